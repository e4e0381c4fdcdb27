"""Decode the few protobuf bodies kubectl sends: its generator commands (`kubectl create namespace`,
`create configmap|secret|serviceaccount`), `kubectl create token` (a TokenRequest) and
`kubectl auth can-i|whoami` (the self reviews) post
`application/vnd.kubernetes.protobuf` for built-ins. Only those kinds are understood; anything else is
refused (415) by the caller."""

from __future__ import annotations

import base64
from collections.abc import Callable, Iterator
from typing import Any

Obj = dict[str, Any]
MAGIC = b"k8s\x00"


class ProtobufError(ValueError):
    pass


def _varint(data: bytes, pos: int) -> tuple[int, int]:
    result = shift = 0
    while True:
        if pos >= len(data):
            raise ProtobufError("truncated varint")
        byte = data[pos]
        pos += 1
        result |= (byte & 0x7F) << shift
        if not byte & 0x80:
            return result, pos
        shift += 7
        if shift > 63:
            raise ProtobufError("varint too long")


def _fields(data: bytes) -> Iterator[tuple[int, int | bytes]]:
    """(field number, value): varints as int, length-delimited fields as bytes; fixed widths skipped."""
    pos = 0
    while pos < len(data):
        key, pos = _varint(data, pos)
        number, wire = key >> 3, key & 7
        if wire == 0:
            value, pos = _varint(data, pos)
            yield number, value
        elif wire == 2:
            size, pos = _varint(data, pos)
            if pos + size > len(data):
                raise ProtobufError("truncated field")
            yield number, data[pos : pos + size]
            pos += size
        elif wire in (1, 5):
            pos += 8 if wire == 1 else 4
        else:
            raise ProtobufError(f"unsupported wire type {wire}")


def _text(value: int | bytes) -> str:
    if not isinstance(value, bytes):
        raise ProtobufError("expected a string")
    return value.decode()


def _map_entry(value: int | bytes) -> tuple[str, bytes]:
    if not isinstance(value, bytes):
        raise ProtobufError("expected a map entry")
    entry = dict(_fields(value))
    key, item = entry.get(1, b""), entry.get(2, b"")
    if not isinstance(key, bytes) or not isinstance(item, bytes):
        raise ProtobufError("bad map entry")
    return key.decode(), item


def _metadata(data: bytes) -> Obj:
    meta: Obj = {}
    names = {1: "name", 2: "generateName", 3: "namespace"}
    for number, value in _fields(data):
        if number in names and _text(value):  # proto2 sends unset strings as "": Go reads them as unset
            meta[names[number]] = _text(value)
        elif number in (11, 12):
            key, item = _map_entry(value)
            meta.setdefault("labels" if number == 11 else "annotations", {})[key] = item.decode()
        elif number == 14:
            meta.setdefault("finalizers", []).append(_text(value))
    return meta


def _configmap(data: bytes) -> Obj:
    obj: Obj = {}
    for number, value in _fields(data):
        if number == 2:
            key, item = _map_entry(value)
            obj.setdefault("data", {})[key] = item.decode()
        elif number == 3:
            key, item = _map_entry(value)
            obj.setdefault("binaryData", {})[key] = base64.b64encode(item).decode()
        elif number == 4:
            obj["immutable"] = bool(value)
    return obj


def _secret(data: bytes) -> Obj:
    obj: Obj = {}
    for number, value in _fields(data):
        if number == 2:
            key, item = _map_entry(value)
            obj.setdefault("data", {})[key] = base64.b64encode(item).decode()
        elif number == 3 and _text(value):
            obj["type"] = _text(value)
        elif number == 4:
            key, item = _map_entry(value)
            obj.setdefault("stringData", {})[key] = item.decode()
        elif number == 5:
            obj["immutable"] = bool(value)
    return obj


def _namespace(data: bytes) -> Obj:
    return {}


def _serviceaccount(data: bytes) -> Obj:
    obj: Obj = {}
    for number, value in _fields(data):
        if number == 4:
            obj["automountServiceAccountToken"] = bool(value)
    return obj


def _strings(data: bytes, names: dict[int, str]) -> Obj:
    return {names[n]: _text(v) for n, v in _fields(data) if n in names and _text(v)}


