"""An in-process Kubernetes API server for tests and `burrito-py dev` (see KUBE-API-FIDELITY.md).

Real HTTP over aiohttp, so kopf, the `kubernetes` clients and `kubectl` use it unchanged. The server
runs its own event loop in a daemon thread; the object semantics live in `kube_store.Store`, which
test threads may read directly (`get_object`, `list_objects`).
"""

from __future__ import annotations

import asyncio
import base64
import binascii
import functools
import json
import re
import ssl
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml
from aiohttp import web

from burrito_local import kube_service_proxy as service_proxy
from burrito_local.kube_authn import ADMIN_TOKEN, Authenticator, Unauthorized, UserInfo
from burrito_local.kube_errors import ApiError, bad_request, invalid, not_found, reason_for, unknown_resource
from burrito_local.kube_impersonation import impersonate
from burrito_local.kube_openapi import group_version_document
from burrito_local.kube_patch import PatchError, json_patch, merge_patch
from burrito_local.kube_protobuf import ProtobufError
from burrito_local.kube_protobuf import decode as decode_protobuf
from burrito_local.kube_rbac import (
    RBAC_STORAGES,
    RbacIndex,
    access_review_attributes,
    authorize,
    bootstrap_policy,
    forbidden,
    request_attributes,
    rules_for,
)
from burrito_local.kube_resources import Resource
from burrito_local.kube_selectors import FieldSelector, LabelSelector, Selection
from burrito_local.kube_store import PATCH_TYPES, FieldChecks, Store, now_rfc3339
from burrito_local.kube_table import table
from burrito_local.kube_tls import ServingCertificate
from burrito_local.kube_tls import issue as issue_certificate
from burrito_local.kube_tokens import API_AUDIENCES, TokenIssuer

Obj = dict[str, Any]
JSON = "application/json"
_TRUE = ("true", "1", "True")
_VERSION = re.compile(r"^v(\d+)(?:(alpha|beta)(\d+))?$")
_YAML_LOADER: Any = getattr(yaml, "CSafeLoader", yaml.SafeLoader)
_USER = web.RequestKey("user", UserInfo)  # the authenticated caller, for the review endpoints


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
    # The request is carried out, then its response is replaced by the error: "the write happened, the
    # client never heard" (a lost response), which is what idempotent retries must survive.
    after: bool = False
    # The connection is closed with no answer at all (a reset, a server going away): the client sees an error of
    # its transport, not an API status.
    drop: bool = False


@functools.cache
def _server_context(certificate: ServingCertificate) -> ssl.SSLContext:
    return certificate.server_context()


def _version_priority(version: str) -> tuple[int, int, int]:
    """Kubernetes' version order: GA > beta > alpha, then by number (v2 > v1, v1beta2 > v1beta1)."""
    m = _VERSION.match(version)
    if m is None:
        return (0, 0, 0)
    stability = {"alpha": 1, "beta": 2, None: 3}[m.group(2)]
    return (stability, int(m.group(1)), int(m.group(3) or 0))


def _json(body: Any, status: int = 200, checks: FieldChecks | None = None) -> web.Response:
    response = web.Response(body=json.dumps(body).encode(), status=status, content_type=JSON)
    for warning in checks.warnings if checks is not None else ():
        response.headers.add("Warning", f"299 - {json.dumps(warning)}")
    return response


def _field_checks(request: web.Request) -> FieldChecks:
    mode = request.query.get("fieldValidation") or "Ignore"
    if mode not in ("Strict", "Warn", "Ignore"):
        raise bad_request(f'invalid fieldValidation directive "{mode}": must be one of Strict, Warn or Ignore')
    return FieldChecks(mode, user=request[_USER].as_review_user())


def _dry_run(request: web.Request, options: Obj | None = None) -> bool:
    values = request.query.getall("dryRun", [])
    values = [*values, *((options or {}).get("dryRun") or [])]
    for value in values:
        if value != "All":
            raise bad_request(f'Invalid dry run value: "{value}": supported values: "All"')
    return bool(values)


def _table_wanted(request: web.Request) -> str | None:
    """includeObject of a request that asks for a meta.k8s.io Table (as kubectl get does), else None."""
    accept = request.headers.get("Accept", "")
    if "as=Table" not in accept:
        return None
    return request.query.get("includeObject") or "Metadata"


