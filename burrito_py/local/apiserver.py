"""An in-process Kubernetes API server for tests and `burrito-py dev` (see KUBE-API-FIDELITY.md).

Real HTTP over aiohttp, so kopf, the `kubernetes` clients and `kubectl` use it unchanged. All state
changes happen on the server's event loop; `_lock` guards them for direct reads from test threads.
"""

from __future__ import annotations

import asyncio
import base64
import collections
import copy
import hashlib
import hmac
import itertools
import json
import re
import secrets
import threading
import time
import uuid
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import yaml
from aiohttp import web

from burrito_py.local.kube_objects import (
    PatchError,
    apply_defaults_and_prune,
    fields_match,
    json_patch,
    labels_match,
    merge_patch,
    parse_field_selector,
    parse_label_selector,
    schema_errors,
    strategic_merge_patch,
)
from burrito_py.local.kube_resources import Resource, builtins, resources_from_crd

Obj = dict[str, Any]
EVENT_LOG_SIZE = 20000
CRD_KEY = ("apiextensions.k8s.io", "v1", "customresourcedefinitions")


class ApiError(Exception):
    def __init__(self, code: int, reason: str, message: str, causes: list[dict[str, str]] | None = None) -> None:
        super().__init__(message)
        self.code, self.reason, self.message, self.causes = code, reason, message, causes or []

    def status(self) -> Obj:
        body: Obj = {
            "kind": "Status",
            "apiVersion": "v1",
            "metadata": {},
            "status": "Failure",
            "message": self.message,
            "reason": self.reason,
            "code": self.code,
        }
        if self.causes:
            body["details"] = {"causes": self.causes}
        return body


def _now() -> str:
    return datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


@dataclass
class RequestRecord:
    method: str
    path: str
    query: dict[str, str]
    time: float


@dataclass
class Fault:
    method: str
    pattern: re.Pattern[str]
    status: int | None
    delay: float
    remaining: int


@dataclass
class Watcher:
    resource: Resource
    namespace: str | None
    labels: list[tuple[str, str, set[str]]]
    fields: list[tuple[str, bool, str]]
    queue: asyncio.Queue[Obj | None] = field(default_factory=asyncio.Queue)

    def matches(self, obj: Obj) -> bool:
        meta = obj["metadata"]
        if self.namespace and meta.get("namespace") != self.namespace:
            return False
        return labels_match(meta.get("labels") or {}, self.labels) and fields_match(obj, self.fields)


