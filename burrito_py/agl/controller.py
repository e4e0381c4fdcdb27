"""The AGL controller's reconciles: definitions → served CRDs, instances → TerraformLayers and status.

Watch events only feed the in-memory stores and wake a key (agl/operator.py); the reconciles here read
the stores, call the pure decisions (definition.py, compile.py, instance_decisions.py) and write what
they say. Conflicts and transient API errors requeue the key.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import logging
from collections.abc import Mapping
from typing import Any

from burrito_py.agl.compile import LABEL_APP_KIND, CompiledInstance, compile_instance, instance_of_layer
from burrito_py.agl.definition import (
    DEFINITION_FINALIZER,
    LABEL_DEFINITION,
    crd_for_definition,
    crd_name,
    crd_up_to_date,
    parse_definition,
)
from burrito_py.agl.errors import Invalid
from burrito_py.agl.instance_decisions import (
    layer_write,
    orphaned_layers,
    owned_by_kind,
    project_status,
    status_patch,
)
from burrito_py.agl.watch import KindWatches
from burrito_py.api.application import AGL_API_VERSION, APPS_VERSION, ApplicationDefinition
from burrito_py.kube.client import Kube, KubeError, crd_path, path
from burrito_py.kube.conditions import Cond, merge_conditions
from burrito_py.kube.events import post_event
from burrito_py.kube.forbidden import ForbiddenReporter
from burrito_py.kube.inventory import Store
from burrito_py.kube.scheduler import Scheduler
from burrito_py.kube.shards import Scope
from burrito_py.timeutil import utcnow

__all__ = ["AglController", "InstanceKey", "instance_key", "resync_forever"]

log = logging.getLogger(__name__)

InstanceKey = tuple[str, str, str, str]  # (group, kind, namespace, name)
Body = dict[str, Any]
CRDS = "/apis/apiextensions.k8s.io/v1/customresourcedefinitions"
DEFINITIONS = f"/apis/{AGL_API_VERSION}/applicationdefinitions"
# Instance events arrive in bursts; a definition's instance count is rewritten at most this often.
COUNT_DELAY = 1.0
RETRY_SOON = 0.2
# How long a definition's reconcile waits for its kind's first listing, so Ready says whether the controllers may
# read the kind (a 403) rather than "served" before they know.
FIRST_LISTING_WAIT = 10.0
GRANT_HINT = "grant it with the chart's controllers.agl.groups (the kind's group) or controllers.agl.kinds"


def instance_key(body: Mapping[str, Any]) -> InstanceKey:
    meta = body["metadata"]
    group = str(body.get("apiVersion", "")).rpartition("/")[0]
    return group, str(body.get("kind", "")), str(meta.get("namespace") or ""), str(meta["name"])


class AglController:
    def __init__(self, kube: Kube, namespaces: list[str] | None = None, scope: Scope | None = None) -> None:
        self.kube = kube
        # What this process watches and owns (kube/shards.py): with shards, instances and their layers
        # are compiled by the shard owning their namespace; definitions → CRDs by the first listed shard only.
        self.scope = scope if scope is not None else Scope(patterns=list(namespaces or []))
        self.definitions: dict[str, Body] = {}
        self.instances: dict[tuple[str, str], Store] = {}  # (group, kind) → instances
        self.layers = Store()  # layers implementing instances (labelled), by (namespace, name)
        self._parsed: dict[tuple[str, str], ApplicationDefinition | Invalid] = {}  # (name, resourceVersion)
        self._warned: dict[InstanceKey, str] = {}
        self._aligned: dict[str, Any] = {}  # definition → the generation its instances were woken for
        # A kind whose listing the API refuses (or allows again) changes its definition's Ready: look again.
        self.watches = KindWatches(kube, changed=lambda _: self._wake_definitions())
        self.primed = False
        # A 403 (a kind the chart was not told about) is a Forbidden event on the object, not a log line only.
        forbidden = ForbiddenReporter(kube)
        self.definition_queue: Scheduler[str] = Scheduler("agl-definitions", forbidden.wrap(
            "definition", self.reconcile_definition, self.definitions.get))
        self.instance_queue: Scheduler[InstanceKey] = Scheduler("agl-instances", forbidden.wrap(
            "instance", self.reconcile_instance, lambda k: self.instances_of(k[0], k[1]).get((k[2], k[3]))))

    # ------------------------------------------------------------------------------------- feeding

    def wake_definition(self, name: str, after: float = 0.0) -> None:
        if self.primed:
            self.definition_queue.schedule(name, after)

    def _wake_definitions(self) -> None:
        for name in self.definitions:
            self.wake_definition(name)

    def wake_instance(self, key: InstanceKey, after: float = 0.0) -> None:
        if self.primed:
            self.instance_queue.schedule(key, after)

    def instances_of(self, group: str, kind: str) -> Store:
        return self.instances.setdefault((group, kind), Store())

    def parsed(self, body: Mapping[str, Any]) -> ApplicationDefinition | Invalid:
        meta = body["metadata"]
        key = (str(meta["name"]), str(meta.get("resourceVersion", "")))
        if key not in self._parsed:
            try:
                self._parsed[key] = parse_definition(body)
            except Invalid as error:
                self._parsed[key] = error
            if len(self._parsed) > 4 * len(self.definitions) + 16:  # drop versions no longer held
                held = {(n, str(d["metadata"].get("resourceVersion", ""))) for n, d in self.definitions.items()}
                self._parsed = {k: v for k, v in self._parsed.items() if k in held or k == key}
        return self._parsed[key]

    def definition_of(self, group: str, kind: str) -> tuple[Body, ApplicationDefinition] | None:
        """The valid definition serving (group, kind); the oldest one when several claim it."""
        found = []
        for body in self.definitions.values():
            parsed = self.parsed(body)
            if isinstance(parsed, ApplicationDefinition) and (
                parsed.spec.application.group, parsed.spec.application.kind) == (group, kind):
                found.append((body["metadata"].get("creationTimestamp", ""), body["metadata"]["name"], body, parsed))
        if not found:
            return None
        _, _, body, parsed = min(found, key=lambda f: (f[0], f[1]))
        return body, parsed

    def prefix_of(self, group: str, kind: str) -> str | None:
        """The layer prefix of (group, kind)'s instances, for the kinds an instance's spec.dependsOn names."""
        found = self.definition_of(group, kind)
        return found[1].spec.backend.terraform.prefix if found is not None else None

    async def prime(self) -> None:
        """Definitions and existing layers first, so no instance is compiled against a partial view."""
        for body in await self.kube.list(DEFINITIONS):
            self._observe_definition(body)
        existing = None if self.scope.literal else [
            n["metadata"]["name"] for n in await self.kube.list(path("v1", "namespaces"))]
        for namespace in self.scope.listing(existing):
            for layer in await self.kube.list(crd_path("terraformlayers", namespace), label_selector=LABEL_APP_KIND):
                self.layers.observe(layer)
        self.primed = True
        for name in self.definitions:
            self.wake_definition(name)

    # ----------------------------------------------------------------------------- kind watches

    def _namespaces(self) -> list[str | None]:
        """Where a kind is watched: each plain name, else the whole cluster (patterns: what this process does
        not own is dropped in on_instance; instances are few, and a namespace created later is then followed)."""
        return self.scope.listing(None) if self.scope.literal else [None]

    def _collections(self, served: str) -> list[str]:
        plural, _, group = served.partition(".")
        return [path(f"{group}/{APPS_VERSION}", plural, namespace) for namespace in self._namespaces()]

    def _watch_kind(self, definition: ApplicationDefinition) -> None:
        application = definition.spec.application
        group, kind = application.group, application.kind
        namespaces = self._namespaces()
        for collection, namespace in zip(self._collections(crd_name(definition)), namespaces, strict=True):
            reset = functools.partial(self._reset_kind, group, kind, namespace)
            self.watches.ensure(collection, self.on_instance, reset)

    async def _unwatch(self, served: str) -> None:
        for collection in self._collections(served):
            await self.watches.stop(collection)

    def _reset_kind(self, group: str, kind: str, namespace: str | None, items: list[Body]) -> None:
        """A fresh listing of a kind: forget what is gone, take in the rest."""
        store = self.instances_of(group, kind)
        listed = {(i["metadata"].get("namespace") or "", i["metadata"]["name"]) for i in items}
        for held in store:
            key = instance_key(held)
            if (namespace is None or key[2] == namespace) and (key[2], key[3]) not in listed:
                self.on_instance("DELETED", held)
        for item in items:
            self.on_instance(None, {"apiVersion": f"{group}/{APPS_VERSION}", "kind": kind, **item})

    async def close(self) -> None:
        await self.watches.stop_all()
        await self.kube.close()

    def wake_everything(self) -> None:
        for name in self.definitions:
            self.wake_definition(name)
        for store in self.instances.values():
            for body in store:
                self.wake_instance(instance_key(body))

    # ------------------------------------------------------------------------------- definitions

    async def _definition_status(self, body: Mapping[str, Any], ready: Cond, **extra: Any) -> None:
        status = dict(body.get("status") or {})
        desired = {**status, **extra, "observedGeneration": body["metadata"].get("generation"),
                   "conditions": merge_conditions(status.get("conditions"), [ready], utcnow())}
        patch = status_patch(status, desired)
        if patch is None:
            return
        name = body["metadata"]["name"]
        try:
            written = await self.kube.merge_patch(f"{DEFINITIONS}/{name}/status", {"status": patch})
        except KubeError as error:
            if error.status == 404:
                return
            raise
        self._observe_definition(written)

    def _observe_definition(self, body: Body) -> None:
        name = body["metadata"]["name"]
        held = self.definitions.get(name)
        held_rv = str((held or {}).get("metadata", {}).get("resourceVersion", "0"))
        new_rv = str(body["metadata"].get("resourceVersion", "0"))
        if held is None or not (held_rv.isdigit() and new_rv.isdigit()) or int(new_rv) >= int(held_rv):
            self.definitions[name] = body
            # A new generation (whether seen in a watch event or in one of our own write responses)
            # re-aligns every instance of the kind, and of the kind it had before if that changed.
            generation = body["metadata"].get("generation")
            if self._aligned.get(name) != generation:
                self._aligned[name] = generation
                self._wake_kind_of(body)
                self._wake_kind_of(held)

    async def _forbidden(self, body: Mapping[str, Any], doing: str, error: KubeError | str, **extra: Any) -> None:
        """Ready=False naming the permission the controllers lack (the API's own message), and a Warning once per
        message (a reconcile that raises gets the same from forbidden.py)."""
        message = f"{doing}: {error.message if isinstance(error, KubeError) else error}; {GRANT_HINT}"
        previous: Mapping[str, Any] = next(
            (c for c in (body.get("status") or {}).get("conditions") or () if c.get("type") == "Ready"), {})
        await self._definition_status(body, Cond("Ready", False, "Forbidden", message), **extra)
        if previous.get("message") != message and not isinstance(error, KubeError):
            await post_event(self.kube, body, "Warning", "Forbidden", message)

    async def _count_served(self, served: str) -> list[str]:
        plural, _, group = served.partition(".")
        try:
            items = await self.kube.list(f"/apis/{group}/{APPS_VERSION}/{plural}")
        except KubeError as error:
            if error.status == 404:
                return []
            raise
        return [f"{i['metadata'].get('namespace')}/{i['metadata']['name']}" for i in items]

    async def _delete_crd(self, name: str, definition: str) -> bool:
        """Withdraw the kind; True once its CRD is gone (or is not this definition's). A real API server keeps a
        deleted CRD, Terminating, and serves its kind until it has removed the instances: gone only after that."""
        crd = await self.kube.get(f"{CRDS}/{name}")
        if crd is None or (crd["metadata"].get("labels") or {}).get(LABEL_DEFINITION) != definition:
            return True
        if not crd["metadata"].get("deletionTimestamp"):
            await self.kube.delete(f"{CRDS}/{name}")
            crd = await self.kube.get(f"{CRDS}/{name}")
        return crd is None

    async def _finish_deletion(self, body: Body, served: str | None) -> None:
        name = body["metadata"]["name"]
        finalizers = list(body["metadata"].get("finalizers") or ())
        if DEFINITION_FINALIZER not in finalizers:
            return
        if served:
            try:
                remaining = await self._count_served(served)
            except KubeError as error:
                if error.status == 403:
                    await self._forbidden(body, f"deleting: cannot count the instances of {served}", error)
                raise
            if remaining:
                shown = ", ".join(remaining[:5]) + (", …" if len(remaining) > 5 else "")
                await self._definition_status(body, Cond(
                    "Ready", False, "InstancesRemain",
                    f"deleting: {served} is served until its {len(remaining)} instance(s) are deleted: {shown}",
                ), instances=len(remaining))
                self.wake_definition(name, 10.0)  # instance deletions wake us sooner
                return
            layers = self._layers_of_kind(body)
            if layers:
                if not await self._delete_orphans(body):
                    self.wake_definition(name, 10.0)  # Ready=False Forbidden says what the controllers lack
                    return
                # Deleted instances' layers may still be destroying: withdrawing the kind now would make the
                # destroy guard (controllers/layer/crd_guard.py) take their deletion for a CRD's, and skip it.
                shown = ", ".join(layers[:5]) + (", …" if len(layers) > 5 else "")
                await self._definition_status(body, Cond(
                    "Ready", False, "LayersRemain",
                    f"deleting: {served} is served until the layers of its deleted instances are gone: {shown}",
                ), instances=0)
                self.wake_definition(name, 10.0)  # layer deletions wake us sooner
                return
            await self._unwatch(served)
            try:
                gone = await self._delete_crd(served, name)
            except KubeError as error:
                if error.status == 403:
                    await self._forbidden(body, f"deleting: cannot withdraw the CRD {served}", error)
                raise
            if not gone:
                # Released now, the definition would be gone while its kind is still served (and a definition made
                # again under its name would meet the Terminating CRD).
                await self._definition_status(body, Cond(
                    "Ready", False, "CRDTerminating",
                    f"deleting: the API server is removing the CRD {served}; released once it is gone",
                ), instances=0)
                self.wake_definition(name, 1.0)
                return
        finalizers.remove(DEFINITION_FINALIZER)
        patch = {"metadata": {"finalizers": finalizers, "resourceVersion": body["metadata"]["resourceVersion"]}}
        try:
            await self.kube.merge_patch(f"{DEFINITIONS}/{name}", patch)
        except KubeError as error:
            if error.status == 409:
                self.wake_definition(name, RETRY_SOON)
            elif error.status != 404:
                raise
        log.info("ApplicationDefinition %s released (no instance left)", name)

    async def _delete_orphans(self, body: Mapping[str, Any]) -> bool:
        """No instance of the kind is left: delete its layers that are not being deleted yet and whose every owner
        is an instance of the kind, as Kubernetes' garbage collector would. The collector may never get to them: it
        learns a new kind by discovery every 30 s, and the instances of a kind defined and deleted (its CRD with
        it) within that time leave their layers with owners it cannot resolve, so the definition would wait for
        them forever. Each layer's own deletion then decides on its destroy (§21), as after the collector's.
        False when the API refused a deletion (then the definition's Ready condition says so)."""
        parsed = self.parsed(body)
        if not isinstance(parsed, ApplicationDefinition):
            return True
        application = parsed.spec.application
        for layer in orphaned_layers(list(self.layers), application.group, application.kind):
            meta = layer["metadata"]
            where = f"{meta.get('namespace')}/{meta['name']}"
            try:
                if await self.kube.delete(crd_path("terraformlayers", meta.get("namespace"), meta["name"])):
                    log.info("layer %s deleted: its %s instance is gone", where, application.kind)
            except KubeError as error:  # looked at again at the definition's next wake (10 s)
                if error.status == 403:
                    await self._forbidden(body, f"deleting: cannot delete the layer {where} of a deleted instance",
                                          error)
                    return False
                if error.status != 404:
                    raise
        return True

    def _layers_of_kind(self, body: Mapping[str, Any]) -> list[str]:
        parsed = self.parsed(body)
        if not isinstance(parsed, ApplicationDefinition):
            return []
        group, kind = parsed.spec.application.group, parsed.spec.application.kind
        return [f"{layer['metadata'].get('namespace')}/{layer['metadata']['name']}" for layer in self.layers
                if owned_by_kind(layer, group, kind)]

    async def reconcile_definition(self, name: str) -> None:
        body = self.definitions.get(name)
        if body is None:
            return
        meta = body["metadata"]
        parsed = self.parsed(body)
        served = (body.get("status") or {}).get("servedCrd")
        if not self.scope.cluster_work:
            self._follow_definition(body, parsed, served)
            return
        if meta.get("deletionTimestamp"):
            await self._finish_deletion(body, served)
            return
        if isinstance(parsed, Invalid):
            await self._definition_status(body, Cond("Ready", False, "Invalid", str(parsed)))
            return
        if DEFINITION_FINALIZER not in (meta.get("finalizers") or ()):
            finalizers = [*(meta.get("finalizers") or ()), DEFINITION_FINALIZER]
            try:
                body = await self.kube.merge_patch(f"{DEFINITIONS}/{name}", {"metadata": {
                    "finalizers": finalizers, "resourceVersion": meta["resourceVersion"]}})
            except KubeError as error:
                if error.status in (404, 409):
                    self.wake_definition(name, RETRY_SOON)
                    return
                raise
            self._observe_definition(body)

        application = parsed.spec.application
        owner = self.definition_of(application.group, application.kind)
        if owner is not None and owner[0]["metadata"]["name"] != name:
            await self._definition_status(body, Cond(
                "Ready", False, "KindTaken",
                f"{application.kind}.{application.group} is already served by ApplicationDefinition "
                f"{owner[0]['metadata']['name']}"))
            return
        desired = crd_for_definition(parsed)
        wanted = crd_name(parsed)
        if served and served != wanted:
            remaining = await self._count_served(served)
            if remaining:
                await self._definition_status(body, Cond(
                    "Ready", False, "NamesChanged",
                    f"the kind's names changed from {served} to {wanted}, but {len(remaining)} instance(s) of "
                    f"{served} remain; delete them first or restore the names"))
                return
            await self._unwatch(served)
            await self._delete_crd(served, name)
        existing = await self.kube.get(f"{CRDS}/{wanted}")
        if existing is not None and (existing["metadata"].get("labels") or {}).get(LABEL_DEFINITION) != name:
            await self._definition_status(body, Cond(
                "Ready", False, "CRDTaken",
                f"CustomResourceDefinition {wanted} exists and is not served by this definition"))
            return
        try:
            if existing is None:
                await self.kube.create(CRDS, desired)
                log.info("ApplicationDefinition %s: serving %s", name, wanted)
            elif not crd_up_to_date(existing, desired):
                replacement = {**existing, "spec": {**existing.get("spec", {}), **desired["spec"]}}
                replacement["metadata"] = {**existing["metadata"], "labels": {
                    **(existing["metadata"].get("labels") or {}), **desired["metadata"]["labels"]}}
                await self.kube.replace(f"{CRDS}/{wanted}", replacement)
        except KubeError as error:
            if error.status == 409:
                self.wake_definition(name, RETRY_SOON)
                return
            if error.status in (400, 422):
                await self._definition_status(body, Cond("Ready", False, "CRDRejected", error.message))
                return
            if error.status == 403:  # e.g. replacing the CRD of a kind the chart does not list in agl.kinds
                await self._forbidden(body, f"cannot {'create' if existing is None else 'replace'} the CRD {wanted}",
                                      error)
            raise
        self._watch_kind(parsed)
        # Ready says whether the controllers may read the kind: its first listing decides (a 403 is reported by
        # the watch, which backs off and wakes this definition when the answer changes).
        collections = self._collections(wanted)
        with contextlib.suppress(TimeoutError):
            async with asyncio.timeout(FIRST_LISTING_WAIT):
                await self.watches.answered(collections)
        refusal = self.watches.refusal(collections)
        if refusal is not None:
            await self._forbidden(
                body, f"{application.kind} is served as {application.group}/{APPS_VERSION}, but the controllers may "
                f"not list its instances, so none is compiled", refusal, servedCrd=wanted)
            return
        # A shard holds only its own namespaces' instances: with shards the count is a listing of every one.
        count = (len(await self._count_served(wanted)) if self.scope.sharded
                 else len(self.instances_of(application.group, application.kind)))
        await self._definition_status(body, Cond(
            "Ready", True, "Served",
            f"{application.kind} is served as {application.group}/{APPS_VERSION} (kubectl get {application.plural})",
        ), instances=count, servedCrd=wanted)

    def _follow_definition(self, body: Mapping[str, Any], parsed: ApplicationDefinition | Invalid,
                           served: str | None) -> None:
        """A shard other than the first: the first serves the kind (CRD, status, finalizer); this one only
        watches its instances once the kind is served, and writes nothing cluster-scoped. A withdrawn kind
        ends its watches by itself (404)."""
        if body["metadata"].get("deletionTimestamp") or not isinstance(parsed, ApplicationDefinition):
            return
        application = parsed.spec.application
        owner = self.definition_of(application.group, application.kind)
        if owner is not None and owner[0]["metadata"]["name"] == body["metadata"]["name"] \
                and served == crd_name(parsed):
            self._watch_kind(parsed)

    # --------------------------------------------------------------------------------- instances

    async def reconcile_instance(self, key: InstanceKey) -> None:
        group, kind, namespace, name = key
        body = self.instances_of(group, kind).get((namespace, name))
        if body is None or body["metadata"].get("deletionTimestamp"):
            self._warned.pop(key, None)
            return  # its layer goes with it: garbage collection of the owner reference
        found = self.definition_of(group, kind)
        if found is None:
            return
        definition = found[1]
        outcome: CompiledInstance | Invalid
        try:
            outcome = compile_instance(definition, body, self.prefix_of)
        except Invalid as error:
            outcome = error
        layer: Body | None = None
        conflict: str | None = None
        if isinstance(outcome, CompiledInstance):
            # A layer under another name can only exist once ours is new (the prefix changed): look then.
            new = self.layers.get((namespace, outcome.layer_name)) is None
            layer, conflict = await self._write_layer(key, body, outcome)
            if layer is None and conflict is None:
                return  # requeued
            if new:
                await self._drop_stale_layers(key, body, outcome.layer_name)
        status = project_status(body, outcome, layer, utcnow(), definition.spec.application.plural, conflict)
        await self._write_status(key, body, status, definition)
        await self._report(key, body, outcome, conflict)

    async def _write_layer(self, key: InstanceKey, body: Body,
                           compiled: CompiledInstance) -> tuple[Body | None, str | None]:
        namespace = key[2]
        existing = self.layers.get((namespace, compiled.layer_name))
        write = layer_write(compiled, existing, body, utcnow())
        if write.conflict is not None:
            return existing, write.conflict
        try:
            if write.create is not None:
                existing = await self.kube.create(crd_path("terraformlayers", namespace), write.create)
                await post_event(self.kube, body, "Normal", "LayerCreated",
                                 f"created TerraformLayer {compiled.layer_name}")
            elif write.replace is not None:
                existing = await self.kube.replace(crd_path("terraformlayers", namespace, compiled.layer_name),
                                                   write.replace)
        except KubeError as error:
            if error.status in (404, 409):  # our view of the layer is behind: read it again, then retry
                fresh = await self.kube.get(crd_path("terraformlayers", namespace, compiled.layer_name))
                if fresh is not None:
                    self.layers.observe(fresh)
                self.wake_instance(key, RETRY_SOON)
                return None, None
            raise
        if existing is not None:
            self.layers.observe(existing)
        return existing, None

    async def _drop_stale_layers(self, key: InstanceKey, body: Body, current: str) -> None:
        """Layers this instance owned under another name (the definition's prefix changed)."""
        uid = body["metadata"].get("uid")
        for layer in list(self.layers):
            if instance_of_layer(layer) != key or layer["metadata"]["name"] == current:
                continue
            if any(ref.get("uid") == uid for ref in layer["metadata"].get("ownerReferences") or ()):
                await self.kube.delete(crd_path("terraformlayers", key[2], layer["metadata"]["name"]))
                self.layers.forget(layer)

    async def _write_status(self, key: InstanceKey, body: Body, status: Mapping[str, Any],
                            definition: ApplicationDefinition) -> None:
        patch = status_patch(body.get("status"), status)
        if patch is None:
            return
        group, _, namespace, name = key
        resource = path(f"{group}/{APPS_VERSION}", definition.spec.application.plural, namespace, name, "status")
        try:
            written = await self.kube.merge_patch(resource, {"status": patch})
        except KubeError as error:
            if error.status == 404:
                return
            raise
        self.instances_of(key[0], key[1]).observe(written)

    async def _report(self, key: InstanceKey, body: Body, outcome: CompiledInstance | Invalid,
                      conflict: str | None) -> None:
        """One Warning event per distinct problem, not one per reconcile."""
        problem = str(outcome) if isinstance(outcome, Invalid) else conflict
        if problem is None:
            self._warned.pop(key, None)
            return
        if self._warned.get(key) == problem:
            return
        self._warned[key] = problem
        reason = "InvalidSpec" if isinstance(outcome, Invalid) else "LayerConflict"
        await post_event(self.kube, body, "Warning", reason, problem)

    # ------------------------------------------------------------------------------------- events

    def on_definition(self, event_type: str | None, body: Body) -> None:
        name = body["metadata"]["name"]
        if event_type == "DELETED":
            self._aligned.pop(name, None)
            self._wake_kind_of(self.definitions.pop(name, None))
            return
        self._observe_definition(body)
        self.wake_definition(name)

    def _wake_kind_of(self, body: Mapping[str, Any] | None) -> None:
        if body is None:
            return
        application = ((body.get("spec") or {}).get("application") or {})
        group = application.get("group") or "apps.burrito-py.io"
        for instance in self.instances_of(group, str(application.get("kind", ""))):
            self.wake_instance(instance_key(instance))

    def on_instance(self, event_type: str | None, body: Body) -> None:
        key = instance_key(body)
        if not self.scope.owns(key[2]):
            return  # another shard's namespace, or one a cluster-wide kind watch sees but this process ignores
        store = self.instances_of(key[0], key[1])
        known = store.get((key[2], key[3])) is not None
        if event_type == "DELETED":
            store.forget(body)
        else:
            store.observe(body)
        self.wake_instance(key)
        if event_type == "DELETED" or not known:
            found = self.definition_of(key[0], key[1])
            if found is not None:
                self.wake_definition(found[0]["metadata"]["name"], COUNT_DELAY)

    def on_layer(self, event_type: str | None, body: Body) -> None:
        if event_type == "DELETED":
            self.layers.forget(body)
        else:
            self.layers.observe(body)
        owner = instance_of_layer(body)
        if owner is not None:
            self.wake_instance(owner)
            found = self.definition_of(owner[0], owner[1]) if event_type == "DELETED" else None
            if found is not None and found[0]["metadata"].get("deletionTimestamp"):
                self.wake_definition(found[0]["metadata"]["name"], COUNT_DELAY)


async def resync_forever(agl: AglController, interval: float) -> None:
    while True:
        await asyncio.sleep(interval)
        agl.wake_everything()

