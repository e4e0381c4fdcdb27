"""A minimal kube-controller-manager for the API emulator, talking to it over HTTP only (like the kubelet):

- Deployments make Pods directly. There are no ReplicaSets: a pod carries its template's
  `pod-template-hash` label and an ownerReference to the Deployment (controller: true). A template change
  rolls pods one at a time (a new pod first, an old one deleted once a new one is Ready).
- Endpoints for every Service with a selector: Ready pods under `addresses`, the others under
  `notReadyAddresses`, ports resolved from `targetPort` (a number or a container port's name).
- PersistentVolumeClaims are Bound at once (there are no PersistentVolumes; the kubelet gives each claim a
  directory).

Decisions are the pure functions of `workloads.py`; this module only watches and writes.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Callable
from pathlib import Path
from typing import Any

from burrito_local.kube_client import ApiFailure, Informer, Key, KubeHttp, client_session, key_of, read_kubeconfig
from burrito_local.loop_thread import LoopThread
from burrito_local.workloads import (
    TEMPLATE_HASH_LABEL,
    deployment_status,
    endpoint_subsets,
    plan_rollout,
    pod_name,
    same_status,
    template_hash,
)
from burrito_py.timeutil import format_time, utcnow

log = logging.getLogger(__name__)
Obj = dict[str, Any]


class ControllerManager(LoopThread):
    thread_name = "burrito-py-controller-manager"

    def __init__(self, kubeconfig: Path, resync_seconds: float = 30.0) -> None:
        super().__init__()
        self._kubeconfig = kubeconfig
        self._server = read_kubeconfig(kubeconfig)[0]
        self._resync = resync_seconds
        self._wake: asyncio.Event | None = None
        self._dirty_deployments: set[Key] = set()
        self._dirty_services: set[Key] = set()
        self._dirty_claims: set[Key] = set()
        self._gone_pods: set[str] = set()  # uids we deleted; a late watch event must not bring them back
        self._http: KubeHttp | None = None
        self.deployments: Informer | None = None
        self.pods: Informer | None = None
        self.services: Informer | None = None
        self.endpoints: Informer | None = None
        self.claims: Informer | None = None

    # -- lifecycle -------------------------------------------------------------------------------
    def _prepare(self) -> None:
        self._wake = asyncio.Event()

    async def _run(self) -> None:
        assert self._stopping is not None
        async with client_session(self._kubeconfig) as session:
            http = KubeHttp(self._kubeconfig, session)
            self._http = http
            self.deployments = Informer(http, "/apis/apps/v1/deployments", self._on_deployment)
            self.pods = Informer(http, "/api/v1/pods", self._on_pod)
            self.services = Informer(http, "/api/v1/services", self._on_service)
            self.endpoints = Informer(http, "/api/v1/endpoints")
            self.claims = Informer(http, "/api/v1/persistentvolumeclaims", self._on_claim)
            informers = [self.deployments, self.pods, self.services, self.endpoints, self.claims]
            tasks = [asyncio.create_task(i.run()) for i in informers]
            worker = asyncio.create_task(self._work(informers))
            await self._stopping.wait()
            for task in [*tasks, worker]:
                task.cancel()
            await asyncio.gather(*tasks, worker, return_exceptions=True)

    @property
    def http(self) -> KubeHttp:
        assert self._http is not None
        return self._http

    # -- events → dirty keys ---------------------------------------------------------------------
    def _poke(self) -> None:
        if self._wake is not None:
            self._wake.set()

    def _on_deployment(self, _: str, obj: Obj) -> None:
        self._dirty_deployments.add(key_of(obj))
        self._poke()

    def _on_pod(self, event_type: str, obj: Obj) -> None:
        if event_type != "DELETED" and obj["metadata"]["uid"] in self._gone_pods and self.pods is not None:
            self.pods.cache.pop(key_of(obj), None)
        meta = obj["metadata"]
        for ref in meta.get("ownerReferences") or ():
            if ref.get("kind") == "Deployment" and ref.get("controller"):
                self._dirty_deployments.add((meta["namespace"], ref["name"]))
        if self.services is not None:
            self._dirty_services.update(k for k in self.services.cache if k[0] == meta["namespace"])
        self._poke()

    def _on_service(self, event_type: str, obj: Obj) -> None:
        self._dirty_services.add(key_of(obj))
        self._poke()

    def _on_claim(self, _: str, obj: Obj) -> None:
        self._dirty_claims.add(key_of(obj))
        self._poke()

    async def _work(self, informers: list[Informer]) -> None:
        assert self._wake is not None
        for informer in informers:
            await informer.synced.wait()
        while True:
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._wake.wait(), self._resync)
            self._wake.clear()
            if not (self._dirty_deployments or self._dirty_services or self._dirty_claims):
                self._resync_all()
            for batch, action in ((self._dirty_deployments, self._sync_deployment),
                                  (self._dirty_services, self._sync_endpoints),
                                  (self._dirty_claims, self._sync_claim)):
                keys = list(batch)
                batch.clear()
                for key in keys:
                    await self._guarded(action, key)

    def _resync_all(self) -> None:
        for informer, dirty in ((self.deployments, self._dirty_deployments), (self.services, self._dirty_services),
                                (self.claims, self._dirty_claims)):
            if informer is not None:
                dirty.update(informer.cache)

    async def _guarded(self, action: Callable[[Key], Any], key: Key) -> None:
        try:
            await action(key)
        except asyncio.CancelledError:
            raise
        except Exception as exc:  # retried on the next event or resync
            log.warning("controller manager: syncing %s/%s failed: %s", key[0], key[1], exc)
            if self._loop is not None:
                self._loop.call_later(1.0, self._poke)
            self._resync_all()

    # -- Deployments -----------------------------------------------------------------------------
    async def _sync_deployment(self, key: Key) -> None:
        assert self.deployments is not None and self.pods is not None
        deployment = self.deployments.cache.get(key)
        if deployment is None or deployment["metadata"].get("deletionTimestamp"):
            return  # its pods go with it: the API's garbage collector follows their ownerReferences
        namespace, name = key
        uid = deployment["metadata"]["uid"]
        pods = [p for p in self.pods.cache.values()
                if p["metadata"].get("namespace") == namespace and p["metadata"]["uid"] not in self._gone_pods
                and any(r.get("uid") == uid and r.get("controller") for r in p["metadata"].get("ownerReferences")
                        or ())]
        spec = deployment.get("spec") or {}
        template = spec.get("template") or {}
        current = template_hash(template)
        step = plan_rollout(int(spec.get("replicas", 1)), current, pods)
        for _ in range(step.create):
            created = await self.http.call("POST", f"/api/v1/namespaces/{namespace}/pods",
                                           self._pod_for(deployment, template, current))
            self.pods.remember(created)
            pods.append(created)
        for victim in step.delete:
            with contextlib.suppress(ApiFailure):
                gone = await self.http.call("DELETE", f"/api/v1/namespaces/{namespace}/pods/{victim}")
                self._gone_pods.add(gone["metadata"]["uid"])
            self.pods.cache.pop((namespace, victim), None)
            pods = [p for p in pods if p["metadata"]["name"] != victim]
        status = deployment_status(deployment, current, pods, format_time(utcnow()))
        if not same_status(deployment.get("status"), status):
            previous = deployment.get("status") or {}
            patch = {**{k: None for k in previous if k not in status}, **status}
            updated = await self.http.call(
                "PATCH", f"/apis/apps/v1/namespaces/{namespace}/deployments/{name}/status", {"status": patch},
                "application/merge-patch+json",
            )
            self.deployments.remember(updated)

    @staticmethod
    def _pod_for(deployment: Obj, template: Obj, hash_: str) -> Obj:
        meta = deployment["metadata"]
        template_meta = template.get("metadata") or {}
        labels = {**(template_meta.get("labels") or {}), TEMPLATE_HASH_LABEL: hash_}
        pod_meta: Obj = {
            "name": pod_name(meta["name"], hash_),
            "namespace": meta["namespace"],
            "labels": labels,
            "ownerReferences": [{"apiVersion": "apps/v1", "kind": "Deployment", "name": meta["name"],
                                 "uid": meta["uid"], "controller": True, "blockOwnerDeletion": True}],
        }
        if template_meta.get("annotations"):
            pod_meta["annotations"] = dict(template_meta["annotations"])
        return {"apiVersion": "v1", "kind": "Pod", "metadata": pod_meta, "spec": template.get("spec") or {}}

    # -- Endpoints -------------------------------------------------------------------------------
    async def _sync_endpoints(self, key: Key) -> None:
        assert self.services is not None and self.endpoints is not None and self.pods is not None
        namespace, name = key
        service = self.services.cache.get(key)
        existing = self.endpoints.cache.get(key)
        path = f"/api/v1/namespaces/{namespace}/endpoints"
        if service is None:
            if existing is not None:
                with contextlib.suppress(ApiFailure):
                    await self.http.call("DELETE", f"{path}/{name}")
                self.endpoints.cache.pop(key, None)
            return
        if not (service.get("spec") or {}).get("selector"):
            return  # Endpoints of a selector-less Service are the user's to write
        subsets = endpoint_subsets(service, [p for p in self.pods.cache.values()
                                             if p["metadata"]["uid"] not in self._gone_pods])
        labels = service["metadata"].get("labels") or {}
        if existing is not None and (existing.get("subsets") or []) == subsets and (
                existing["metadata"].get("labels") or {}) == labels:
            return
        body: Obj = {"apiVersion": "v1", "kind": "Endpoints",
                     "metadata": {"name": name, "namespace": namespace, "labels": labels}, "subsets": subsets}
        if existing is None:
            try:
                written = await self.http.call("POST", path, body)
            except ApiFailure as exc:
                if exc.status != 409:
                    raise
                current = await self.http.call("GET", f"{path}/{name}")
                body["metadata"]["resourceVersion"] = current["metadata"]["resourceVersion"]
                written = await self.http.call("PUT", f"{path}/{name}", body)
        else:
            body["metadata"]["resourceVersion"] = existing["metadata"]["resourceVersion"]
            written = await self.http.call("PUT", f"{path}/{name}", body)
        self.endpoints.remember(written)

    # -- PersistentVolumeClaims ------------------------------------------------------------------
    async def _sync_claim(self, key: Key) -> None:
        assert self.claims is not None
        claim = self.claims.cache.get(key)
        if claim is None or (claim.get("status") or {}).get("phase") == "Bound":
            return
        spec = claim.get("spec") or {}
        status: Obj = {"phase": "Bound", "accessModes": spec.get("accessModes") or ["ReadWriteOnce"]}
        storage = ((spec.get("resources") or {}).get("requests") or {}).get("storage")
        if storage:
            status["capacity"] = {"storage": storage}
        updated = await self.http.call(
            "PATCH", f"/api/v1/namespaces/{key[0]}/persistentvolumeclaims/{key[1]}/status", {"status": status},
            "application/merge-patch+json",
        )
        self.claims.remember(updated)
