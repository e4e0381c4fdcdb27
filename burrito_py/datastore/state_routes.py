"""The state backend's routes (docs/architecture.md §10.6): Terraform's and OpenTofu's `http` backend protocol for
a layer's state, stored through the datastore's `Storage` (filesystem or S3, encrypted when encryption is on).

    GET    /api/v1/layers/{ns}/{layer}/state           the current state (404: none yet)
    POST   /api/v1/layers/{ns}/{layer}/state[?ID=]     a new version (Terraform's update; `ID`: the lock it holds)
    LOCK   /api/v1/layers/{ns}/{layer}/state/lock      take the lock (body: Terraform's lock info)
    UNLOCK /api/v1/layers/{ns}/{layer}/state/lock      release it (body: the same lock info; an admin: any)
    GET    /api/v1/layers/{ns}/{layer}/state/lock      who holds it (404: nobody)
    GET    /api/v1/layers/{ns}/{layer}/state/versions  every version kept: its record, oldest first
    GET    /api/v1/layers/{ns}/{layer}/state/versions/{serial}  one version's state

Storage, under `states/<ns>/<layer>/` (retention, §10.4, never lists it):
    versions/<serial, 20 digits>.tfstate    each state as posted, written once (create-if-absent)
    versions/<serial, 20 digits>.json       what the datastore knows of it (run, attempt, time, size, ...)
    versions/index.json                     every kept version's record in one object: what a listing reads
                                            (a cache, checked against the version keys: state.py)
    lock.json                               the lock, created once (create-if-absent), deleted to unlock

The current state is the version with the highest serial. Requests on one layer are serialised in a replica
(one asyncio lock per layer); across replicas the create-if-absent writes of versions and of the lock decide a
race (the Lease, §7, already keeps one runner per state). Every decision is `state.py`'s, from what is stored:
a refused request changes nothing.
"""

# No `from __future__ import annotations`: FastAPI reads the routes' annotations, and `Caller` is local to
# `state_router`.
import asyncio
import contextlib
import json
import logging
from collections import Counter
from collections.abc import AsyncIterator, Awaitable, Callable
from datetime import UTC, datetime
from typing import Annotated, Any

import anyio
import anyio.to_thread
from fastapi import APIRouter, Depends, Query, Request, Response
from fastapi import Path as PathParam
from fastapi.responses import JSONResponse, StreamingResponse

from burrito_py.datastore.auth import STATE_WRITERS, Action, LayerState, Principal, Target
from burrito_py.datastore.quota import NamespaceUsage
from burrito_py.datastore.state import (
    META_SUFFIX,
    BadState,
    LockRecord,
    StateFacts,
    VersionIndex,
    check_md5,
    decide_lock,
    decide_unlock,
    decide_write,
    facts_record,
    index_after_listing,
    index_after_write,
    listing_of,
    parse_lock_request,
    parse_state,
    plan_listing,
    version_key,
    version_serial,
    versions_to_drop,
)
from burrito_py.datastore.storage import CHUNK, DeleteFailed, Exists, Storage, TooLarge

log = logging.getLogger(__name__)

LOCK_FILE = "lock.json"
LOCK_LIMIT = 64 * 1024  # Terraform's lock info is a few hundred bytes
META_LIMIT = 64 * 1024
RECORD_READS = 16  # version records read at once to complete the index (S3 GETs through the storage's worker threads)
INDEX_FILE = "index.json"  # states/<ns>/<layer>/versions/index.json: never a version key (those are 20 digits)
INDEX_LIMIT = 64 * 1024 * 1024  # a record is a few hundred bytes: room for far more versions than anyone keeps
# A posted state is held whole while it is parsed and stored (its key is its serial, which may come last). At most
# STATE_BODIES x MAX_STATE_BYTES of them are held at once by a replica, and one MAX_STATE_BYTES per namespace (a
# tenant's slow bodies never take another's room); a body beyond waits up to STATE_WAIT_SECONDS for room, then is a
# 503 (docs §10.7): an apply's state refused is a state lost, so it waits rather than fail at once.
STATE_BODIES = 4
STATE_WAIT_SECONDS = 30.0
# States parsed at once, each in a worker thread: its CPU is linear in its JSON values, seconds for 32 MiB of `{}`.
STATE_PARSES = 2
Segment = Annotated[str, PathParam(min_length=1, max_length=253)]


def _error(status: int, message: str, headers: dict[str, str] | None = None, **extra: Any) -> JSONResponse:
    return JSONResponse({"error": message, **extra}, status_code=status, headers=headers)


