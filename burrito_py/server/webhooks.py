"""Push webhooks from GitHub, GitLab and Gitea/Forgejo (docs/architecture.md §11.1): who sent it, is it signed,
what it names.

Pure functions; `burrito_py.server.app` does the I/O. The order of checks is what makes a forged delivery
change nothing: the provider is told by its event header, the body must be JSON, the repository it names
must match TerraformRepositories, and a delivery is acted on only for the repositories whose Secret's
`webhookSecret` verifies it (through the key the controllers publish, `webhook_keys.py`) — `X-Hub-Signature-256`
(HMAC-SHA256 of the body, GitHub), `X-Gitea-Signature` (hex HMAC-SHA256, Gitea/Forgejo, which also send
`X-GitHub-Event`) or `X-Gitlab-Token` (the secret itself, compared in constant time). Only then is the event type
considered: anything but a branch push or a pull request event is ignored.
"""

from __future__ import annotations

import hashlib
import hmac
import json
import secrets
from collections import OrderedDict
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Literal

from burrito_py.git.urls import repository_identity
from burrito_py.server.webhook_keys import hmac_key

Provider = Literal["github", "gitlab", "gitea"]
BRANCH_REF_PREFIX = "refs/heads/"


class BadDelivery(Exception):
    """The request is not a webhook delivery we can read (400)."""


@dataclass(frozen=True)
class Delivery:
    provider: Provider
    event: str
    delivery_id: str | None
    payload: dict[str, Any]

    @property
    def is_push(self) -> bool:
        return self.event in ("push", "Push Hook")

    @property
    def branch(self) -> str | None:
        """The pushed branch; None for tags and other refs."""
        ref = self.payload.get("ref")
        if isinstance(ref, str) and ref.startswith(BRANCH_REF_PREFIX):
            return ref[len(BRANCH_REF_PREFIX) :]
        return None

    def repository_urls(self) -> list[str]:
        """Every URL the payload gives for its repository (clone, ssh and web forms)."""
        sections = [self.payload.get("repository"), self.payload.get("project")]
        keys = ("clone_url", "ssh_url", "git_url", "html_url", "url", "git_http_url", "git_ssh_url", "web_url",
                "homepage")
        urls = [s[k] for s in sections if isinstance(s, dict) for k in keys if isinstance(s.get(k), str)]
        return list(dict.fromkeys(urls))

    def identities(self) -> set[tuple[str, str]]:
        return {identity for url in self.repository_urls() if (identity := repository_identity(url)) is not None}


def read_delivery(headers: Mapping[str, str], body: bytes) -> Delivery:
    """`headers` with lower-case names. Raises BadDelivery naming what is wrong."""
    provider: Provider
    if "x-gitea-event" in headers:
        provider, event, delivery_id = "gitea", headers["x-gitea-event"], headers.get("x-gitea-delivery")
    elif "x-gitlab-event" in headers:
        provider, event = "gitlab", headers["x-gitlab-event"]
        delivery_id = headers.get("x-gitlab-event-uuid") or headers.get("x-gitlab-webhook-uuid")
    elif "x-github-event" in headers:
        provider, event, delivery_id = "github", headers["x-github-event"], headers.get("x-github-delivery")
    else:
        raise BadDelivery("not a webhook delivery: no X-GitHub-Event, X-Gitlab-Event or X-Gitea-Event header")
    try:
        payload = json.loads(body)
    except (ValueError, UnicodeDecodeError) as exc:
        raise BadDelivery(f"the body is not valid JSON: {exc}") from None
    if not isinstance(payload, dict):
        raise BadDelivery("the body is not a JSON object")
    return Delivery(provider, event, delivery_id, payload)


def signature_valid(delivery: Delivery, headers: Mapping[str, str], body: bytes, key: bytes) -> bool:
    """Whether the delivery is signed with the webhook secret whose HMAC key (`webhook_keys.hmac_key`) is `key`,
    the way its provider signs. HMAC under that key is HMAC under the secret itself (RFC 2104)."""
    if not key:
        return False
    if delivery.provider == "gitlab":
        token = headers.get("x-gitlab-token", "").encode()
        return hmac.compare_digest(hmac_key(token), key)
    expected = hmac.new(key, body, hashlib.sha256).hexdigest()
    if delivery.provider == "gitea":
        given = headers.get("x-gitea-signature", "")
    else:
        given = headers.get("x-hub-signature-256", "").removeprefix("sha256=")
    return hmac.compare_digest(given.encode(), expected.encode())


_DECOY = secrets.token_bytes(32)


def verified_by(delivery: Delivery, headers: Mapping[str, str], body: bytes, keys: Sequence[bytes | None]
                ) -> list[bool]:
    """Which of `keys` (None: a repository with no published key) verify the delivery. The same work whatever
    they are: a missing key, or no key at all (no repository matched), is checked against a decoy key, so the
    time of an answer does not tell an unknown repository from a wrong signature."""
    checked = [signature_valid(delivery, headers, body, key or _DECOY) and key is not None for key in keys]
    if not keys:
        signature_valid(delivery, headers, body, _DECOY)
    return checked


def body_digest(body: bytes) -> str:
    return hashlib.sha256(body).hexdigest()


class RecentDeliveries:
    """Deliveries already acted on, by delivery id and by the digest of their signed body (providers redeliver on
    timeouts and on request; the id header is not signed, so a captured delivery sent again under a new id is
    known by its body): bounded, in memory, per server process. A replay that reaches another replica, or comes
    after `size` newer deliveries, is acted on again: harmless, since a push only asks for a fetch of what the
    branch really holds, and a pull request event older than what its TerraformPullRequest records is ignored
    (§11.3)."""

    def __init__(self, size: int = 10_000) -> None:
        self._seen: OrderedDict[str, None] = OrderedDict()
        self._size = size

    def seen(self, *keys: str | None) -> bool:
        return any(key is not None and key in self._seen for key in keys)

    def remember(self, *keys: str | None) -> None:
        for key in keys:
            if key is None:
                continue
            self._seen[key] = None
            self._seen.move_to_end(key)
        while len(self._seen) > self._size:
            self._seen.popitem(last=False)