class ApiServer:
    """See the module doc. `start()` returns once listening; `stop()` ends watches and frees the port.

    Every request is authenticated (`kube_authn`) and authorized by RBAC (`kube_rbac`) as kube-apiserver
    does; the token of `write_kubeconfig` (`admin_token`) is the bootstrap cluster admin (system:masters).
    """

    admin_token = ADMIN_TOKEN

    def __init__(
        self, host: str = "127.0.0.1", port: int = 0, pod_log_dir: Path | None = None, event_log_size: int = 10_000
    ) -> None:
        self.host, self.port = host, port
        self.tls_port = 0  # the HTTPS listener kubeconfigs point at (see kube_tls), on a free port
        self.certificate = issue_certificate(host)
        self.pod_log_dir = pod_log_dir
        self.store = Store(event_log_size)
        self.tokens = TokenIssuer(self.store.uid_of)
        self.authenticator = Authenticator(self.tokens)
        self._rbac_key: tuple[int, ...] = ()
        self._rbac = RbacIndex()
        for obj in bootstrap_policy():
            plural = "clusterroles" if obj["kind"] == "ClusterRole" else "clusterrolebindings"
            self.store.create(self.store.resources[("rbac.authorization.k8s.io", "v1", plural)], None, obj)
        self.bookmark_interval = 60.0  # seconds between BOOKMARK events on watches that allow them
        self.log_poll_interval = 0.02  # how often a followed pod log looks for more output
        self.requests: list[RequestRecord] = []
        self.max_requests = 100_000  # the log keeps the newest records (bounded for long `burrito-py dev` runs)
        self._faults: list[Fault] = []
        self._extras_lock = threading.Lock()
        self._loop: asyncio.AbstractEventLoop | None = None
        self._runner: web.AppRunner | None = None
        self._thread: threading.Thread | None = None
        self._stopping: asyncio.Event | None = None

    # -- lifecycle -------------------------------------------------------------------------------
    @property
    def url(self) -> str:
        """Plain HTTP, for test-side clients that send `admin_headers` (kubectl would send no credentials
        here: client-go sends a kubeconfig's credentials to https servers only)."""
        return f"http://{self.host}:{self.port}"

    @property
    def tls_url(self) -> str:
        """HTTPS with `certificate.ca_pem` as CA: what `write_kubeconfig` points at."""
        return f"https://{self.host}:{self.tls_port}"

    def start(self) -> ApiServer:
        if self._thread is not None:
            return self
        ready = threading.Event()
        failure: list[BaseException] = []

        def main() -> None:
            loop = asyncio.new_event_loop()
            asyncio.set_event_loop(loop)
            try:
                loop.run_until_complete(self._serve())
            except BaseException as exc:  # reported to the starting thread
                failure.append(exc)
                ready.set()
                loop.close()
                return
            self._loop = loop
            ready.set()
            try:
                loop.run_forever()
            finally:
                loop.run_until_complete(self._cleanup())
                loop.close()

        self._thread = threading.Thread(target=main, name="burrito-py-apiserver", daemon=True)
        self._thread.start()
        ready.wait()
        if failure:
            self._thread = None
            raise failure[0]
        return self

    async def _serve(self) -> None:
        self._stopping = asyncio.Event()
        app = web.Application(middlewares=[self._middleware], client_max_size=64 * 1024 * 1024)
        app.router.add_route("*", "/{tail:.*}", self._dispatch)
        self._runner = web.AppRunner(app, access_log=None, handle_signals=False, shutdown_timeout=0.2)
        await self._runner.setup()
        site = web.TCPSite(self._runner, self.host, self.port, reuse_address=True)
        await site.start()
        self.port = int(self._runner.addresses[0][1])
        tls = web.TCPSite(self._runner, self.host, self.tls_port, reuse_address=True,
                          ssl_context=_server_context(self.certificate))
        await tls.start()
        self.tls_port = int(self._runner.addresses[1][1])

    async def _cleanup(self) -> None:
        if self._stopping is not None:
            self._stopping.set()
        self.store.close_watches()
        if self._runner is not None:
            await self._runner.cleanup()

    def stop(self) -> None:
        loop, thread = self._loop, self._thread
        if loop is None or thread is None:
            return
        self._loop = None
        loop.call_soon_threadsafe(loop.stop)
        thread.join(10)
        self._thread = None

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
            "clusters": [{"name": name, "cluster": {
                "server": self.tls_url,
                "certificate-authority-data": base64.b64encode(self.certificate.ca_pem).decode()}}],
            "users": [{"name": name, "user": {"token": self.admin_token}}],
            "contexts": [{"name": name, "context": {"cluster": name, "user": name, "namespace": namespace}}],
        }
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_name(path.name + ".tmp")
        tmp.write_text(json.dumps(config, indent=2))  # JSON, which is YAML: runners read it without PyYAML
        tmp.replace(path)
        return path

    @property
    def admin_headers(self) -> dict[str, str]:
        """The Authorization header of the bootstrap cluster admin (what the kubeconfig carries)."""
        return {"Authorization": f"Bearer {self.admin_token}"}

    # -- authorization ---------------------------------------------------------------------------
    def rbac_index(self) -> RbacIndex:
        """The RBAC grants by subject, rebuilt when a Role, ClusterRole or binding changed since the last
        request (so a new RoleBinding takes effect on the next request, and requests in between cost a
        few dict lookups)."""
        with self.store.lock:
            key = tuple(self.store.generations[s] for s in RBAC_STORAGES)
            if key != self._rbac_key:
                lists = [list(self.store._iter(s, None)) for s in RBAC_STORAGES]
                self._rbac = RbacIndex.build(*lists)
                self._rbac_key = key
            return self._rbac

    def _authorize(self, request: web.Request) -> UserInfo:
        try:
            user = self.authenticator.authenticate(request.headers.get("Authorization"))
        except Unauthorized:
            raise ApiError(401, "Unauthorized", "Unauthorized") from None
        # As kube-apiserver's filter chain: authentication, then impersonation, then authorization of the
        # acting identity (`kubectl --as`).
        user = impersonate(self.rbac_index(), user, list(request.headers.items()))
        attrs = request_attributes(request.method, request.path, request.query)
        decision = authorize(self.rbac_index(), user, attrs)
        if not decision.allowed:
            raise forbidden(user.username, attrs, decision.reason)
        return user

    # -- test-side extras ------------------------------------------------------------------------
    def get_object(self, api_version: str, kind_plural: str, namespace: str | None, name: str) -> Obj | None:
        found: list[Obj] = self.store.snapshot(api_version, kind_plural, namespace, name)
        return found[0] if found else None

    def list_objects(self, api_version: str, plural: str, namespace: str | None = None) -> list[Obj]:
        return self.store.snapshot(api_version, plural, namespace, None)

    def clear_requests(self) -> None:
        with self._extras_lock:
            self.requests.clear()

    def inject_fault(
        self, method: str, path_regex: str, status: int | None = None, delay: float = 0.0, times: int = 1,
        after: bool = False, drop: bool = False,
    ) -> None:
        """Answer the next `times` requests matching (method or "*", regex searched in the path) with a
        Status of `status`, after `delay` seconds (a delay alone lets the request through, late).

        `after`: carry the request out first and lose its response (the client sees only `status`).
        `drop`: close the connection without an answer (the request is not carried out)."""
        with self._extras_lock:
            self._faults.append(Fault(method.upper(), re.compile(path_regex), status, delay, times, after, drop))

    # -- HTTP plumbing ---------------------------------------------------------------------------
    @web.middleware
    async def _middleware(self, request: web.Request, handler: Any) -> web.StreamResponse:
        with self._extras_lock:
            self.requests.append(RequestRecord(request.method, request.path, dict(request.query), time.time()))
            if len(self.requests) > self.max_requests:
                del self.requests[: len(self.requests) - self.max_requests // 2]
            fault = next(
                (f for f in self._faults
                 if f.remaining > 0 and f.method in (request.method, "*") and f.pattern.search(request.path)),
                None,
            )
            if fault is not None:
                fault.remaining -= 1
                if fault.remaining <= 0:
                    self._faults.remove(fault)
        try:
            if fault is not None:
                if fault.delay:
                    await asyncio.sleep(fault.delay)
                if fault.drop and request.transport is not None:
                    request.transport.close()
                    return web.Response(status=503)  # never reaches the client
                if fault.status is not None and not fault.after:
                    reason = reason_for(fault.status)
                    raise ApiError(fault.status, reason, f"injected fault: {reason}")
            request[_USER] = self._authorize(request)
            response: web.StreamResponse = await handler(request)
            if fault is not None and fault.after and fault.status is not None:
                reason = reason_for(fault.status)
                raise ApiError(fault.status, reason, f"injected fault after the request was carried out: {reason}")
            return response
        except ApiError as exc:
            return _json(exc.status(), exc.code)

    async def _dispatch(self, request: web.Request) -> web.StreamResponse:
        path = request.path.rstrip("/") or "/"
        if path in ("/healthz", "/readyz", "/livez") or path.startswith(("/healthz/", "/readyz/", "/livez/")):
            return web.Response(text="ok")
        if path == "/version":
            return _json({"major": "1", "minor": "32", "gitVersion": "v1.32.0-burrito-py", "gitCommit": "local",
                          "gitTreeState": "clean", "buildDate": "2025-01-01T00:00:00Z", "goVersion": "go1.23",
                          "compiler": "gc", "platform": "linux/amd64"})
        if path == "/api":
            return _json({"kind": "APIVersions", "versions": ["v1"], "serverAddressByClientCIDRs": [
                {"clientCIDR": "0.0.0.0/0", "serverAddress": f"{self.host}:{self.port}"}]})
        if path == "/apis":
            return _json(self._group_list())
        if path == "/openapi/v3" or path.startswith("/openapi/v3/"):
            return self._openapi_v3(path.removeprefix("/openapi/v3").strip("/"))
        parts = path.strip("/").split("/")
        if parts[0] == "api" and len(parts) >= 2:
            group, version, rest = "", parts[1], parts[2:]
        elif parts[0] == "apis" and len(parts) >= 2:
            if len(parts) == 2:
                return _json(self._group(parts[1]))
            group, version, rest = parts[1], parts[2], parts[3:]
        else:
            raise unknown_resource(path)
        if not rest:
            return _json(self._resource_list(group, version, path))
        return await self._resource_request(request, group, version, rest, path)

    # -- discovery -------------------------------------------------------------------------------
    def _groups(self) -> dict[str, list[str]]:
        groups: dict[str, list[str]] = {}
        with self.store.lock:
            for resource in self.store.resources.values():
                if resource.group and resource.version not in groups.setdefault(resource.group, []):
                    groups[resource.group].append(resource.version)
        return {g: sorted(v, key=_version_priority, reverse=True) for g, v in groups.items()}

    def _group(self, name: str) -> Obj:
        versions = self._groups().get(name)
        if not versions:
            raise unknown_resource(f"/apis/{name}")
        entries = [{"groupVersion": f"{name}/{v}", "version": v} for v in versions]
        return {"kind": "APIGroup", "apiVersion": "v1", "name": name, "versions": entries,
                "preferredVersion": entries[0]}

    def _group_list(self) -> Obj:
        groups = self._groups()
        return {"kind": "APIGroupList", "apiVersion": "v1",
                "groups": [self._group(name) for name in sorted(groups)]}

    def _resource_list(self, group: str, version: str, path: str) -> Obj:
        with self.store.lock:
            found = [r for r in self.store.resources.values() if r.group == group and r.version == version]
        if not found:
            raise unknown_resource(path)
        return {"kind": "APIResourceList", "apiVersion": "v1", "groupVersion": f"{group}/{version}".lstrip("/"),
                "resources": [entry for r in found for entry in r.discovery()]}

    def _openapi_v3(self, group_version: str) -> web.Response:
        """The OpenAPI v3 index, or one group version's document (`kube_openapi`): Kubernetes' schemas of
        the built-in kinds, the CRDs' schemas of custom resources, and PATCH operations that take
        `fieldValidation` (so `kubectl apply/create` leave field validation to the server)."""
        with self.store.lock:
            resources = list(self.store.resources.values())
        by_gv: dict[str, list[Resource]] = {}
        for r in resources:
            by_gv.setdefault(f"apis/{r.group}/{r.version}" if r.group else f"api/{r.version}", []).append(r)
        if not group_version:
            return _json({"paths": {gv: {"serverRelativeURL": f"/openapi/v3/{gv}"} for gv in sorted(by_gv)}})
        if group_version not in by_gv:
            raise unknown_resource(f"/openapi/v3/{group_version}")
        return web.Response(body=group_version_document(group_version, by_gv[group_version]), content_type=JSON)

    # -- resources -------------------------------------------------------------------------------
    async def _resource_request(
        self, request: web.Request, group: str, version: str, rest: list[str], path: str
    ) -> web.StreamResponse:
        namespace: str | None = None
        if rest[0] == "namespaces" and len(rest) >= 3 and rest[2] not in ("status", "finalize"):
            namespace, rest = rest[1], rest[2:]
        resource = self.store.resource(group, version, rest[0])
        if (group, rest[0]) == ("", "services") and namespace is not None and len(rest) >= 3 \
                and rest[2] == "proxy":
            return await self._service_proxy(request, namespace, rest[1], "/".join(rest[3:]))
        if resource is None or len(rest) > 3 or (namespace is not None and not resource.namespaced):
            raise unknown_resource(path)
        name = rest[1] if len(rest) > 1 else None
        sub = rest[2] if len(rest) > 2 else None
        if resource.namespaced and namespace is None and name is not None:
            raise unknown_resource(path)
        allowed_subs = {"status"} if resource.status_subresource else set()
        allowed_subs.update(resource.subresources)
        if sub is not None and sub not in allowed_subs:
            raise unknown_resource(path)
        method = request.method
        if sub == "log":
            if method != "GET":
                raise self._not_allowed(method, path)
            return await self._pod_log(request, resource, namespace or "", name or "")
        if sub == "token":
            if method != "POST":
                raise self._not_allowed(method, path)
            return _json(self._token_request(namespace or "", name or "", await self._body(request)), 201)
        if sub == "binding":  # pods/binding: the local kubelet assigns a pod to its node before running it
            if method != "POST":
                raise self._not_allowed(method, path)
            self.store.bind(resource, namespace or "", name or "", await self._body(request))
            return _json({"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Success", "code": 201},
                         201)
        if sub == "scale":
            return await self._scale(request, resource, namespace or "", name or "", path)
        if resource.verbs == ["create"]:  # the reviews: nothing is stored, the answer is computed
            if method != "POST" or name is not None:
                raise self._not_allowed(method, path)
            spec = (await self._body(request)).get("spec") or {}
            if not isinstance(spec, dict):
                raise bad_request("spec must be an object")
            status = self._review(resource, namespace, spec, request[_USER])
            return _json({"kind": resource.kind, "apiVersion": resource.api_version,
                          "metadata": {"creationTimestamp": None}, "spec": spec, "status": status}, 201)
        if name is None:
            if method == "GET":
                if request.query.get("watch") in _TRUE:
                    return await self._watch(request, resource, namespace, self._selection(request, resource))
                return self._list(request, resource, namespace)
            if method == "POST":
                if resource.namespaced and namespace is None:
                    raise self._not_allowed(method, path)
                body = await self._body(request)
                checks = _field_checks(request)
                return _json(self.store.create(resource, namespace, body, _dry_run(request), checks), 201, checks)
            if method == "DELETE":
                options = await self._body(request, optional=True)
                deleted = self.store.delete_collection(resource, namespace, self._selection(request, resource),
                                                       self._delete_options(request, options),
                                                       _dry_run(request, options))
                return _json({"kind": f"{resource.kind}List", "apiVersion": resource.api_version,
                              "metadata": {"resourceVersion": str(self.store.rv)}, "items": deleted})
            raise self._not_allowed(method, path)
        if method == "GET":
            if request.query.get("watch") in _TRUE:
                pinned = Selection(LabelSelector(), FieldSelector((("metadata.name", True, name),)))
                return await self._watch(request, resource, namespace, pinned)
            with self.store.lock:
                obj = self.store.get(resource, namespace, name)
            wanted = _table_wanted(request)
            if wanted is not None:
                return _json(table(resource, [obj], {"resourceVersion": obj["metadata"]["resourceVersion"]}, wanted))
            return _json(obj)
        if method == "PUT":
            body = await self._body(request)
            checks = _field_checks(request)
            return _json(self.store.update(resource, namespace, name, body, sub, _dry_run(request), checks), 200,
                         checks)
        if method == "PATCH":
            patch_type = request.content_type
            if patch_type not in PATCH_TYPES:
                raise ApiError(415, "UnsupportedMediaType", f"the body of the request was in an unknown format - "
                               f"accepted media types include: {', '.join(PATCH_TYPES)}")
            if patch_type == PATCH_TYPES[3] and not request.query.get("fieldManager"):
                raise bad_request("PATCH requests with the apply content type require a fieldManager")
            body = await self._body(request, any_json=True)
            checks = _field_checks(request)
            obj, created = self.store.patch(resource, namespace, name, patch_type, body, sub, _dry_run(request),
                                            checks)
            return _json(obj, 201 if created else 200, checks)
        if method == "DELETE":
            if sub is not None:
                raise self._not_allowed(method, path)
            options = await self._body(request, optional=True)
            obj, gone = self.store.delete(resource, namespace, name, self._delete_options(request, options),
                                          _dry_run(request, options))
            if gone and not resource.returns_deleted_object:
                return _json({"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Success",
                              "details": {"name": name, "group": resource.group, "kind": resource.plural,
                                          "uid": obj["metadata"]["uid"]}})
            # kube-apiserver answers 202 only when the object stays and orphanDependents=false was asked for.
            accepted = not gone and options.get("orphanDependents") is False
            return _json(obj, 202 if accepted else 200)
        raise self._not_allowed(method, path)

    async def _scale(self, request: web.Request, resource: Resource, namespace: str, name: str,
                     path: str) -> web.Response:
        """The `scale` subresource (autoscaling/v1 Scale): `kubectl scale` reads and writes spec.replicas."""
        method = request.method
        if method not in ("GET", "PUT", "PATCH"):
            raise self._not_allowed(method, path)
        if method != "GET":
            body = await self._body(request, any_json=True)
            with self.store.lock:
                current = self._scale_of(self.store.get(resource, namespace, name))
                if method == "PUT":
                    wanted = body
                else:
                    try:
                        wanted = merge_patch(current, body) if request.content_type != PATCH_TYPES[0] else json_patch(
                            current, body)
                    except (PatchError, TypeError) as exc:
                        raise bad_request(str(exc)) from None
                replicas = (wanted.get("spec") or {}).get("replicas") if isinstance(wanted, dict) else None
                if not isinstance(replicas, int) or replicas < 0:
                    raise invalid("Scale", "autoscaling", name, [{"reason": "FieldValueInvalid",
                                  "field": "spec.replicas", "message": f"Invalid value: {replicas}: must be greater "
                                  "than or equal to 0"}])
                self.store.patch(resource, namespace, name, "application/merge-patch+json",
                                 {"spec": {"replicas": replicas}}, None, _dry_run(request))
        with self.store.lock:
            return _json(self._scale_of(self.store.get(resource, namespace, name)))

    @staticmethod
    def _scale_of(obj: Obj) -> Obj:
        meta, spec, status = obj["metadata"], obj.get("spec") or {}, obj.get("status") or {}
        selector = ",".join(f"{k}={v}" for k, v in ((spec.get("selector") or {}).get("matchLabels") or {}).items())
        return {"kind": "Scale", "apiVersion": "autoscaling/v1",
                "metadata": {k: meta[k] for k in ("name", "namespace", "uid", "resourceVersion", "creationTimestamp")
                             if k in meta},
                "spec": {"replicas": int(spec.get("replicas", 1))},
                "status": {"replicas": int(status.get("replicas", 0)), "selector": selector}}

    @staticmethod
    def _not_allowed(method: str, path: str) -> ApiError:
        return ApiError(405, "MethodNotAllowed", "the server does not allow this method on the requested resource",
                        {"causes": [{"reason": "UnexpectedServerResponse", "message": f"{method} {path}"}]})

    async def _body(self, request: web.Request, optional: bool = False, any_json: bool = False) -> Obj:
        raw = await request.read()
        if not raw.strip():
            if optional:
                return {}
            raise bad_request("the request body is empty")
        content_type = request.content_type
        if "protobuf" in content_type:
            try:
                return decode_protobuf(raw)
            except ProtobufError as exc:
                raise ApiError(415, "UnsupportedMediaType", f"the body of the request was in an unknown format - "
                               f"accepted media types include: {JSON}, application/yaml ({exc})") from None
        try:
            data = yaml.load(raw, Loader=_YAML_LOADER) if "yaml" in content_type else json.loads(raw)  # noqa: S506
        except (ValueError, yaml.YAMLError) as exc:
            raise bad_request(f"the body of the request could not be decoded: {exc}") from None
        if optional and data is None:
            return {}
        if not isinstance(data, dict) and not any_json:
            raise bad_request(f"the body of the request must be a JSON object, not {type(data).__name__}")
        return data  # type: ignore[no-any-return]

    @staticmethod
    def _delete_options(request: web.Request, options: Obj) -> Obj:
        merged = dict(options)
        if request.query.get("propagationPolicy"):
            merged["propagationPolicy"] = request.query["propagationPolicy"]
        if request.query.get("gracePeriodSeconds"):
            merged["gracePeriodSeconds"] = request.query["gracePeriodSeconds"]
        if not merged.get("propagationPolicy") and options.get("orphanDependents") is True:
            merged["propagationPolicy"] = "Orphan"
        return merged

    @staticmethod
    def _selection(request: web.Request, resource: Resource) -> Selection:
        try:
            labels = LabelSelector.parse(request.query.get("labelSelector"))
            fields = FieldSelector.parse(request.query.get("fieldSelector"))
        except ValueError as exc:
            raise bad_request(str(exc)) from None
        for name in fields.fields:
            if name not in resource.field_selectors:
                raise bad_request(f'field label not supported: {name}')
        return Selection(labels, fields)

    # -- lists and watches -----------------------------------------------------------------------
    def _list(self, request: web.Request, resource: Resource, namespace: str | None) -> web.Response:
        items, rv = self.store.list_items(resource, namespace, self._selection(request, resource))
        meta: Obj = {"resourceVersion": str(rv)}
        token = request.query.get("continue")
        if token:
            try:
                after = json.loads(base64.urlsafe_b64decode(token.encode()))
                start_key = (str(after["ns"]), str(after["name"]))
            except (ValueError, KeyError, TypeError, binascii.Error):
                raise bad_request("continue key is not valid: incorrect encoded start resourceVersion") from None
            items = [o for o in items
                     if (o["metadata"].get("namespace") or "", o["metadata"]["name"]) > start_key]
        try:
            limit = int(request.query.get("limit") or 0)
        except ValueError:
            raise bad_request(f"invalid limit: {request.query.get('limit')!r}") from None
        if 0 < limit < len(items):
            last = items[limit - 1]["metadata"]
            meta["continue"] = base64.urlsafe_b64encode(
                json.dumps({"ns": last.get("namespace") or "", "name": last["name"], "rv": rv}).encode()
            ).decode()
            meta["remainingItemCount"] = len(items) - limit
            items = items[:limit]
        wanted = _table_wanted(request)
        if wanted is not None:
            return _json(table(resource, items, meta, wanted))
        return _json({"kind": f"{resource.kind}List", "apiVersion": resource.api_version, "metadata": meta,
                      "items": items})

    async def _watch(
        self, request: web.Request, resource: Resource, namespace: str | None, selection: Selection
    ) -> web.StreamResponse:
        since = request.query.get("resourceVersion")
        bookmarks = request.query.get("allowWatchBookmarks") in _TRUE
        try:
            timeout = float(request.query.get("timeoutSeconds") or 1800)
        except ValueError:
            raise bad_request("invalid timeoutSeconds") from None
        try:
            first, watch = self.store.watch(resource, namespace, selection, since, asyncio.get_running_loop(),
                                            _table_wanted(request))
        except ApiError as exc:
            if exc.code != 410:
                raise
            first, watch = [json.dumps({"type": "ERROR", "object": exc.status()}).encode() + b"\n"], None
        response = web.StreamResponse(status=200, headers={"Content-Type": JSON})
        response.enable_chunked_encoding()
        await response.prepare(request)
        try:
            if first:
                await response.write(b"".join(first))
            if watch is None:
                return response
            deadline = time.monotonic() + timeout
            next_bookmark = time.monotonic() + self.bookmark_interval
            while True:
                now = time.monotonic()
                if now >= deadline:
                    break
                if bookmarks and now >= next_bookmark:
                    mark = {"kind": resource.kind, "apiVersion": resource.api_version,
                            "metadata": {"resourceVersion": str(self.store.rv)}}
                    await response.write(json.dumps({"type": "BOOKMARK", "object": mark}).encode() + b"\n")
                    next_bookmark = now + self.bookmark_interval
                wait = min(deadline, next_bookmark) - now if bookmarks else deadline - now
                if watch.queue.empty():
                    try:
                        item = await asyncio.wait_for(watch.queue.get(), timeout=max(wait, 0.001))
                    except TimeoutError:
                        continue
                else:
                    item = watch.queue.get_nowait()
                batch: list[bytes] = []
                while item is not None:
                    batch.append(item)
                    if watch.queue.empty():
                        break
                    item = watch.queue.get_nowait()
                if batch:
                    await response.write(b"".join(batch))
                if item is None:
                    break
        except (ConnectionResetError, asyncio.CancelledError):
            pass
        finally:
            if watch is not None:
                self.store.unwatch(watch)
        return response

    # -- reviews ---------------------------------------------------------------------------------
    def _review(self, resource: Resource, namespace: str | None, spec: Obj, caller: UserInfo) -> Obj:
        """The status of a TokenReview, SelfSubjectReview, (Self|Local)SubjectAccessReview or
        SelfSubjectRulesReview."""
        plural = resource.plural
        if plural == "tokenreviews":
            return self.tokens.review(spec)
        if plural == "selfsubjectreviews":
            return {"userInfo": caller.as_review_user()}
        if plural == "selfsubjectrulesreviews":
            rules, errors = rules_for(self.rbac_index(), caller, str(spec.get("namespace") or ""))
            status: Obj = {
                "resourceRules": [r.as_object() for r in rules if not r.non_resource_urls],
                "nonResourceRules": [r.as_object() for r in rules if r.non_resource_urls],
                "incomplete": bool(errors),
            }
            if errors:
                status["evaluationError"] = ", ".join(errors)
            return status
        user = caller
        if plural in ("subjectaccessreviews", "localsubjectaccessreviews"):
            username, groups = str(spec.get("user") or ""), spec.get("groups") or []
            if not username and not groups:
                raise invalid(resource.kind, resource.group, "", [{
                    "reason": "FieldValueInvalid", "field": "spec.user",
                    "message": 'Invalid value: "": at least one of user or group must be specified'}])
            extra = {str(k): tuple(str(x) for x in v) for k, v in (spec.get("extra") or {}).items()}
            user = UserInfo(username, str(spec.get("uid") or ""), tuple(str(g) for g in groups), extra)
        try:
            attrs = access_review_attributes(spec)
        except ValueError as exc:
            raise invalid(resource.kind, resource.group, "", [{"reason": "FieldValueInvalid",
                                                                "message": str(exc)}]) from None
        if namespace is not None and attrs.namespace != namespace:
            raise invalid(resource.kind, resource.group, "", [{
                "reason": "FieldValueInvalid", "field": "spec.resourceAttributes.namespace",
                "message": f'Invalid value: "{attrs.namespace}": must match metadata.namespace'}])
        decision = authorize(self.rbac_index(), user, attrs)
        answer: Obj = {"allowed": decision.allowed}
        if decision.reason:
            answer["reason"] = decision.reason
        if decision.error:
            answer["evaluationError"] = decision.error
        return answer

    # -- tokens ----------------------------------------------------------------------------------
    def _token_request(self, namespace: str, name: str, body: Obj) -> Obj:
        spec = body.get("spec") or {}
        if not isinstance(spec, dict):
            raise bad_request("spec must be an object")
        audiences = spec.get("audiences") or list(API_AUDIENCES)
        if not isinstance(audiences, list) or not all(isinstance(a, str) for a in audiences):
            raise bad_request("spec.audiences must be a list of strings")
        seconds = spec.get("expirationSeconds") or 3600
        causes = []
        if not isinstance(seconds, int) or seconds < 600:
            causes.append({"reason": "FieldValueInvalid", "field": "spec.expirationSeconds",
                           "message": f"Invalid value: {seconds}: may not specify a duration less than 10 minutes"})
        bound = spec.get("boundObjectRef") or None
        if bound is not None and (not isinstance(bound, dict) or bound.get("kind") not in ("Pod", "Secret")):
            causes.append({"reason": "FieldValueNotSupported", "field": "spec.boundObjectRef.kind",
                           "message": 'Unsupported value: supported values: "Pod", "Secret"'})
        if causes:
            raise invalid("TokenRequest", "authentication.k8s.io", name, causes)
        with self.store.lock:
            accounts = self.store.resources[("", "v1", "serviceaccounts")]
            account = self.store.get(accounts, namespace, name)
            pod: tuple[str, str] | None = None
            if bound is not None:
                plural = "pods" if bound["kind"] == "Pod" else "secrets"
                target = self.store.find(self.store.resources[("", "v1", plural)], namespace, str(bound.get("name")))
                if target is None:
                    raise not_found(plural, "", str(bound.get("name")))
                uid = target["metadata"]["uid"]
                if bound.get("uid") and bound["uid"] != uid:
                    raise ApiError(409, "Conflict", f"the UID in the bound object reference ({bound['uid']}) does "
                                   f"not match the UID in record. The object might have been deleted and then "
                                   f"recreated")
                bound = {**bound, "apiVersion": "v1", "uid": uid}
                if plural == "pods":
                    pod = (str(bound["name"]), str(uid))
            token, expires = self.tokens.issue(namespace, name, account["metadata"]["uid"], audiences, seconds, pod)
        out_spec: Obj = {"audiences": audiences, "expirationSeconds": seconds, "boundObjectRef": bound}
        return {"kind": "TokenRequest", "apiVersion": "authentication.k8s.io/v1",
                "metadata": {"name": name, "namespace": namespace, "creationTimestamp": now_rfc3339()},
                "spec": out_spec, "status": self.tokens.token_request_status(token, expires)}

    # -- pod logs --------------------------------------------------------------------------------
    async def _service_proxy(self, request: web.Request, namespace: str, target: str, path: str) -> web.StreamResponse:
        scheme, name, port = service_proxy.parse_target(target)
        services = self.store.resource("", "v1", "services")
        endpoints = self.store.resource("", "v1", "endpoints")
        assert services is not None and endpoints is not None
        with self.store.lock:
            service = self.store.find(services, namespace, name)
            found = self.store.find(endpoints, namespace, name)
        if service is None:
            raise not_found("services", "", name)
        backend = service_proxy.pick_backend(service, found, port)
        # The path as sent (percent-encoding kept), after the `/proxy/` segment.
        raw = request.raw_path.split("?", 1)[0]
        marker = f"/{target}/proxy"
        tail = raw[raw.index(marker) + len(marker):].lstrip("/") if marker in raw else path
        return await service_proxy.forward(request, scheme, backend, tail)

    async def _pod_log(self, request: web.Request, resource: Resource, namespace: str, name: str) -> web.StreamResponse:
        with self.store.lock:
            pod = self.store.get(resource, namespace, name)
        names = [str(c.get("name")) for c in (pod.get("spec") or {}).get("containers") or () if c.get("name")]
        container = request.query.get("container")
        if not container:
            if len(names) > 1:
                raise bad_request(f"a container name must be specified for pod {name}, choose one of: "
                                  f"[{' '.join(names)}]")
            container = names[0] if names else "main"
        elif names and container not in names:
            raise bad_request(f'container "{container}" in pod "{name}" is not valid')
        path = self.pod_log_dir / namespace / name / f"{container}.log" if self.pod_log_dir else None
        try:
            tail = int(request.query["tailLines"]) if request.query.get("tailLines") else None
            limit = int(request.query["limitBytes"]) if request.query.get("limitBytes") else None
        except ValueError:
            raise bad_request("tailLines and limitBytes must be integers") from None
        text = path.read_bytes() if path is not None and path.is_file() else b""
        offset = len(text)
        if tail is not None:
            text = b"".join(text.splitlines(keepends=True)[-tail:]) if tail > 0 else b""
        if limit is not None:
            text = text[:limit]
        if request.query.get("follow") not in _TRUE:
            return web.Response(body=text, content_type="text/plain")
        response = web.StreamResponse(status=200, headers={"Content-Type": "text/plain"})
        response.enable_chunked_encoding()
        await response.prepare(request)
        await response.write(text)
        uid = pod["metadata"]["uid"]
        stopping = self._stopping
        try:
            while stopping is None or not stopping.is_set():
                current = self.store.find(resource, namespace, name)
                finished = current is None or current["metadata"]["uid"] != uid or (
                    (current.get("status") or {}).get("phase") in ("Succeeded", "Failed"))
                if path is not None and path.is_file():
                    with path.open("rb") as handle:
                        handle.seek(offset)
                        chunk = handle.read()
                    if chunk:
                        offset += len(chunk)
                        await response.write(chunk)
                if finished:
                    break
                await asyncio.sleep(self.log_poll_interval)
        except (ConnectionResetError, asyncio.CancelledError):
            pass
        return response


def serve_forever(host: str = "127.0.0.1", port: int = 0, kubeconfig: Path | None = None) -> None:
    """`burrito-py local apiserver`: serve until Ctrl-C."""
    server = ApiServer(host=host, port=port).start()
    try:
        if kubeconfig is not None:
            server.write_kubeconfig(kubeconfig)
        print(f"Kubernetes API emulator listening on {server.url}", flush=True)
        print(f"HTTPS (what kubeconfigs point at) on {server.tls_url}", flush=True)
        if kubeconfig is not None:
            print(f"kubeconfig written to {kubeconfig}", flush=True)
        threading.Event().wait()
    except KeyboardInterrupt:
        pass
    finally:
        server.stop()
