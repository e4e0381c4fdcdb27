"""Terraform state the platform owns (docs/architecture.md §10.6): the pure half.

The datastore serves Terraform's and OpenTofu's `http` backend protocol for a layer whose `spec.state.managed` is
true. What a request may do is decided here, from what is stored and what was sent, with no I/O:

- `parse_state`: what a posted body claims (serial, lineage, resources), or why it is not a state (400);
- `decide_write`: whether a posted state may become the layer's next version (lock, lineage, serial);
- `decide_lock`, `decide_unlock`: the state lock, one holder at a time, released only by its holder (or an
  admin's force-unlock);
- `plan_listing`, `index_after_listing`, `index_after_write`: the versions index, a cache of the version records
  in one object that a listing checks against the listed version keys (never trusted beyond them).

A refused request never changes what is stored: `state_routes.py` executes a verdict only when it allows.
"""

from __future__ import annotations

import base64
import binascii
import codecs
import hashlib
import json
import re
import sys
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Literal

import ijson

__all__ = [
    "BadState",
    "ListingPlan",
    "LockRecord",
    "LockVerdict",
    "StateFacts",
    "VersionIndex",
    "WriteVerdict",
    "check_md5",
    "decide_lock",
    "decide_unlock",
    "decide_write",
    "facts_record",
    "held_by_other",
    "index_after_listing",
    "index_after_write",
    "listing_of",
    "parse_lock_request",
    "parse_state",
    "plan_listing",
    "rollback_body",
    "version_key",
    "version_serial",
    "versions_to_drop",
]

# Serials are zero-padded in keys so that keys sort as serials do (Terraform's serial is a uint64).
SERIAL_DIGITS = 20
STATE_SUFFIX = ".tfstate"
META_SUFFIX = ".json"


class BadState(Exception):
    """400: a body that is not what the protocol sends; the message names the field and the reason."""


@dataclass(frozen=True, slots=True)
class StateFacts:
    """What the datastore knows of one stored (or posted) state without keeping it parsed."""

    serial: int
    lineage: str
    resources: int  # resource instances, as `terraform state list` counts them
    size: int
    sha256: str


# What a state is read for (its serial, lineage and resource instances) is taken from the JSON's events as they are
# parsed (ijson's C backend), never from the document built in memory: `json.loads` of a state of many empty
# resources cost ~26 times its size (docs/architecture.md §10.6).
PARSE_CHUNK = 64 * 1024
_SCALARS = frozenset({"string", "number", "boolean", "null"})
_CONTAINER = object()  # a value that is a JSON object or array where a scalar is expected
# yajl's own reasons (the first line of its error): the only part of a parse error ever shown, as the rest of it
# quotes the state around the error.
_JSON_REASONS = frozenset({
    "premature EOF", "trailing garbage", "invalid bytes in UTF8 string.", "invalid char in json text.",
    "invalid string in json text.", "unallowed token at this point in JSON text",
    "invalid object key (must be a string)", "object key and value must be separated by a colon (':')",
    "after key and value, inside map, I expect ',' or '}'", "after array element, I expect ',' or ']'",
    "inside a string, '\\' occurs before a character which it may not.", "invalid character inside string.",
    "invalid (non-hex) character occurs after '\\u' inside string.",
    "malformed number, a digit is required after the exponent.",
    "malformed number, a digit is required after the decimal point.",
    "malformed number, a digit is required after the minus sign.", "numeric (floating point) overflow",
})


# ijson's C backend (3.6.0) does not check its conversion of an integer to a Python int: one of more digits than
# Python converts (sys.get_int_max_str_digits) leaves an exception set and a NULL in its event, which crashed the
# process. So a body with a run of that many digits that is not a decimal's (no `.`, `e` or `E` after it) is refused
# before it is parsed, strings included: no Terraform state has one. Found with C-speed scans (`translate`, `find`):
# a regex tried at every `,` of a state of 16 MiB held the interpreter lock for seconds.
_DIGITS_AS_ZERO = bytes.maketrans(b"123456789", b"000000000")
_PYTHON_BACKEND = ijson.get_backend("python")
_ZEROS = re.compile(rb"0*")