_RESOURCE_ATTRIBUTES = {1: "namespace", 2: "verb", 3: "group", 4: "version", 5: "resource", 6: "subresource",
                        7: "name"}


def _access_review_spec(data: bytes) -> Obj:
    """(Self)SubjectAccessReviewSpec: resourceAttributes 1, nonResourceAttributes 2, then (not in a self
    review) user 3, groups 4, extra 5, uid 6."""
    spec: Obj = {}
    for number, value in _fields(data):
        if number == 1 and isinstance(value, bytes):
            spec["resourceAttributes"] = _strings(value, _RESOURCE_ATTRIBUTES)
        elif number == 2 and isinstance(value, bytes):
            spec["nonResourceAttributes"] = _strings(value, {1: "path", 2: "verb"})
        elif number in (3, 6) and _text(value):
            spec["user" if number == 3 else "uid"] = _text(value)
        elif number == 4:
            spec.setdefault("groups", []).append(_text(value))
        elif number == 5:
            key, item = _map_entry(value)
            spec.setdefault("extra", {})[key] = [_text(v) for n, v in _fields(item) if n == 1]
    return spec


def _token_request_spec(data: bytes) -> Obj:
    """TokenRequestSpec: audiences 1 (repeated), boundObjectRef 3 (kind 1, apiVersion 2, name 3, uid 4),
    expirationSeconds 4 (what `kubectl create token` sends)."""
    spec: Obj = {}
    for number, value in _fields(data):
        if number == 1:
            spec.setdefault("audiences", []).append(_text(value))
        elif number == 3 and isinstance(value, bytes):
            spec["boundObjectRef"] = _strings(value, {1: "kind", 2: "apiVersion", 3: "name", 4: "uid"})
        elif number == 4 and isinstance(value, int):
            spec["expirationSeconds"] = value
    return spec


def _review(spec: Callable[[bytes], Obj]) -> Callable[[bytes], Obj]:
    def decode_review(data: bytes) -> Obj:
        return {"spec": next((spec(v) for n, v in _fields(data) if n == 2 and isinstance(v, bytes)), {})}

    return decode_review


_KINDS: dict[tuple[str, str], Callable[[bytes], Obj]] = {
    ("v1", "ConfigMap"): _configmap, ("v1", "Secret"): _secret, ("v1", "Namespace"): _namespace,
    ("v1", "ServiceAccount"): _serviceaccount,
    ("authorization.k8s.io/v1", "SelfSubjectAccessReview"): _review(_access_review_spec),
    ("authorization.k8s.io/v1", "SubjectAccessReview"): _review(_access_review_spec),
    ("authorization.k8s.io/v1", "LocalSubjectAccessReview"): _review(_access_review_spec),
    ("authorization.k8s.io/v1", "SelfSubjectRulesReview"): _review(lambda data: _strings(data, {1: "namespace"})),
    ("authentication.k8s.io/v1", "SelfSubjectReview"): lambda data: {},
    ("authentication.k8s.io/v1", "TokenRequest"): _review(_token_request_spec),
}


def decode(body: bytes) -> Obj:
    """The JSON form of a protobuf-encoded object of a supported kind; ProtobufError otherwise."""
    if not body.startswith(MAGIC):
        raise ProtobufError("missing the k8s protobuf envelope")
    envelope = dict(_fields(body[len(MAGIC):]))
    type_meta, raw = envelope.get(1, b""), envelope.get(2, b"")
    if not isinstance(type_meta, bytes) or not isinstance(raw, bytes):
        raise ProtobufError("bad envelope")
    names = {n: _text(v) for n, v in _fields(type_meta)}
    api_version, kind = names.get(1, ""), names.get(2, "")
    decoder = _KINDS.get((api_version, kind))
    if decoder is None:
        raise ProtobufError(f"protobuf bodies of {api_version} {kind} are not supported; send JSON")
    obj: Obj = {"apiVersion": api_version, "kind": kind}
    for number, value in _fields(raw):
        if number == 1 and isinstance(value, bytes):
            obj["metadata"] = _metadata(value)
    obj.update(decoder(raw))
    return obj
