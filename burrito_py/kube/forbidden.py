"""A permission the controllers lack must be visible where people look (`kubectl describe`), not only in
the controller's log: a 403 from the API during a reconcile becomes a `Forbidden` Warning event on the object
being reconciled, naming the verb and resource as the API server's message does. One event per distinct
message per object until a reconcile of it succeeds, so a retry loop does not flood the namespace."""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Hashable, Mapping
from typing import Any, TypeVar

from burrito_py.kube.client import Kube, KubeError
from burrito_py.kube.events import post_event

K = TypeVar("K", bound=Hashable)


class ForbiddenReporter:
    def __init__(self, kube: Kube) -> None:
        self._kube = kube
        self._reported: dict[tuple[str, Hashable], str] = {}

    def wrap(
        self,
        kind: str,
        handler: Callable[[K], Awaitable[None]],
        lookup: Callable[[K], Mapping[str, Any] | None],
    ) -> Callable[[K], Awaitable[None]]:
        async def reconcile(key: K) -> None:
            try:
                await handler(key)
            except KubeError as exc:
                if exc.status == 403:
                    await self._report(kind, key, lookup(key), exc.message or str(exc))
                raise
            self._reported.pop((kind, key), None)

        return reconcile

    async def _report(self, kind: str, key: Hashable, obj: Mapping[str, Any] | None, message: str) -> None:
        if obj is None or self._reported.get((kind, key)) == message:
            return
        self._reported[(kind, key)] = message
        await post_event(self._kube, obj, "Warning", "Forbidden", message)