def _long_integer(body: bytes | bytearray) -> int:
    """The limit of digits Python converts when `body` holds an integer beyond it, else 0."""
    limit = sys.get_int_max_str_digits()
    if not limit:
        return 0
    digits, run = body.translate(_DIGITS_AS_ZERO), b"0" * (limit + 1)
    at = digits.find(run)
    while at != -1:
        zeros = _ZEROS.match(digits, at)
        assert zeros is not None  # `0*` matches anywhere
        end = zeros.end()
        if digits[end:end + 1] not in (b".", b"e", b"E"):
            return limit
        at = digits.find(run, end)
    return 0


class _Chunks:
    """A read-only file over `data` (bytes or bytearray), PARSE_CHUNK at a time, without copying it whole."""

    def __init__(self, data: bytes | bytearray) -> None:
        self.view, self.at = memoryview(data), 0

    def read(self, size: int = PARSE_CHUNK) -> bytes:
        chunk = bytes(self.view[self.at:self.at + size])
        self.at += len(chunk)
        return chunk


def _json_reason(exc: Exception) -> str:
    kind, _, reason = str(exc).split("\n", 1)[0].partition(" error: ")
    return f": {reason.rstrip('.')}" if kind in ("parse", "lexical") and reason in _JSON_REASONS else ""


def parse_state(body: bytes | bytearray) -> StateFacts:
    """The facts of a posted state, or BadState naming why it is not one (never echoing its content: a state
    holds secrets). Memory: a parse buffer, whatever the body holds; CPU: linear in its JSON events (a worker
    thread's, state_routes.py)."""
    if not body:
        raise BadState("the state is empty: expected Terraform's state JSON")
    decoder = codecs.getincrementaldecoder("utf-8")()
    view = memoryview(body)
    try:
        for at in range(0, len(view), 1024 * 1024):
            decoder.decode(view[at:at + 1024 * 1024])
        decoder.decode(b"", final=True)
    except UnicodeDecodeError:
        raise BadState("the state is not UTF-8 text: expected Terraform's state JSON") from None
    # A run of that many digits is most often inside a string (a file's content, an HTTP body in the state): such a
    # body is parsed by ijson's Python backend, which refuses a real integer that long cleanly (a refused apply's
    # state is a state lost, so it is never refused for a string's digits).
    backend: Any = _PYTHON_BACKEND if (limit := _long_integer(body)) else ijson
    serial: Any = None
    lineage: Any = None
    top_object = resources_list = True
    resources = depth = 0
    top_key = resource_key = None
    in_resources = resource_map = in_instances = False
    instances: int | None = None
    try:
        # A value opens at `depth` (the containers around it): the top object at 0, its members at 1, the resources
        # at 2, their members at 3, their instances at 4. A duplicate key's last value counts, as in `json.loads`.
        for event, value in backend.basic_parse(_Chunks(body), buf_size=PARSE_CHUNK):
            if event == "map_key":
                if depth == 1:
                    top_key = value
                elif depth == 3:
                    resource_key = value
                continue
            if event == "end_map" or event == "end_array":
                depth -= 1
                if depth == 2 and in_resources and event == "end_map":
                    resources += 1 if instances is None else instances
                continue
            if depth == 0:
                top_object = event == "start_map"
            elif depth == 1 and top_object:
                scalar = value if event in _SCALARS else _CONTAINER
                if top_key == "serial":
                    serial = scalar
                elif top_key == "lineage":
                    lineage = scalar
                in_resources = top_key == "resources" and event == "start_array"
                if top_key == "resources":
                    resources_list, resources = in_resources, 0
            elif depth == 2 and in_resources:
                resource_map, instances = event == "start_map", None
                if not resource_map:
                    resources += 1  # not an object: counted as one resource without instances
            elif depth == 3 and in_resources and resource_map:
                in_instances = resource_key == "instances" and event == "start_array"
                if resource_key == "instances":
                    instances = 0 if in_instances else None
            elif depth == 4 and in_instances and in_resources and resource_map:
                assert instances is not None
                instances += 1
            if event == "start_map" or event == "start_array":
                depth += 1
    except (ijson.JSONError, ValueError, ArithmeticError) as exc:  # a number Decimal refuses (`1e` and 20 digits)
        if limit:
            raise BadState(f"the state holds an integer of more than {limit} digits, or is not valid JSON") from None
        raise BadState(f"the state is not valid JSON{_json_reason(exc)} (corrupt or truncated)") from None
    if not top_object:
        raise BadState("the state is not a JSON object")
    if isinstance(serial, bool) or not isinstance(serial, int):
        raise BadState("serial: missing or not an integer")
    if serial < 0 or serial >= 10**SERIAL_DIGITS:
        raise BadState(f"serial: {serial} is out of range (0 to 10^{SERIAL_DIGITS} - 1)")
    if not isinstance(lineage, str) or not lineage.strip():
        raise BadState("lineage: missing or not a non-empty string")
    if len(lineage) > 256:
        raise BadState("lineage: longer than 256 characters")
    if not resources_list:
        raise BadState("resources: not a list")
    return StateFacts(serial, lineage, resources, len(body), hashlib.sha256(body).hexdigest())


