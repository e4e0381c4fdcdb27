"""The API emulator's object store: kube-apiserver's write semantics without HTTP.

Stored objects are never mutated once stored (a write stores a new dict), so readers may serialise
them without copying and without the lock. Every change takes `lock`, bumps the one global
resourceVersion, is appended to a bounded event log (watch resume) and pushed to the live watches.
"""

from __future__ import annotations

import asyncio
import base64
import collections
import copy
import json
import re
import secrets as random
import threading
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import Any

from burrito_local.kube_admission_policy import BINDINGS, POLICIES, AdmissionRequest, admit
from burrito_local.kube_errors import (
    STALE,
    ApiError,
    already_exists,
    bad_request,
    conflict,
    field_cause,
    invalid,
    not_found,
)
from burrito_local.kube_meta import metadata_causes
from burrito_local.kube_openapi import builtin_schema, prune_unknown
from burrito_local.kube_patch import PatchError, json_patch, merge_patch, strategic_merge_patch
from burrito_local.kube_rbac import RBAC_GROUP, prepare_binding
from burrito_local.kube_resources import Resource, builtins, resources_from_crd, storage_version
from burrito_local.kube_selectors import Selection
from burrito_local.kube_table import table
from burrito_local.workloads import IpPool, label_selector_matches, pod_deletion_grace

Obj = dict[str, Any]
Storage = tuple[str, str]
NAMESPACES: Storage = ("", "namespaces")
CRDS: Storage = ("apiextensions.k8s.io", "customresourcedefinitions")
RBAC_BINDINGS: Storage = (RBAC_GROUP, "rolebindings")
RBAC_CLUSTER_BINDINGS: Storage = (RBAC_GROUP, "clusterrolebindings")
FOREGROUND = "foregroundDeletion"
CRD_CLEANUP = "customresourcecleanup.apiextensions.k8s.io"
SERVICES: Storage = ("", "services")
DEPLOYMENTS: Storage = ("apps", "deployments")
PODS: Storage = ("", "pods")
# A token bound to a pod stays valid until this long after the pod's deletionTimestamp (kube-apiserver's JWT leeway):
# a pod being deleted gracefully still acts as its ServiceAccount (a leader releasing its Lease on SIGTERM).
BOUND_TOKEN_LEEWAY = timedelta(seconds=60)
# Services' cluster IPs: loopback addresses the local kubelet's service proxy listens on (pods get theirs
# from 127.10.0.0/16), so a process on this machine reaches a Service as a pod on a node would.
SERVICE_CIDR = "127.20.0.0/16"
_DNS_SUBDOMAIN = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$")
_DNS_LABEL = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$")
_SUFFIX_ALPHABET = "bcdfghjklmnpqrstvwxz2456789"
PATCH_TYPES = (
    "application/json-patch+json",
    "application/merge-patch+json",
    "application/strategic-merge-patch+json",
    "application/apply-patch+yaml",
)
_IMMUTABLE_META = ("uid", "creationTimestamp", "name", "namespace", "deletionTimestamp",
                   "deletionGracePeriodSeconds", "generation")


@dataclass
class FieldChecks:
    """Per-request options of an API write. `?fieldValidation=`: Strict refuses unknown fields, Warn reports them
    in `warnings`, Ignore drops them. `user` (the caller's userInfo) is what admission policies see as
    `request.userInfo`; writes that come with FieldChecks (the HTTP API's) go through admission, the
    store's own writes (cascades, test-side writes) do not, as if written to etcd."""

    mode: str = "Ignore"
    warnings: list[str] = field(default_factory=list)
    user: dict[str, Any] = field(default_factory=dict)


def _grace_option(options: Obj) -> int | None:
    """DeleteOptions.gracePeriodSeconds (body or query): None for the default."""
    value = options.get("gracePeriodSeconds")
    if value is None or value == "":
        return None
    try:
        seconds = int(value)
    except (TypeError, ValueError):
        raise bad_request(f"gracePeriodSeconds must be an integer, not {value!r}") from None
    return max(seconds, 0)


def now_rfc3339(after: float = 0.0) -> str:
    return (datetime.now(UTC) + timedelta(seconds=after)).strftime("%Y-%m-%dT%H:%M:%SZ")


def view(resource: Resource, obj: Obj) -> Obj:
    """`obj` as served under `resource`'s version (versions share storage; no conversion needed)."""
    return obj if obj.get("apiVersion") == resource.api_version else {**obj, "apiVersion": resource.api_version}


@dataclass
class Event:
    rv: int
    storage: Storage
    type: str  # ADDED, MODIFIED, DELETED
    obj: Obj
    prev: Obj | None = None


@dataclass(eq=False)
class Watch:
    """One open watch stream: lines of NDJSON (bytes) arrive on `queue`, None ends the stream."""

    resource: Resource
    namespace: str | None
    selection: Selection
    loop: asyncio.AbstractEventLoop
    loop_thread: int
    table: str | None = None  # includeObject of a `kubectl get -w` that asked for Table rows
    queue: asyncio.Queue[bytes | None] = field(default_factory=asyncio.Queue)

    def accepts(self, obj: Obj | None) -> bool:
        if obj is None:
            return False
        if self.namespace is not None and obj["metadata"].get("namespace") != self.namespace:
            return False
        return self.selection.matches(obj)

    def translate(self, event: Event) -> tuple[str, Obj] | None:
        """The event this watch sees: selectors turn MODIFIED into ADDED/DELETED at their edge."""
        now_in = event.type != "DELETED" and self.accepts(event.obj)
        was_in = self.accepts(event.prev) if event.type == "MODIFIED" else event.type == "DELETED" and self.accepts(
            event.obj
        )
        if event.type == "MODIFIED" and was_in and not now_in and event.prev is not None:
            prev = event.prev
            return "DELETED", {**prev, "metadata": {**prev["metadata"], "resourceVersion": str(event.rv)}}
        if now_in:
            return ("ADDED" if event.type == "MODIFIED" and not was_in else event.type), event.obj
        if was_in:
            return "DELETED", event.obj
        return None

    def line(self, event_type: str, obj: Obj) -> bytes:
        shown = view(self.resource, obj)
        if self.table is not None:
            shown = table(self.resource, [shown], {"resourceVersion": obj["metadata"]["resourceVersion"]},
                          self.table)
        return json.dumps({"type": event_type, "object": shown}).encode() + b"\n"

    def push(self, item: bytes | None) -> None:
        if threading.get_ident() == self.loop_thread:
            self.queue.put_nowait(item)
        else:
            self.loop.call_soon_threadsafe(self.queue.put_nowait, item)


