"""Push webhooks from GitHub, GitLab and Gitea/Forgejo (docs/architecture.md §11.1): who sent it, is it signed,
what it names.

Pure functions; `burrito_py.server.app` does the I/O. What each provider sends is its module's in
`burrito_py/gitproviders/` (asked through `registry.py`). The order of checks is what makes a forged delivery
change nothing: the provider is told by its event header, the body must be JSON, the repository it names
must match TerraformRepositories, and a delivery is acted on only for the repositories whose Secret's
`webhookSecret` verifies it (through the key the controllers publish, `webhook_keys.py`) — `X-Hub-Signature-256`
(HMAC-SHA256 of the body, GitHub), `X-Gitea-Signature` (hex HMAC-SHA256, Gitea/Forgejo, which also send
`X-GitHub-Event`) or `X-Gitlab-Token` (the secret itself, compared in constant time). Only then is the event type
considered: anything but a branch push or a pull request event is ignored.
"""

from __future__ import annotations

import hashlib
import json
import secrets
from collections import OrderedDict
from collections.abc import Mapping, Sequence

from burrito_py.gitproviders import registry
from burrito_py.gitproviders.delivery import Delivery


class BadDelivery(Exception):
    """The request is not a webhook delivery we can read (400)."""


def read_delivery(headers: Mapping[str, str], body: bytes) -> Delivery:
    """`headers` with lower-case names. Raises BadDelivery naming what is wrong."""
    detected = registry.detect(headers)
    try:
        payload = json.loads(body)
    except (ValueError, UnicodeDecodeError) as exc:
        if detected is None:
            raise BadDelivery(_not_a_delivery()) from None
        raise BadDelivery(f"the body is not valid JSON: {exc}") from None
    except RecursionError:  # `[[[[…`: refused (and counted against its source) like any body that is not JSON
        raise BadDelivery(_not_a_delivery() if detected is None else "the body nests JSON too deeply") from None
    if not isinstance(payload, dict):
        raise BadDelivery(_not_a_delivery() if detected is None else "the body is not a JSON object")
    if detected is None:
        # No provider's header: a provider told by its body (Azure DevOps' service hooks) may claim it.
        detected = registry.detect_body(headers, payload)
        if detected is None:
            raise BadDelivery(_not_a_delivery())
    provider, event, delivery_id = detected
    return Delivery(provider.name, event, delivery_id, payload)


def _not_a_delivery() -> str:
    # Asked each time: the registry's providers are read when the message is written.
    return (f"not a webhook delivery: no {registry.event_headers()} header, and no provider's service hook body "
            "(publisherId, eventType)")


def signature_valid(delivery: Delivery, headers: Mapping[str, str], body: bytes, key: bytes) -> bool:
    """Whether the delivery is signed with the webhook secret whose HMAC key (`webhook_keys.hmac_key`) is `key`,
    the way its provider signs. HMAC under that key is HMAC under the secret itself (RFC 2104)."""
    if not key:
        return False
    return registry.provider_named(delivery.provider).signature_valid(headers, body, key)


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
