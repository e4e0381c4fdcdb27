"""A local kubelet: runs Pods as local processes, talking to the API only over HTTP, like a node.

The image is ignored: a pod's first container `command` + `args` runs on this machine (`burrito-py` from
PATH stands in for the image's entrypoint). Emulation rules:

- Files: a pod's absolute paths live under its private root (`BURRITO_LOCAL_ROOT`;
  `burrito_py.kube.pod_paths.pod_path` maps them). HOME defaults to a per-pod directory and TMPDIR to the
  root's `/tmp`; a container env that sets HOME or TMPDIR to an absolute path gets it mapped under the root.
  The root, emptyDirs and log belong to one pod (its UID): a pod recreated under the same name starts with
  an empty /tmp and log, and a deleted pod's files go with it. (A program that writes to the literal
  path /tmp, ignoring TMPDIR, still reaches the host's /tmp: there is no mount namespace.)
- Processes: each container runs in its own session (its main process leads it). When its main process
  exits (or the pod is deleted), every process left in that session, whatever its process group, is
  SIGKILLed and waited for before the status is written, as a container's PID namespace ends with its PID 1:
  a `terraform apply` the runner started in a process group of its own cannot outlive a killed runner. (A
  process that calls setsid() itself leaves the session and escapes: there are no cgroups here.) Exit codes
  are the runtime's: 128 + N for signal N (137 and reason `Error` for SIGKILL; OOMKilled is never reported,
  limits are not enforced).
- Status: each status write is retried with back-off until the API takes it (404/409: the pod is gone or
  replaced; other 4xx: refused for good), with the pod's UID as a precondition.
- Network: each pod gets its own loopback address from 127.10.0.0/16 (`status.podIP`); Services get
  cluster IPs from 127.20.0.0/16 and this kubelet proxies them (kube-proxy lives on the node, and so
  does the only "node" here); `BURRITO_LOCAL_HOSTS` names a hosts file for the pod's namespace that
  `burrito_py.kube.pod_dns` answers Service names from.
- Restarts: `restartPolicy: Never` pods run once (runner pods); Always/OnFailure pods restart in place
  with the kubelet's back-off (CrashLoopBackOff) and their readiness/liveness probes (httpGet, tcpSocket).
- Deadline: a `restartPolicy: Never` pod still active `activeDeadlineSeconds` after the kubelet took it up has its
  container stopped as on a deletion (SIGTERM, the grace period, SIGKILL), staying `Running` meanwhile; once it is
  gone the pod is `Failed` with the kubelet's reason `DeadlineExceeded` and message (a kubelet never reports a
  terminal phase while a container may run). A pod that never started its process is `Failed` at once and never
  starts. (Other pods' deadlines are not enforced: nothing here sets one.)
- Credentials: each pod acts as its ServiceAccount: a per-pod KUBECONFIG with a pod-bound token (one
  year, as kube-apiserver's extended expiry of kubelet tokens, since processes read it once; renewed at
  80 % like the others), the in-cluster token files under /var/run/secrets/kubernetes.io/serviceaccount
  (automountServiceAccountToken), and projected serviceAccountToken volumes renewed at 80 % of their
  lifetime or after 24 h, replaced atomically.
- Volumes: secret, configMap, projected (serviceAccountToken, secret, configMap), emptyDir (per pod),
  persistentVolumeClaim (a directory per claim under the work dir that outlives pods). readOnly is not
  enforced.
- Binding: the kubelet assigns each pod it runs to its node (`pods/binding`, as a scheduler would) before
  anything else, so the emulator knows a kubelet will stop it.
- Deletion is graceful, as on a node: a deleted pod stays, with `deletionTimestamp` (and its ServiceAccount
  token valid), while the kubelet sends SIGTERM to its main process group, waits for the main process at most
  the pod's grace period (`deletionGracePeriodSeconds`, capped by `grace_seconds`), SIGKILLs the rest of the
  container's session, writes the pod's final status, then deletes it with a grace period of 0 (a UID
  precondition: never its successor), which removes it. A pod deleted with a grace period of 0 (forced) is gone
  at once; the kubelet stops its processes all the same.

With `runtime="podman"` the pods' containers run from their images instead (`container_runtime.py`,
docs/architecture.md §20): the securityContext applied for real, the volumes above bind-mounted, the host's
network; the status, log, restart and deletion machinery stays the same.

With `node=NodeMode(...)` the kubelet is a Node of a real control plane instead (`kubelet_node.py`,
docs/architecture.md §22.3): it registers its Node and renews its Lease, watches only the pods bound to it
(`spec.nodeName`), addresses pods from the node's pod range and reports the node's address as their hostIP,
leaves PodScheduled to the scheduler (status writes are strategic merge patches, which keep the other
conditions), confirms a graceful deletion (DELETE with grace 0 and the pod's UID) once the containers are
gone, and serves the kubelet API over HTTPS so `kubectl logs` goes through kube-apiserver.
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import functools
import json
import logging
import os
import re
import shutil
import signal
import time
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import aiohttp

from burrito_local.container_runtime import (
    ContainerConfigError,
    Mount,
    Podman,
    check_non_root,
    container_name,
    podman_env,
    run_argv,
)
from burrito_local.kube_client import (
    TRANSIENT,
    ApiFailure,
    Informer,
    KubeHttp,
    client_session,
    cluster_ca,
    read_kubeconfig,
)
from burrito_local.kubelet_node import NodeAgent, NodeMode
from burrito_local.loop_thread import LoopThread
from burrito_local.service_proxy import ServiceProxy
from burrito_local.workloads import (
    RESET_BACKOFF_AFTER,
    IpPool,
    NodeAddress,
    hosts_file,
    restart_delay,
    service_link_env,
    status_retry_delays,
    token_refresh_delay,
)
from burrito_py.timeutil import format_time, utcnow

log = logging.getLogger(__name__)
Obj = dict[str, Any]
TERMINAL = ("Succeeded", "Failed")
# What a kubelet says of a pod it stopped at its activeDeadlineSeconds (pkg/kubelet/active_deadline.go).
DEADLINE_EXCEEDED = {"reason": "DeadlineExceeded", "message": "Pod was active on the node longer than the specified "
                     "deadline"}
_VAR = re.compile(r"\$\(([A-Za-z_][A-Za-z0-9_]*)\)")
_FIELD_KEY = re.compile(r"^metadata\.(labels|annotations)\['([^']*)'\]$")
POD_CIDR = "127.10.0.0/16"
HOST_IP = "127.0.0.1"
SA_DIR = "/var/run/secrets/kubernetes.io/serviceaccount"
KUBECONFIG_TOKEN_SECONDS = 365 * 24 * 3600
SA_TOKEN_SECONDS = 3607  # what the ServiceAccount admission plugin asks for
RUNTIMES = ("process", "podman")
# Where a container (runtime "podman") finds what the kubelet gives it besides its volumes.
CONTAINER_KUBE_DIR = "/var/run/burrito-local/kube"
CONTAINER_DNS_DIR = "/var/run/burrito-local/dns"


class ConfigError(Exception):
    """A referenced Secret or ConfigMap key is missing: the pod waits, as on a real node."""


def expand(text: str, env: Mapping[str, str]) -> str:
    """Kubernetes `$(VAR)` expansion; unknown references stay as written."""
    return _VAR.sub(lambda m: env.get(m.group(1), m.group(0)), text)


def _identity(container: Mapping[str, Any]) -> Obj:
    """Fields every client expects in a container status (the image is not used here)."""
    return {"name": container.get("name", "main"), "image": container.get("image", ""), "imageID": ""}


def exit_code(returncode: int) -> int:
    """A container's exit code as a runtime reports it: 128 + N for a process ended by signal N."""
    return 128 - returncode if returncode < 0 else returncode


def container_members(leader: int) -> list[int] | None:
    """The live (not zombie) processes of a container: those in the session, or the process group, its main
    process `leader` started (it runs with start_new_session, so both ids are its pid). An orphan its new parent
    has not reaped yet is dead for our purpose. Reads /proc on Linux; None elsewhere (no way to list them)."""
    proc = Path("/proc")
    if not proc.is_dir():
        return None
    found = []
    for entry in proc.iterdir():
        if not entry.name.isdigit():
            continue
        try:
            fields = (entry / "stat").read_text().rpartition(")")[2].split()
        except OSError:
            continue
        # After the command name: state, ppid, pgrp, session.
        if len(fields) > 3 and fields[0] != "Z" and str(leader) in (fields[2], fields[3]):
            found.append(int(entry.name))
    return found


