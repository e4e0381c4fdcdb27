"""Kubernetes Events on our objects, so `kubectl describe` tells people what happened and why."""

from __future__ import annotations

import logging
from collections.abc import Mapping
from typing import Any, Literal

from burrito_py.kube.client import Kube, KubeError, path
from burrito_py.timeutil import format_time, utcnow

log = logging.getLogger(__name__)
COMPONENT = "burrito-py-controllers"


async def post_event(
    kube: Kube, obj: Mapping[str, Any], type_: Literal["Normal", "Warning"], reason: str, message: str,
    name: str | None = None,
) -> None:
    """Best effort: a lost event must never fail a reconcile. `name`: an Event told once, whoever tells it again
    (the API refuses a second one of that name, which is then not posted)."""
    meta = obj["metadata"]
    namespace = meta.get("namespace") or "default"
    now = format_time(utcnow())
    event = {
        "apiVersion": "v1",
        "kind": "Event",
        "metadata": {**({"name": name} if name else {"generateName": f"{meta['name']}."}), "namespace": namespace},
        "involvedObject": {
            "apiVersion": obj.get("apiVersion"),
            "kind": obj.get("kind"),
            "name": meta["name"],
            "namespace": namespace,
            "uid": meta.get("uid"),
            "resourceVersion": meta.get("resourceVersion"),
        },
        "type": type_,
        "reason": reason,
        "message": message[:1024],
        "source": {"component": COMPONENT},
        "reportingComponent": COMPONENT,
        "firstTimestamp": now,
        "lastTimestamp": now,
        "count": 1,
    }
    try:
        await kube.create(path("v1", "events", namespace), event)
    except KubeError as exc:
        if name and exc.status == 409:
            return  # told already
        log.warning("could not post event %s on %s/%s: %s", reason, namespace, meta["name"], exc)