def check_md5(body: bytes | bytearray, header: str | None) -> None:
    """Terraform sends `Content-MD5` (base64) with every state it posts: a body cut short on the way fails here."""
    if not header:
        return
    try:
        expected = base64.b64decode(header, validate=True)
    except (binascii.Error, ValueError):
        raise BadState("Content-MD5: not base64") from None
    if hashlib.md5(body, usedforsecurity=False).digest() != expected:
        raise BadState("Content-MD5: does not match the body (truncated or corrupted on the way)")


@dataclass(frozen=True, slots=True)
class LockRecord:
    """The stored lock: Terraform's lock info as the client sent it, and who holds it as the datastore knows it
    (from the token's pod binding, never from the lock info)."""

    id: str
    info: Mapping[str, Any]
    holder: str  # the caller's identity
    run: str = ""
    attempt: int = 0
    pod: str = ""
    pod_uid: str = ""
    created: str = ""

    def to_json(self) -> dict[str, Any]:
        return {"id": self.id, "info": dict(self.info), "holder": self.holder, "run": self.run,
                "attempt": self.attempt, "pod": self.pod, "podUid": self.pod_uid, "created": self.created}

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> LockRecord:
        return cls(id=str(data.get("id") or ""), info=dict(data.get("info") or {}),
                   holder=str(data.get("holder") or ""),
                   run=str(data.get("run") or ""), attempt=int(data.get("attempt") or 0),
                   pod=str(data.get("pod") or ""), pod_uid=str(data.get("podUid") or ""),
                   created=str(data.get("created") or ""))

    def describe(self) -> str:
        return f"run {self.run} attempt {self.attempt} (pod {self.pod})" if self.run else self.holder

    def answer(self) -> dict[str, Any]:
        """What a refused client is shown: Terraform's own lock info (it prints `ID`, `Who`, `Operation`), with the
        holder the datastore recorded."""
        info = dict(self.info)
        info["ID"] = self.id
        info["Info"] = f"held by {self.describe()}" + (f"; {info['Info']}" if info.get("Info") else "")
        return info