async def _once(data: bytes) -> AsyncIterator[bytes]:
    yield data


async def _slices(data: bytes | bytearray) -> AsyncIterator[bytes]:
    """A held body to storage a chunk at a time: as one piece, the storage's buffers copied it whole twice."""
    view = memoryview(data)
    for at in range(0, len(view), CHUNK):
        yield bytes(view[at:at + CHUNK])


class HeldBodies:
    """The bytes of posted states a replica holds at once, at most `limit`, and at most `per_namespace` for one
    namespace: what bounds their memory whatever the number of requests in flight (§10.7), and keeps one tenant's
    bodies (slow ones included) from taking every other tenant's room."""

    def __init__(self, limit: int, per_namespace: int, wait_seconds: float = STATE_WAIT_SECONDS) -> None:
        self.limit, self.per_namespace, self.wait_seconds = limit, per_namespace, wait_seconds
        self.used = 0
        self.by_namespace: Counter[str] = Counter()
        self._changed: asyncio.Condition | None = None  # made on the serving loop, at first use

    @contextlib.asynccontextmanager
    async def holding(self, namespace: str) -> AsyncIterator[Callable[[int], Awaitable[bool]]]:
        """A `take(size)` that waits (up to `wait_seconds`) for room for `size` more bytes and answers whether it
        got it; all of them are given back on exit."""
        if self._changed is None:
            self._changed = asyncio.Condition()
        changed, held = self._changed, 0

        def fits(size: int) -> bool:
            return (self.used + size <= self.limit
                    and self.by_namespace[namespace] + size <= self.per_namespace)

        async def take(size: int) -> bool:
            nonlocal held
            async with changed:
                try:
                    await asyncio.wait_for(changed.wait_for(lambda: fits(size)), self.wait_seconds)
                except TimeoutError:
                    return False
                self.used, self.by_namespace[namespace], held = (
                    self.used + size, self.by_namespace[namespace] + size, held + size)
                return True

        try:
            yield take
        finally:
            # Given back before any await (a cancelled request never keeps its room), then the waiters told.
            self.used -= held
            self.by_namespace[namespace] -= held
            if self.by_namespace[namespace] <= 0:
                del self.by_namespace[namespace]
            async with changed:
                changed.notify_all()