class ApiServer:
    def __init__(self, host: str = "127.0.0.1", port: int = 0, pod_log_dir: Path | None = None) -> None:
        self.host, self.port = host, port
        self.pod_log_dir = pod_log_dir
        self._lock = threading.RLock()
        self._resources: dict[tuple[str, str, str], Resource] = {}
        self._objects: dict[tuple[str, str, str], dict[tuple[str, str], Obj]] = collections.defaultdict(dict)
        self._rv = itertools.count(1)
        self._last_rv = 0
        self._log: collections.deque[tuple[int, tuple[str, str, str], str, Obj, Obj | None]] = collections.deque(
            maxlen=EVENT_LOG_SIZE
        )
        self._watchers: list[Watcher] = []
        self._signing_key = secrets.token_bytes(32)
        self.requests: list[RequestRecord] = []
        self._faults: list[Fault] = []
        self._loop: asyncio.AbstractEventLoop | None = None
        self._runner: web.AppRunner | None = None
        self._thread: threading.Thread | None = None
        for resource in builtins():
            self._resources[resource.key] = resource
        for ns in ("default", "kube-system"):
            self._create(self._resources[("", "v1", "namespaces")], None, {"metadata": {"name": ns}}, False)

    # -- lifecycle -------------------------------------------------------------------------------
    @property
    def url(self) -> str:
        return f"http://{self.host}:{self.port}"

    def start(self) -> ApiServer:
        ready = threading.Event()
        errors: list[BaseException] = []

        def main() -> None:
            loop = asyncio.new_event_loop()
            self._loop = loop
            try:
                loop.run_until_complete(self._serve())
            except BaseException as exc:
                errors.append(exc)
                ready.set()
                return
            ready.set()
            loop.run_forever()
            loop.run_until_complete(self._shutdown())
            loop.close()

        self._thread = threading.Thread(target=main, name="burrito-py-apiserver", daemon=True)
        self._thread.start()
        ready.wait()
        if errors:
            raise errors[0]
        return self

    async def _serve(self) -> None:
        app = web.Application(middlewares=[self._middleware], client_max_size=64 * 1024 * 1024)
        app.router.add_route("*", "/{tail:.*}", self._dispatch)
        self._runner = web.AppRunner(app, access_log=None, handle_signals=False, shutdown_timeout=0.5)
        await self._runner.setup()
        site = web.TCPSite(self._runner, self.host, self.port)
        await site.start()
        self.port = int(self._runner.addresses[0][1])

    async def _shutdown(self) -> None:
        for watcher in list(self._watchers):
            watcher.queue.put_nowait(None)
        if self._runner is not None:
            await self._runner.cleanup()

    def stop(self) -> None:
        if self._loop is None or self._thread is None:
            return
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join(10)
        self._loop = None

    def __enter__(self) -> ApiServer:
        return self.start()

    def __exit__(self, *_: object) -> None:
        self.stop()

    def write_kubeconfig(self, path: Path, namespace: str = "default") -> Path:
        name = "burrito-py-local"
        config = {
            "apiVersion": "v1",
            "kind": "Config",
            "current-context": name,
            "clusters": [{"name": name, "cluster": {"server": self.url}}],
            "users": [{"name": name, "user": {"token": "burrito-py-local-admin"}}],
            "contexts": [{"name": name, "context": {"cluster": name, "user": name, "namespace": namespace}}],
        }
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_suffix(".tmp")
        tmp.write_text(yaml.safe_dump(config))
        tmp.replace(path)
        return path

    # -- test-side extras ------------------------------------------------------------------------
    def get_object(self, api_version: str, plural: str, namespace: str | None, name: str) -> Obj | None:
        group, _, version = api_version.rpartition("/")
        with self._lock:
            obj = self._objects[(group, version, plural)].get((namespace or "", name))
            return copy.deepcopy(obj) if obj else None

    def list_objects(self, api_version: str, plural: str, namespace: str | None = None) -> list[Obj]:
        group, _, version = api_version.rpartition("/")
        with self._lock:
            return [
                copy.deepcopy(o)
                for (ns, _), o in self._objects[(group, version, plural)].items()
                if namespace is None or ns == namespace
            ]

    def clear_requests(self) -> None:
        with self._lock:
            self.requests.clear()

    def inject_fault(
        self, method: str, path_regex: str, status: int | None = None, delay: float = 0.0, times: int = 1
    ) -> None:
        with self._lock:
            self._faults.append(Fault(method.upper(), re.compile(path_regex), status, delay, times))

    # -- HTTP plumbing ---------------------------------------------------------------------------
    @web.middleware
    async def _middleware(self, request: web.Request, handler: Any) -> web.StreamResponse:
        with self._lock:
            self.requests.append(RequestRecord(request.method, request.path, dict(request.query), time.time()))
            fault = next(
                (
                    f
                    for f in self._faults
                    if f.remaining > 0 and f.method in (request.method, "*") and f.pattern.search(request.path)
                ),
                None,
            )
            if fault is not None:
                fault.remaining -= 1
        if fault is not None:
            if fault.delay:
                await asyncio.sleep(fault.delay)
            if fault.status is not None:
                reason = {409: "Conflict", 429: "TooManyRequests", 404: "NotFound"}.get(fault.status, "InternalError")
                return web.json_response(ApiError(fault.status, reason, "injected fault").status(), status=fault.status)
        try:
            response: web.StreamResponse = await handler(request)
            return response
        except ApiError as exc:
            return web.json_response(exc.status(), status=exc.code)

    async def _dispatch(self, request: web.Request) -> web.StreamResponse:
        path = request.path.rstrip("/") or "/"
        if path in ("/healthz", "/readyz", "/livez"):
            return web.Response(text="ok")
        if path == "/version":
            return web.json_response(
                {"major": "1", "minor": "32", "gitVersion": "v1.32.0-burrito-py", "platform": "linux/amd64"}
            )
        if path == "/api":
            return web.json_response(
                {
                    "kind": "APIVersions",
                    "versions": ["v1"],
                    "serverAddressByClientCIDRs": [
                        {"clientCIDR": "0.0.0.0/0", "serverAddress": f"{self.host}:{self.port}"}
                    ],
                }
            )
        if path == "/apis":
            return web.json_response(self._group_list())
        parts = path.strip("/").split("/")
        if parts[0] == "api" and len(parts) >= 2:
            group, version, rest = "", parts[1], parts[2:]
        elif parts[0] == "apis" and len(parts) >= 2:
            if len(parts) == 2:
                return web.json_response(self._group(parts[1]))
            group, version, rest = parts[1], parts[2], parts[3:]
        else:
            raise ApiError(404, "NotFound", f"the server could not find the requested resource ({path})")
        if not rest:
            return web.json_response(self._resource_list(group, version))
        return await self._resource_request(request, group, version, rest)

    # -- discovery -------------------------------------------------------------------------------
    def _groups(self) -> dict[str, list[str]]:
        groups: dict[str, list[str]] = {}
        with self._lock:
            for resource in self._resources.values():
                if resource.group and resource.version not in groups.setdefault(resource.group, []):
                    groups[resource.group].append(resource.version)
        return groups

    def _group(self, name: str) -> Obj:
        versions = self._groups().get(name)
        if not versions:
            raise ApiError(404, "NotFound", f"group {name} not found")
        entries = [{"groupVersion": f"{name}/{v}", "version": v} for v in versions]
        return {
            "kind": "APIGroup",
            "apiVersion": "v1",
            "name": name,
            "versions": entries,
            "preferredVersion": entries[0],
        }

    def _group_list(self) -> Obj:
        return {
            "kind": "APIGroupList",
            "apiVersion": "v1",
            "groups": [self._group(name) for name in sorted(self._groups())],
        }

    def _resource_list(self, group: str, version: str) -> Obj:
        with self._lock:
            found = [r for r in self._resources.values() if r.group == group and r.version == version]
        if not found:
            raise ApiError(404, "NotFound", f"{group}/{version} is not served")
        return {
            "kind": "APIResourceList",
            "apiVersion": "v1",
            "groupVersion": f"{group}/{version}".lstrip("/"),
            "resources": [entry for r in found for entry in r.discovery()],
        }

    # -- resources -------------------------------------------------------------------------------
    def _find(self, group: str, version: str, plural: str) -> Resource:
        with self._lock:
            resource = self._resources.get((group, version, plural))
        if resource is None:
            raise ApiError(404, "NotFound", f"the server could not find the requested resource ({plural})")
        return resource

    async def _resource_request(
        self, request: web.Request, group: str, version: str, rest: list[str]
    ) -> web.StreamResponse:
        namespace: str | None = None
        if rest[0] == "namespaces" and len(rest) >= 3 and (group, version, rest[2]) in self._resources:
            namespace, rest = rest[1], rest[2:]
        resource = self._find(group, version, rest[0])
        name = rest[1] if len(rest) > 1 else None
        sub = rest[2] if len(rest) > 2 else None
        if len(rest) > 3 or (sub is not None and sub not in ("status", "log", "token")):
            raise ApiError(404, "NotFound", f"unknown subresource {'/'.join(rest[2:])}")
        if resource.namespaced and namespace is None and name is not None:
            raise ApiError(404, "NotFound", f"{resource.plural} is namespaced")
        method = request.method
        if sub == "log" and method == "GET":
            return await self._pod_log(request, resource, namespace or "", name or "")
        if sub == "token" and method == "POST":
            return web.json_response(
                self._token_request(namespace or "", name or "", await self._body(request)), status=201
            )
        if name is None:
            if method == "GET":
                if request.query.get("watch") in ("true", "1", "True"):
                    return await self._watch(request, resource, namespace)
                return self._list_response(request, resource, namespace)
            if method == "POST":
                if resource.key == ("authentication.k8s.io", "v1", "tokenreviews"):
                    return web.json_response(self._token_review(await self._body(request)), status=201)
                created = self._create(resource, namespace, await self._body(request), _dry_run(request))
                return web.json_response(created, status=201)
            if method == "DELETE":
                return web.json_response(self._delete_collection(request, resource, namespace))
            raise ApiError(405, "MethodNotAllowed", f"{method} is not allowed on a collection")
        if method == "GET":
            return self._get_response(request, resource, namespace, name)
        if method == "PUT":
            body = await self._body(request)
            return web.json_response(self._replace(resource, namespace, name, body, sub, _dry_run(request)))
        if method == "PATCH":
            return await self._patch(request, resource, namespace, name, sub)
        if method == "DELETE":
            options = await self._body(request, optional=True)
            return web.json_response(
                self._delete(
                    resource, namespace, name, options or {}, request.query.get("propagationPolicy"), _dry_run(request)
                )
            )
        raise ApiError(405, "MethodNotAllowed", f"{method} is not allowed")

    async def _body(self, request: web.Request, optional: bool = False) -> Obj:
        raw = await request.read()
        if not raw:
            if optional:
                return {}
            raise ApiError(400, "BadRequest", "request body is empty")
        try:
            data = yaml.safe_load(raw) if "yaml" in request.content_type else json.loads(raw)
        except (ValueError, yaml.YAMLError) as exc:
            raise ApiError(400, "BadRequest", f"the body is not valid JSON/YAML: {exc}") from None
        if optional and data is None:
            return {}
        if not isinstance(data, dict) and request.method != "PATCH":
            raise ApiError(400, "BadRequest", "the body must be an object")
        return data  # type: ignore[no-any-return]

    # -- storage core ----------------------------------------------------------------------------
    def _next_rv(self) -> str:
        self._last_rv = next(self._rv)
        return str(self._last_rv)

    def _emit(self, resource: Resource, event_type: str, obj: Obj, previous: Obj | None = None) -> None:
        rv = int(obj["metadata"]["resourceVersion"])
        stored = copy.deepcopy(obj)
        self._log.append((rv, resource.key, event_type, stored, copy.deepcopy(previous) if previous else None))
        for watcher in self._watchers:
            if watcher.resource.key == resource.key:
                kind = _event_for(watcher, event_type, obj, previous)
                if kind is not None:
                    watcher.queue.put_nowait({"type": kind, "object": copy.deepcopy(obj)})

    def _store(self, resource: Resource, obj: Obj, previous: Obj | None) -> Obj:
        """Write `obj` (new rv), emit the watch event; a no-op write changes nothing."""
        meta = obj["metadata"]
        key = (meta.get("namespace") or "", meta["name"])
        if previous is not None and _same(previous, obj):
            return copy.deepcopy(previous)
        meta["resourceVersion"] = self._next_rv()
        self._objects[resource.key][key] = obj
        self._emit(resource, "ADDED" if previous is None else "MODIFIED", obj, previous)
        if resource.key == CRD_KEY:
            self._register_crd(obj)
        return copy.deepcopy(obj)

    def _remove(self, resource: Resource, obj: Obj) -> Obj:
        meta = obj["metadata"]
        self._objects[resource.key].pop((meta.get("namespace") or "", meta["name"]), None)
        gone = copy.deepcopy(obj)
        gone["metadata"]["resourceVersion"] = self._next_rv()
        self._emit(resource, "DELETED", gone)
        if resource.key == CRD_KEY:
            self._unregister_crd(obj)
        elif resource.key == ("", "v1", "namespaces"):
            for other in list(self._resources.values()):
                for (ns, _), child in list(self._objects[other.key].items()):
                    if ns == meta["name"]:
                        self._remove(other, child)
        self._collect_dependents(meta.get("uid"))
        return gone

    def _collect_dependents(self, uid: str | None) -> None:
        """Background garbage collection: delete everything owned by `uid`."""
        if not uid:
            return
        for resource in list(self._resources.values()):
            for child in list(self._objects[resource.key].values()):
                owners = child["metadata"].get("ownerReferences") or ()
                if any(o.get("uid") == uid for o in owners):
                    self._delete_object(resource, child, "Background")

    def _delete_object(self, resource: Resource, obj: Obj, propagation: str | None) -> Obj:
        meta = obj["metadata"]
        if propagation == "Foreground":
            self._collect_dependents(meta.get("uid"))
        if meta.get("finalizers"):
            if not meta.get("deletionTimestamp"):
                updated = copy.deepcopy(obj)
                updated["metadata"]["deletionTimestamp"] = _now()
                updated["metadata"]["deletionGracePeriodSeconds"] = 0
                return self._store(resource, updated, obj)
            return copy.deepcopy(obj)
        return self._remove(resource, obj)

    def _require_namespace(self, resource: Resource, namespace: str | None) -> None:
        if resource.namespaced:
            ns_key = ("", "v1", "namespaces")
            if ("", namespace or "") not in self._objects[ns_key]:
                raise ApiError(404, "NotFound", f'namespaces "{namespace}" not found')

    def _prepare(self, resource: Resource, obj: Obj) -> Obj:
        """Defaults, pruning and schema validation of custom resources (422 naming the field)."""
        if resource.schema is None:
            return obj
        meta = obj.get("metadata")
        pruned: Obj = apply_defaults_and_prune(resource.schema, {k: v for k, v in obj.items() if k != "metadata"})
        pruned["metadata"] = meta
        errors = schema_errors(resource.schema, pruned)
        if errors:
            name = (meta or {}).get("name", "")
            message = f'{resource.kind} "{name}" is invalid: ' + ", ".join(f"{p}: {m}" for p, m in errors)
            causes = [{"reason": "FieldValueInvalid", "message": m, "field": p} for p, m in errors]
            raise ApiError(422, "Invalid", message, causes)
        return pruned

    def _create(self, resource: Resource, namespace: str | None, body: Obj, dry_run: bool) -> Obj:
        obj = copy.deepcopy(body)
        meta = obj.setdefault("metadata", {})
        if not isinstance(meta, dict):
            raise ApiError(400, "BadRequest", "metadata must be an object")
        if resource.namespaced:
            if meta.get("namespace") and namespace and meta["namespace"] != namespace:
                raise ApiError(
                    400,
                    "BadRequest",
                    "the namespace of the provided object does not match the namespace sent on the request",
                )
            meta["namespace"] = namespace or meta.get("namespace") or "default"
        else:
            meta.pop("namespace", None)
        obj["apiVersion"], obj["kind"] = resource.api_version, resource.kind
        with self._lock:
            self._require_namespace(resource, meta.get("namespace"))
            if not meta.get("name"):
                if not meta.get("generateName"):
                    raise ApiError(
                        422,
                        "Invalid",
                        f"{resource.kind}: metadata.name: Required value",
                        [{"reason": "FieldValueRequired", "message": "Required value", "field": "metadata.name"}],
                    )
                meta["name"] = meta["generateName"] + secrets.token_hex(3)[:5]
            key = (meta.get("namespace") or "", meta["name"])
            if key in self._objects[resource.key]:
                raise ApiError(409, "AlreadyExists", f'{resource.plural} "{meta["name"]}" already exists')
            meta.update(uid=str(uuid.uuid4()), creationTimestamp=_now(), generation=1)
            meta.pop("resourceVersion", None)
            meta.pop("deletionTimestamp", None)
            if resource.status_subresource and resource.group not in ("", "apiextensions.k8s.io"):
                obj.pop("status", None)
            obj = self._prepare(resource, obj)
            if resource.key == CRD_KEY:
                obj.setdefault("status", {})["conditions"] = [
                    {"type": t, "status": "True", "reason": t, "lastTransitionTime": _now()}
                    for t in ("NamesAccepted", "Established")
                ]
            if dry_run:
                return obj
            created = self._store(resource, obj, None)
            if resource.key == ("", "v1", "namespaces"):
                sa = self._resources[("", "v1", "serviceaccounts")]
                self._create(sa, meta["name"], {"metadata": {"name": "default"}}, False)
            return created

    def _get(self, resource: Resource, namespace: str | None, name: str) -> Obj:
        obj = self._objects[resource.key].get((namespace or "", name))
        if obj is None:
            raise ApiError(404, "NotFound", f'{resource.plural}.{resource.group} "{name}" not found'.replace(". ", " "))
        return obj

    def _write(self, resource: Resource, previous: Obj, new: Obj, sub: str | None, dry_run: bool) -> Obj:
        """Common rules of PUT and PATCH: subresource split, immutable metadata, generation, finalizers."""
        new = copy.deepcopy(new)
        old_meta = previous["metadata"]
        if resource.status_subresource:
            if sub == "status":
                new = {**copy.deepcopy(previous), "status": new.get("status")}
            else:
                new["status"] = copy.deepcopy(previous.get("status"))
                if new["status"] is None:
                    new.pop("status")
        meta = new.setdefault("metadata", {})
        for key in ("uid", "creationTimestamp", "name", "namespace", "deletionTimestamp", "generation"):
            if key in old_meta:
                meta[key] = old_meta[key]
        new["apiVersion"], new["kind"] = resource.api_version, resource.kind
        if old_meta.get("deletionTimestamp"):
            added = set(meta.get("finalizers") or ()) - set(old_meta.get("finalizers") or ())
            if added:
                raise ApiError(
                    422,
                    "Invalid",
                    "metadata.finalizers: Forbidden: no new finalizers can be added if the object is being deleted",
                )
        new = self._prepare(resource, new)
        new["metadata"] = meta
        if _spec_changed(previous, new):
            meta["generation"] = int(old_meta.get("generation") or 1) + 1
        meta["resourceVersion"] = old_meta.get("resourceVersion")
        if dry_run:
            return new
        stored = self._store(resource, new, previous)
        if old_meta.get("deletionTimestamp") and not meta.get("finalizers"):
            return self._remove(resource, stored)  # the last finalizer is gone: the deletion completes
        return stored

    def _replace(
        self, resource: Resource, namespace: str | None, name: str, body: Obj, sub: str | None, dry_run: bool
    ) -> Obj:
        with self._lock:
            previous = self._get(resource, namespace, name)
            wanted = (body.get("metadata") or {}).get("resourceVersion")
            if wanted and wanted != previous["metadata"]["resourceVersion"]:
                raise ApiError(
                    409,
                    "Conflict",
                    f'Operation cannot be fulfilled on {resource.plural} "{name}": the '
                    "object has been modified; please apply your changes to the latest "
                    "version and try again",
                )
            return self._write(resource, previous, body, sub, dry_run)

    async def _patch(
        self, request: web.Request, resource: Resource, namespace: str | None, name: str, sub: str | None
    ) -> web.Response:
        content_type = request.content_type
        body: Any = await self._body(request)
        dry_run = _dry_run(request)
        with self._lock:
            existing = self._objects[resource.key].get((namespace or "", name))
            if existing is None:
                if content_type == "application/apply-patch+yaml":
                    return web.json_response(self._create(resource, namespace, body, dry_run), status=201)
                raise ApiError(404, "NotFound", f'{resource.plural} "{name}" not found')
            try:
                if content_type == "application/merge-patch+json":
                    if not isinstance(body, dict):
                        raise PatchError("a merge patch must be an object")
                    wanted = (body.get("metadata") or {}).get("resourceVersion")
                    if wanted and wanted != existing["metadata"]["resourceVersion"]:
                        raise ApiError(409, "Conflict", f'the object "{name}" has been modified')
                    patched = merge_patch(existing, body)
                elif content_type == "application/json-patch+json":
                    patched = json_patch(existing, body)
                elif content_type == "application/strategic-merge-patch+json":
                    if resource.group not in ("", "coordination.k8s.io", "events.k8s.io"):
                        raise ApiError(
                            415, "UnsupportedMediaType", "strategic merge patch is not supported for custom resources"
                        )
                    patched = strategic_merge_patch(existing, body)
                elif content_type == "application/apply-patch+yaml":
                    patched = merge_patch(existing, {k: v for k, v in body.items() if k != "status" or sub})
                else:
                    raise ApiError(
                        415,
                        "UnsupportedMediaType",
                        "the body of the request was in an unknown format "
                        "- accepted media types include: "
                        "application/json-patch+json, "
                        "application/merge-patch+json, "
                        "application/apply-patch+yaml",
                    )
            except PatchError as exc:
                raise ApiError(422, "Invalid", f"the patch could not be applied: {exc}") from None
            if not isinstance(patched, dict) or not isinstance(patched.get("metadata"), dict):
                raise ApiError(422, "Invalid", "the patched object is not a valid object")
            return web.json_response(self._write(resource, existing, patched, sub, dry_run))

    def _delete(
        self, resource: Resource, namespace: str | None, name: str, options: Obj, propagation: str | None, dry_run: bool
    ) -> Obj:
        with self._lock:
            obj = self._get(resource, namespace, name)
            preconditions = options.get("preconditions") or {}
            for key in ("resourceVersion", "uid"):
                if preconditions.get(key) and preconditions[key] != obj["metadata"].get(key):
                    raise ApiError(
                        409,
                        "Conflict",
                        f"Precondition failed: {key} in precondition: "
                        f"{preconditions[key]}, {key} in object meta: "
                        f"{obj['metadata'].get(key)}",
                    )
            if dry_run:
                return copy.deepcopy(obj)
            return self._delete_object(resource, obj, propagation or options.get("propagationPolicy"))

    def _delete_collection(self, request: web.Request, resource: Resource, namespace: str | None) -> Obj:
        items = self._select(request, resource, namespace)
        with self._lock:
            for obj in items:
                current = self._objects[resource.key].get(
                    (obj["metadata"].get("namespace") or "", obj["metadata"]["name"])
                )
                if current is not None:
                    self._delete_object(resource, current, request.query.get("propagationPolicy"))
        return self._list_body(resource, items)

    # -- lists and watches -----------------------------------------------------------------------
    def _selectors(self, request: web.Request) -> tuple[list[tuple[str, str, set[str]]], list[tuple[str, bool, str]]]:
        try:
            return (
                parse_label_selector(request.query.get("labelSelector")),
                parse_field_selector(request.query.get("fieldSelector")),
            )
        except ValueError as exc:
            raise ApiError(400, "BadRequest", str(exc)) from None

    def _select(self, request: web.Request, resource: Resource, namespace: str | None) -> list[Obj]:
        labels, fields = self._selectors(request)
        with self._lock:
            return [
                copy.deepcopy(o)
                for (ns, _), o in sorted(self._objects[resource.key].items())
                if (not namespace or ns == namespace)
                and labels_match(o["metadata"].get("labels") or {}, labels)
                and fields_match(o, fields)
            ]

    def _list_body(self, resource: Resource, items: list[Obj], cont: str | None = None) -> Obj:
        meta: Obj = {"resourceVersion": str(self._last_rv)}
        if cont:
            meta["continue"] = cont
        return {"kind": f"{resource.kind}List", "apiVersion": resource.api_version, "metadata": meta, "items": items}

    def _list_response(self, request: web.Request, resource: Resource, namespace: str | None) -> web.Response:
        items = self._select(request, resource, namespace)
        cont = None
        limit = request.query.get("limit")
        if limit:
            try:
                start = (
                    int(base64.urlsafe_b64decode(request.query["continue"]).decode())
                    if request.query.get("continue")
                    else 0
                )
                size = int(limit)
            except ValueError:
                raise ApiError(400, "BadRequest", "invalid limit or continue token") from None
            if start + size < len(items):
                cont = base64.urlsafe_b64encode(str(start + size).encode()).decode()
            items = items[start : start + size]
        if _wants_table(request):
            return web.json_response(self._table(resource, items))
        return web.json_response(self._list_body(resource, items, cont))

    def _get_response(self, request: web.Request, resource: Resource, namespace: str | None, name: str) -> web.Response:
        with self._lock:
            obj = copy.deepcopy(self._get(resource, namespace, name))
        if _wants_table(request):
            return web.json_response(self._table(resource, [obj]))
        return web.json_response(obj)

    async def _watch(self, request: web.Request, resource: Resource, namespace: str | None) -> web.StreamResponse:
        labels, fields = self._selectors(request)
        watcher = Watcher(resource, namespace, labels, fields)
        since = request.query.get("resourceVersion") or "0"
        bookmarks = request.query.get("allowWatchBookmarks") in ("true", "1", "True")
        timeout = float(request.query.get("timeoutSeconds") or 1800)
        response = web.StreamResponse(headers={"Content-Type": "application/json"})
        response.enable_chunked_encoding()
        await response.prepare(request)
        with self._lock:
            initial: list[Obj] = []
            if since == "0":
                initial = [
                    {"type": "ADDED", "object": copy.deepcopy(o)}
                    for (ns, _), o in sorted(self._objects[resource.key].items())
                    if watcher.matches(o)
                ]
            else:
                try:
                    wanted = int(since)
                except ValueError:
                    raise ApiError(400, "BadRequest", f"invalid resourceVersion {since!r}") from None
                oldest = self._log[0][0] if self._log else self._last_rv + 1
                if wanted < oldest - 1 and wanted < self._last_rv:
                    initial = [
                        {
                            "type": "ERROR",
                            "object": ApiError(
                                410, "Expired", f"too old resource version: {wanted} ({oldest - 1})"
                            ).status(),
                        }
                    ]
                else:
                    for rv, key, event_type, obj, previous in self._log:
                        kind = _event_for(watcher, event_type, obj, previous) if key == resource.key else None
                        if rv > wanted and kind is not None:
                            initial.append({"type": kind, "object": copy.deepcopy(obj)})
            self._watchers.append(watcher)
        try:
            for event in initial:
                await response.write(json.dumps(event).encode() + b"\n")
            if initial and initial[0]["type"] == "ERROR":
                return response
            deadline = time.monotonic() + timeout
            while True:
                remaining = deadline - time.monotonic()
                if remaining <= 0:
                    break
                try:
                    live = await asyncio.wait_for(watcher.queue.get(), timeout=min(remaining, 5.0))
                except TimeoutError:
                    if bookmarks:
                        mark = {
                            "kind": resource.kind,
                            "apiVersion": resource.api_version,
                            "metadata": {"resourceVersion": str(self._last_rv)},
                        }
                        await response.write(json.dumps({"type": "BOOKMARK", "object": mark}).encode() + b"\n")
                    continue
                if live is None:
                    break
                await response.write(json.dumps(live).encode() + b"\n")
        except (ConnectionResetError, asyncio.CancelledError):
            pass
        finally:
            with self._lock:
                if watcher in self._watchers:
                    self._watchers.remove(watcher)
        return response

    def _table(self, resource: Resource, items: list[Obj]) -> Obj:
        columns = [{"name": "Name", "type": "string", "format": "name", "description": "Name", "priority": 0}]
        paths: list[str] = []
        for column in resource.printer_columns:
            columns.append(
                {
                    "name": column["name"],
                    "type": column.get("type", "string"),
                    "format": column.get("format", ""),
                    "description": column.get("description", ""),
                    "priority": column.get("priority", 0),
                }
            )
            paths.append(column["jsonPath"])
        if not resource.printer_columns:
            columns.append({"name": "Age", "type": "date", "format": "", "description": "Age", "priority": 0})
            paths.append(".metadata.creationTimestamp")
        rows = [
            {
                "cells": [o["metadata"]["name"], *(_json_path(o, p) for p in paths)],
                "object": {"kind": "PartialObjectMetadata", "apiVersion": "meta.k8s.io/v1", "metadata": o["metadata"]},
            }
            for o in items
        ]
        return {
            "kind": "Table",
            "apiVersion": "meta.k8s.io/v1",
            "metadata": {"resourceVersion": str(self._last_rv)},
            "columnDefinitions": columns,
            "rows": rows,
        }

    # -- CRDs ------------------------------------------------------------------------------------
    def _register_crd(self, crd: Obj) -> None:
        for resource in resources_from_crd(crd):
            self._resources[resource.key] = resource

    def _unregister_crd(self, crd: Obj) -> None:
        for resource in resources_from_crd(crd):
            self._resources.pop(resource.key, None)
            self._objects.pop(resource.key, None)

    # -- tokens ----------------------------------------------------------------------------------
    def _sign(self, claims: Obj) -> str:
        def b64(data: bytes) -> str:
            return base64.urlsafe_b64encode(data).rstrip(b"=").decode()

        head = b64(json.dumps({"alg": "HS256", "typ": "JWT"}).encode())
        body = b64(json.dumps(claims, sort_keys=True).encode())
        signature = hmac.new(self._signing_key, f"{head}.{body}".encode(), hashlib.sha256).digest()
        return f"{head}.{body}.{b64(signature)}"

    def _verify(self, token: str) -> Obj | None:
        try:
            head, body, signature = token.split(".")
            expected = hmac.new(self._signing_key, f"{head}.{body}".encode(), hashlib.sha256).digest()
            if not hmac.compare_digest(base64.urlsafe_b64decode(signature + "=" * (-len(signature) % 4)), expected):
                return None
            claims: Obj = json.loads(base64.urlsafe_b64decode(body + "=" * (-len(body) % 4)))
        except (ValueError, json.JSONDecodeError):
            return None
        return claims

    def _token_request(self, namespace: str, name: str, body: Obj) -> Obj:
        with self._lock:
            sa = self._get(self._resources[("", "v1", "serviceaccounts")], namespace, name)
            spec = body.get("spec") or {}
            expires = int(time.time()) + int(spec.get("expirationSeconds") or 3600)
            claims: Obj = {
                "iss": "burrito-py-local",
                "sub": f"system:serviceaccount:{namespace}:{name}",
                "aud": spec.get("audiences") or ["burrito-py-local"],
                "exp": expires,
                "kubernetes.io": {
                    "namespace": namespace,
                    "serviceaccount": {"name": name, "uid": sa["metadata"]["uid"]},
                },
            }
            bound = spec.get("boundObjectRef") or {}
            if bound.get("kind") == "Pod":
                claims["kubernetes.io"]["pod"] = {"name": bound.get("name"), "uid": bound.get("uid")}
        expiry = datetime.fromtimestamp(expires, UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
        return {
            "kind": "TokenRequest",
            "apiVersion": "authentication.k8s.io/v1",
            "metadata": {"name": name},
            "spec": spec,
            "status": {"token": self._sign(claims), "expirationTimestamp": expiry},
        }

    def _token_review(self, body: Obj) -> Obj:
        spec = body.get("spec") or {}
        claims = self._verify(str(spec.get("token") or ""))
        status: Obj = {"authenticated": False}
        if claims is not None and claims.get("exp", 0) > time.time():
            audiences = set(claims.get("aud") or ())
            wanted = set(spec.get("audiences") or ()) or audiences
            info = claims.get("kubernetes.io") or {}
            pod = info.get("pod")
            pod_alive = True
            if pod:
                with self._lock:
                    live = self._objects[("", "v1", "pods")].get((info.get("namespace", ""), pod.get("name", "")))
                pod_alive = live is not None and (not pod.get("uid") or live["metadata"]["uid"] == pod.get("uid"))
            if audiences & wanted and pod_alive:
                extra = {}
                if pod:
                    extra = {
                        "authentication.kubernetes.io/pod-name": [pod.get("name")],
                        "authentication.kubernetes.io/pod-uid": [pod.get("uid")],
                    }
                status = {
                    "authenticated": True,
                    "audiences": sorted(audiences & wanted),
                    "user": {
                        "username": claims["sub"],
                        "uid": info.get("serviceaccount", {}).get("uid"),
                        "groups": ["system:serviceaccounts", f"system:serviceaccounts:{info.get('namespace')}"],
                        "extra": extra,
                    },
                }
            else:
                status["error"] = "token audiences or pod binding do not match"
        else:
            status["error"] = "invalid or expired token"
        return {
            "kind": "TokenReview",
            "apiVersion": "authentication.k8s.io/v1",
            "metadata": {},
            "spec": spec,
            "status": status,
        }

    # -- pod logs --------------------------------------------------------------------------------
    async def _pod_log(self, request: web.Request, resource: Resource, namespace: str, name: str) -> web.StreamResponse:
        with self._lock:
            pod = self._get(resource, namespace, name)
            containers = (pod.get("spec") or {}).get("containers") or [{"name": "main"}]
        container = request.query.get("container") or containers[0].get("name", "main")
        path = (self.pod_log_dir / namespace / name / f"{container}.log") if self.pod_log_dir else None
        follow = request.query.get("follow") in ("true", "1", "True")
        tail = request.query.get("tailLines")
        if not follow:
            text = path.read_bytes() if path is not None and path.exists() else b""
            if tail:
                text = b"".join(text.splitlines(keepends=True)[-int(tail) :])
            return web.Response(body=text, content_type="text/plain")
        response = web.StreamResponse(headers={"Content-Type": "text/plain"})
        response.enable_chunked_encoding()
        await response.prepare(request)
        offset = 0
        while True:
            if path is not None and path.exists():
                with path.open("rb") as handle:
                    handle.seek(offset)
                    chunk = handle.read()
                if chunk:
                    offset += len(chunk)
                    await response.write(chunk)
            with self._lock:
                current = self._objects[resource.key].get((namespace, name))
            if current is None or (current.get("status") or {}).get("phase") in ("Succeeded", "Failed"):
                if path is not None and path.exists() and path.stat().st_size > offset:
                    continue
                break
            await asyncio.sleep(0.05)
        return response


def _event_for(watcher: Watcher, event_type: str, obj: Obj, previous: Obj | None) -> str | None:
    """What a selector watch sees: objects entering the selector are ADDED, leaving it DELETED."""
    now_in, was_in = watcher.matches(obj), previous is not None and watcher.matches(previous)
    if event_type == "MODIFIED" and now_in and not was_in:
        return "ADDED"
    if event_type == "MODIFIED" and was_in and not now_in:
        return "DELETED"
    return event_type if now_in else None


def _dry_run(request: web.Request) -> bool:
    return request.query.get("dryRun") == "All"


def _wants_table(request: web.Request) -> bool:
    return "as=Table" in request.headers.get("Accept", "")


def _same(a: Obj, b: Obj) -> bool:
    def strip(obj: Obj) -> Obj:
        clone = dict(obj)
        clone["metadata"] = {k: v for k, v in obj["metadata"].items() if k != "resourceVersion"}
        return clone

    return strip(a) == strip(b)


def _spec_changed(old: Obj, new: Obj) -> bool:
    def payload(obj: Obj) -> Obj:
        return {k: v for k, v in obj.items() if k not in ("metadata", "status")}

    return payload(old) != payload(new)


def _cell(value: Any, column_type: str) -> Any:
    """The server renders date columns as ages (`5m`), as kube-apiserver's table convertor does."""
    if column_type != "date" or not isinstance(value, str):
        return value
    try:
        seconds = int((datetime.now(UTC) - datetime.fromisoformat(value.replace("Z", "+00:00"))).total_seconds())
    except ValueError:
        return value
    for unit, size in (("d", 86400), ("h", 3600), ("m", 60)):
        if seconds >= size * 2:
            return f"{seconds // size}{unit}"
    return f"{max(seconds, 0)}s"


def _json_path(obj: Obj, path: str) -> Any:
    node: Any = obj
    for part in path.strip(".").split("."):
        node = node.get(part) if isinstance(node, dict) else None
    return node


def serve_forever(host: str = "127.0.0.1", port: int = 0, kubeconfig: Path | None = None) -> None:
    server = ApiServer(host=host, port=port).start()
    if kubeconfig is not None:
        server.write_kubeconfig(kubeconfig)
    print(f"Kubernetes API emulator listening on {server.url}", flush=True)
    if kubeconfig is not None:
        print(f"kubeconfig written to {kubeconfig}", flush=True)
    try:
        while True:
            time.sleep(3600)
    except KeyboardInterrupt:
        pass
    finally:
        server.stop()
