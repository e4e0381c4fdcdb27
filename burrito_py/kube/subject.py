"""Who a SubjectAccessReview asks about: the whole identity a TokenReview gave, not only its name and groups.

An authorizer may decide on `uid` and `extra` as well (a webhook authorizer, or scoped tokens whose scopes travel
in `extra`, as OpenShift's do): a review without them asks about a broader identity than the caller's, so a token
limited by its scopes would get its user's full rights here. RBAC ignores both, so under RBAC alone nothing
changes.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

# `extra` as a hashable value (caches are keyed by who asks): keys sorted, each with its values in order.
Extra = tuple[tuple[str, tuple[str, ...]], ...]


def frozen_extra(extra: Mapping[str, Iterable[str]] | None) -> Extra:
    """A TokenReview's `status.user.extra` as a hashable value."""
    return tuple(sorted((str(key), tuple(str(v) for v in values or ())) for key, values in (extra or {}).items()))


def review_subject(username: str, groups: Iterable[str], uid: str = "", extra: Extra = ()) -> dict[str, Any]:
    """The subject part of a SubjectAccessReview's spec (user, groups, uid, extra: what kube-apiserver itself
    passes to its authorizers for a request made with that token)."""
    subject: dict[str, Any] = {"user": username, "groups": list(groups)}
    if uid:
        subject["uid"] = uid
    if extra:
        subject["extra"] = {key: list(values) for key, values in extra}
    return subject