def group_alive(pgid: int) -> bool:
    """Whether anything of the container led by `pgid` is still alive (its session or its process group).
    Without /proc, asks the kernel about the process group (zombies count)."""
    members = container_members(pgid)
    if members is not None:
        return bool(members)
    try:
        os.killpg(pgid, 0)
    except (ProcessLookupError, PermissionError):
        return False
    return True


GROUP_KILL_WAIT = 10.0  # seconds a killed container's processes may take to go before the kubelet gives up


def _kill_container(leader: int) -> None:
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(leader, signal.SIGKILL)
    for pid in container_members(leader) or ():
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.kill(pid, signal.SIGKILL)


async def end_group(pgid: int) -> None:
    """SIGKILL what is left of a container (its session, and its process group) and wait until it is gone: on a
    node the container's PID namespace ends with its main process, so no child outlives the container, not even
    one in a process group of its own (terraform under the runner)."""
    deadline = time.monotonic() + GROUP_KILL_WAIT
    while True:
        await asyncio.to_thread(_kill_container, pgid)
        if not await asyncio.to_thread(group_alive, pgid):
            return
        if time.monotonic() >= deadline:
            log.warning("kubelet: processes of container %d survived SIGKILL for %gs", pgid, GROUP_KILL_WAIT)
            return
        await asyncio.sleep(0.02)


POD_RELIST_SECONDS = 60.0


def _log_failure(task: asyncio.Task[None]) -> None:
    """A spawned task's unexpected failure is logged when it happens: nobody awaits these tasks, and a pod whose
    start died silently would stay Pending with nothing said."""
    if not task.cancelled() and task.exception() is not None:
        log.error("kubelet: %s failed", getattr(task.get_coro(), "__qualname__", task.get_name()),
                  exc_info=task.exception())


def _pod_field(pod: Obj, path: str) -> str:
    """A downward-API field of the pod's metadata (`metadata.name`, `metadata.labels['k']`, ...)."""
    meta = pod["metadata"]
    keyed = _FIELD_KEY.match(path)
    if keyed:
        return str((meta.get(keyed.group(1)) or {}).get(keyed.group(2), ""))
    if path in ("metadata.labels", "metadata.annotations"):
        return "\n".join(f'{k}="{v}"' for k, v in sorted((meta.get(path.split(".")[1]) or {}).items()))
    return str(meta.get(path.removeprefix("metadata."), "")) if path.startswith("metadata.") else ""


def remap(root: Path, path: str) -> Path:
    return root / path.lstrip("/")


def _projects_api_token(pod: Obj) -> bool:
    """Whether a volume of the pod projects a ServiceAccount token for the API's own audience (no audience)."""
    for volume in (pod.get("spec") or {}).get("volumes") or ():
        for source in (volume.get("projected") or {}).get("sources") or ():
            token = source.get("serviceAccountToken")
            if token is not None and not token.get("audience"):
                return True
    return False


def _write_atomically(path: Path, data: bytes, mode: int | None = None) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.tmp")
    tmp.write_bytes(data)
    if mode is not None:
        tmp.chmod(mode)
    tmp.replace(path)


def _token_writer(path: Path, mode: int) -> Callable[[str], None]:
    return lambda token: _write_atomically(path, token.encode(), mode)


@dataclass
class TokenFile:
    """A token the kubelet keeps fresh for a pod: `write` puts a new one in place."""

    audience: str | None
    seconds: int
    write: Callable[[str], None]
    due: float = 0.0


@dataclass
class Life:
    """What the kubelet knows of one long-running pod (restartPolicy Always/OnFailure)."""

    pod: Obj
    container: Obj
    ip: str
    grace: float
    started: str
    stop: asyncio.Event = field(default_factory=asyncio.Event)
    lock: asyncio.Lock = field(default_factory=asyncio.Lock)
    phase: str = "Pending"
    restarts: int = 0
    ready: bool = False
    state: Obj = field(default_factory=lambda: {"waiting": {"reason": "ContainerCreating"}})
    last_state: Obj = field(default_factory=dict)
    transitions: dict[str, tuple[str, str]] = field(default_factory=dict)
    process: asyncio.subprocess.Process | None = None
    runtime_name: str | None = None  # the podman container's name (runtime "podman")