class StateStore:
    """One layer's state objects in `Storage`: reads and the writes a verdict allows."""

    def __init__(self, storage: Storage, prefix: str, parsing: anyio.CapacityLimiter | None = None) -> None:
        self.storage, self.prefix = storage, prefix
        self.parsing = parsing or anyio.CapacityLimiter(STATE_PARSES)

    async def parse(self, body: bytes | bytearray) -> StateFacts:
        """`parse_state` in a worker thread (STATE_PARSES at once): never on the event loop."""
        return await anyio.to_thread.run_sync(parse_state, body, limiter=self.parsing)

    async def _read(self, key: str, limit: int | None = None) -> bytes | None:
        stream = await self.storage.open(key)
        if stream is None:
            return None
        chunks, size = [], 0
        async for chunk in stream:
            size += len(chunk)
            if limit is not None and size > limit:
                raise TooLarge(limit)
            chunks.append(chunk)
        return b"".join(chunks)

    async def serials(self) -> list[int]:
        keys = await self.storage.list(f"{self.prefix}/versions")
        return sorted(s for key in keys if (s := version_serial(key)) is not None)

    async def latest(self) -> int | None:
        serials = await self.serials()
        return serials[-1] if serials else None

    async def facts(self, serial: int) -> StateFacts | None:
        """What is known of a stored version: its record, else (a write that died between the state and its
        record) the state itself, parsed."""
        meta = await self._read(version_key(self.prefix, serial, META_SUFFIX), META_LIMIT)
        if meta is not None:
            data = json.loads(meta)
            return StateFacts(int(data["serial"]), str(data["lineage"]), int(data["resources"]), int(data["size"]),
                              str(data["sha256"]))
        body = await self._read(version_key(self.prefix, serial))
        return await self.parse(body) if body is not None else None

    async def lock(self) -> LockRecord | None:
        raw = await self._read(f"{self.prefix}/{LOCK_FILE}", LOCK_LIMIT)
        return LockRecord.from_json(json.loads(raw)) if raw is not None else None

    async def record(self, serial: int) -> tuple[dict[str, Any], bool] | None:
        """A version's record and True; (a write that died between the state and its record) what its state says and
        False; None when the version is gone."""
        meta = await self._read(version_key(self.prefix, serial, META_SUFFIX), META_LIMIT)
        if meta is not None:
            return dict(json.loads(meta)), True
        body = await self._read(version_key(self.prefix, serial))
        return (facts_record(await self.parse(body)), False) if body is not None else None

    @property
    def index_key(self) -> str:
        return f"{self.prefix}/versions/{INDEX_FILE}"

    async def index(self) -> VersionIndex | None:
        """The versions index; None when there is none (a store from before it) or it is not readable as one."""
        try:
            raw = await self._read(self.index_key, INDEX_LIMIT)
        except TooLarge:
            log.warning("state versions index %s is over %d bytes: ignored", self.index_key, INDEX_LIMIT)
            return None
        return VersionIndex.from_json(raw) if raw is not None else None

    async def write_index(self, index: VersionIndex) -> None:
        """Store the index. It is a cache of the records (the version keys are the truth): a failure is logged and
        the next listing repairs it, so it never fails the request that stored a version."""
        try:
            await self.storage.put(self.index_key, _once(index.to_json()), INDEX_LIMIT)
        except Exception as exc:  # whatever the backend raised, the version itself is stored
            log.warning("state versions index %s not written (the next listing repairs it): %s", self.index_key, exc)

    async def records(self, guard: asyncio.Lock | None = None) -> list[dict[str, Any]]:
        """Every kept version's record, oldest first (a version whose record is missing: its facts only): one listing
        of the version keys and one read of the index. The records the index lacks (or holds from the state alone)
        are read RECORD_READS at a time and the index rewritten, under `guard` (the layer's, so no write of this
        replica comes in between); versions it names that are no longer stored are left out."""
        index = await self.index()
        if index is not None:  # else (a store from before the index) straight to the guarded rebuild: one listing
            plan = plan_listing(await self.serials(), index)
            if not plan.stale:
                return [dict(plan.known[s]) for s in plan.serials]
        async with guard if guard is not None else contextlib.nullcontext():
            plan = plan_listing(await self.serials(), await self.index())  # again: a write may have repaired it
            gate = asyncio.Semaphore(RECORD_READS)

            async def read(serial: int) -> tuple[int, tuple[dict[str, Any], bool] | None]:
                async with gate:
                    return serial, await self.record(serial)

            found = dict(await asyncio.gather(*(read(serial) for serial in plan.to_read)))
            repaired = index_after_listing(plan, found)
            if plan.stale:
                if plan.to_read:
                    log.info("state versions index %s: %d records read to complete it", self.index_key,
                             len(plan.to_read))
                await self.write_index(repaired)
        return [dict(r) for r in listing_of(plan, repaired)]

    async def drop_old(self, keep: int, serials: list[int]) -> list[int]:
        """Retention: delete all but the `keep` newest of `serials` (their state and record). `serials` may miss a
        version another replica just wrote: dropping the oldest of fewer versions drops none of the newest."""
        dropped = versions_to_drop(serials, keep)
        if dropped:
            await self.storage.delete_many([version_key(self.prefix, serial, suffix) for serial in dropped
                                            for suffix in (META_SUFFIX, ".tfstate")])
        return dropped

    async def write_meta(self, facts: StateFacts, who: Principal, now: datetime,
                         audit: dict[str, Any] | None = None) -> dict[str, Any]:
        scope = who.runner
        record = {**(audit or {}), "serial": facts.serial, "lineage": facts.lineage, "resources": facts.resources,
                  "size": facts.size,
                  "sha256": facts.sha256, "writer": who.username, "run": scope.run if scope else "",
                  "attempt": scope.attempt if scope else 0, "created": now.isoformat()}
        await self.storage.put(version_key(self.prefix, facts.serial, META_SUFFIX),
                               _once(json.dumps(record).encode()), META_LIMIT)
        return record