def parse_lock_request(body: bytes | bytearray) -> tuple[str | None, dict[str, Any]]:
    """(the lock ID, the lock info) of a LOCK or UNLOCK body; (None, {}) for an empty body (a force-unlock sends
    none). BadState for a body that is not a JSON object or an ID that is not a string."""
    if not body.strip():
        return None, {}
    try:
        parsed = json.loads(body)
    except (ValueError, UnicodeDecodeError):
        raise BadState("the lock info is not valid JSON") from None
    if not isinstance(parsed, dict):
        raise BadState("the lock info is not a JSON object")
    lock_id = parsed.get("ID")
    if lock_id is None or lock_id == "":
        return None, parsed
    if not isinstance(lock_id, str) or len(lock_id) > 256:
        raise BadState("ID: not a string of at most 256 characters")
    return lock_id, parsed


@dataclass(frozen=True, slots=True)
class WriteVerdict:
    """`allow`: store the posted state as a new version (`created`), or answer 200 for the very state already
    stored (`created` False: a retried POST). Otherwise `status` and `message` (and the lock to show)."""

    allow: bool
    status: int = 200
    message: str = ""
    created: bool = False
    lock: LockRecord | None = None


def held_by_other(lock: LockRecord, pod_uid: str, username: str, admin: bool) -> bool:
    """Whether the caller is not the lock's holder, whatever lock ID it learnt (GET …/state/lock and a 423 show it).
    A lock bound to a pod is that pod's alone. One taken without a pod (an admin's) is its holder identity's, or any
    admin's: never a runner pod's, which would otherwise use an admin's lock by its ID."""
    if lock.pod_uid:
        return lock.pod_uid != pod_uid
    return not admin and (bool(pod_uid) or not lock.holder or lock.holder != username)


def decide_write(current: StateFacts | None, incoming: StateFacts, lock: LockRecord | None,
                 request_lock_id: str | None, writer_pod_uid: str = "", writer: str = "",
                 admin: bool = False) -> WriteVerdict:
    """May `incoming` become the layer's next version? Terraform sends the lock ID it holds as `?ID=`: while the
    state is locked, only its holder (that ID, from the pod that took it, or for a lock no pod took the identity
    that took it or an admin: `held_by_other`) writes. Then one lineage per layer, and serials never go back; the
    same serial again is only the very same state (a retried POST)."""
    if lock is not None and (request_lock_id != lock.id or held_by_other(lock, writer_pod_uid, writer, admin)):
        sent = f"lock ID {request_lock_id}" if request_lock_id else "no lock ID"
        if request_lock_id == lock.id:
            sent += " from another pod" if lock.pod_uid else f" from {writer or 'another caller'}"
        return WriteVerdict(False, 409, f"the state is locked by {lock.describe()} (lock ID {lock.id}); the "
                            f"write sent {sent}", lock=lock)
    if current is None:
        return WriteVerdict(True, created=True)
    if incoming.lineage != current.lineage:
        return WriteVerdict(False, 409, f"lineage: {incoming.lineage!r} is not the stored state's lineage "
                            f"{current.lineage!r}; a state of another lineage never replaces this layer's")
    if incoming.serial < current.serial:
        return WriteVerdict(False, 409, f"serial: {incoming.serial} is lower than the stored state's serial "
                            f"{current.serial} (lineage {current.lineage}); a state never goes back")
    if incoming.serial == current.serial:
        if incoming.sha256 == current.sha256:
            return WriteVerdict(True, created=False)
        return WriteVerdict(False, 409, f"serial: {incoming.serial} is already stored with other content; a "
                            "changed state must have a higher serial")
    return WriteVerdict(True, created=True)


LockAction = Literal["acquire", "keep", "release", "none", "refuse"]


@dataclass(frozen=True, slots=True)
class LockVerdict:
    """`acquire` (store the lock), `keep` (already held by this ID: 200), `release` (delete it), `none` (nothing
    to do: 200), or `refuse` with `status` and `message` (and the lock to show)."""

    action: LockAction
    status: int = 200
    message: str = ""
    lock: LockRecord | None = field(default=None)


