"""Server-side `meta.k8s.io/v1 Table` rendering (what `kubectl get` asks for): a CRD's
additionalPrinterColumns, or the usual columns of the built-ins."""

from __future__ import annotations

import json
import re
from collections.abc import Callable
from datetime import UTC, datetime
from typing import Any

from burrito_local.kube_resources import Resource

Obj = dict[str, Any]
_TOKEN = re.compile(
    r"\.([A-Za-z0-9_$-]+)|\[(\d+)\]|\['([^']*)'\]|\[\?\(@\.([A-Za-z0-9_.]+)\s*==\s*[\"']([^\"']*)[\"']\)\]"
)


def human_duration(seconds: float) -> str:
    """apimachinery's duration.HumanDuration: 5s, 3m20s, 12m, 2h5m, 20h, 3d4h, 40d, 2y30d."""
    s = int(seconds)
    if s < -1:
        return "<invalid>"
    if s < 0:
        return "0s"
    if s < 120:
        return f"{s}s"
    minutes = s // 60
    if minutes < 10:
        return f"{minutes}m" if s % 60 == 0 else f"{minutes}m{s % 60}s"
    if minutes < 180:
        return f"{minutes}m"
    hours = s // 3600
    if hours < 8:
        return f"{hours}h" if minutes % 60 == 0 else f"{hours}h{minutes % 60}m"
    if hours < 48:
        return f"{hours}h"
    if hours < 24 * 8:
        return f"{hours // 24}d" if hours % 24 == 0 else f"{hours // 24}d{hours % 24}h"
    if hours < 24 * 365 * 2:
        return f"{hours // 24}d"
    if hours < 24 * 365 * 8:
        days = (hours // 24) % 365
        return f"{hours // 24 // 365}y" if days == 0 else f"{hours // 24 // 365}y{days}d"
    return f"{hours // 24 // 365}y"


def age(timestamp: Any) -> str:
    if not isinstance(timestamp, str) or not timestamp:
        return "<unknown>"
    try:
        when = datetime.fromisoformat(timestamp.replace("Z", "+00:00"))
    except ValueError:
        return "<invalid>"
    return human_duration((datetime.now(UTC) - when).total_seconds())


def json_path(obj: Any, path: str) -> Any:
    """The value at a simple JSONPath (`.status.state`, `.spec.items[0].name`,
    `.status.conditions[?(@.type=="Ready")].status`); None when absent."""
    text = path.strip()
    if text.startswith("{") and text.endswith("}"):
        text = text[1:-1]
    text = text.removeprefix("$")
    node: Any = obj
    pos = 0
    while pos < len(text):
        m = _TOKEN.match(text, pos)
        if m is None:
            return None
        pos = m.end()
        name, index, quoted, filter_field, filter_value = m.groups()
        if name is not None or quoted is not None:
            node = node.get(name if name is not None else quoted) if isinstance(node, dict) else None
        elif index is not None:
            node = node[int(index)] if isinstance(node, list) and int(index) < len(node) else None
        elif isinstance(node, list):
            node = next(
                (item for item in node if isinstance(item, dict) and str(json_path(item, "." + filter_field))
                 == filter_value),
                None,
            )
        else:
            node = None
        if node is None:
            return None
    return node


def _cell(value: Any, column_type: str) -> Any:
    if column_type == "date":
        return age(value)
    if value is None or isinstance(value, (str, int, float, bool)):
        return value
    return json.dumps(value, separators=(",", ":"))


def _column(name: str, type_: str = "string", description: str = "", priority: int = 0, fmt: str = "") -> Obj:
    return {"name": name, "type": type_, "format": fmt, "description": description, "priority": priority}


NAME = _column("Name", fmt="name", description="Name must be unique within a namespace.")
AGE = _column("Age", description="CreationTimestamp is a timestamp representing the server time when this object "
              "was created.")


def _pod_cells(pod: Obj) -> list[Any]:
    status = pod.get("status") or {}
    containers = (pod.get("spec") or {}).get("containers") or []
    statuses = status.get("containerStatuses") or []
    ready = sum(1 for c in statuses if c.get("ready"))
    restarts = sum(int(c.get("restartCount") or 0) for c in statuses)
    reason = status.get("reason") or status.get("phase") or "Unknown"
    for c in statuses:
        state = c.get("state") or {}
        waiting, terminated = state.get("waiting") or {}, state.get("terminated") or {}
        if waiting.get("reason"):
            reason = waiting["reason"]
        elif terminated:
            reason = terminated.get("reason") or f"ExitCode:{terminated.get('exitCode', 0)}"
    if pod["metadata"].get("deletionTimestamp"):
        reason = "Terminating"
    return [f"{ready}/{len(containers)}", reason, restarts, age(pod["metadata"].get("creationTimestamp")),
            status.get("podIP") or "<none>", (pod.get("spec") or {}).get("nodeName") or "<none>"]


def _event_cells(event: Obj) -> list[Any]:
    involved = event.get("involvedObject") or event.get("regarding") or {}
    last = event.get("lastTimestamp") or event.get("eventTime") or event["metadata"].get("creationTimestamp")
    kind = str(involved.get("kind", "")).lower()
    return [age(last), event.get("type", ""), event.get("reason", ""), f"{kind}/{involved.get('name', '')}",
            event.get("message") or event.get("note", "")]


def _deployment_cells(deployment: Obj) -> list[Any]:
    spec, status = deployment.get("spec") or {}, deployment.get("status") or {}
    return [f"{status.get('readyReplicas', 0)}/{spec.get('replicas', 1)}", status.get("updatedReplicas", 0),
            status.get("availableReplicas", 0), age(deployment["metadata"].get("creationTimestamp"))]


def _service_cells(service: Obj) -> list[Any]:
    spec = service.get("spec") or {}
    ports = ",".join(f"{p.get('port')}/{p.get('protocol', 'TCP')}" for p in spec.get("ports") or ()) or "<none>"
    return [spec.get("type", "ClusterIP"), spec.get("clusterIP") or "<none>", "<none>", ports,
            age(service["metadata"].get("creationTimestamp"))]


def _endpoints_cells(endpoints: Obj) -> list[Any]:
    shown = [f"{a.get('ip')}:{p.get('port')}" for s in endpoints.get("subsets") or ()
             for a in s.get("addresses") or () for p in s.get("ports") or ()]
    text = ",".join(shown[:3]) + (f" + {len(shown) - 3} more..." if len(shown) > 3 else "")
    return [text or "<none>", age(endpoints["metadata"].get("creationTimestamp"))]


def _claim_cells(claim: Obj) -> list[Any]:
    spec, status = claim.get("spec") or {}, claim.get("status") or {}
    modes = {"ReadWriteOnce": "RWO", "ReadOnlyMany": "ROX", "ReadWriteMany": "RWX", "ReadWriteOncePod": "RWOP"}
    return [status.get("phase", "Pending"), spec.get("volumeName", ""), (status.get("capacity") or {}).get(
        "storage", ""), ",".join(modes.get(m, m) for m in status.get("accessModes") or ()),
        spec.get("storageClassName") or "", age(claim["metadata"].get("creationTimestamp"))]


_BUILTIN: dict[str, tuple[list[Obj], Callable[[Obj], list[Any]]]] = {
    "deployments": (
        [_column("Ready"), _column("Up-to-date", "integer"), _column("Available", "integer"), AGE],
        _deployment_cells,
    ),
    "services": (
        [_column("Type"), _column("Cluster-IP"), _column("External-IP"), _column("Port(s)"), AGE],
        _service_cells,
    ),
    "endpoints": ([_column("Endpoints"), AGE], _endpoints_cells),
    "persistentvolumeclaims": (
        [_column("Status"), _column("Volume"), _column("Capacity"), _column("Access Modes"),
         _column("StorageClass"), AGE],
        _claim_cells,
    ),
    "pods": (
        [_column("Ready"), _column("Status"), _column("Restarts", "integer"), AGE,
         _column("IP", priority=1), _column("Node", priority=1)],
        _pod_cells,
    ),
    "namespaces": (
        [_column("Status"), AGE],
        lambda o: [(o.get("status") or {}).get("phase", "Active"), age(o["metadata"].get("creationTimestamp"))],
    ),
    "secrets": (
        [_column("Type"), _column("Data", "integer"), AGE],
        lambda o: [o.get("type", "Opaque"), len(o.get("data") or {}), age(o["metadata"].get("creationTimestamp"))],
    ),
    "configmaps": (
        [_column("Data", "integer"), AGE],
        lambda o: [len(o.get("data") or {}) + len(o.get("binaryData") or {}),
                   age(o["metadata"].get("creationTimestamp"))],
    ),
    "serviceaccounts": (
        [_column("Secrets", "integer"), AGE],
        lambda o: [len(o.get("secrets") or ()), age(o["metadata"].get("creationTimestamp"))],
    ),
    "leases": (
        [_column("Holder"), AGE],
        lambda o: [(o.get("spec") or {}).get("holderIdentity") or "", age(o["metadata"].get("creationTimestamp"))],
    ),
    "customresourcedefinitions": (
        [_column("Created At", "date")],
        lambda o: [o["metadata"].get("creationTimestamp")],
    ),
}
_EVENT_COLUMNS = [_column("Last Seen"), _column("Type"), _column("Reason"), _column("Object"), _column("Message")]


def _columns(resource: Resource) -> tuple[list[Obj], Callable[[Obj], list[Any]]]:
    if resource.custom and resource.printer_columns:
        defs = [
            _column(c["name"], c.get("type", "string"), c.get("description", ""), int(c.get("priority", 0)),
                    c.get("format", ""))
            for c in resource.printer_columns
        ]

        def cells(obj: Obj) -> list[Any]:
            return [_cell(json_path(obj, c.get("jsonPath", "")), c.get("type", "string"))
                    for c in resource.printer_columns]

        return [NAME, *defs], lambda o: [o["metadata"]["name"], *cells(o)]
    if resource.plural == "events":
        # `kubectl get events` shows LAST SEEN first; the Name column is hidden in wide output only.
        return [*_EVENT_COLUMNS, {**NAME, "priority": 1}], lambda o: [*_event_cells(o), o["metadata"]["name"]]
    if not resource.custom and resource.plural in _BUILTIN:
        defs, render = _BUILTIN[resource.plural]
        return [NAME, *defs], lambda o: [o["metadata"]["name"], *render(o)]
    return [NAME, AGE], lambda o: [o["metadata"]["name"], age(o["metadata"].get("creationTimestamp"))]


def table(resource: Resource, items: list[Obj], list_meta: Obj, include_object: str = "Metadata") -> Obj:
    """The Table for `items`; `include_object` is the request's `includeObject` (None/Metadata/Object)."""
    defs, render = _columns(resource)
    rows = []
    for obj in items:
        row: Obj = {"cells": render(obj)}
        if include_object == "Object":
            row["object"] = obj
        elif include_object != "None":
            row["object"] = {"kind": "PartialObjectMetadata", "apiVersion": "meta.k8s.io/v1",
                             "metadata": obj["metadata"]}
        rows.append(row)
    return {"kind": "Table", "apiVersion": "meta.k8s.io/v1", "metadata": list_meta, "columnDefinitions": defs,
            "rows": rows}
