"""What the REST API and the UI both do with a layer's managed state and its day-2 operations (docs/architecture.md
§5.12, §10.6, §11.2, §11.4): list the kept versions, compare two, download one, roll back, ask for an operation.

One copy of every check, asked as the caller (`server/access.py`) before anything is read: the REST routes and the
UI's pages and forms call these and only translate `Refused` (and `Forbidden`, `ReadFailure`) into their answer. The
server reads and writes with its own rights once the caller's SubjectAccessReviews allow it."""

from __future__ import annotations

import asyncio
import json
import logging
import weakref
from collections.abc import Callable
from typing import Any

import anyio.to_thread

from burrito_py.api import annotations as ann
from burrito_py.api.operations import BadOperation, describe, parse_request
from burrito_py.datastore.auth import Principal
from burrito_py.datastore.state import BadState, StateFacts, rollback_body
from burrito_py.datastore.state_diff import state_diff
from burrito_py.kube.client import Body, Kube, crd_path
from burrito_py.kube.events import post_event
from burrito_py.server.access import GET_RUNS, GET_SECRETS, PATCH_LAYERS, Access, Forbidden
from burrito_py.server.reads import Artifacts
from burrito_py.server.views import OperationRequest, OperationView
from burrito_py.timeutil import format_time_precise, utcnow

log = logging.getLogger(__name__)

# The diff builds both versions whole (`json.loads`), which costs up to ~26 times a state's size (one of many empty
# values): it compares versions of at most DIFF_LIMIT bytes, one diff at a time per server, in a worker thread, so
# that its worst case (2 x 4 MiB x 26, ~210 MiB) fits beside the server in its memory limit (chart: 512 MiB).
DIFF_LIMIT = 4 * 1024 * 1024
# One lock per event loop (a server's; tests run several): a diff waits its turn on the loop, never in a worker
# thread, where each waiting diff held one of the threads every datastore read of the server needs.
_diffing: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, asyncio.Lock] = weakref.WeakKeyDictionary()


def _diff_of(old: bytes, new: bytes) -> dict[str, Any]:
    return state_diff(json.loads(old), json.loads(new))


class Refused(Exception):
    """An answer other than success (400, 404, 409); the message is shown to the caller, so it never holds a
    value of the state."""

    def __init__(self, status: int, message: str) -> None:
        super().__init__(message)
        self.status = status