def state_router(
    storage: Storage,
    caller: Callable[..., Awaitable[Principal]],
    allow: Callable[[Principal, Action, Target], None],
    name: Callable[[str, str], str],
    max_state_bytes: int,
    versions_kept: int = 100,
    clock: Callable[[], datetime] = lambda: datetime.now(UTC),
    usage: NamespaceUsage | None = None,
    namespace_quota: int = 0,
) -> APIRouter:
    """The routes; `caller` authenticates (bearer or Terraform's basic auth, the password being the token),
    `allow` authorizes (auth.py's `LayerState` rules), `name` validates a path segment. `usage` and
    `namespace_quota`: a runner's state counts in its namespace's quota (quota.py), as its artifacts do."""
    router = APIRouter(prefix="/api/v1")
    guards: dict[tuple[str, str], asyncio.Lock] = {}
    Caller = Annotated[Principal, Depends(caller)]
    parsing = anyio.CapacityLimiter(STATE_PARSES)
    held = HeldBodies(STATE_BODIES * max_state_bytes, max_state_bytes)

    def store(who: Principal, action: Action, ns: str, layer: str) -> StateStore:
        prefix = f"states/{name('namespace', ns)}/{name('layer', layer)}"
        allow(who, action, LayerState(ns, layer))
        return StateStore(storage, prefix, parsing)

    def guard(ns: str, layer: str) -> asyncio.Lock:
        return guards.setdefault((ns, layer), asyncio.Lock())

    async def body_of(request: Request, limit: int, what: str, setting: str,
                      take: Callable[[int], Awaitable[bool]] | None = None, reason: str | None = None
                      ) -> bytearray | JSONResponse:
        """The body, at most `limit` bytes (`reason`: what sets it, else `setting`); `take`: the replica's room for it
        (HeldBodies), else a 503."""
        declared = request.headers.get("content-length", "")
        refusal = _error(413, f"{what} refused: {reason or f'it may hold at most {limit} bytes ({setting})'}",
                         limit=limit)
        if declared.isdigit() and int(declared) > limit:
            return refusal  # before a byte is read
        full = _error(503, f"{what} refused for now: the datastore held {held.limit} bytes of posted states, or this "
                      f"namespace's {held.per_namespace}, for {held.wait_seconds:g}s ({STATE_BODIES} x "
                      "BURRITO_PY_DATASTORE_MAX_STATE_BYTES, one per namespace): retry", headers={"Retry-After": "1"})
        if take is not None and declared.isdigit() and not await take(int(declared)):
            return full  # before a byte is read
        body = bytearray()  # grown in place: a list of pieces joined at the end held the body twice
        async for chunk in request.stream():
            if len(body) + len(chunk) > limit:
                return refusal
            if take is not None and not declared.isdigit() and not await take(len(chunk)):
                return full
            body += chunk
        return body

    responses: dict[int | str, dict[str, Any]] = {
        400: {"description": "A path segment, the state or the lock info is invalid (the reason is named)."},
        401: {"description": "No token, or one the Kubernetes API rejects."},
        403: {"description": "The caller is not the layer's current runner pod (nor an admin)."},
        503: {"description": "The token cannot be checked now."},
    }

    @router.get("/layers/{ns}/{layer}/state", responses={**responses, 404: {"description": "No state yet."}})
    async def get_state(who: Caller, ns: Segment, layer: Segment) -> Response:
        state = store(who, "state-read", ns, layer)
        latest = await state.latest()
        opened = await storage.read(version_key(state.prefix, latest)) if latest is not None else None
        if opened is None:
            return _error(404, f"layer {ns}/{layer} has no state yet")
        headers = {"Content-Length": str(opened.info.size), "X-Burrito-State-Serial": str(latest)}
        return StreamingResponse(opened.stream, media_type="application/json", headers=headers)

    @router.post("/layers/{ns}/{layer}/state", responses={
        **responses, 409: {"description": "Locked by another holder, another lineage, or a lower serial."},
        413: {"description": "Above BURRITO_PY_DATASTORE_MAX_STATE_BYTES."}})
    async def post_state(
        who: Caller, ns: Segment, layer: Segment, request: Request,
        lock_id: Annotated[str | None, Query(alias="ID", max_length=256)] = None,
        rollback_of: Annotated[int | None, Query(alias="rollbackOf", ge=0, le=10**20 - 1, description=(
            "An admin's rollback (the server's, §11.2): the version this state restores."))] = None,
        requested_by: Annotated[str | None, Query(alias="requestedBy", max_length=256, description=(
            "An admin's rollback: who asked for it (recorded in the version)."))] = None,
    ) -> Response:
        state = store(who, "state-write", ns, layer)
        if (rollback_of is not None or requested_by is not None) and not who.admin:
            return _error(403, f"{who.describe()} may not record a rollback: only the server's audited rollback does")
        audit = {"rollbackOf": rollback_of, "requestedBy": requested_by} if rollback_of is not None else {}
        # A state counts in its namespace's quota but is never refused for it here: an apply's POST comes after
        # Terraform changed the infrastructure, and a refused one is a state lost (Terraform keeps it only in the
        # runner's errored.tfstate). The quota refuses a state-writing run's LOCK instead, before anything changed.
        async with held.holding(ns) as take:
            body = await body_of(request, max_state_bytes, "the state", "BURRITO_PY_DATASTORE_MAX_STATE_BYTES", take)
            if isinstance(body, JSONResponse):
                return body
            try:
                check_md5(body, request.headers.get("content-md5"))
                incoming = await state.parse(body)
            except BadState as exc:
                return _error(400, f"the state of layer {ns}/{layer} refused: {exc}")
            return await write_state(who, ns, layer, state, body, incoming, lock_id, audit)

    async def write_state(who: Principal, ns: str, layer: str, state: StateStore, body: bytearray,
                          incoming: StateFacts, lock_id: str | None, audit: dict[str, Any]) -> Response:
        pod_uid = who.runner.pod_uid if who.runner else ""
        async with guard(ns, layer):
            serials = await state.serials()
            current = await state.facts(serials[-1]) if serials else None
            verdict = decide_write(current, incoming, await state.lock(), lock_id, pod_uid, who.username, who.admin)
            if not verdict.allow:
                log.info("state of %s/%s: %s refused: %s", ns, layer, who.username, verdict.message)
                extra = {"lock": verdict.lock.answer()} if verdict.lock is not None else {}
                return _error(verdict.status, verdict.message, **extra)
            try:
                stored = await storage.put(version_key(state.prefix, incoming.serial), _slices(body), max_state_bytes,
                                           once=True)
            except Exists:  # another replica wrote this serial meanwhile with other content
                return _error(409, f"serial: {incoming.serial} was just stored with other content")
            if usage is not None and stored.created:
                usage.add(ns, stored.size)
            record = None
            if verdict.created or not await storage.exists(version_key(state.prefix, incoming.serial, META_SUFFIX)):
                # A retry completes the record of a write that died between its state and its record.
                record = await state.write_meta(incoming, who, clock(), audit)
            dropped: list[int] = []
            if verdict.created:
                log.info("state of %s/%s: serial %d (%d resources, %d bytes) written by %s", ns, layer,
                         incoming.serial, incoming.resources, incoming.size, who.describe())
                try:
                    dropped = await state.drop_old(versions_kept, [*serials, incoming.serial])
                except DeleteFailed as exc:  # the next write tries again; the new version is stored
                    log.warning("state of %s/%s: old versions not deleted: %s", ns, layer, exc)
                else:
                    if dropped:
                        log.info("state of %s/%s: versions %s dropped (BURRITO_PY_DATASTORE_STATE_VERSIONS_KEPT=%d)",
                                 ns, layer, ", ".join(map(str, dropped)), versions_kept)
            if record is not None:
                # The index after the version, its record and retention: a crash before this line leaves it behind,
                # which the next listing sees and repairs.
                index = await state.index()
                if usage is not None and index is not None:  # the dropped versions' bytes, as their records say
                    usage.add(ns, -sum(int(index.records[s].get("size") or 0) for s in dropped if s in index.records))
                kept = sorted({*serials, incoming.serial} - set(dropped))
                await state.write_index(index_after_write(index, record, kept))
        return JSONResponse({"serial": incoming.serial, "lineage": incoming.lineage, "sha256": incoming.sha256},
                            status_code=200)

    @router.api_route("/layers/{ns}/{layer}/state/lock", methods=["LOCK"], responses={
        **responses, 423: {"description": "Locked by another holder: the body is its lock info."}})
    async def lock_state(who: Caller, ns: Segment, layer: Segment, request: Request) -> Response:
        state = store(who, "state-lock", ns, layer)
        body = await body_of(request, LOCK_LIMIT, "the lock info", "fixed")
        if isinstance(body, JSONResponse):
            return body
        try:
            lock_id, info = parse_lock_request(body)
        except BadState as exc:
            return _error(400, f"the lock of layer {ns}/{layer} refused: {exc}")
        scope = who.runner
        pod_uid = scope.pod_uid if scope else ""
        if scope is not None and scope.action in STATE_WRITERS and usage is not None and namespace_quota:
            # A run that writes state starts only with room for it: refused here, Terraform has changed nothing.
            used = await usage.used(ns)
            if used >= namespace_quota:
                return _error(413, f"the lock of layer {ns}/{layer} refused: namespace {ns} uses {used} bytes, its "
                              f"quota is {namespace_quota} (BURRITO_PY_DATASTORE_NAMESPACE_QUOTA_BYTES): nothing "
                              "that writes state starts until it has room", limit=namespace_quota)
        async with guard(ns, layer):
            for _ in range(2):  # a second look when another replica created the lock meanwhile
                held = await state.lock()
                verdict = decide_lock(held, lock_id, pod_uid, who.username, who.admin)
                if verdict.action != "acquire":
                    break
                assert lock_id is not None
                record = LockRecord(lock_id, info, who.username, scope.run if scope else "",
                                    scope.attempt if scope else 0, scope.pod if scope else "", pod_uid,
                                    clock().isoformat())
                try:
                    await storage.put(f"{state.prefix}/{LOCK_FILE}", _once(json.dumps(record.to_json()).encode()),
                                      LOCK_LIMIT, once=True)
                except Exists:
                    continue
                log.info("state of %s/%s locked by %s (lock ID %s)", ns, layer, who.describe(), lock_id)
                return Response(status_code=200)
            else:
                # Both creates met a lock the reads before them did not see: look once more to name its holder;
                # still unseen, the caller holds nothing, so it must retry (Terraform reads a 200 as "locked").
                verdict = decide_lock(await state.lock(), lock_id, pod_uid, who.username, who.admin)
                if verdict.action == "acquire":
                    return _error(503, f"the lock of layer {ns}/{layer} is being taken by another request: retry",
                                  headers={"Retry-After": "1"})
        if verdict.action == "keep":
            return Response(status_code=200)
        if verdict.status == 423 and verdict.lock is not None:
            # Terraform reads the holder's lock info from the body of a 423 and prints it.
            return JSONResponse(verdict.lock.answer(), status_code=423)
        return _error(verdict.status, f"the lock of layer {ns}/{layer} refused: {verdict.message}")

    @router.api_route("/layers/{ns}/{layer}/state/lock", methods=["UNLOCK"], responses={
        **responses, 409: {"description": "Another lock ID (or pod) holds the lock: the holder is named."}})
    async def unlock_state(who: Caller, ns: Segment, layer: Segment, request: Request) -> Response:
        state = store(who, "state-lock", ns, layer)
        body = await body_of(request, LOCK_LIMIT, "the lock info", "fixed")
        if isinstance(body, JSONResponse):
            return body
        try:
            lock_id, _info = parse_lock_request(body)
        except BadState as exc:
            return _error(400, f"the unlock of layer {ns}/{layer} refused: {exc}")
        async with guard(ns, layer):
            held = await state.lock()
            verdict = decide_unlock(held, lock_id, who.admin, who.runner.pod_uid if who.runner else "",
                                    who.runner.force_unlock if who.runner else "", who.username)
            if verdict.action == "release":
                await storage.delete(f"{state.prefix}/{LOCK_FILE}")
                assert held is not None
                log.info("state of %s/%s unlocked by %s (lock ID %s%s)", ns, layer, who.describe(), held.id,
                         ", forced" if held.id != lock_id else "")
        if verdict.action == "refuse":
            extra = {"lock": verdict.lock.answer()} if verdict.lock is not None else {}
            return _error(verdict.status, f"the unlock of layer {ns}/{layer} refused: {verdict.message}", **extra)
        return Response(status_code=200)

    @router.get("/layers/{ns}/{layer}/state/lock", responses={**responses, 404: {"description": "Not locked."}})
    async def get_lock(who: Caller, ns: Segment, layer: Segment) -> Response:
        state = store(who, "state-read", ns, layer)
        held = await state.lock()
        if held is None:
            return _error(404, f"the state of layer {ns}/{layer} is not locked")
        return JSONResponse(held.to_json())

    @router.get("/layers/{ns}/{layer}/state/versions", responses=responses)
    async def list_versions(who: Caller, ns: Segment, layer: Segment) -> Response:
        return JSONResponse(await store(who, "state-read", ns, layer).records(guard(ns, layer)))

    @router.get("/layers/{ns}/{layer}/state/versions/{serial}",
                responses={**responses, 404: {"description": "No such version (never written, or dropped)."}})
    async def get_version(who: Caller, ns: Segment, layer: Segment,
                          serial: Annotated[int, PathParam(ge=0, le=10**20 - 1)]) -> Response:
        state = store(who, "state-read", ns, layer)
        opened = await storage.read(version_key(state.prefix, serial))
        if opened is None:
            return _error(404, f"layer {ns}/{layer} has no state version {serial}")
        headers = {"Content-Length": str(opened.info.size), "X-Burrito-State-Serial": str(serial)}
        return StreamingResponse(opened.stream, media_type="application/json", headers=headers)

    return router
