"""The AGL controller's kopf handlers, registered into the controllers' operator (`controllers start`).

Definitions and the layers the AGL made are watched through kopf; instances of the user kinds, which
appear and disappear at runtime, by the controller's own watches (agl/watch.py says why). Handlers only
feed the stores and wake keys.
"""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import kopf

from burrito_py.agl.compile import LABEL_APP_KIND
from burrito_py.agl.controller import AglController, resync_forever
from burrito_py.api import annotations as ann
from burrito_py.api.application import AGL_GROUP, AGL_VERSION
from burrito_py.controllers.settings import ControllerSettings
from burrito_py.kube.client import Kube

__all__ = ["register_agl"]


def register_agl(registry: kopf.OperatorRegistry, settings: ControllerSettings, kubeconfig: Path | None) -> None:
    holder: dict[str, AglController] = {}

    @kopf.on.startup(registry=registry)
    async def agl_startup(memo: kopf.Memo, **_: Any) -> None:
        kube = await Kube.connect(str(kubeconfig) if kubeconfig else None)
        agl = AglController(kube, scope=settings.scope())
        await agl.prime()
        holder["agl"] = agl
        memo["agl_tasks"] = [
            asyncio.create_task(agl.definition_queue.run()),
            asyncio.create_task(agl.instance_queue.run()),
            asyncio.create_task(resync_forever(agl, settings.resync_interval.total_seconds())),
        ]

    @kopf.on.cleanup(registry=registry)
    async def agl_cleanup(memo: kopf.Memo, **_: Any) -> None:
        for task in memo.get("agl_tasks", []):
            task.cancel()
        if "agl" in holder:
            await holder["agl"].close()

    def feed(event: kopf.RawEvent) -> tuple[str | None, dict[str, Any]] | None:
        body = event.get("object") or {}
        if "agl" not in holder or not body.get("metadata"):
            return None
        return event.get("type"), dict(body)

    @kopf.on.event(AGL_GROUP, AGL_VERSION, "applicationdefinitions", registry=registry)
    async def on_definition(event: kopf.RawEvent, **_: Any) -> None:
        fed = feed(event)
        if fed is not None:
            holder["agl"].on_definition(*fed)

    def owned(namespace: str | None, **_: Any) -> bool:
        return settings.scope().owns(namespace)  # a shard compiles only its own namespaces' instances

    @kopf.on.event(ann.GROUP, ann.VERSION, "terraformlayers", labels={LABEL_APP_KIND: kopf.PRESENT},
                   when=owned, registry=registry)
    async def on_layer(event: kopf.RawEvent, **_: Any) -> None:
        fed = feed(event)
        if fed is not None:
            holder["agl"].on_layer(*fed)