def decide_lock(held: LockRecord | None, requested_id: str | None, pod_uid: str = "", username: str = "",
                admin: bool = False) -> LockVerdict:
    if not requested_id:
        return LockVerdict("refuse", 400, "ID: the lock info names no lock ID")
    if held is None:
        return LockVerdict("acquire")
    if held.id == requested_id and not held_by_other(held, pod_uid, username, admin):
        return LockVerdict("keep")  # a retried LOCK whose answer was lost
    return LockVerdict("refuse", 423, f"the state is locked by {held.describe()} (lock ID {held.id})", held)


def decide_unlock(held: LockRecord | None, requested_id: str | None, admin: bool, pod_uid: str = "",
                  force_unlock: str = "", username: str = "") -> LockVerdict:
    """Unlocking what is not locked is a 200, so a retried UNLOCK succeeds. A lock is released by its ID, from its
    holder (`held_by_other`); an admin's UNLOCK without an ID (Terraform's force-unlock sends no body) releases any,
    and so does the runner of a force-unlock run (`force_unlock`, its `spec.operation.lockId`, §5.12) for that lock
    only."""
    if held is None:
        return LockVerdict("none")
    if not requested_id:
        if admin or (force_unlock and held.id == force_unlock):
            return LockVerdict("release")
        if force_unlock:
            return LockVerdict("refuse", 409, f"the force-unlock of lock ID {force_unlock} refused: the state is "
                               f"locked by {held.describe()} (lock ID {held.id})", held)
        return LockVerdict("refuse", 400, "ID: the unlock request names no lock ID")
    if held.id != requested_id or (held_by_other(held, pod_uid, username, admin) and not admin):
        return LockVerdict("refuse", 409, f"lock ID {requested_id} does not hold the state: it is locked by "
                           f"{held.describe()} (lock ID {held.id})", held)
    return LockVerdict("release")


def version_key(prefix: str, serial: int, suffix: str = STATE_SUFFIX) -> str:
    return f"{prefix}/versions/{serial:0{SERIAL_DIGITS}d}{suffix}"


def version_serial(key: str, suffix: str = STATE_SUFFIX) -> int | None:
    """The serial of a version key, else None (an unknown shape)."""
    name = key.rsplit("/", 1)[-1]
    if not name.endswith(suffix):
        return None
    digits = name[: -len(suffix)]
    return int(digits) if len(digits) == SERIAL_DIGITS and digits.isdigit() else None


def versions_to_drop(serials: list[int], keep: int) -> list[int]:
    """The versions retention deletes: all but the `keep` highest serials (`keep` ≥ 1, so never the current one)."""
    ordered = sorted(set(serials))
    return ordered[: max(0, len(ordered) - max(1, keep))]


def rollback_body(old: bytes, current: StateFacts) -> bytes:
    """An earlier version's state as the next version: its content, with the serial after the current one (Terraform
    then reads it as newer than anything it holds). BadState when it is not of the current lineage."""
    parsed = json.loads(old)
    if not isinstance(parsed, dict) or parsed.get("lineage") != current.lineage:
        raise BadState(f"lineage: the version is not of the current lineage {current.lineage!r}")
    parsed["serial"] = current.serial + 1
    return json.dumps(parsed, indent=2).encode() + b"\n"


def facts_record(facts: StateFacts) -> dict[str, Any]:
    """What a listing shows of a version whose record is missing (a write that died between its state and its
    record): what the state itself says."""
    return {"serial": facts.serial, "lineage": facts.lineage, "resources": facts.resources, "size": facts.size,
            "sha256": facts.sha256}


# The versions index (`states/<ns>/<layer>/versions/index.json`): every kept version's record in one object, so a
# listing reads one object rather than one per version. It is a cache of the records, never the truth: the version
# keys are. A listing lists the version keys (as every state request does) and answers from the index only for the
# serials it finds there; a serial the index lacks is read from its record (and the index rewritten), a serial it
# names that is no longer stored is left out. So an index that fell behind (a crash between a version and the
# index's update, two replicas' updates of which the later overwrote the other's, a failed write of it, a store
# from before the index) costs reads until it is repaired, and never loses nor invents a version.
INDEX_FORMAT = 1


