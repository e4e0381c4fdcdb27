"""What the webhook endpoint matches deliveries against, kept in memory (docs/architecture.md §11.1): the
TerraformRepositories by URL identity, from one list-and-watch per server process (per served namespace under the
`namespaces` setting), and the webhook keys the controllers publish (`server/webhook_keys.py`), from a
list-and-watch of each key Secret by name. A delivery, signed or not, costs no Kubernetes request: an outsider can
neither load the API nor learn from the time an answer takes whether a list found anything."""

from __future__ import annotations

import asyncio
import contextlib
import functools
import logging
from collections.abc import Callable, Coroutine, Iterable, Sequence
from dataclasses import dataclass
from typing import Any

from burrito_py.git.urls import repository_identity
from burrito_py.kube.client import Body, Kube, KubeError, crd_path, path
from burrito_py.server.webhook_keys import PublishedKey, decode_entries

__all__ = ["Candidate", "WebhookIndex", "follow"]

log = logging.getLogger(__name__)
RETRY_SECONDS = 2.0
Identity = tuple[str, str]
Key = tuple[str, str]


class _Expired(Exception):
    """The watch's resourceVersion is too old (410): list again."""


async def follow(kube: Kube, resource: str, reset: Callable[[list[Body]], None],
                 apply: Callable[[str, Body], None], synced: asyncio.Event, what: str,
                 field_selector: str | None = None, retry: float = RETRY_SECONDS) -> None:
    """List `resource` (`reset` with the items), then watch it (`apply` each ADDED/MODIFIED/DELETED event) until
    cancelled, listing again whenever the watch cannot resume; errors are logged and retried."""
    while True:
        try:
            items, version = await kube.list_versioned(resource, field_selector=field_selector)
            reset(items)
            synced.set()
            while True:  # watch until the API ends the stream, then again from the last version seen
                async for event in kube.watch(resource, version, timeout_seconds=240, field_selector=field_selector):
                    kind, obj = str(event.get("type") or ""), event.get("object") or {}
                    if kind == "ERROR":
                        raise _Expired if obj.get("code") == 410 else KubeError(int(obj.get("code") or 0), "",
                                                                                str(obj))
                    version = str((obj.get("metadata") or {}).get("resourceVersion") or version)
                    if kind != "BOOKMARK":
                        apply(kind, obj)
        except asyncio.CancelledError:
            raise
        except _Expired:
            continue
        except Exception as exc:  # the API down or refusing: keep what we have, try again
            log.warning("webhooks: following %s failed: %s", what, exc)
            await asyncio.sleep(retry)


@dataclass(frozen=True, slots=True)
class Candidate:
    """A repository a delivery's URLs name, and the key that verifies its deliveries (None: none published)."""

    repository: Body
    key: bytes | None

    @property
    def name(self) -> str:
        meta = self.repository["metadata"]
        return f"{meta['namespace']}/{meta['name']}"


def _identity(repository: Body) -> Identity | None:
    return repository_identity(((repository.get("spec") or {}).get("repository") or {}).get("url") or "")


class WebhookIndex:
    def __init__(self, kube: Kube, namespaces: Sequence[str], keys_namespace: str, key_secrets: Sequence[str]
                 ) -> None:
        self.kube = kube
        self.scopes: list[str | None] = list(sorted(namespaces)) or [None]
        self.keys_namespace, self.key_secrets = keys_namespace, list(dict.fromkeys(key_secrets))
        self.repositories: dict[Key, Body] = {}
        self.by_identity: dict[Identity, set[Key]] = {}
        self.keys: dict[str, dict[Key, PublishedKey]] = {name: {} for name in self.key_secrets}
        self._synced: list[asyncio.Event] = []
        self._tasks: list[asyncio.Task[None]] = []

    # -- what deliveries read ----------------------------------------------------------------------------------
    def candidates(self, identities: Iterable[Identity]) -> list[Candidate]:
        found = sorted({key for identity in identities for key in self.by_identity.get(identity, ())})
        return [Candidate(self.repositories[key], self._key_of(key)) for key in found]

    def _key_of(self, key: Key) -> bytes | None:
        uid = self.repositories[key]["metadata"].get("uid")
        for published in self.keys.values():
            entry = published.get(key)
            if entry is not None and uid and entry.uid == uid:
                return entry.key
        return None

    # -- following the API -------------------------------------------------------------------------------------
    async def ready(self, wait_seconds: float) -> bool:
        """Whether every first list is in within `wait_seconds` (started here if `start` was not called)."""
        self.start()
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(asyncio.gather(*(e.wait() for e in self._synced)), wait_seconds)
        return all(e.is_set() for e in self._synced)

    def start(self) -> None:
        """Start following (once; in the server's event loop): at the server's start, so no delivery waits."""
        if not self._tasks:
            for scope in self.scopes:
                where = f" of {scope}" if scope else ""
                self._start(follow(self.kube, crd_path("terraformrepositories", scope),
                                   functools.partial(self._reset_repositories, scope), self._apply_repository,
                                   self._event(), f"TerraformRepositories{where}"))
            for name in self.key_secrets:
                self._start(follow(self.kube, path("v1", "secrets", self.keys_namespace),
                                   functools.partial(self._reset_keys, name), functools.partial(self._apply_keys, name),
                                   self._event(), f"Secret {self.keys_namespace}/{name}",
                                   field_selector=f"metadata.name={name}"))

    def _event(self) -> asyncio.Event:
        event = asyncio.Event()
        self._synced.append(event)
        return event

    def _start(self, run: Coroutine[Any, Any, None]) -> None:
        self._tasks.append(asyncio.create_task(run))

    async def close(self) -> None:
        for task in self._tasks:
            task.cancel()
        for task in self._tasks:
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await task

    def _forget(self, key: Key) -> None:
        held = self.repositories.pop(key, None)
        identity = _identity(held) if held is not None else None
        if identity is not None:
            keys = self.by_identity.get(identity, set())
            keys.discard(key)
            if not keys:
                self.by_identity.pop(identity, None)

    def _store(self, repository: Body) -> None:
        key = (repository["metadata"]["namespace"], repository["metadata"]["name"])
        self._forget(key)
        self.repositories[key] = repository
        identity = _identity(repository)
        if identity is not None:
            self.by_identity.setdefault(identity, set()).add(key)

    def _reset_repositories(self, scope: str | None, items: list[Body]) -> None:
        for key in [k for k in self.repositories if scope is None or k[0] == scope]:
            self._forget(key)
        for item in items:
            self._store(item)

    def _apply_repository(self, kind: str, obj: Body) -> None:
        meta = obj.get("metadata") or {}
        if not meta.get("name"):
            return
        if kind == "DELETED":
            self._forget((meta["namespace"], meta["name"]))
        else:
            self._store(obj)

    def _reset_keys(self, name: str, items: list[Body]) -> None:
        self.keys[name] = decode_entries(next((i for i in items if i["metadata"]["name"] == name), None))

    def _apply_keys(self, name: str, kind: str, obj: dict[str, Any]) -> None:
        if (obj.get("metadata") or {}).get("name") != name:
            return
        self.keys[name] = {} if kind == "DELETED" else decode_entries(obj)
