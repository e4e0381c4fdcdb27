"""Push webhooks from GitHub, GitLab and Gitea/Forgejo (docs/architecture.md §11.1): who sent it, is it signed,
what it names.

Pure functions; `burrito_py.server.app` does the I/O. The order of checks is what makes a forged delivery
change nothing: the provider is told by its event header, the body must be JSON, the repository it names
must match TerraformRepositories, and a delivery is acted on only for the repositories whose Secret's
`webhookSecret` verifies it — `X-Hub-Signature-256` (HMAC-SHA256 of the body, GitHub), `X-Gitea-Signature`
(hex HMAC-SHA256, Gitea/Forgejo, which also send `X-GitHub-Event`) or `X-Gitlab-Token` (the secret itself,
compared in constant time). Only then is the event type considered: anything but a branch push is ignored.
"""

from __future__ import annotations

import hashlib
import hmac
import json
from collections import OrderedDict
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Literal

from burrito_py.gitops.urls import repository_identity

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


def signature_valid(delivery: Delivery, headers: Mapping[str, str], body: bytes, secret: bytes) -> bool:
    """Whether the delivery is signed with `secret` the way its provider signs."""
    if not secret:
        return False
    if delivery.provider == "gitlab":
        token = headers.get("x-gitlab-token", "")
        return hmac.compare_digest(token.encode(), secret)
    expected = hmac.new(secret, body, hashlib.sha256).hexdigest()
    if delivery.provider == "gitea":
        given = headers.get("x-gitea-signature", "")
    else:
        given = headers.get("x-hub-signature-256", "").removeprefix("sha256=")
    return hmac.compare_digest(given.encode(), expected.encode())


class RecentDeliveries:
    """Delivery ids already acted on (providers redeliver on timeouts and on request): bounded, in memory.
    Per server process; a replica that did not see a delivery acts on its redelivery, which is harmless
    since marking a repository for sync twice fetches once."""

    def __init__(self, size: int = 10_000) -> None:
        self._seen: OrderedDict[str, None] = OrderedDict()
        self._size = size

    def seen(self, key: str) -> bool:
        return key in self._seen

    def remember(self, key: str) -> None:
        self._seen[key] = None
        self._seen.move_to_end(key)
        while len(self._seen) > self._size:
            self._seen.popitem(last=False)