class LayerState:
    """`visible` is the server's `namespaces` setting: a namespace outside it is a 404, as the rest of the API
    answers."""

    def __init__(self, kube: Kube, artifacts: Artifacts, access: Access, visible: Callable[[str], bool]) -> None:
        self.kube, self.artifacts, self.access, self.visible = kube, artifacts, access, visible

    async def layer(self, ns: str, name: str) -> Body:
        found = await self.kube.get(crd_path("terraformlayers", ns, name)) if self.visible(ns) else None
        if found is None:
            raise Refused(404, f"TerraformLayer {ns}/{name} not found")
        return found

    # -- reads: get terraformruns (names, serials, counts, never a value) ---------------------------------------
    async def versions(self, who: Principal, ns: str, name: str) -> list[dict[str, Any]]:
        """The kept versions' records, oldest first ([] when none)."""
        await self.access.require(who, GET_RUNS, ns)
        await self.layer(ns, name)
        return await self.artifacts.state_versions(ns, name)

    async def diff(self, who: Principal, ns: str, name: str, from_serial: int | None = None,
                   to_serial: int | None = None) -> dict[str, Any]:
        """`state_diff` of two kept versions (default: the current one and the one before it), each of at most
        DIFF_LIMIT bytes (413 above, before either is read)."""
        versions = [v for v in await self.versions(who, ns, name) if isinstance(v.get("serial"), int)]
        serials = [int(v["serial"]) for v in versions]
        to = to_serial if to_serial is not None else (serials[-1] if serials else None)
        older = [s for s in serials if to is not None and s < to]
        before = from_serial if from_serial is not None else (older[-1] if older else None)
        if to is None or before is None:
            raise Refused(404, f"layer {ns}/{name} has no two state versions to compare")
        sizes = {int(v["serial"]): v.get("size") for v in versions}
        for serial in (before, to):
            size = sizes.get(serial)
            if isinstance(size, int) and size > DIFF_LIMIT:
                raise Refused(413, self._too_large(ns, name, serial, size))
        old = await self.artifacts.state_version(ns, name, before)
        new = await self.artifacts.state_version(ns, name, to)
        for serial, body in ((before, old), (to, new)):
            if len(body) > DIFF_LIMIT:  # a version its record did not size
                raise Refused(413, self._too_large(ns, name, serial, len(body)))
        async with _diffing.setdefault(asyncio.get_running_loop(), asyncio.Lock()):
            return await anyio.to_thread.run_sync(_diff_of, old, new)

    @staticmethod
    def _too_large(ns: str, name: str, serial: int, size: int) -> str:
        return (f"version {serial} of layer {ns}/{name} holds {size} bytes: the diff compares versions of at most "
                f"{DIFF_LIMIT} bytes; download them (get secrets) to compare larger ones")

    # -- a version's state: get secrets too (it holds every secret of the layer, as a plan's JSON does) -----------
    async def may_download(self, who: Principal, ns: str) -> bool:
        """For drawing a link (cached answers); `download` asks again."""
        return await self.access.allowed(who, GET_RUNS, ns) and await self.access.allowed(who, GET_SECRETS, ns)

    async def download(self, who: Principal, ns: str, name: str, serial: int) -> bytes:
        await self.versions(who, ns, name)
        try:
            await self.access.require(who, GET_SECRETS, ns)
        except Forbidden as exc:
            raise Forbidden(f"{exc}: a state holds every secret of the layer; the diff shows what changed") \
                from None
        return await self.artifacts.state_version(ns, name, serial)

    # -- rollback: patch on the layer and get secrets, asked afresh ---------------------------------------------
    async def may_roll_back(self, who: Principal, ns: str) -> bool:
        """For drawing buttons (cached answers); `roll_back` asks again, afresh."""
        return await self.access.allowed(who, PATCH_LAYERS, ns) and await self.access.allowed(who, GET_SECRETS, ns)

    async def roll_back(self, who: Principal, ns: str, name: str, serial: int) -> dict[str, Any]:
        """Restore kept version `serial` as a new version, recorded with the caller; a Warning `StateRolledBack` on
        the layer names who. Refused while the state is locked (409 naming the holder: `ReadFailure`)."""
        await self.access.require(who, PATCH_LAYERS, ns, fresh=True)
        await self.access.require(who, GET_SECRETS, ns, fresh=True)
        layer = await self.layer(ns, name)
        versions = await self.artifacts.state_versions(ns, name)
        if not versions:
            raise Refused(404, f"layer {ns}/{name} has no state versions")
        current = versions[-1]
        if current.get("serial") == serial:
            raise Refused(409, f"version {serial} is already the current state of layer {ns}/{name}")
        old = await self.artifacts.state_version(ns, name, serial)
        try:
            restored = rollback_body(old, StateFacts(int(current["serial"]), str(current["lineage"]), 0, 0, ""))
        except BadState as exc:
            raise Refused(409, f"version {serial} cannot be restored: {exc}") from None
        answer = await self.artifacts.store_rollback(ns, name, restored, serial, who.username)
        message = f"state rolled back to version {serial} by {who.username}: new version {answer.get('serial')}"
        log.info("layer %s/%s: %s", ns, name, message)
        await post_event(self.kube, layer, "Warning", "StateRolledBack", message)
        return {"namespace": ns, "name": name, "rollbackOf": serial, "serial": answer.get("serial"),
                "by": who.username}

    # -- day-2 operations: patch on the layer, asked afresh ------------------------------------------------------
    async def request_operation(self, who: Principal, ns: str, name: str, body: OperationRequest) -> OperationView:
        """Check the request (400 naming the field), then write it as the layer's `operation` annotation with the
        caller as `operation-by`; the controllers run it. A request already waiting is someone's: 409."""
        await self.access.require(who, PATCH_LAYERS, ns, fresh=True)
        requested_at = format_time_precise(utcnow())
        value = json.dumps({"operation": body.operation, **body.model_dump(by_alias=True, exclude_none=True,
                                                                            exclude={"operation", "replace", "target"}),
                            **({"replace": body.replace} if body.replace else {}),
                            **({"target": body.target} if body.target else {}), "requestedAt": requested_at})
        try:
            kind, operation = parse_request(value, who.username)
        except BadOperation as exc:
            raise Refused(400, str(exc).removeprefix(f"{ann.OPERATION}: ")) from None
        layer = await self.layer(ns, name)
        waiting = layer["metadata"].get("annotations") or {}
        if ann.OPERATION in waiting:
            raise Refused(409, f"layer {ns}/{name} already has an operation request waiting (asked by "
                               f"{waiting.get(ann.OPERATION_BY) or 'nobody named'}); it runs once no run is live")
        await self.kube.merge_patch(crd_path("terraformlayers", ns, name), {
            "metadata": {"annotations": {ann.OPERATION: value, ann.OPERATION_BY: who.username}}})
        what = describe(kind, operation)
        log.info("%s asked for %s on layer %s/%s", who.username, what, ns, name)
        return OperationView(namespace=ns, name=name, operation=what, by=who.username, requested_at=requested_at)