@dataclass(frozen=True, slots=True)
class VersionIndex:
    """serial → the record a listing shows; `partial`: serials indexed from their state alone (their record was
    missing then), read again by the next listing in case the record was completed since."""

    records: Mapping[int, Mapping[str, Any]]
    partial: frozenset[int] = frozenset()

    def to_json(self) -> bytes:
        return json.dumps({"format": INDEX_FORMAT, "versions": [dict(self.records[s]) for s in sorted(self.records)],
                           "partial": sorted(self.partial & set(self.records))}).encode()

    @classmethod
    def from_json(cls, raw: bytes) -> VersionIndex | None:
        """The index, or None when it is not one this code wrote (then the listing reads every record and writes a
        new one)."""
        try:
            data = json.loads(raw)
            if not isinstance(data, dict) or data.get("format") != INDEX_FORMAT:
                return None
            records: dict[int, Mapping[str, Any]] = {}
            for record in data["versions"]:
                serial = record["serial"] if isinstance(record, dict) else None
                if isinstance(serial, bool) or not isinstance(serial, int):
                    return None
                records[serial] = record
            partial = frozenset(int(s) for s in data.get("partial", []))
        except (ValueError, TypeError, KeyError, UnicodeDecodeError):
            return None
        return cls(records, partial)


@dataclass(frozen=True, slots=True)
class ListingPlan:
    """How to answer a listing of the stored `serials`: `known` from the index, `to_read` from each version's record
    (the index lacks them or holds them only partially); `stale`: the index must be rewritten (it lacks a stored
    version, holds one partially, or names one no longer stored)."""

    serials: tuple[int, ...]
    known: Mapping[int, Mapping[str, Any]]
    to_read: tuple[int, ...]
    stale: bool


def plan_listing(serials: list[int] | tuple[int, ...], index: VersionIndex | None) -> ListingPlan:
    stored = tuple(sorted(set(serials)))
    records = index.records if index is not None else {}
    partial = index.partial if index is not None else frozenset()
    known = {s: records[s] for s in stored if s in records and s not in partial}
    to_read = tuple(s for s in stored if s not in known)
    stale = index is None or bool(to_read) or len(records) != len(known)
    return ListingPlan(stored, known, to_read, stale)


def index_after_listing(plan: ListingPlan, read: Mapping[int, tuple[Mapping[str, Any], bool] | None]) -> VersionIndex:
    """The index a listing leaves: the records it answered with. `read`: for each serial of `plan.to_read`, its
    record and whether it is complete (False: from the state alone), or None when the version vanished meanwhile."""
    records: dict[int, Mapping[str, Any]] = dict(plan.known)
    partial: set[int] = set()
    for serial in plan.to_read:
        found = read.get(serial)
        if found is None:
            continue
        records[serial] = found[0]
        if not found[1]:
            partial.add(serial)
    return VersionIndex(records, frozenset(partial))


def index_after_write(index: VersionIndex | None, record: Mapping[str, Any], kept: list[int] | tuple[int, ...]
                      ) -> VersionIndex:
    """The index after a write stored `record`'s version (its record complete) and retention kept `kept` (the
    serials stored now, as the writer knows them): the index's entries of kept versions, and the new record. Kept
    versions the index lacks stay lacking (the next listing reads them): a write reads no other record."""
    serial = int(record["serial"])
    stay = set(kept) | {serial}
    records = {s: r for s, r in (index.records.items() if index is not None else ()) if s in stay}
    records[serial] = record
    partial = (index.partial if index is not None else frozenset()) & (stay - {serial})
    return VersionIndex(records, frozenset(partial))


def listing_of(plan: ListingPlan, index: VersionIndex) -> list[Mapping[str, Any]]:
    """The answer: the records of the stored serials the index now holds, oldest first."""
    return [index.records[s] for s in plan.serials if s in index.records]
