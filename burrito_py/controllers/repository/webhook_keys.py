"""Publishing each repository's webhook key for the server (docs/architecture.md §11.1).

The server may read no Secret of a tenant namespace, so the repository controller, which reads each repository's
Secret anyway, writes the key that verifies its webhook deliveries (`server/webhook_keys.py`) into one Secret of
its own namespace, `webhook_keys_secret` (one per controllers Deployment, so shards never write the same object),
which only the server reads, by name. What a tenant user who may edit a repository can make us publish: the
`webhookSecret` of a Secret of the repository's own namespace (never another's), reduced to at most 64 bytes,
under that repository's name and uid; it never leaves the server, which uses it for that repository alone. At most
`webhook_keys_per_namespace` repositories of one namespace are published, so no namespace fills the 1 MiB Secret
for the others.

Latency: a repository's entry is written by its reconcile (its creation, a spec change, each poll), so a new or
re-pointed `secretName` is published at once and a changed `webhookSecret` value at the next poll; a deleted
repository's entry goes when its deletion is seen; entries of repositories deleted while no controller ran go at
the next write. Only the leader writes; a 409 (another writer, e.g. the previous leader) reads the Secret again.

`decide_entries` is the pure part; `WebhookKeyPublisher` reads and writes the Secret.
"""

from __future__ import annotations

import asyncio
import base64
import logging
import time
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from burrito_py.api.patterns import object_name_problem
from burrito_py.kube.client import Body, Kube, KubeError, path
from burrito_py.kube.conditions import Cond
from burrito_py.server.webhook_keys import encode_entry, entry_name, parse_entry_name

__all__ = ["WEBHOOK_SECRET_KEY", "EntryDecision", "WebhookKeyPublisher", "decide_entries", "webhook_entry"]

log = logging.getLogger(__name__)
WEBHOOK_SECRET_KEY = "webhookSecret"  # noqa: S105 - the name of a Secret key
CONDITION = "Webhooks"
REREAD_SECONDS = 60.0  # how old our copy of the published Secret may be before a decision reads it again


@dataclass(frozen=True, slots=True)
class EntryDecision:
    data: dict[str, str]  # the published Secret's data after the decision
    refused: bool = False  # the namespace already has its maximum of entries: this repository's was not added


def decide_entries(current: Mapping[str, str], live: Mapping[tuple[str, str], str], repository: tuple[str, str],
                   entry: str | None, per_namespace: int) -> EntryDecision:
    """The published data after setting (or removing, when `entry` is None) the repository's entry: entries of
    repositories no longer `live` (namespace/name → uid) are dropped, and a namespace never holds more than
    `per_namespace` entries (an entry already published stays)."""
    data = {}
    for name, value in current.items():
        where = parse_entry_name(name)
        if where is not None and where in live and _uid_of(value) == live[where]:
            data[name] = value
    name = entry_name(*repository)
    if entry is None:
        data.pop(name, None)
        return EntryDecision(data)
    if name not in data and sum(1 for n in data if n.startswith(f"{repository[0]}.")) >= per_namespace:
        return EntryDecision(data, refused=True)
    data[name] = entry
    return EntryDecision(data)


def _uid_of(value: str) -> str:
    try:
        return base64.b64decode(value).decode().partition(":")[0]
    except (ValueError, UnicodeDecodeError):
        return ""