def _same(a: Obj, b: Obj) -> bool:
    """Equal but for resourceVersion: such a write is a no-op (no rv bump, no event)."""
    return {**a, "metadata": {**a["metadata"], "resourceVersion": None}} == {
        **b,
        "metadata": {**b["metadata"], "resourceVersion": None},
    }


def _payload(resource: Resource, obj: Obj) -> Obj:
    """What `generation` tracks: everything but metadata (and status when it is a subresource)."""
    skip = ("metadata", "status", "apiVersion", "kind") if resource.status_subresource else (
        "metadata", "apiVersion", "kind")
    return {k: v for k, v in obj.items() if k not in skip}


class Store:
    def __init__(self, event_log_size: int = 10_000) -> None:
        self.lock = threading.RLock()
        self.resources: dict[tuple[str, str, str], Resource] = {}
        self.objects: dict[Storage, dict[str, dict[str, Obj]]] = collections.defaultdict(dict)
        self.by_uid: dict[str, tuple[Resource, str, str]] = {}
        self.dependents: dict[str, set[str]] = collections.defaultdict(set)
        self.rv = 0
        self.log: collections.deque[Event] = collections.deque(maxlen=event_log_size)
        self.trimmed_rv = 0  # events up to this rv have left the log
        self.watches: dict[Storage, set[Watch]] = collections.defaultdict(set)
        self.on_change: list[Callable[[], None]] = []  # discovery changed (CRD (un)registered)
        # Writes per storage: readers that derive state from one kind (the RBAC index) rebuild on a change.
        self.generations: dict[Storage, int] = collections.defaultdict(int)
        self._emptying: set[tuple[str, str]] = set()  # cascades in progress (re-entrancy guard)
        for resource in builtins():
            self.resources[resource.key] = resource
        for name in ("default", "kube-system", "kube-public", "kube-node-lease"):
            self.create(self.resources[("", "v1", "namespaces")], None, {"metadata": {"name": name}})

    # -- lookups ---------------------------------------------------------------------------------
    def resource(self, group: str, version: str, plural: str) -> Resource | None:
        return self.resources.get((group, version, plural))

    def resource_for(self, storage: Storage) -> Resource | None:
        return next((r for r in self.resources.values() if r.storage == storage), None)

    def find(self, resource: Resource, namespace: str | None, name: str) -> Obj | None:
        return self.objects[resource.storage].get(namespace or "", {}).get(name)

    def get(self, resource: Resource, namespace: str | None, name: str) -> Obj:
        obj = self.find(resource, namespace, name)
        if obj is None:
            raise not_found(resource.plural, resource.group, name)
        return view(resource, obj)

    def uid_of(self, plural: str, namespace: str, name: str) -> str | None:
        """The uid of a live object (what a bound token names). A pod being deleted is live until a minute after
        its deletionTimestamp, as kube-apiserver's token validator judges it."""
        with self.lock:
            obj = self.objects[("", plural)].get(namespace, {}).get(name)
            if obj is None:
                return None
            deleted = obj["metadata"].get("deletionTimestamp")
            if deleted and plural == "pods":
                when = datetime.strptime(str(deleted), "%Y-%m-%dT%H:%M:%SZ").replace(tzinfo=UTC)
                if when < datetime.now(UTC) - BOUND_TOKEN_LEEWAY:
                    return None
            return str(obj["metadata"]["uid"])

    def _iter(self, storage: Storage, namespace: str | None) -> Iterator[Obj]:
        by_ns = self.objects[storage]
        spaces = [namespace or ""] if namespace is not None else sorted(by_ns)
        for ns in spaces:
            names = by_ns.get(ns) or {}
            for name in sorted(names):
                yield names[name]

    def list_items(self, resource: Resource, namespace: str | None, selection: Selection) -> tuple[list[Obj], int]:
        with self.lock:
            pinned = selection.fields.exact("metadata.name")
            if pinned is not None and namespace is not None:
                found = self.find(resource, namespace, pinned)
                candidates: Iterator[Obj] | list[Obj] = [found] if found is not None else []
            else:
                candidates = self._iter(resource.storage, namespace if resource.namespaced else None)
            items = [view(resource, o) for o in candidates if selection.matches(o)]
            return items, self.rv

    # -- the write path --------------------------------------------------------------------------
    def _commit(self, resource: Resource, new: Obj, prev: Obj | None) -> Obj:
        """Store `new` under a fresh resourceVersion and tell the watches; a no-op stores nothing."""
        if prev is not None and _same(prev, new):
            return prev
        self.rv += 1
        self.generations[resource.storage] += 1
        meta = new["metadata"]
        meta["resourceVersion"] = str(self.rv)
        ns, name, uid = meta.get("namespace") or "", meta["name"], meta["uid"]
        self.objects[resource.storage].setdefault(ns, {})[name] = new
        self.by_uid[uid] = (resource, ns, name)
        old_owners = {o.get("uid") for o in (prev or {}).get("metadata", {}).get("ownerReferences") or ()}
        new_owners = {o.get("uid") for o in meta.get("ownerReferences") or ()}
        for owner in old_owners - new_owners:
            self.dependents[str(owner)].discard(uid)
        for owner in new_owners - old_owners:
            self.dependents[str(owner)].add(uid)
        self._publish(Event(self.rv, resource.storage, "ADDED" if prev is None else "MODIFIED", new, prev))
        if resource.storage == CRDS:
            self._register_crd(new, prev)
        return new

    def _publish(self, event: Event) -> None:
        if len(self.log) == self.log.maxlen:
            self.trimmed_rv = self.log[0].rv
        self.log.append(event)
        lines: dict[tuple[str, int, str], bytes] = {}
        for watch in self.watches.get(event.storage, ()):
            seen = watch.translate(event)
            if seen is None:
                continue
            cache_key = (seen[0], id(seen[1]), watch.resource.version + str(watch.table))
            if cache_key not in lines:
                lines[cache_key] = watch.line(*seen)
            watch.push(lines[cache_key])

    def _prepare(self, resource: Resource, obj: Obj, name: str, checks: FieldChecks | None = None) -> Obj:
        """Kind-specific normalisation, then pruning, defaults and schema validation (custom resources)."""
        if resource.storage == ("", "secrets") and "stringData" in obj:
            string_data = obj.pop("stringData") or {}
            obj["data"] = {
                **(obj.get("data") or {}),
                **{k: base64.b64encode(str(v).encode()).decode() for k, v in string_data.items()},
            }
        if resource.storage == ("", "secrets") and not obj.get("type"):
            obj["type"] = "Opaque"
        if resource.storage in (RBAC_BINDINGS, RBAC_CLUSTER_BINDINGS):
            obj, causes = prepare_binding(obj, resource.storage == RBAC_BINDINGS)
            if causes:
                raise invalid(resource.kind, resource.group, name, causes)
        dropped: list[str] = []
        if resource.schema is None:
            builtin = None if resource.custom else builtin_schema(resource)
            if builtin is None:
                return obj
            # Go's decoding of a built-in kind drops the fields its types do not declare.
            obj = prune_unknown(builtin, obj, dropped)
            self._unknown_fields(resource, dropped, checks)
            return obj
        prepared = resource.schema.prepare(obj, dropped)
        self._unknown_fields(resource, dropped, checks)
        causes = resource.schema.causes(prepared)
        if causes:
            raise invalid(resource.kind, resource.group, name, causes)
        return prepared

    @staticmethod
    def _unknown_fields(resource: Resource, dropped: list[str], checks: FieldChecks | None) -> None:
        """`fieldValidation`: Strict refuses unknown fields (400, the strict decoder's words), Warn reports them."""
        if dropped and checks is not None and checks.mode == "Strict":
            unknown = ", ".join(f'unknown field "{p}"' for p in dropped)
            raise bad_request(f'{resource.kind} in version "{resource.version}" cannot be handled as a '
                              f"{resource.kind}: strict decoding error: {unknown}")
        if dropped and checks is not None and checks.mode == "Warn":
            checks.warnings.extend(f'unknown field "{p}"' for p in dropped)

    def _check_meta(self, resource: Resource, meta: Obj) -> None:
        name = str(meta.get("name", ""))
        for key in ("labels", "annotations"):
            values = meta.get(key)
            if values is not None and (
                not isinstance(values, dict) or not all(isinstance(v, str) for v in values.values())
            ):
                raise bad_request(f"metadata.{key} must be a map of string keys to string values")
        if not isinstance(meta.get("finalizers") or [], list) or not all(
            isinstance(f, str) for f in meta.get("finalizers") or []
        ):
            raise bad_request("metadata.finalizers must be a list of strings")
        causes = metadata_causes(meta)
        for i, ref in enumerate(meta.get("ownerReferences") or ()):
            if not isinstance(ref, dict):
                raise bad_request("metadata.ownerReferences must be a list of objects")
            for part in ("apiVersion", "kind", "name", "uid"):
                if not ref.get(part):
                    causes.append(field_cause(f"metadata.ownerReferences[{i}].{part}", "Invalid value: \"\": "
                                              f"{part} must not be empty"))
        if causes:
            raise invalid(resource.kind, resource.group, name, causes)

    def _validate_name(self, resource: Resource, name: str) -> None:
        if resource.group == "rbac.authorization.k8s.io":  # any path segment name (`system:discovery`)
            why = ("may not be '.' or '..'" if name in (".", "..") else
                   "may not contain '/' or '%'" if "/" in name or "%" in name else "")
            if why:
                raise invalid(resource.kind, resource.group, name,
                              [field_cause("metadata.name", f'Invalid value: "{name}": {why}')])
            return
        pattern, limit = (_DNS_LABEL, 63) if resource.storage == NAMESPACES else (_DNS_SUBDOMAIN, 253)
        if not pattern.match(name) or len(name) > limit:
            what = "RFC 1123 label" if limit == 63 else "RFC 1123 subdomain"
            raise invalid(resource.kind, resource.group, name, [field_cause(
                "metadata.name",
                f'Invalid value: "{name}": a lowercase {what} must consist of lower case alphanumeric characters, '
                "'-' or '.', and must start and end with an alphanumeric character",
            )])

    def _check_body(self, resource: Resource, body: Any) -> Obj:
        if not isinstance(body, dict):
            raise bad_request(f"the body of a {resource.kind} must be a JSON object")
        meta = body.get("metadata", {})
        if not isinstance(meta, dict):
            raise bad_request("metadata must be an object")
        kind = body.get("kind")
        if kind is not None and kind != resource.kind:
            raise bad_request(f"the kind in the body ({kind}) does not match the resource ({resource.kind})")
        api_version = body.get("apiVersion")
        if api_version is not None and api_version.rpartition("/")[0] != resource.group:
            raise bad_request(
                f"the API version in the data ({api_version}) does not match the expected API version "
                f"({resource.api_version})"
            )
        return body

    def create(self, resource: Resource, namespace: str | None, body: Any, dry_run: bool = False,
               checks: FieldChecks | None = None) -> Obj:
        with self.lock:
            obj = dict(self._check_body(resource, body))
            meta = dict(obj.get("metadata") or {})
            if resource.namespaced:
                if meta.get("namespace") and namespace and meta["namespace"] != namespace:
                    raise bad_request(
                        "the namespace of the provided object does not match the namespace sent on the request"
                    )
                meta["namespace"] = namespace or meta.get("namespace") or "default"
                self._require_namespace(meta["namespace"])
            else:
                meta.pop("namespace", None)
            if not meta.get("name"):
                if not meta.get("generateName"):
                    raise invalid(resource.kind, resource.group, "", [field_cause(
                        "metadata.name", "Required value: name or generateName is required", "FieldValueRequired")])
                meta["name"] = str(meta["generateName"])[:58] + "".join(
                    random.choice(_SUFFIX_ALPHABET) for _ in range(5)
                )
            name = str(meta["name"])
            self._validate_name(resource, name)
            self._check_meta(resource, meta)
            if self.find(resource, meta.get("namespace"), name) is not None:
                raise already_exists(resource.plural, resource.group, name)
            for key in ("resourceVersion", "deletionTimestamp", "deletionGracePeriodSeconds", "managedFields",
                        "selfLink"):
                meta.pop(key, None)
            meta.update(uid=str(uuid.uuid4()), creationTimestamp=now_rfc3339(), generation=1)
            obj["metadata"] = meta
            obj["apiVersion"], obj["kind"] = resource.api_version, resource.kind
            if resource.custom:
                self._require_crd_active(resource)
                if resource.status_subresource:
                    obj.pop("status", None)
            obj = self._defaults_on_create(resource, obj)
            obj = self._prepare(resource, obj, name, checks)
            self._admit(resource, "CREATE", None, obj, None, checks, dry_run)
            if dry_run:
                return obj
            created = self._commit(resource, obj, None)
            if resource.storage == NAMESPACES:
                sa = self.resources[("", "v1", "serviceaccounts")]
                self.create(sa, name, {"metadata": {"name": "default"}})
            return created

    def _defaults_on_create(self, resource: Resource, obj: Obj) -> Obj:
        meta = obj["metadata"]
        if resource.storage == NAMESPACES:
            meta["labels"] = {**(meta.get("labels") or {}), "kubernetes.io/metadata.name": meta["name"]}
            obj["spec"] = {"finalizers": ["kubernetes"]}
            obj["status"] = {"phase": "Active"}
        elif resource.storage == ("", "pods"):
            spec = dict(obj.get("spec") or {})
            spec.setdefault("serviceAccountName", spec.get("serviceAccount") or "default")
            spec.setdefault("serviceAccount", spec["serviceAccountName"])
            spec.setdefault("restartPolicy", "Always")
            spec.setdefault("terminationGracePeriodSeconds", 30)
            account = str(spec["serviceAccountName"])
            if self.find(self.resources[("", "v1", "serviceaccounts")], meta["namespace"], account) is None:
                raise ApiError(403, "Forbidden", f'pods "{meta["name"]}" is forbidden: error looking up service '
                               f'account {meta["namespace"]}/{account}: serviceaccount "{account}" not found',
                               {"name": meta["name"], "kind": "pods"})
            obj["spec"] = spec
            obj["status"] = {"phase": "Pending", "qosClass": "BestEffort"}
        elif resource.storage == SERVICES:
            obj["spec"] = self._service_spec(meta["name"], dict(obj.get("spec") or {}), None)
        elif resource.storage == DEPLOYMENTS:
            obj["spec"] = self._deployment_spec(meta["name"], dict(obj.get("spec") or {}))
            obj.pop("status", None)
        elif resource.storage == ("", "persistentvolumeclaims"):
            obj["status"] = {"phase": "Pending"}
        elif resource.storage == CRDS:
            spec = obj.get("spec") or {}
            names = spec.get("names") or {}
            expected = f"{names.get('plural', '')}.{spec.get('group', '')}"
            if meta["name"] != expected:
                raise invalid(resource.kind, resource.group, meta["name"], [field_cause(
                    "metadata.name", f'Invalid value: "{meta["name"]}": must be spec.names.plural+"."+spec.group')])
            if not spec.get("versions"):
                raise invalid(resource.kind, resource.group, meta["name"], [field_cause(
                    "spec.versions", "Required value: must have exactly one version marked as storage version",
                    "FieldValueRequired")])
            meta["finalizers"] = [*(meta.get("finalizers") or ()), CRD_CLEANUP]
            obj["status"] = self._crd_status(obj)
        return obj

    def _service_spec(self, name: str, spec: Obj, prev: Obj | None) -> Obj:
        """Defaults of a Service; a cluster IP is allocated (kept on update) unless `clusterIP: None`."""
        spec.setdefault("type", "ClusterIP")
        spec.setdefault("sessionAffinity", "None")
        ports = []
        for port in spec.get("ports") or ():
            if isinstance(port, dict):
                port = {"protocol": "TCP", **port}
                port.setdefault("targetPort", port.get("port"))
            ports.append(port)
        if ports:
            spec["ports"] = ports
        kept = ((prev or {}).get("spec") or {}).get("clusterIP")
        if kept and not spec.get("clusterIP"):
            spec["clusterIP"] = kept
        elif kept and spec["clusterIP"] != kept:
            raise invalid("Service", "", name, [field_cause("spec.clusterIP", f'Invalid value: "{spec["clusterIP"]}": '
                                                            "field is immutable")])
        if not spec.get("clusterIP"):
            taken = [str((o.get("spec") or {}).get("clusterIP")) for o in self._iter(SERVICES, None)]
            spec["clusterIP"] = IpPool(SERVICE_CIDR, taken, IpPool.random_start(SERVICE_CIDR)).allocate()
        spec["clusterIPs"] = [spec["clusterIP"]]
        return spec

    @staticmethod
    def _deployment_spec(name: str, spec: Obj) -> Obj:
        spec.setdefault("replicas", 1)
        spec.setdefault("revisionHistoryLimit", 10)
        spec.setdefault("progressDeadlineSeconds", 600)
        spec.setdefault("strategy", {"type": "RollingUpdate",
                                     "rollingUpdate": {"maxSurge": "25%", "maxUnavailable": "25%"}})
        template = dict(spec.get("template") or {})
        template_spec = dict(template.get("spec") or {})
        template_spec.setdefault("restartPolicy", "Always")
        template_spec.setdefault("terminationGracePeriodSeconds", 30)
        template["spec"] = template_spec
        spec["template"] = template
        labels = (template.get("metadata") or {}).get("labels") or {}
        selector = spec.get("selector")
        if not isinstance(selector, dict) or not (selector.get("matchLabels") or selector.get("matchExpressions")):
            raise invalid("Deployment", "apps", name, [field_cause("spec.selector", "Required value",
                                                                   "FieldValueRequired")])
        if not label_selector_matches(selector, labels):
            raise invalid("Deployment", "apps", name, [field_cause(
                "spec.template.metadata.labels", f"Invalid value: {json.dumps(labels)}: `selector` does not match "
                "template `labels`")])
        return spec

    def _crd_status(self, crd: Obj) -> Obj:
        spec = crd.get("spec") or {}
        names = dict(spec.get("names") or {})
        names.setdefault("singular", str(names.get("kind", "")).lower())
        names.setdefault("listKind", f"{names.get('kind', '')}List")
        when = now_rfc3339()
        conditions = [
            {"type": "NamesAccepted", "status": "True", "reason": "NoConflicts",
             "message": "no conflicts found", "lastTransitionTime": when},
            {"type": "Established", "status": "True", "reason": "InitialNamesAccepted",
             "message": "the initial names have been accepted", "lastTransitionTime": when},
        ]
        if crd["metadata"].get("deletionTimestamp"):
            conditions.append({"type": "Terminating", "status": "True", "reason": "InstanceDeletionInProgress",
                               "message": "CustomResource deletion is in progress", "lastTransitionTime": when})
        stored = storage_version(crd)
        return {"conditions": conditions, "acceptedNames": names, "storedVersions": [stored] if stored else []}

    def _admit(self, resource: Resource, operation: str, sub: str | None, new: Obj, prev: Obj | None,
               checks: FieldChecks | None, dry_run: bool) -> None:
        """Validating admission policies (after schema validation, as kube-apiserver runs validating
        admission): a denial raises, Warn decisions go to the response's Warning headers."""
        if checks is None or not self.objects[BINDINGS]:
            return
        meta = new["metadata"]
        namespace = str(meta.get("namespace") or "") if resource.namespaced else ""
        request = AdmissionRequest(operation, resource.group, resource.version, resource.plural, resource.kind,
                                   str(meta.get("name") or ""), namespace, new, prev, sub or "", checks.user,
                                   dry_run)
        namespace_object = self.objects[NAMESPACES].get("", {}).get(namespace) if namespace else None
        outcome = admit(self._iter(POLICIES, None), self._iter(BINDINGS, None), request, namespace_object)
        if outcome.denial is not None:
            raise outcome.denial
        checks.warnings.extend(outcome.warnings)

    def _require_namespace(self, namespace: str) -> None:
        ns = self.objects[NAMESPACES].get("", {}).get(namespace)
        if ns is None:
            raise not_found("namespaces", "", namespace)
        if ns["metadata"].get("deletionTimestamp"):
            raise ApiError(403, "Forbidden", f"unable to create new content in namespace {namespace} because it is "
                           "being terminated", {"name": namespace, "kind": "namespaces"})

    def _require_crd_active(self, resource: Resource) -> None:
        crd = self.objects[CRDS].get("", {}).get(f"{resource.plural}.{resource.group}")
        if crd is not None and crd["metadata"].get("deletionTimestamp"):
            # apiextensions-apiserver's words (customresource_handler.go), details as NewMethodNotSupported's.
            raise ApiError(405, "MethodNotAllowed", "create not allowed while custom resource definition is "
                           "terminating", {"group": resource.group, "kind": resource.plural})

    def _write(self, resource: Resource, prev: Obj, body: Any, sub: str | None, dry_run: bool,
               checks: FieldChecks | None = None) -> Obj:
        """Rules common to PUT and PATCH: subresource split, immutable metadata, finalizers, generation."""
        new = dict(self._check_body(resource, body))
        name = prev["metadata"]["name"]
        meta = dict(new.get("metadata") or {})
        if meta.get("name") not in (None, name):
            raise bad_request(f"the name of the object ({meta['name']}) does not match the name on the URL ({name})")
        if resource.namespaced and meta.get("namespace") not in (None, "", prev["metadata"].get("namespace")):
            raise bad_request("the namespace of the provided object does not match the namespace sent on the request")
        if sub == "status":
            status = new.get("status")
            new = {k: v for k, v in prev.items() if k != "status"}
            meta = dict(prev["metadata"])
            if status is not None:
                new["status"] = status
        elif resource.status_subresource:
            new.pop("status", None)
            if "status" in prev:
                new["status"] = prev["status"]
        old_meta = prev["metadata"]
        for key in _IMMUTABLE_META:
            if key in old_meta:
                meta[key] = old_meta[key]
            else:
                meta.pop(key, None)
        meta.pop("managedFields", None)
        self._check_meta(resource, meta)
        if old_meta.get("deletionTimestamp"):
            added = [f for f in meta.get("finalizers") or () if f not in (old_meta.get("finalizers") or ())]
            if added:
                raise invalid(resource.kind, resource.group, name, [field_cause(
                    "metadata.finalizers",
                    f"Forbidden: no new finalizers can be added if the object is being deleted, found new "
                    f"finalizers {json.dumps(added)}", "FieldValueForbidden")])
        new["metadata"] = meta
        new["apiVersion"], new["kind"] = resource.api_version, resource.kind
        if resource.storage == NAMESPACES:
            new["spec"], new["status"] = prev.get("spec"), prev.get("status")
        if resource.storage == SERVICES and sub is None:
            new["spec"] = self._service_spec(name, dict(new.get("spec") or {}), prev)
        if resource.storage == DEPLOYMENTS and sub is None:
            new["spec"] = self._deployment_spec(name, dict(new.get("spec") or {}))
        new = self._prepare(resource, new, name, checks)
        self._admit(resource, "UPDATE", sub, new, prev, checks, dry_run)
        if resource.storage == CRDS:
            new["status"] = self._crd_status(new)
        if _payload(resource, prev) != _payload(resource, new):
            meta["generation"] = int(old_meta.get("generation") or 1) + 1
        meta["resourceVersion"] = old_meta.get("resourceVersion")
        if dry_run:
            return new
        stored = self._commit(resource, new, prev)
        if meta.get("deletionTimestamp") and not meta.get("finalizers") and not meta.get("deletionGracePeriodSeconds"):
            # The last finalizer is gone: the deletion completes (a pod still in its grace period waits for its
            # kubelet's final DELETE).
            return self._remove(resource, stored)
        return stored

    def update(self, resource: Resource, namespace: str | None, name: str, body: Any, sub: str | None,
               dry_run: bool = False, checks: FieldChecks | None = None) -> Obj:
        with self.lock:
            prev = self.find(resource, namespace, name)
            if prev is None:
                raise not_found(resource.plural, resource.group, name)
            wanted = (body.get("metadata") or {}).get("resourceVersion") if isinstance(body, dict) else None
            if wanted and wanted != prev["metadata"]["resourceVersion"]:
                raise conflict(resource.plural, resource.group, name, STALE)
            if not wanted and resource.custom:
                raise invalid(resource.kind, resource.group, name, [field_cause(
                    "metadata.resourceVersion", "Invalid value: 0x0: must be specified for an update")])
            return view(resource, self._write(resource, prev, body, sub, dry_run, checks))

    def patch(self, resource: Resource, namespace: str | None, name: str, patch_type: str, body: Any,
              sub: str | None, dry_run: bool = False, checks: FieldChecks | None = None) -> tuple[Obj, bool]:
        """(object, created): apply-patch creates a missing object."""
        with self.lock:
            prev = self.find(resource, namespace, name)
            if prev is None:
                if patch_type == PATCH_TYPES[3] and sub is None:
                    obj = self._check_body(resource, body)
                    if not obj.get("apiVersion") or not obj.get("kind"):
                        raise bad_request("apiVersion and kind must be set in an apply request")
                    if (obj.get("metadata") or {}).get("name") != name:
                        raise bad_request("the name of the object does not match the name on the URL")
                    return view(resource, self.create(resource, namespace, obj, dry_run, checks)), True
                raise not_found(resource.plural, resource.group, name)
            try:
                if patch_type == "application/merge-patch+json":
                    if not isinstance(body, dict):
                        raise bad_request("a merge patch must be a JSON object")
                    patched = merge_patch(prev, body)
                elif patch_type == "application/json-patch+json":
                    patched = json_patch(prev, body)
                elif patch_type == "application/strategic-merge-patch+json":
                    if resource.custom:
                        raise ApiError(415, "UnsupportedMediaType",
                                       "strategic merge patch is not supported for custom resources; use a JSON "
                                       "merge patch")
                    patched = strategic_merge_patch(prev, body)
                else:
                    body = self._check_body(resource, body)
                    applied = {k: v for k, v in body.items() if k not in ("apiVersion", "kind")}
                    patched = merge_patch(prev, applied) if resource.custom else strategic_merge_patch(prev, applied)
            except TypeError as exc:
                raise bad_request(str(exc)) from None
            except PatchError as exc:
                raise ApiError(422, "Invalid", f"the server rejected our request due to an error in our request: "
                               f"{exc}") from None
            if not isinstance(patched, dict) or not isinstance(patched.get("metadata"), dict):
                raise ApiError(422, "Invalid", "the patched object is not a valid object")
            wanted = patched["metadata"].get("resourceVersion")
            if wanted and wanted != prev["metadata"]["resourceVersion"]:
                raise conflict(resource.plural, resource.group, name, STALE)
            if patched["metadata"].get("uid") not in (None, prev["metadata"]["uid"]):
                raise conflict(resource.plural, resource.group, name,
                               f"Precondition failed: UID in precondition: {patched['metadata']['uid']}, "
                               f"UID in object meta: {prev['metadata']['uid']}")
            return view(resource, self._write(resource, prev, patched, sub, dry_run, checks)), False

    # -- deletion and garbage collection ---------------------------------------------------------
    def delete(self, resource: Resource, namespace: str | None, name: str, options: Obj,
               dry_run: bool = False) -> tuple[Obj, bool]:
        """(object, gone): gone is False while finalizers hold the object."""
        with self.lock:
            obj = self.find(resource, namespace, name)
            if obj is None:
                raise not_found(resource.plural, resource.group, name)
            preconditions = options.get("preconditions") or {}
            for key, label in (("uid", "UID"), ("resourceVersion", "ResourceVersion")):
                if preconditions.get(key) and preconditions[key] != obj["metadata"].get(key):
                    raise conflict(resource.plural, resource.group, name,
                                   f"Precondition failed: {label} in precondition: {preconditions[key]}, "
                                   f"{label} in object meta: {obj['metadata'].get(key)}")
            if resource.storage == NAMESPACES and name in ("default", "kube-system", "kube-public"):
                raise ApiError(403, "Forbidden", f'namespaces "{name}" is forbidden: this namespace may not be '
                               "deleted", {"name": name, "kind": "namespaces"})
            policy = str(options.get("propagationPolicy") or "Background")
            if policy not in ("Background", "Foreground", "Orphan"):
                raise invalid("DeleteOptions", "", "", [field_cause(
                    "propagationPolicy", f'Unsupported value: "{policy}": supported values: "Foreground", '
                    '"Background", "Orphan"', "FieldValueNotSupported")])
            grace = _grace_option(options)
            if dry_run:
                return view(resource, obj), False
            result, gone = self._delete(resource, obj, policy, grace)
            if resource.storage == CRDS:
                # kube-apiserver answers a CRD's DELETE with the CRD as marked (200): its cleanup finalizer
                # is released later, by the apiextensions controller, even when it has no instance.
                return view(resource, result), False
            return view(resource, result), gone

    def _live_dependents(self, uid: str) -> list[tuple[Resource, Obj]]:
        found = []
        for dep_uid in list(self.dependents.get(uid, ())):
            where = self.by_uid.get(dep_uid)
            if where is None:
                continue
            obj = self.find(where[0], where[1], where[2])
            if obj is not None:
                found.append((where[0], obj))
        return found

    def _delete(self, resource: Resource, obj: Obj, policy: str, grace: int | None = None) -> tuple[Obj, bool]:
        meta = obj["metadata"]
        uid = meta["uid"]
        if policy == "Orphan":
            for dep_resource, dep in self._live_dependents(uid):
                self._drop_owner(dep_resource, dep, uid)
        if resource.storage == PODS:
            graceful = self._delete_pod_gracefully(resource, obj, grace)
            if graceful is not None:
                return graceful
        if meta.get("deletionTimestamp"):
            return obj, False
        finalizers = list(meta.get("finalizers") or ())
        cascade = resource.storage in (NAMESPACES, CRDS)
        if policy == "Foreground" and self._live_dependents(uid) and FOREGROUND not in finalizers:
            finalizers.append(FOREGROUND)
        if not finalizers and not cascade:
            return self._remove(resource, obj), True
        marked: Obj = {**obj, "metadata": {**meta, "deletionTimestamp": now_rfc3339(),
                                            "deletionGracePeriodSeconds": 0, "finalizers": finalizers}}
        if int(meta.get("generation") or 0) > 0:
            # As the real store's markAsDeleting: a controller that tracks observedGeneration sees the
            # deletion as a new generation to act on.
            marked["metadata"]["generation"] = int(meta["generation"]) + 1
        if not finalizers:
            marked["metadata"].pop("finalizers")
        if resource.storage == NAMESPACES:
            marked["status"] = {**(obj.get("status") or {}), "phase": "Terminating"}
        if resource.storage == CRDS:
            marked["status"] = self._crd_status(marked)
        current = self._commit(resource, marked, obj)
        if resource.storage == NAMESPACES:
            self._empty_namespace(meta["name"])
        elif resource.storage == CRDS:
            self._empty_crd(current)
        if FOREGROUND in finalizers:
            for dep_resource, dep in self._live_dependents(uid):
                self._delete(dep_resource, dep, "Foreground")
            self._release_foreground(uid)
        latest = self.find(resource, meta.get("namespace"), meta["name"])
        return (latest, False) if latest is not None else (current, True)

    def _delete_pod_gracefully(self, resource: Resource, pod: Obj, requested: int | None) -> tuple[Obj, bool] | None:
        """A pod its kubelet runs is not removed at once: it is marked (`deletionTimestamp` = now + its grace
        period, `deletionGracePeriodSeconds`), its kubelet stops its containers and then deletes it with a grace
        period of 0, which removes it (its finalizers permitting). A later DELETE may shorten the grace period,
        never lengthen it. None: the pod goes at once (never bound, already ended, or a grace period of 0), as any
        object does."""
        meta = pod["metadata"]
        period = pod_deletion_grace(pod, requested)
        if not meta.get("deletionTimestamp"):
            if period == 0:
                return None
        else:
            current = meta.get("deletionGracePeriodSeconds")
            if current is None or period >= int(current):
                return pod, False  # already terminating, no sooner than asked
            if period == 0 and not meta.get("finalizers"):
                return self._remove(resource, pod), True
        marked: Obj = {**pod, "metadata": {**meta, "deletionTimestamp": now_rfc3339(period),
                                            "deletionGracePeriodSeconds": period}}
        return self._commit(resource, marked, pod), False

    def bind(self, resource: Resource, namespace: str, name: str, body: Obj) -> None:
        """`POST pods/<name>/binding` (what a scheduler does): the pod is assigned to the node `target.name`."""
        with self.lock:
            pod = self.find(resource, namespace, name)
            if pod is None:
                raise not_found(resource.plural, resource.group, name)
            target = str(((body.get("target") or {}) if isinstance(body.get("target"), dict) else {}).get("name")
                         or "")
            if not target:
                raise invalid("Binding", "", name, [field_cause("target.name", "Required value", "FieldValueRequired")])
            wanted_uid = (body.get("metadata") or {}).get("uid") if isinstance(body.get("metadata"), dict) else None
            if wanted_uid and wanted_uid != pod["metadata"]["uid"]:
                raise conflict("pods/binding", "", name, f"Precondition failed: UID in precondition: {wanted_uid}, "
                               f"UID in object meta: {pod['metadata']['uid']}")
            if pod["metadata"].get("deletionTimestamp"):
                raise conflict("pods/binding", "", name, "pod is being deleted, cannot be assigned to a host")
            current = (pod.get("spec") or {}).get("nodeName")
            if current:
                raise conflict("pods/binding", "", name, f'pod {name} is already assigned to node "{current}"')
            bound = {**pod, "metadata": dict(pod["metadata"]), "spec": {**(pod.get("spec") or {}), "nodeName": target}}
            self._commit(resource, bound, pod)

    def _drop_owner(self, resource: Resource, obj: Obj, owner_uid: str) -> None:
        refs = [r for r in obj["metadata"].get("ownerReferences") or () if r.get("uid") != owner_uid]
        meta = {**obj["metadata"], "ownerReferences": refs}
        if not refs:
            meta.pop("ownerReferences")
        self._commit(resource, {**obj, "metadata": meta}, obj)

    def _remove(self, resource: Resource, obj: Obj) -> Obj:
        """The object leaves the store: DELETED event, then garbage collection and pending cascades."""
        meta = obj["metadata"]
        ns, name, uid = meta.get("namespace") or "", meta["name"], meta["uid"]
        spaces = self.objects[resource.storage]
        spaces.get(ns, {}).pop(name, None)
        if ns in spaces and not spaces[ns]:
            del spaces[ns]
        self.by_uid.pop(uid, None)
        self.rv += 1
        self.generations[resource.storage] += 1
        gone = {**obj, "metadata": {**meta, "resourceVersion": str(self.rv)}}
        self._publish(Event(self.rv, resource.storage, "DELETED", gone))
        for ref in meta.get("ownerReferences") or ():
            owner = str(ref.get("uid"))
            self.dependents[owner].discard(uid)
            if not self.dependents[owner]:
                del self.dependents[owner]
            self._release_foreground(owner)
        for dep_resource, dep in self._live_dependents(uid):
            others = [r for r in dep["metadata"].get("ownerReferences") or ()
                      if r.get("uid") != uid and r.get("uid") in self.by_uid]
            if others:
                self._drop_owner(dep_resource, dep, uid)
            else:
                self._delete(dep_resource, dep, "Background")
        self.dependents.pop(uid, None)
        if resource.storage == CRDS:
            self._unregister_crd(obj)
        elif resource.custom:
            crd = self.objects[CRDS].get("", {}).get(f"{resource.plural}.{resource.group}")
            if crd is not None and crd["metadata"].get("deletionTimestamp"):
                self._empty_crd(crd)
        if resource.namespaced:
            namespace = self.objects[NAMESPACES].get("", {}).get(ns)
            if namespace is not None and namespace["metadata"].get("deletionTimestamp"):
                self._empty_namespace(ns)
        return gone

    def _release_foreground(self, owner_uid: str) -> None:
        """An owner deleted in the foreground goes once its dependents are gone."""
        where = self.by_uid.get(owner_uid)
        if where is None:
            return
        resource, ns, name = where
        owner = self.find(resource, ns, name)
        if owner is None or FOREGROUND not in (owner["metadata"].get("finalizers") or ()):
            return
        if self._live_dependents(owner_uid):
            return
        finalizers = [f for f in owner["metadata"]["finalizers"] if f != FOREGROUND]
        meta = {**owner["metadata"], "finalizers": finalizers}
        if not finalizers:
            meta.pop("finalizers")
        stored = self._commit(resource, {**owner, "metadata": meta}, owner)
        if not finalizers:
            self._remove(resource, stored)

    def _empty_namespace(self, namespace: str) -> None:
        """Delete what the namespace holds; the namespace goes when nothing is left."""
        if ("ns", namespace) in self._emptying:
            return
        self._emptying.add(("ns", namespace))
        try:
            for storage in list(self.objects):
                resource = self.resource_for(storage)
                if resource is None or not resource.namespaced:
                    continue
                for name in list(self.objects[storage].get(namespace, {})):
                    current = self.find(resource, namespace, name)
                    if current is not None and not current["metadata"].get("deletionTimestamp"):
                        self._delete(resource, current, "Background")
        finally:
            self._emptying.discard(("ns", namespace))
        remaining = any(spaces.get(namespace) for storage, spaces in self.objects.items() if storage != NAMESPACES)
        ns_obj = self.objects[NAMESPACES].get("", {}).get(namespace)
        if not remaining and ns_obj is not None and not ns_obj["metadata"].get("finalizers"):
            self._remove(self.resources[("", "v1", "namespaces")], ns_obj)

    def _empty_crd(self, crd: Obj) -> None:
        """Delete a terminating CRD's custom resources; drop its cleanup finalizer when none are left."""
        name = crd["metadata"]["name"]
        if ("crd", name) in self._emptying:
            return
        spec = crd.get("spec") or {}
        storage = (spec.get("group", ""), (spec.get("names") or {}).get("plural", ""))
        resource = self.resource_for(storage)
        self._emptying.add(("crd", name))
        try:
            if resource is not None:
                for obj in list(self._iter(storage, None)):
                    current = self.find(resource, obj["metadata"].get("namespace"), obj["metadata"]["name"])
                    if current is not None and not current["metadata"].get("deletionTimestamp"):
                        self._delete(resource, current, "Background")
        finally:
            self._emptying.discard(("crd", name))
        if any(self.objects[storage].values()):
            return
        current = self.objects[CRDS].get("", {}).get(name)
        if current is None or CRD_CLEANUP not in (current["metadata"].get("finalizers") or ()):
            return
        finalizers = [f for f in current["metadata"]["finalizers"] if f != CRD_CLEANUP]
        meta = {**current["metadata"], "finalizers": finalizers}
        if not finalizers:
            meta.pop("finalizers")
        crd_resource = self.resources[("apiextensions.k8s.io", "v1", "customresourcedefinitions")]
        stored = self._commit(crd_resource, {**current, "metadata": meta}, current)
        if not finalizers:
            self._remove(crd_resource, stored)

    def delete_collection(self, resource: Resource, namespace: str | None, selection: Selection, options: Obj,
                          dry_run: bool = False) -> list[Obj]:
        with self.lock:
            items, _ = self.list_items(resource, namespace, selection)
            if dry_run:
                return items
            policy = str(options.get("propagationPolicy") or "Background")
            grace = _grace_option(options)
            done = []
            for obj in items:
                current = self.find(resource, obj["metadata"].get("namespace"), obj["metadata"]["name"])
                if current is not None:
                    done.append(view(resource, self._delete(resource, current, policy, grace)[0]))
            return done

    # -- CRDs ------------------------------------------------------------------------------------
    def _register_crd(self, crd: Obj, prev: Obj | None) -> None:
        new = {r.key: r for r in resources_from_crd(crd)}
        old = {r.key for r in resources_from_crd(prev)} if prev is not None else set()
        if set(new) == old and prev is not None and prev.get("spec") == crd.get("spec"):
            return
        for key in old - set(new):
            self.resources.pop(key, None)
        self.resources.update(new)
        for hook in self.on_change:
            hook()

    def _unregister_crd(self, crd: Obj) -> None:
        for resource in resources_from_crd(crd):
            self.resources.pop(resource.key, None)
            self.objects.pop(resource.storage, None)
            for watch in self.watches.pop(resource.storage, set()):
                watch.push(None)
        for hook in self.on_change:
            hook()

    # -- watches ---------------------------------------------------------------------------------
    def watch(self, resource: Resource, namespace: str | None, selection: Selection, since: str | None,
              loop: asyncio.AbstractEventLoop, as_table: str | None = None) -> tuple[list[bytes], Watch]:
        """Register a watch; returns the lines to send first (current objects, or the replay)."""
        with self.lock:
            watch = Watch(resource, namespace, selection, loop, threading.get_ident(), as_table)
            if not since or since == "0":
                first = [watch.line("ADDED", o) for o in self._iter(resource.storage, namespace)
                         if watch.accepts(o)]
            else:
                try:
                    wanted = int(since)
                except ValueError:
                    raise bad_request(f'invalid resource version "{since}"') from None
                if wanted < self.trimmed_rv:
                    raise ApiError(410, "Expired", f"too old resource version: {wanted} ({self.trimmed_rv + 1})")
                first = []
                for event in self.log:
                    if event.rv > wanted and event.storage == resource.storage:
                        seen = watch.translate(event)
                        if seen is not None:
                            first.append(watch.line(*seen))
            self.watches[resource.storage].add(watch)
            return first, watch

    def unwatch(self, watch: Watch) -> None:
        with self.lock:
            self.watches.get(watch.resource.storage, set()).discard(watch)

    def close_watches(self) -> None:
        with self.lock:
            for watches in self.watches.values():
                for watch in watches:
                    watch.push(None)
            self.watches.clear()

    def snapshot(self, api_version: str, plural: str, namespace: str | None, name: str | None) -> list[Obj]:
        """Deep copies for test-side reads from other threads."""
        group, _, version = api_version.rpartition("/")
        with self.lock:
            resource = self.resource(group, version, plural)
            storage = resource.storage if resource is not None else (group, plural)
            if name is not None:
                obj = self.objects[storage].get(namespace or "", {}).get(name)
                found = [obj] if obj is not None else []
            else:
                found = list(self._iter(storage, namespace))
            return [copy.deepcopy(view(resource, o) if resource is not None else o) for o in found]
