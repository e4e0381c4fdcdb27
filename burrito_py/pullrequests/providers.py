"""Publishing one pull request update within a call budget (issue 15 item 6), through the provider's client
(`burrito_py/gitproviders/`: each provider's module has its client, `client.py` their shared HTTP: rate limits,
one origin, the outbound guard).

`publish` makes one update: the comment (listed only when its id is not known yet, then created or edited only
when its body changed) and the commit statuses that changed: the aggregate always (branch protection reads it),
the per-layer ones within a fixed budget of calls per update; those left over wait for the next update.
"""

from __future__ import annotations

import hashlib
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from burrito_py.gitproviders.client import CommitStatus, ProviderClient, ProviderError
from burrito_py.pullrequests.statuses import AGGREGATE_CONTEXT, comment_update, statuses_to_send

__all__ = [
    "CALL_BUDGET",
    "Published",
    "body_digest",
    "publish",
]

CALL_BUDGET = 3


@dataclass(frozen=True, slots=True)
class Published:
    comment_id: str | None
    sent: dict[str, CommitStatus]  # what the head now carries, as far as we sent it
    calls: int


def body_digest(body: str) -> str:
    return "sha256:" + hashlib.sha256(body.encode()).hexdigest()


def publish(client: ProviderClient, marker: str, body: str, known_comment: str | None, known_digest: str | None,
            head: str, statuses: Sequence[CommitStatus], sent: Mapping[str, CommitStatus],
            target_url: str | None = None, budget: int = CALL_BUDGET) -> Published:
    """One update: the comment, then the statuses that changed (the aggregate first, always; the others within
    `budget` calls in all).
    `known_comment`/`known_digest`: the comment's id and `body_digest` as last published (kept on the
    TerraformPullRequest), so an unchanged body costs no call at all."""
    start = client.calls
    comment_id = known_comment
    if comment_id is not None and known_digest != body_digest(body):
        try:
            client.edit_comment(comment_id, body)
        except ProviderError as exc:
            if exc.status != 404:
                raise
            comment_id = None  # someone deleted it: found again by its marker, or written anew
    if comment_id is None:
        found = comment_update(client.list_comments(), marker, body)
        comment_id = found.comment_id
        if found.action == "create":
            comment_id = client.create_comment(body)
        elif found.action == "edit":
            assert comment_id is not None
            client.edit_comment(comment_id, body)
    now = dict(sent)
    pending = sorted(statuses_to_send(statuses, sent), key=lambda s: s.context != AGGREGATE_CONTEXT)
    for status in pending:
        # The aggregate always goes (branch protection reads it); the per-layer statuses within the budget.
        if status.context != AGGREGATE_CONTEXT and client.calls - start >= budget:
            break
        client.set_status(head, status, target_url)
        now[status.context] = status
    return Published(comment_id, now, client.calls - start)