async def webhook_entry(kube: Kube, repository: Mapping[str, Any]) -> tuple[str | None, Cond]:
    """The repository's entry (None: it has no webhook key) and its `Webhooks` condition. Messages name the
    Secret and the key, never a value."""
    meta = repository["metadata"]
    namespace = meta["namespace"]
    secret_name = ((repository.get("spec") or {}).get("repository") or {}).get("secretName")
    if not secret_name:
        return None, Cond(CONDITION, False, "NoWebhookSecret",
                          "spec.repository.secretName is not set: no webhook delivery is accepted for this repository")
    problem = object_name_problem(secret_name)
    if problem is not None:  # a path in the name would reach another namespace's Secret: never read
        return None, Cond(CONDITION, False, "SecretNameInvalid", f"spec.repository.secretName: {problem}")
    where = f"Secret {namespace}/{secret_name}"
    try:
        secret = await kube.get(path("v1", "secrets", namespace, secret_name))
    except KubeError as exc:  # e.g. 403 in a namespace that is not a tenant's
        return None, Cond(CONDITION, False, "SecretUnreadable", f"cannot read {where}: {exc.status} {exc.reason}")
    value = ((secret or {}).get("data") or {}).get(WEBHOOK_SECRET_KEY) if secret is not None else None
    if secret is None:
        return None, Cond(CONDITION, False, "SecretNotFound", f"{where} (spec.repository.secretName) does not exist")
    if not value:
        return None, Cond(CONDITION, False, "NoWebhookSecret",
                          f"{where} has no key {WEBHOOK_SECRET_KEY!r}: no webhook delivery is accepted for this "
                          "repository")
    try:
        decoded = base64.b64decode(value)
    except ValueError:
        return None, Cond(CONDITION, False, "NoWebhookSecret", f"{where}: {WEBHOOK_SECRET_KEY!r} is not base64")
    return encode_entry(str(meta.get("uid") or ""), decoded), Cond(
        CONDITION, True, "KeyPublished", f"deliveries signed with the {WEBHOOK_SECRET_KEY!r} of {where} are accepted")


class WebhookKeyPublisher:
    """Our copy of the published Secret and the writes that keep it up to date (the leader's alone)."""

    def __init__(self, namespace: str, name: str, per_namespace: int) -> None:
        self.namespace, self.name, self.per_namespace = namespace, name, per_namespace
        self._lock = asyncio.Lock()
        self._data: dict[str, str] = {}
        self._version: str | None = None  # None: the Secret does not exist (as far as we know)
        self._read_at = -REREAD_SECONDS

    @property
    def _path(self) -> str:
        return path("v1", "secrets", self.namespace, self.name)

    async def _read(self, kube: Kube) -> None:
        body = await kube.get(self._path)
        self._data = dict((body or {}).get("data") or {})
        self._version = str(body["metadata"].get("resourceVersion") or "") if body is not None else None
        self._read_at = time.monotonic()

    async def publish(self, kube: Kube, repositories: Iterable[Body], repository: tuple[str, str], entry: str | None,
                      condition: Cond) -> Cond:
        """Set or remove the repository's entry (`repositories`: every repository the controllers hold); the
        condition to report (the given one, or why it could not be published)."""
        live = {(r["metadata"]["namespace"], r["metadata"]["name"]): str(r["metadata"].get("uid") or "")
                for r in repositories if not r["metadata"].get("deletionTimestamp")}
        async with self._lock:
            if time.monotonic() - self._read_at >= REREAD_SECONDS:
                await self._read(kube)
            for attempt in range(3):
                decision = decide_entries(self._data, live, repository, entry, self.per_namespace)
                if decision.data == self._data:
                    break
                try:
                    await self._write(kube, decision.data)
                    break
                except KubeError as exc:
                    if exc.status == 409 and attempt < 2:  # written meanwhile (a previous leader): read, decide again
                        await self._read(kube)
                        continue
                    await self._read(kube)
                    log.warning("webhook keys: cannot write Secret %s/%s: %s", self.namespace, self.name, exc)
                    return Cond(CONDITION, False, "PublishFailed",
                                f"cannot write the webhook keys Secret {self.namespace}/{self.name}: {exc.status} "
                                f"{exc.reason}")
        if entry is not None and decision.refused:
            return Cond(CONDITION, False, "TooManyRepositories",
                        f"namespace {repository[0]} already has {self.per_namespace} repositories with a webhook key "
                        "(the controllers' webhookKeysPerNamespace): no delivery is accepted for this one")
        return condition

    async def _write(self, kube: Kube, data: dict[str, str]) -> None:
        body: Body = {"apiVersion": "v1", "kind": "Secret", "type": "Opaque",
                      "metadata": {"name": self.name, "namespace": self.namespace,
                                   "labels": {"app.kubernetes.io/name": "burrito-py",
                                              "app.kubernetes.io/component": "webhook-keys"}},
                      "data": data}
        if self._version is None:  # a 409 (it exists after all): the caller reads it and decides again
            written = await kube.create(path("v1", "secrets", self.namespace), body)
        else:
            body["metadata"]["resourceVersion"] = self._version
            written = await kube.replace(self._path, body)
        self._data = dict(written.get("data") or {})
        self._version = str(written["metadata"].get("resourceVersion") or "")
        self._read_at = time.monotonic()