class LocalKubelet(LoopThread):
    thread_name = "burrito-py-kubelet"

    def __init__(
        self,
        kubeconfig: Path,
        pod_log_dir: Path,
        work_dir: Path,
        node_name: str = "burrito-py-local",
        grace_seconds: float = 5.0,
        backoff_base: float = 10.0,
        backoff_cap: float = 300.0,
        refresh_delay: Callable[[float], float] = token_refresh_delay,
        node: NodeMode | None = None,
        runtime: str = "process",
    ) -> None:
        super().__init__()
        if runtime not in RUNTIMES:
            raise ValueError(f"runtime: {runtime!r} is not one of {', '.join(RUNTIMES)}")
        # "podman": containers run from their images (container_runtime.py); podman and runc must be there.
        self._podman = Podman() if runtime == "podman" else None
        self._containers: dict[int, str] = {}  # pid of a `podman run` → its container's name
        self._node_mode = node
        self._kubeconfig = kubeconfig
        self._server = read_kubeconfig(kubeconfig)[0]
        self._ca = cluster_ca(kubeconfig)
        self._log_dir, self._work_dir, self._node = pod_log_dir, work_dir, node_name
        self._grace = grace_seconds
        self._backoff = (backoff_base, backoff_cap)
        self._refresh_delay = refresh_delay
        # Keyed by (namespace, name) with the pod's UID beside: a pod recreated under the same name must
        # never be stopped or cleaned up on behalf of the deleted one.
        self._processes: dict[tuple[str, str], tuple[str, asyncio.subprocess.Process]] = {}
        self._dir_locks: dict[tuple[str, str], asyncio.Lock] = {}
        self._lives: dict[tuple[str, str], Life] = {}
        self._pod_grace: dict[tuple[str, str], float] = {}
        self._started: set[str] = set()
        self._ending: set[str] = set()  # uids of pods being deleted gracefully: never (re)started
        self._expired: set[str] = set()  # uids of pods past their activeDeadlineSeconds: stopped, never started
        self._failed_unstarted: set[str] = set()  # of those, the ones written Failed before their process ran
        self._pod_tasks: dict[str, asyncio.Task[None]] = {}  # uid → the task running the pod
        # uid → how far the kubelet got with the pod (`describe_pod`): what a stuck pod's diagnosis reads first.
        self._stages: dict[str, str] = {}
        self._tasks: set[asyncio.Task[None]] = set()
        pod_cidr = node.pod_cidr if node is not None else POD_CIDR
        self._ips: IpPool | NodeAddress = (NodeAddress(node.address) if node is not None and node.host_network
                                           else IpPool(pod_cidr, start=IpPool.random_start(pod_cidr)))
        self._host_ip = node.address if node is not None else HOST_IP
        self._agent: NodeAgent | None = None
        self._confirmed: set[str] = set()
        self._proxy = ServiceProxy()
        self._network_changed: asyncio.Event | None = None
        self._http: KubeHttp | None = None
        self._probe_http: aiohttp.ClientSession | None = None
        self._services: Informer | None = None
        self._endpoints: Informer | None = None
        self._pods: Informer | None = None

    @property
    def dns_dir(self) -> Path:
        return self._work_dir / "dns"

    # -- lifecycle -------------------------------------------------------------------------------
    def _prepare(self) -> None:
        self._network_changed = asyncio.Event()

    def _join_timeout(self) -> float:
        return self._grace + 10  # the pods' processes get their grace period

    async def _run(self) -> None:
        assert self._stopping is not None
        node = self._node_mode
        proxy_config = node.proxy_kubeconfig if node is not None else None
        async with contextlib.AsyncExitStack() as stack:
            session = await stack.enter_async_context(client_session(self._kubeconfig))
            # Probes open a connection each and close it, as the kubelet's prober does (DisableKeepAlives): a kept-alive
            # probe connection is a request handler task left in the probed server, which delayed the controllers'
            # graceful stop (kopf waits 5 s for the tasks it did not start) past its Lease release.
            probes = await stack.enter_async_context(
                aiohttp.ClientSession(connector=aiohttp.TCPConnector(force_close=True)))
            self._http = KubeHttp(self._kubeconfig, session)
            self._probe_http = probes
            # A node may list Services but not Endpoints: on a real control plane the proxy reads them as
            # kube-proxy does, with its own identity (NodeMode.proxy_kubeconfig), or not at all.
            network_http = self._http
            if proxy_config is not None:
                network_http = KubeHttp(proxy_config, await stack.enter_async_context(client_session(proxy_config)))
            self._services = Informer(network_http, "/api/v1/services", self._on_network)
            self._endpoints = (Informer(network_http, "/api/v1/endpoints", self._on_network)
                               if node is None or proxy_config is not None else None)
            own = {"fieldSelector": f"spec.nodeName={self._node}"} if node is not None else None
            # Listed again every minute: a pod of this node that a watch never delivered still starts (a pod once
            # stayed Pending, bound to this node, for minutes, with nothing logged).
            self._pods = Informer(self._http, "/api/v1/pods", self._on_pod, params=own, relist=POD_RELIST_SECONDS)
            network = [asyncio.create_task(self._services.run()), asyncio.create_task(self._sync_network())]
            if self._endpoints is not None:
                network.append(asyncio.create_task(self._endpoints.run()))
            if node is not None:
                self._agent = NodeAgent(self._http, self._node, node, self._container_log_path, self._pod_running)
                await self._agent.serve()
                await self._agent.register()
                network.append(asyncio.create_task(self._agent.heartbeat(self._stopping)))
            # Service links and DNS need the Services before the first pod starts.
            await asyncio.wait([asyncio.create_task(self._services.synced.wait()),
                                asyncio.create_task(self._stopping.wait())], return_when=asyncio.FIRST_COMPLETED)
            watch = asyncio.create_task(self._pods.run())
            await self._stopping.wait()
            watch.cancel()
            await asyncio.gather(*[self._terminate(key) for key in {*self._processes, *self._lives}])
            for task in [*network, *self._tasks]:
                task.cancel()
            await asyncio.gather(watch, *network, *self._tasks, return_exceptions=True)
            await self._proxy.close()
            if self._agent is not None:
                await self._agent.close()

    def _container_log_path(self, namespace: str, pod: str, container: str) -> Path:
        return self._log_dir / namespace / pod / f"{container}.log"

    def _pod_running(self, namespace: str, name: str) -> bool:
        return (namespace, name) in self._processes or (namespace, name) in self._lives

    # -- Services: DNS and proxy -----------------------------------------------------------------
    def _on_network(self, _: str, __: Obj) -> None:
        if self._network_changed is not None:
            self._network_changed.set()

    async def _sync_network(self) -> None:
        assert self._network_changed is not None
        while True:
            await self._network_changed.wait()
            self._network_changed.clear()
            try:
                self._write_hosts()
                assert self._services is not None
                if self._endpoints is not None:
                    await self._proxy.sync(list(self._services.cache.values()), self._endpoints.cache)
            except Exception:  # keep serving; the next change tries again
                log.exception("kubelet: syncing services failed")
            await asyncio.sleep(0.01)  # coalesce bursts of changes

    def _write_hosts(self, also: str | None = None) -> None:
        services = list(self._services.cache.values()) if self._services is not None else []
        endpoints = self._endpoints.cache if self._endpoints is not None else {}
        namespaces = {s["metadata"].get("namespace", "") for s in services}
        namespaces |= {key[0] for key in (*self._processes, *self._lives)}
        if also is not None:
            namespaces.add(also)
        for namespace in namespaces:
            path = self.dns_dir / f"{namespace}.hosts"
            text = hosts_file(namespace, services, endpoints).encode()
            if not path.exists() or path.read_bytes() != text:
                _write_atomically(path, text)

    # -- pods ------------------------------------------------------------------------------------
    async def _on_pod(self, event_type: str, pod: Obj) -> None:
        startup = self._pods is not None and not self._pods.synced.is_set()
        meta = pod["metadata"]
        key = (meta["namespace"], meta["name"])
        if event_type == "DELETED":
            self._stages.pop(meta["uid"], None)
            self._spawn(self._terminate(key, meta["uid"], forget=True))
            return
        if meta.get("deletionTimestamp") and self._node_mode is not None:  # a real control plane's node
            if meta["uid"] not in self._confirmed:
                self._confirmed.add(meta["uid"])
                self._spawn(self._terminate_and_confirm(key, meta["uid"]))
            return
        if meta.get("deletionTimestamp"):
            if meta["uid"] not in self._ending:
                self._ending.add(meta["uid"])
                self._spawn(self._end_gracefully(pod))
            return
        phase = (pod.get("status") or {}).get("phase")
        if meta["uid"] in self._started or phase in TERMINAL:
            return
        never = (pod.get("spec") or {}).get("restartPolicy", "Always") == "Never"
        if startup and phase == "Running" and never:
            self._spawn(self._patch_status(
                pod,
                {"phase": "Failed", "reason": "NodeLost", "message": "the local kubelet restarted while the pod ran"},
            ))
            return
        self._started.add(meta["uid"])
        uid = meta["uid"]
        self._stages[uid] = "seen"
        task = self._pod_tasks[uid] = self._spawn(self._run_pod(pod))
        task.add_done_callback(lambda _: self._pod_tasks.pop(uid, None))

    def describe_pod(self, uid: str) -> str:
        """How far the kubelet got with pod `uid`, for a diagnosis (thread-safe: reads only)."""
        stage = self._stages.get(uid)
        if stage is None:
            pods = self._pods
            held = pods is not None and any(p["metadata"]["uid"] == uid for p in list(pods.cache.values()))
            watch = pods.describe() if pods is not None else "no pod watch"
            return f"never started it ({'in' if held else 'not in'} its pod watch's cache; {watch})"
        task = self._pod_tasks.get(uid)
        if task is None:
            return f"done with it, last at: {stage}"
        if task.done():
            failure = None if task.cancelled() else task.exception()
            return f"its task ended at: {stage}" + (f" ({type(failure).__name__}: {failure})" if failure else "")
        return f"at: {stage}"

    def _still_to_start(self, uid: str) -> bool:
        """Pod `uid` is still in this node's pod watch, not being deleted and not past its deadline."""
        pods = self._pods
        if pods is None or uid in self._ending or uid in self._confirmed or uid in self._expired:
            return False
        return any(p["metadata"]["uid"] == uid and not p["metadata"].get("deletionTimestamp")
                   for p in list(pods.cache.values()))

    def _spawn(self, work: Any) -> asyncio.Task[None]:
        task = asyncio.create_task(work)
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)
        task.add_done_callback(_log_failure)
        return task

    async def _bind(self, pod: Obj) -> bool:
        """Assign the pod to this node (`pods/binding`); False when it is gone, being deleted or someone else's."""
        meta, spec = pod["metadata"], pod.get("spec") or {}
        if spec.get("nodeName"):
            return bool(spec["nodeName"] == self._node)
        assert self._http is not None
        body = {"apiVersion": "v1", "kind": "Binding", "metadata": {"name": meta["name"], "uid": meta["uid"]},
                "target": {"apiVersion": "v1", "kind": "Node", "name": self._node}}
        for delay in status_retry_delays():
            try:
                await self._http.call("POST", f"/api/v1/namespaces/{meta['namespace']}/pods/{meta['name']}/binding",
                                      body)
                return True
            except ApiFailure as exc:
                if 400 <= exc.status < 500 and exc.status != 429:
                    log.info("kubelet: pod %s/%s not bound: %s", meta["namespace"], meta["name"], exc)
                    return False
            except TRANSIENT as exc:
                log.warning("kubelet: binding %s/%s failed (%s), retrying", meta["namespace"], meta["name"], exc)
            if self._stopping is not None and self._stopping.is_set():
                return False
            await asyncio.sleep(delay)
        return False

    async def _end_gracefully(self, pod: Obj) -> None:
        """A pod marked for deletion: stop its container within its grace period, write its final status, then
        delete it for good (grace period 0, its UID as precondition), as a node's kubelet does."""
        meta = pod["metadata"]
        key, uid = (meta["namespace"], meta["name"]), meta["uid"]
        grace = min(float(meta.get("deletionGracePeriodSeconds") or 0), self._grace)
        life = self._lives.get(key)
        life = life if life is not None and life.pod["metadata"]["uid"] == uid else None
        await self._terminate(key, uid, grace=grace)
        task = self._pod_tasks.get(uid)
        if task is not None and not task.done():
            # A runner's final status (its exit code, its termination message) is written as its process ends.
            done, _ = await asyncio.wait({task}, timeout=10.0)
            if not done:  # never started (e.g. waiting for a Secret): nothing more to say about it
                task.cancel()
                await asyncio.gather(task, return_exceptions=True)
        if life is not None and life.process is not None and life.process.returncode is not None:
            code = exit_code(life.process.returncode)
            await self._patch_status(life.pod, {
                "phase": "Succeeded" if code == 0 else "Failed",
                "conditions": [{"type": kind, "status": "False", "lastProbeTime": None,
                                "lastTransitionTime": format_time(utcnow())} for kind in ("ContainersReady", "Ready")],
                "containerStatuses": [{**_identity(life.container), "ready": False, "started": False,
                                       "restartCount": life.restarts, "lastState": life.last_state, "state": {
                                           "terminated": {"exitCode": code, "reason": "Completed" if code == 0
                                                          else "Error", "startedAt": life.started,
                                                          "finishedAt": format_time(utcnow())}}}]})
        assert self._http is not None
        options = {"apiVersion": "v1", "kind": "DeleteOptions", "gracePeriodSeconds": 0,
                   "preconditions": {"uid": uid}}
        try:
            await self._http.call("DELETE", f"/api/v1/namespaces/{meta['namespace']}/pods/{meta['name']}", options)
        except ApiFailure as exc:  # gone already (a forced delete), or another pod took the name
            log.info("kubelet: final delete of %s/%s: %s", meta["namespace"], meta["name"], exc)
        except TRANSIENT as exc:
            log.warning("kubelet: final delete of %s/%s failed: %s", meta["namespace"], meta["name"], exc)

    async def _api(self, method: str, path: str, body: Any = None, content_type: str = "application/json") -> Any:
        assert self._http is not None
        try:
            return await self._http.call(method, path, body, content_type)
        except ApiFailure as exc:
            raise ConfigError(str(exc)) from None

    async def _terminate_and_confirm(self, key: tuple[str, str], uid: str) -> None:
        """A graceful deletion on a real control plane: the pod stays (with deletionTimestamp) until its
        node says its containers are gone, by deleting it with grace 0 and its UID as precondition."""
        await self._terminate(key, uid, forget=True)
        assert self._http is not None
        body = {"apiVersion": "v1", "kind": "DeleteOptions", "gracePeriodSeconds": 0, "preconditions": {"uid": uid}}
        for delay in status_retry_delays():
            try:
                await self._http.call("DELETE", f"/api/v1/namespaces/{key[0]}/pods/{key[1]}", body)
                return
            except ApiFailure as exc:
                if 400 <= exc.status < 500 and exc.status != 429:  # gone already, or another pod took the name
                    return
                log.warning("kubelet: deletion of %s/%s not confirmed (%s), retrying", key[0], key[1], exc)
            except TRANSIENT as exc:
                log.warning("kubelet: deletion of %s/%s not confirmed (%s), retrying", key[0], key[1], exc)
            if self._stopping is not None and self._stopping.is_set():
                return
            await asyncio.sleep(delay)

    async def _patch_status(self, pod: Obj, status: Obj) -> None:
        """Write a pod status, retrying with back-off until the API takes it, as the kubelet's status
        manager does: a dropped `Succeeded` would leave the pod (and whatever waits on it) Running forever.
        The patch is a merge of the full state, so sending it again after a lost response is harmless.
        Gives up only when the pod is gone (404), the write is refused for good (another 4xx), or the
        kubelet stops."""
        assert self._http is not None
        meta = pod["metadata"]
        path = f"/api/v1/namespaces/{meta['namespace']}/pods/{meta['name']}/status"
        # A precondition on the UID: a patch must never land on a new pod that took the name.
        body = {"metadata": {"uid": meta["uid"]}, "status": status}
        for delay in status_retry_delays():
            try:
                # On a real control plane a strategic merge keeps the conditions others own (PodScheduled).
                await self._http.call("PATCH", path, body, "application/strategic-merge-patch+json"
                                      if self._node_mode is not None else "application/merge-patch+json")
                return
            except ApiFailure as exc:
                if exc.status in (404, 409) or (400 <= exc.status < 500 and exc.status != 429):
                    log.info("kubelet: status of %s/%s not written: %s", meta["namespace"], meta["name"], exc)
                    return
                log.warning("kubelet: status of %s/%s not written (%s), retrying in %.2gs", meta["namespace"],
                            meta["name"], exc, delay)
            except TRANSIENT as exc:
                log.warning("kubelet: status of %s/%s not written (%s), retrying in %.2gs", meta["namespace"],
                            meta["name"], exc or type(exc).__name__, delay)
            if self._stopping is not None and self._stopping.is_set():
                return
            await asyncio.sleep(delay)

    async def _token(self, pod: Obj, audience: str | None, seconds: int) -> str:
        meta, spec = pod["metadata"], pod.get("spec") or {}
        account = spec.get("serviceAccountName") or "default"
        body = {
            "spec": {
                "audiences": [audience] if audience else [],
                "expirationSeconds": seconds,
                "boundObjectRef": {"kind": "Pod", "apiVersion": "v1", "name": meta["name"], "uid": meta["uid"]},
            }
        }
        result = await self._api(
            "POST", f"/api/v1/namespaces/{meta['namespace']}/serviceaccounts/{account}/token", body
        )
        return str(result["status"]["token"])

    async def _object(self, namespace: str, kind: str, name: str, optional: bool) -> Obj | None:
        try:
            return await self._api("GET", f"/api/v1/namespaces/{namespace}/{kind}/{name}")  # type: ignore[no-any-return]
        except ConfigError:
            if optional:
                return None
            raise ConfigError(f'{kind[:-1]} "{name}" not found') from None

    async def _data(self, namespace: str, kind: str, name: str, optional: bool) -> dict[str, bytes] | None:
        """A Secret's or ConfigMap's keys as bytes (None: an optional object that is missing)."""
        obj = await self._object(namespace, kind, name, optional)
        if obj is None:
            return None
        if kind == "secrets":
            return {k: base64.b64decode(v) for k, v in (obj.get("data") or {}).items()}
        found = {k: str(v).encode() for k, v in (obj.get("data") or {}).items()}
        found.update({k: base64.b64decode(v) for k, v in (obj.get("binaryData") or {}).items()})
        return found

    async def _lookup(self, namespace: str, kind: str, name: str, key: str | None, optional: bool) -> Any:
        data = await self._data(namespace, kind, name, optional)
        if data is None:
            return None
        text = {k: v.decode(errors="replace") for k, v in data.items()}
        if key is None:
            return text
        if key not in text and not optional:
            raise ConfigError(f"couldn't find key {key} in {kind[:-1]} {namespace}/{name}")
        return text.get(key)

    def _service_env(self, pod: Obj) -> dict[str, str]:
        url = urlsplit(self._server)
        host, port = url.hostname or self._host_ip, str(url.port or (443 if url.scheme == "https" else 80))
        env = {"KUBERNETES_SERVICE_HOST": host, "KUBERNETES_SERVICE_PORT": port,
               "KUBERNETES_SERVICE_PORT_HTTPS": port, "KUBERNETES_PORT": f"tcp://{host}:{port}",
               f"KUBERNETES_PORT_{port}_TCP": f"tcp://{host}:{port}", f"KUBERNETES_PORT_{port}_TCP_PROTO": "tcp",
               f"KUBERNETES_PORT_{port}_TCP_PORT": port, f"KUBERNETES_PORT_{port}_TCP_ADDR": host}
        if (pod.get("spec") or {}).get("enableServiceLinks", True) and self._services is not None:
            namespace = pod["metadata"]["namespace"]
            env.update(service_link_env(s for s in self._services.cache.values()
                                        if s["metadata"].get("namespace") == namespace))
        return env

    async def _environment(self, pod: Obj, container: Obj, root: Path, ip: str = "") -> dict[str, str]:
        meta, spec = pod["metadata"], pod.get("spec") or {}
        ns = meta["namespace"]
        env: dict[str, str] = self._service_env(pod)
        for source in container.get("envFrom") or ():
            ref = source.get("secretRef") or source.get("configMapRef") or {}
            kind = "secrets" if "secretRef" in source else "configmaps"
            values = await self._lookup(ns, kind, ref.get("name", ""), None, bool(ref.get("optional")))
            env.update({source.get("prefix", "") + k: v for k, v in (values or {}).items()})
        fields = {
            "metadata.name": meta["name"],
            "metadata.namespace": ns,
            "metadata.uid": meta["uid"],
            "spec.serviceAccountName": spec.get("serviceAccountName") or "default",
            "spec.nodeName": self._node,
            "status.podIP": ip,
            "status.podIPs": ip,
            "status.hostIP": self._host_ip,
            "status.hostIPs": self._host_ip,
        }
        for item in container.get("env") or ():
            source = item.get("valueFrom") or {}
            if "value" in item or not source:
                env[item["name"]] = expand(str(item.get("value", "")), env)
            elif "fieldRef" in source:
                path = source["fieldRef"].get("fieldPath", "")
                keyed = _FIELD_KEY.match(path)
                if keyed:
                    env[item["name"]] = (meta.get(keyed.group(1)) or {}).get(keyed.group(2), "")
                else:
                    env[item["name"]] = fields.get(path, "")
            else:
                ref = source.get("secretKeyRef") or source.get("configMapKeyRef") or {}
                kind = "secrets" if "secretKeyRef" in source else "configmaps"
                value = await self._lookup(ns, kind, ref.get("name", ""), ref.get("key"), bool(ref.get("optional")))
                if value is not None:
                    env[item["name"]] = value
        return env

    # -- volumes ---------------------------------------------------------------------------------
    async def _volume_files(self, pod: Obj, volume: Obj, tokens: list[TokenFile], target: Path) -> dict[str, tuple[
            bytes, int]] | None:
        """The files of a secret/configMap/projected volume (path → content, mode); None for other kinds.
        Projected tokens are registered in `tokens` (written, and renewed, by the caller)."""
        ns = pod["metadata"]["namespace"]

        async def keys(kind: str, ref: Obj, mode: int) -> dict[str, tuple[bytes, int]]:
            name = ref.get("secretName" if kind == "secrets" else "name", "")
            data = await self._data(ns, kind, name, bool(ref.get("optional"))) or {}
            items = ref.get("items")
            if not items:
                return {k: (v, mode) for k, v in data.items()}
            files = {}
            for item in items:
                if item["key"] not in data:
                    if ref.get("optional"):
                        continue
                    raise ConfigError(f"couldn't find key {item['key']} in {kind[:-1]} {ns}/{name}")
                files[item.get("path", item["key"])] = (data[item["key"]], int(item.get("mode", mode)))
            return files

        if "secret" in volume:
            return await keys("secrets", volume["secret"], int(volume["secret"].get("defaultMode", 0o644)))
        if "configMap" in volume:
            return await keys("configmaps", volume["configMap"], int(volume["configMap"].get("defaultMode", 0o644)))
        if "projected" not in volume:
            return None
        mode = int(volume["projected"].get("defaultMode", 0o644))
        files: dict[str, tuple[bytes, int]] = {}
        for source in volume["projected"].get("sources") or ():
            if "serviceAccountToken" in source:
                sat = source["serviceAccountToken"]
                path = target / sat.get("path", "token")
                tokens.append(TokenFile(sat.get("audience"), int(sat.get("expirationSeconds", 3600)),
                                        _token_writer(path, mode)))
            elif "secret" in source:
                files.update(await keys("secrets", {"secretName": source["secret"].get("name", ""),
                                                    **source["secret"]}, mode))
            elif "configMap" in source:
                files.update(await keys("configmaps", source["configMap"], mode))
            elif "downwardAPI" in source:  # how kube-apiserver's kube-api-access-* volume gives the namespace
                for item in source["downwardAPI"].get("items") or ():
                    value = _pod_field(pod, str((item.get("fieldRef") or {}).get("fieldPath", "")))
                    files[item["path"]] = (value.encode(), int(item.get("mode", mode)))
        return files

    async def _volumes(self, pod: Obj, container: Obj, root: Path, pod_dir: Path) -> list[TokenFile]:
        spec = pod.get("spec") or {}
        volumes = {v["name"]: v for v in spec.get("volumes") or ()}
        ns = pod["metadata"]["namespace"]
        tokens: list[TokenFile] = []
        for mount in container.get("volumeMounts") or ():
            volume = volumes.get(mount["name"])
            if volume is None:
                raise ConfigError(f'volume "{mount["name"]}" is not declared in the pod spec')
            target = remap(root, mount["mountPath"])
            sub = str(mount.get("subPath") or "").strip("/")
            directory: Path | None = None
            if "emptyDir" in volume:
                directory = pod_dir / "volumes" / mount["name"]
            elif "persistentVolumeClaim" in volume:
                claim = volume["persistentVolumeClaim"].get("claimName", "")
                await self._object(ns, "persistentvolumeclaims", claim, False)
                directory = self._work_dir / "volumes" / ns / claim
            if directory is not None:
                source = directory / sub if sub else directory
                source.mkdir(parents=True, exist_ok=True)
                target.parent.mkdir(parents=True, exist_ok=True)
                if target.is_symlink() or not target.exists():
                    target.unlink(missing_ok=True)
                    target.symlink_to(source, target_is_directory=True)
                continue
            files = await self._volume_files(pod, volume, tokens, target)
            if files is None:
                target.mkdir(parents=True, exist_ok=True)  # a kind not emulated: an empty directory
                continue
            if sub:
                if sub in files:
                    _write_atomically(target, *files[sub])
                continue
            target.mkdir(parents=True, exist_ok=True)
            for name, (content, mode) in files.items():
                _write_atomically(target / name, content, mode)
        if await self._automount(pod, container):
            sa_dir = remap(root, SA_DIR)
            _write_atomically(sa_dir / "namespace", ns.encode())
            _write_atomically(sa_dir / "ca.crt", self._ca or b"")
            tokens.append(TokenFile(None, SA_TOKEN_SECONDS,
                                    lambda token: _write_atomically(sa_dir / "token", token.encode(), 0o644)))
        return tokens

    async def _automount(self, pod: Obj, container: Obj) -> bool:
        spec = pod.get("spec") or {}
        if any(m.get("mountPath", "").rstrip("/") == SA_DIR for m in container.get("volumeMounts") or ()):
            return False
        if spec.get("automountServiceAccountToken") is not None:
            return bool(spec["automountServiceAccountToken"])
        account = await self._object(pod["metadata"]["namespace"], "serviceaccounts",
                                     spec.get("serviceAccountName") or "default", True)
        return (account or {}).get("automountServiceAccountToken") is not False

    async def _keep_tokens(self, pod: Obj, tokens: list[TokenFile]) -> None:
        """Write each token now, then renew it when due (80 % of its lifetime, or 24 h)."""
        while tokens:
            now = time.monotonic()
            for token in tokens:
                if token.due <= now:
                    try:
                        token.write(await self._token(pod, token.audience, token.seconds))
                    except ConfigError as exc:
                        log.info("kubelet: token for %s not renewed: %s", pod["metadata"]["name"], exc)
                    except TRANSIENT as exc:  # the API did not answer: ask again soon, the token still holds
                        log.warning("kubelet: token for %s not renewed (%s), retrying in 5 s", pod["metadata"]["name"],
                                    exc or type(exc).__name__)
                        token.due = time.monotonic() + 5.0
                        continue
                    token.due = time.monotonic() + self._refresh_delay(token.seconds)
            await asyncio.sleep(max(0.0, min(t.due for t in tokens) - time.monotonic()))

    # -- running a pod ---------------------------------------------------------------------------
    async def _again(self, pod: Obj, what: str, exc: BaseException, delays: Iterator[float]) -> bool:
        """After a request lost on its way while setting `pod` up: say so, wait the next delay; False when the
        kubelet is stopping meanwhile (give up), True to ask again."""
        delay = next(delays)
        log.warning("kubelet: pod %s/%s: %s (%s), retrying in %.2gs", pod["metadata"]["namespace"],
                    pod["metadata"]["name"], what, exc or type(exc).__name__, delay)
        await asyncio.sleep(delay)
        return not (self._stopping is not None and self._stopping.is_set())

    async def _run_pod(self, pod: Obj) -> None:
        meta, spec = pod["metadata"], pod.get("spec") or {}
        key = (meta["namespace"], meta["name"])
        pod_dir = self._work_dir / meta["namespace"] / meta["name"]
        root = pod_dir / "root"
        container = (spec.get("containers") or [{}])[0]
        stage = functools.partial(self._stages.__setitem__, meta["uid"])
        stage("binding")
        if not await self._bind(pod):
            return
        stage("making its directory")
        await self._fresh_pod_dir(key, meta["uid"])
        ip = self._ips.allocate()
        self._pod_grace[key] = float(spec.get("terminationGracePeriodSeconds", 30))
        never = spec.get("restartPolicy", "Always") == "Never"
        life = None if never else Life(pod, container, ip, self._pod_grace[key], format_time(utcnow()))
        if life is not None:
            self._lives[key] = life
        self._write_hosts(also=meta["namespace"])
        refresher: asyncio.Task[None] | None = None
        deadline = spec.get("activeDeadlineSeconds")
        watchdog = self._spawn(self._enforce_deadline(pod, float(deadline))) if never and deadline else None
        try:
            if life is not None:
                await self._publish(life)
            else:
                pending: Obj = {"phase": "Pending", "podIP": ip, "podIPs": [{"ip": ip}], "hostIP": self._host_ip,
                                "hostIPs": [{"ip": self._host_ip}]}
                if self._node_mode is None:  # on a real control plane, PodScheduled is the scheduler's
                    pending["conditions"] = [{"type": "PodScheduled", "status": "True",
                                              "lastTransitionTime": format_time(utcnow())}]
                stage("writing its Pending status")
                await self._patch_status(pod, pending)
            stage("reading its configuration (Secrets, ConfigMaps, ServiceAccount)")
            delays = status_retry_delays()
            while True:
                try:
                    if self._podman is not None:
                        check_non_root(pod, container, await self._podman.image_user(str(container.get("image"))))
                    env = await self._environment(pod, container, root, ip)
                    tokens = await self._volumes(pod, container, root, pod_dir)
                    break
                except TRANSIENT as exc:  # the API did not answer: ask again (the pod is not at fault)
                    if not await self._again(pod, "reading its configuration failed", exc, delays):
                        return
                except (ConfigError, ContainerConfigError) as exc:
                    reason = exc.reason if isinstance(exc, ContainerConfigError) else "CreateContainerConfigError"
                    await self._patch_status(pod, {"containerStatuses": [{
                        **_identity(container), "ready": False, "restartCount": 0,
                        "state": {"waiting": {"reason": reason, "message": str(exc)}}}]})
                    if (life is not None and life.stop.is_set()) or meta["uid"] in self._ending | self._expired:
                        return
                    await asyncio.sleep(1.0)
                    if self._stopping is not None and self._stopping.is_set():
                        return
            kubeconfig = pod_dir / "kube" / "kubeconfig" if self._podman is not None else pod_dir / "kubeconfig"
            kubeconfig.parent.mkdir(parents=True, exist_ok=True)
            # On a real control plane the Node authorizer refuses a node a token for an audience none of the pod's
            # volumes names (ServiceAccountNodeAudienceRestriction): a pod without the API's projected token
            # (kube-apiserver injects it unless automountServiceAccountToken is false) gets no kubeconfig token.
            if self._node_mode is None or _projects_api_token(pod):
                tokens.append(TokenFile(None, KUBECONFIG_TOKEN_SECONDS, lambda token: self._write_pod_kubeconfig(
                    kubeconfig, token, meta["namespace"])))
            stage("asking for its tokens")
            delays = status_retry_delays()
            while True:
                try:
                    fresh = await asyncio.gather(*(self._token(pod, t.audience, t.seconds) for t in tokens))
                    break
                except ConfigError as exc:
                    # Refused rather than lost: right after a binding the node authorizer's graph may not know it
                    # yet (403), API priority and fairness may shed the call (429), the ServiceAccount may be
                    # missing for now (404). A node asks again for as long as the pod is its to start; given up
                    # on, the pod stayed Pending for good (its run, and its layer, Running).
                    if not self._still_to_start(meta["uid"]):
                        log.info("kubelet: pod %s/%s not started: %s", meta["namespace"], meta["name"], exc)
                        return
                    stage(f"asking for its tokens, refused: {exc}")
                    if not await self._again(pod, "its tokens were not issued", exc, delays):
                        return
                except TRANSIENT as exc:
                    if not await self._again(pod, "its tokens were not issued", exc, delays):
                        return
            for token, value in zip(tokens, fresh, strict=True):  # in place before the process starts
                token.write(value)
                token.due = time.monotonic() + self._refresh_delay(token.seconds)
            refresher = asyncio.create_task(self._keep_tokens(pod, tokens))
            (root / "dev").mkdir(parents=True, exist_ok=True)
            process_env = self._process_env(pod, container, root, pod_dir, kubeconfig, env)
            argv = [expand(a, process_env)
                    for a in [*(container.get("command") or ()), *(container.get("args") or ())]]
            log_path = self._log_dir / meta["namespace"] / meta["name"] / f"{container.get('name', 'main')}.log"
            log_path.parent.mkdir(parents=True, exist_ok=True)
            cwd = remap(root, container["workingDir"]) if container.get("workingDir") else pod_dir
            runtime_name = None
            if self._podman is not None:
                runtime_name = container_name(pod)
                argv, process_env = self._container_command(pod, container, root, pod_dir, env, runtime_name)
                cwd = pod_dir
            cwd.mkdir(parents=True, exist_ok=True)
            if meta["uid"] in self._ending | self._expired:
                return  # deleted, or past its deadline, while it was being set up: never started
            stage("starting its process")
            if life is not None:
                life.runtime_name = runtime_name
                await self._run_long(life, argv, process_env, cwd, log_path)
            else:
                await self._run_once(pod, container, argv, process_env, cwd, log_path, root, runtime_name)
        finally:
            for task in (refresher, watchdog):
                if task is not None:
                    task.cancel()
                    await asyncio.gather(task, return_exceptions=True)
            self._expired.discard(meta["uid"])  # its final status is written: nothing reads it any more
            self._failed_unstarted.discard(meta["uid"])
            if self._lives.get(key) is life:
                self._lives.pop(key, None)
            if (self._processes.get(key) or ("",))[0] in ("", meta["uid"]):
                self._pod_grace.pop(key, None)
            self._ips.release(ip)

    def _process_env(self, pod: Obj, container: Obj, root: Path, pod_dir: Path, kubeconfig: Path,
                     env: dict[str, str]) -> dict[str, str]:
        meta = pod["metadata"]
        home = pod_dir / "home"
        home.mkdir(parents=True, exist_ok=True)
        process_env = {
            "PATH": os.environ.get("PATH", "/usr/bin:/bin"),
            "HOME": str(home),
            "TMPDIR": str(remap(root, "/tmp")),
            "LANG": os.environ.get("LANG", "C.UTF-8"),
            "KUBECONFIG": str(kubeconfig),
            "BURRITO_LOCAL_ROOT": str(root),
            "BURRITO_LOCAL_HOSTS": str(self.dns_dir / f"{meta['namespace']}.hosts"),
            "HOSTNAME": meta["name"],
            **env,
        }
        # Emulation rule: a HOME or TMPDIR the container sets is a path inside the pod, so under its root.
        for name in ("HOME", "TMPDIR"):
            if name in env and env[name].startswith("/"):
                process_env[name] = str(remap(root, env[name]))
            Path(process_env[name]).mkdir(parents=True, exist_ok=True)
        return process_env

    def _container_command(self, pod: Obj, container: Obj, root: Path, pod_dir: Path, env: dict[str, str],
                           name: str) -> tuple[list[str], dict[str, str]]:
        """`podman run` for the pod's container and podman's environment (runtime "podman"): the volumes the
        kubelet materialized under the pod's root, bind-mounted at their mount paths; no path is remapped (the
        container has its own filesystem, so BURRITO_LOCAL_ROOT is not set)."""
        assert self._podman is not None
        meta = pod["metadata"]
        container_env = {
            "KUBECONFIG": f"{CONTAINER_KUBE_DIR}/kubeconfig",
            "BURRITO_LOCAL_HOSTS": f"{CONTAINER_DNS_DIR}/{meta['namespace']}.hosts",
            "HOSTNAME": meta["name"],
            **env,
        }
        args = [expand(a, container_env) for a in container.get("args") or ()]
        command = [expand(a, container_env) for a in container.get("command") or ()]
        spec_container = {**container, "command": command} if command else container
        argv = run_argv(self._podman.binary, name, pod, spec_container, sorted(container_env),
                        self._container_mounts(pod, container, root, pod_dir), args)
        return argv, podman_env(os.environ, container_env)

    def _container_mounts(self, pod: Obj, container: Obj, root: Path, pod_dir: Path) -> list[Mount]:
        spec = pod.get("spec") or {}
        volumes = {v["name"]: v for v in spec.get("volumes") or ()}
        mounts = [Mount(str(pod_dir / "kube"), CONTAINER_KUBE_DIR, True),
                  Mount(str(self.dns_dir), CONTAINER_DNS_DIR, True)]
        for mount in container.get("volumeMounts") or ():
            volume = volumes[mount["name"]]
            if "emptyDir" in volume or "persistentVolumeClaim" in volume:
                # The symlink _volumes made points at the volume's directory (its subPath resolved); emptyDirs are
                # 0777 on a node.
                source = remap(root, mount["mountPath"]).resolve()
                source.chmod(0o777)
            else:
                source = remap(root, mount["mountPath"])
            mounts.append(Mount(str(source), mount["mountPath"], bool(mount.get("readOnly"))))
        sa_dir = remap(root, SA_DIR)
        if sa_dir.is_dir() and not any(m.target.rstrip("/") == SA_DIR for m in mounts):
            mounts.append(Mount(str(sa_dir), SA_DIR, True))
        message_path = container.get("terminationMessagePath") or "/dev/termination-log"
        message_file = remap(root, message_path)
        message_file.parent.mkdir(parents=True, exist_ok=True)
        message_file.touch()
        message_file.chmod(0o666)  # the container's user writes it, whoever that is
        mounts.append(Mount(str(message_file), message_path))
        return mounts

    def _write_pod_kubeconfig(self, path: Path, token: str, namespace: str) -> None:
        config = {
            "apiVersion": "v1",
            "kind": "Config",
            "current-context": "pod",
            "clusters": [{"name": "local", "cluster": {
                "server": self._server,
                **({"certificate-authority-data": base64.b64encode(self._ca).decode()} if self._ca else {})}}],
            "users": [{"name": "pod", "user": {"token": token}}],
            "contexts": [{"name": "pod", "context": {"cluster": "local", "user": "pod", "namespace": namespace}}],
        }
        # JSON, which is YAML: the runner reads it without PyYAML's parser (docs/architecture.md §9).
        _write_atomically(path, json.dumps(config, indent=2).encode())

    async def _run_once(self, pod: Obj, container: Obj, argv: list[str], process_env: dict[str, str], cwd: Path,
                        log_path: Path, root: Path, runtime_name: str | None = None) -> None:
        """A `restartPolicy: Never` pod (a runner): one process, then Succeeded or Failed."""
        meta = pod["metadata"]
        key = (meta["namespace"], meta["name"])
        started = format_time(utcnow())
        with log_path.open("ab", buffering=0) as output:
            try:
                process = await asyncio.create_subprocess_exec(
                    *argv,
                    env=process_env,
                    cwd=cwd,
                    stdout=output,
                    stderr=asyncio.subprocess.STDOUT,
                    start_new_session=True,
                )
            except (OSError, ValueError) as exc:
                await self._finish(pod, container, 128, "StartError", str(exc), started)
                return
            self._processes[key] = (meta["uid"], process)
            if runtime_name is not None:
                self._containers[process.pid] = runtime_name
            if meta["uid"] in self._ending | self._expired:  # deleted or past its deadline while it was started
                self._spawn(self._terminate(key, meta["uid"]))
            await self._patch_status(
                pod,
                {
                    "phase": "Failed" if meta["uid"] in self._failed_unstarted else "Running",  # never out of Failed
                    "startTime": started,
                    "containerStatuses": [
                        {
                            **_identity(container),
                            "ready": True,
                            "restartCount": 0,
                            "state": {"running": {"startedAt": started}},
                        }
                    ],
                },
            )
            code = exit_code(await process.wait())
            await end_group(process.pid)
            await self._container_gone(process)
        if (self._processes.get(key) or ("",))[0] == meta["uid"]:
            self._processes.pop(key, None)
        message_file = remap(root, container.get("terminationMessagePath") or "/dev/termination-log")
        message = message_file.read_text()[-4096:] if message_file.exists() else ""
        if not message and code != 0 and container.get("terminationMessagePolicy") == "FallbackToLogsOnError":
            message = "".join(log_path.read_text(errors="replace").splitlines(keepends=True)[-20:])[-4096:]
        await self._finish(pod, container, code, "Completed" if code == 0 else "Error", message, started)

    async def _enforce_deadline(self, pod: Obj, seconds: float) -> None:
        """At `activeDeadlineSeconds` after the pod was taken up, its container is stopped as on a deletion (the
        pod's grace period), and `_finish` writes `Failed` with the kubelet's reason and message once its process
        is gone. Not before: a kubelet never reports a terminal phase while a container may still run (the
        kubelet's status manager holds the phase back, `mergePodStatus`). A pod whose process never started
        could have no running container: it is `Failed` at once."""
        await asyncio.sleep(seconds)
        meta = pod["metadata"]
        key, uid = (meta["namespace"], meta["name"]), meta["uid"]
        if uid in self._ending or uid in self._confirmed:
            return  # being deleted already: the deletion stops it
        self._expired.add(uid)
        self._stages[uid] = "past its activeDeadlineSeconds: stopping it"
        if (self._processes.get(key) or ("",))[0] != uid:
            self._failed_unstarted.add(uid)
            # A task of its own: a pod that never started ends its `_run_pod` (which cancels this watchdog) as
            # soon as it sees the deadline passed, and must not take this write with it.
            await asyncio.shield(self._spawn(self._patch_status(pod, {"phase": "Failed", **DEADLINE_EXCEEDED})))
        await self._terminate(key, uid)

    async def _finish(self, pod: Obj, container: Obj, code: int, reason: str, message: str, started: str) -> None:
        terminated = {"exitCode": code, "reason": reason, "startedAt": started, "finishedAt": format_time(utcnow())}
        if message:
            terminated["message"] = message
        expired = pod["metadata"]["uid"] in self._expired  # stopped at its deadline: Failed whatever its exit code
        await self._patch_status(
            pod,
            {
                "phase": "Succeeded" if code == 0 and not expired else "Failed",
                **(DEADLINE_EXCEEDED if expired else {}),
                "containerStatuses": [
                    {
                        **_identity(container),
                        "ready": False,
                        "restartCount": 0,
                        "state": {"terminated": terminated},
                    }
                ],
            },
        )

    # -- long-running pods -----------------------------------------------------------------------
    async def _publish(self, life: Life) -> None:
        """Write the pod's whole status (serialised per pod, so the last write carries the latest state)."""
        async with life.lock:
            now = format_time(utcnow())
            running = "running" in life.state
            wanted = {"PodScheduled": True, "Initialized": True, "ContainersReady": life.ready, "Ready": life.ready}
            if self._node_mode is not None:  # the scheduler's condition
                del wanted["PodScheduled"]
            conditions = []
            for kind, value in wanted.items():
                truth = "True" if value else "False"
                before = life.transitions.get(kind)
                if before is None or before[0] != truth:
                    life.transitions[kind] = (truth, now)
                conditions.append({"type": kind, "status": truth, "lastProbeTime": None,
                                   "lastTransitionTime": life.transitions[kind][1]})
            container: Obj = {**_identity(life.container), "ready": life.ready, "started": running,
                              "restartCount": life.restarts, "state": life.state, "lastState": life.last_state}
            if life.process is not None:
                container["containerID"] = f"local://{life.process.pid}"
            status: Obj = {"phase": life.phase, "podIP": life.ip, "podIPs": [{"ip": life.ip}],
                           "hostIP": self._host_ip, "hostIPs": [{"ip": self._host_ip}], "startTime": life.started,
                           "conditions": conditions,
                           "containerStatuses": [container]}
            if not life.stop.is_set():
                await self._patch_status(life.pod, status)

    async def _run_long(self, life: Life, argv: list[str], env: dict[str, str], cwd: Path, log_path: Path) -> None:
        """Run, and restart in place after the back-off, until the pod is deleted (or, OnFailure, succeeds)."""
        policy = (life.pod.get("spec") or {}).get("restartPolicy", "Always")
        backoff_steps = 0
        base, cap = self._backoff
        while not life.stop.is_set():
            started, began = format_time(utcnow()), time.monotonic()
            probes: list[asyncio.Task[None]] = []
            try:
                with log_path.open("ab", buffering=0) as output:
                    try:
                        life.process = await asyncio.create_subprocess_exec(
                            *argv, env=env, cwd=cwd, stdout=output, stderr=asyncio.subprocess.STDOUT,
                            start_new_session=True)
                        if life.runtime_name is not None:
                            self._containers[life.process.pid] = life.runtime_name
                        code, reason, message = None, "", ""
                    except (OSError, ValueError) as exc:
                        life.process = None
                        code, reason, message = 128, "StartError", str(exc)
                    if life.process is not None and life.stop.is_set():  # deleted while it was being started
                        self._spawn(self._kill(life.process, life.grace))
                    if life.process is not None:
                        life.phase, life.state = "Running", {"running": {"startedAt": started}}
                        readiness = life.container.get("readinessProbe")
                        liveness = life.container.get("livenessProbe")
                        life.ready = readiness is None
                        await self._publish(life)
                        if readiness:
                            probes.append(asyncio.create_task(self._probe_loop(life, readiness, "readiness")))
                        if liveness:
                            probes.append(asyncio.create_task(self._probe_loop(life, liveness, "liveness")))
                        code = exit_code(await life.process.wait())
                        reason = "Completed" if code == 0 else "Error"
            finally:  # also when the kubelet stops (cancelled): no probe outlives its container
                for task in probes:
                    task.cancel()
                await asyncio.gather(*probes, return_exceptions=True)
            if life.process is not None:
                await end_group(life.process.pid)
                await self._container_gone(life.process)
            if life.stop.is_set():
                return
            finished = {"exitCode": code, "reason": reason, "startedAt": started,
                        "finishedAt": format_time(utcnow())}
            if message:
                finished["message"] = message
            life.ready = False
            if policy == "OnFailure" and code == 0:
                life.phase, life.state = "Succeeded", {"terminated": finished}
                await self._publish(life)
                return
            life.last_state = {"terminated": finished}
            if time.monotonic() - began >= RESET_BACKOFF_AFTER:
                backoff_steps = 0
            delay = restart_delay(backoff_steps, base, cap)
            backoff_steps += 1
            name = life.container.get("name", "main")
            meta = life.pod["metadata"]
            life.state = {"waiting": {"reason": "CrashLoopBackOff", "message": (
                f"back-off {delay:g}s restarting failed container={name} pod={meta['name']}_{meta['namespace']}"
                f"({meta['uid']})")}}
            await self._publish(life)
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(life.stop.wait(), delay)
            life.restarts += 1

    async def _probe_loop(self, life: Life, probe: Obj, kind: str) -> None:
        period = float(probe.get("periodSeconds", 10))
        success_needed = int(probe.get("successThreshold", 1))
        failure_limit = int(probe.get("failureThreshold", 3))
        successes = failures = 0
        await asyncio.sleep(float(probe.get("initialDelaySeconds", 0)))
        while True:
            ok = await self._probe_once(life, probe)
            successes, failures = (successes + 1, 0) if ok else (0, failures + 1)
            if kind == "readiness":
                if ok and successes >= success_needed and not life.ready:
                    life.ready = True
                    await self._publish(life)
                elif not ok and failures >= failure_limit and life.ready:
                    life.ready = False
                    await self._publish(life)
            elif failures >= failure_limit and life.process is not None:
                log.info("kubelet: liveness probe of %s failed %d times: restarting", life.pod["metadata"]["name"],
                         failures)
                await self._kill(life.process, life.grace)
                return
            await asyncio.sleep(period)

    async def _probe_once(self, life: Life, probe: Obj) -> bool:
        timeout = float(probe.get("timeoutSeconds", 1))

        def port_of(value: Any) -> int:
            if isinstance(value, int) or str(value).isdigit():
                return int(value)
            found = next((p["containerPort"] for p in life.container.get("ports") or () if p.get("name") == value),
                         None)
            if found is None:
                raise ValueError(f"no container port named {value!r}")
            return int(found)

        try:
            if "httpGet" in probe:
                get = probe["httpGet"]
                scheme = str(get.get("scheme", "HTTP")).lower()
                url = f"{scheme}://{get.get('host') or life.ip}:{port_of(get.get('port'))}{get.get('path', '/')}"
                headers = {h["name"]: h["value"] for h in get.get("httpHeaders") or ()}
                assert self._probe_http is not None
                async with self._probe_http.get(url, headers=headers, timeout=aiohttp.ClientTimeout(total=timeout),
                                                allow_redirects=False, ssl=False) as response:
                    return 200 <= response.status < 400
            if "tcpSocket" in probe:
                sock = probe["tcpSocket"]
                _, writer = await asyncio.wait_for(
                    asyncio.open_connection(sock.get("host") or life.ip, port_of(sock.get("port"))), timeout)
                writer.close()
                return True
        except (aiohttp.ClientError, OSError, TimeoutError, ValueError):
            return False
        log.warning("kubelet: probe kind of %s not emulated (httpGet and tcpSocket are): counted as a success",
                    life.pod["metadata"]["name"])
        return True

    # -- termination -----------------------------------------------------------------------------
    async def _kill(self, process: asyncio.subprocess.Process, grace: float) -> None:
        """SIGTERM to the container's process group, SIGKILL to whatever of it is left after the grace
        period (or as soon as the main process is gone), and wait until the whole group is gone. A container
        (runtime "podman") is stopped by podman: the stop signal to its PID 1, SIGKILL after the grace period."""
        name = self._containers.get(process.pid)
        if name is not None and self._podman is not None:
            if process.returncode is None:
                await self._podman.stop(name, grace)
            await process.wait()
        if process.returncode is None:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(process.pid, signal.SIGTERM)
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(process.wait(), grace)
        await end_group(process.pid)
        await process.wait()

    async def _container_gone(self, process: asyncio.subprocess.Process) -> None:
        """After a `podman run` ended: remove its container if anything of it is left (--rm normally did)."""
        name = self._containers.pop(process.pid, None)
        if name is not None and self._podman is not None:
            await self._podman.remove(name)

    async def _terminate(self, key: tuple[str, str], uid: str | None = None, forget: bool = False,
                         grace: float | None = None) -> None:
        """Stop a pod's process; `forget` (the pod was deleted): its emptyDirs go too, as on a node. `grace`: the
        deletion's grace period (default: the pod's terminationGracePeriodSeconds), capped by `grace_seconds`."""
        if grace is None:
            grace = min(self._pod_grace.get(key, self._grace), self._grace)
        life = self._lives.get(key)
        if life is not None and (uid is None or life.pod["metadata"]["uid"] == uid):
            life.stop.set()
            if life.process is not None:
                await self._kill(life.process, grace)
        else:
            entry = self._processes.get(key)
            if entry is not None and (uid is None or entry[0] == uid):
                self._processes.pop(key, None)
                await self._kill(entry[1], grace)
        if forget and uid is not None:
            await self._remove_pod_dir(key, uid)

    # -- a pod's files ---------------------------------------------------------------------------
    # A pod's directory (root, emptyDirs, HOME, kubeconfig) and its log belong to one pod, named by the
    # UID in its `uid` file: a pod recreated under the same name starts with an empty /tmp and an empty
    # log, as a new container filesystem would; a deleted pod's files go with it. Setting up and removing
    # take the name's lock, so the cleanup of a deleted pod never removes its successor's files.
    def _dir_lock(self, key: tuple[str, str]) -> asyncio.Lock:
        return self._dir_locks.setdefault(key, asyncio.Lock())

    def _owner(self, key: tuple[str, str]) -> str | None:
        try:
            return (self.pod_root(*key).parent / "uid").read_text()
        except OSError:
            return None

    async def _fresh_pod_dir(self, key: tuple[str, str], uid: str) -> None:
        async with self._dir_lock(key):
            pod_dir = self.pod_root(*key).parent
            if self._owner(key) == uid:
                return  # the same pod (a restarted kubelet): keep its files
            await asyncio.to_thread(shutil.rmtree, pod_dir, True)
            await asyncio.to_thread(shutil.rmtree, self._log_dir / key[0] / key[1], True)
            pod_dir.mkdir(parents=True, exist_ok=True)
            (pod_dir / "uid").write_text(uid)

    async def _remove_pod_dir(self, key: tuple[str, str], uid: str) -> None:
        async with self._dir_lock(key):
            if self._owner(key) == uid:
                await asyncio.to_thread(shutil.rmtree, self.pod_root(*key).parent, True)

    def pod_root(self, namespace: str, name: str) -> Path:
        """The directory a pod's absolute paths live under (its `BURRITO_LOCAL_ROOT`)."""
        return self._work_dir / namespace / name / "root"
