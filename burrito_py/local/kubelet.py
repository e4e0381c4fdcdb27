"""A local kubelet: runs Pods as local processes, talking to the API only over HTTP, like a node.

The image is ignored: a pod's first container `command` + `args` runs on this machine. Volumes are
written under a per-pod root directory; `BURRITO_LOCAL_ROOT` tells the process where that root is
(`burrito_py.local.paths.pod_path` maps absolute pod paths onto it). Only `restartPolicy: Never`.
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import json
import logging
import os
import re
import signal
import ssl
import threading
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import aiohttp
import yaml

from burrito_py.timeutil import format_time, utcnow

log = logging.getLogger(__name__)
Obj = dict[str, Any]
TERMINAL = ("Succeeded", "Failed")
_VAR = re.compile(r"\$\(([A-Za-z_][A-Za-z0-9_]*)\)")


class ConfigError(Exception):
    """A referenced Secret or ConfigMap key is missing: the pod waits, as on a real node."""


def expand(text: str, env: Mapping[str, str]) -> str:
    """Kubernetes `$(VAR)` expansion; unknown references stay as written."""
    return _VAR.sub(lambda m: env.get(m.group(1), m.group(0)), text)


def _identity(container: Mapping[str, Any]) -> Obj:
    """Fields every client expects in a container status (the image is not used here)."""
    return {"name": container.get("name", "main"), "image": container.get("image", ""), "imageID": ""}


def remap(root: Path, path: str) -> Path:
    return root / path.lstrip("/")


class LocalKubelet:
    def __init__(
        self,
        kubeconfig: Path,
        pod_log_dir: Path,
        work_dir: Path,
        node_name: str = "burrito-py-local",
        grace_seconds: float = 5.0,
    ) -> None:
        config = yaml.safe_load(kubeconfig.read_text())
        context = next(c["context"] for c in config["contexts"] if c["name"] == config["current-context"])
        cluster = next(c["cluster"] for c in config["clusters"] if c["name"] == context["cluster"])
        self._server = cluster["server"]
        self._ca_data: str | None = cluster.get("certificate-authority-data")
        # The kubelet calls the API with the kubeconfig's credential (the emulator's admin): a real kubelet
        # is `system:node:<name>`, limited by the Node authorizer, which the emulator does not model.
        user = next((u.get("user") or {} for u in config.get("users") or () if u["name"] == context.get("user")), {})
        self._headers = {"Authorization": f"Bearer {user['token']}"} if user.get("token") else {}
        self._log_dir, self._work_dir, self._node = pod_log_dir, work_dir, node_name
        self._grace = grace_seconds
        self._processes: dict[tuple[str, str], asyncio.subprocess.Process] = {}
        self._started: set[str] = set()
        self._tasks: set[asyncio.Task[None]] = set()
        self._loop: asyncio.AbstractEventLoop | None = None
        self._thread: threading.Thread | None = None
        self._stopping: asyncio.Event | None = None
        self._http: aiohttp.ClientSession | None = None

    # -- lifecycle -------------------------------------------------------------------------------
    def start(self) -> None:
        ready = threading.Event()

        def main() -> None:
            loop = asyncio.new_event_loop()
            self._loop = loop
            self._stopping = asyncio.Event()
            loop.call_soon(ready.set)
            loop.run_until_complete(self._run())
            loop.close()

        self._thread = threading.Thread(target=main, name="burrito-py-kubelet", daemon=True)
        self._thread.start()
        ready.wait()

    def stop(self) -> None:
        if self._loop is None or self._stopping is None:
            return
        self._loop.call_soon_threadsafe(self._stopping.set)
        if self._thread is not None:
            self._thread.join(self._grace + 10)

    def __enter__(self) -> LocalKubelet:
        self.start()
        return self

    def __exit__(self, *_: object) -> None:
        self.stop()

    async def _run(self) -> None:
        assert self._stopping is not None
        ssl_context = (ssl.create_default_context(cadata=base64.b64decode(self._ca_data).decode())
                       if self._ca_data else None)
        connector = aiohttp.TCPConnector(ssl=ssl_context) if ssl_context is not None else None
        async with aiohttp.ClientSession(self._server, headers=self._headers, connector=connector) as http:
            self._http = http
            watch = asyncio.create_task(self._watch_forever())
            await self._stopping.wait()
            watch.cancel()
            for key in list(self._processes):
                await self._terminate(key)
            for task in list(self._tasks):
                task.cancel()
            await asyncio.gather(watch, *self._tasks, return_exceptions=True)

    async def _watch_forever(self) -> None:
        assert self._http is not None
        rv = ""
        while True:
            try:
                if not rv:
                    async with self._http.get("/api/v1/pods") as response:
                        listing = await response.json()
                    rv = listing["metadata"]["resourceVersion"]
                    for pod in listing["items"]:
                        await self._on_pod("ADDED", pod, startup=True)
                params = {"watch": "true", "resourceVersion": rv, "timeoutSeconds": "300"}
                async with self._http.get("/api/v1/pods", params=params, timeout=aiohttp.ClientTimeout(None)) as resp:
                    async for line in resp.content:
                        event = json.loads(line)
                        if event["type"] == "ERROR":
                            rv = ""  # 410 Expired: list again
                            break
                        rv = event["object"]["metadata"]["resourceVersion"]
                        await self._on_pod(event["type"], event["object"])
            except asyncio.CancelledError:
                raise
            except Exception as exc:  # the API went away for a moment: retry
                log.warning("kubelet watch failed: %s", exc)
                await asyncio.sleep(0.5)

    async def _on_pod(self, event_type: str, pod: Obj, startup: bool = False) -> None:
        meta = pod["metadata"]
        key = (meta["namespace"], meta["name"])
        if event_type == "DELETED" or meta.get("deletionTimestamp"):
            await self._terminate(key)
            return
        phase = (pod.get("status") or {}).get("phase")
        if meta["uid"] in self._started or phase in TERMINAL:
            return
        if startup and phase == "Running":
            await self._patch_status(
                pod,
                {"phase": "Failed", "reason": "NodeLost", "message": "the local kubelet restarted while the pod ran"},
            )
            return
        self._started.add(meta["uid"])
        task = asyncio.create_task(self._run_pod(pod))
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    # -- running a pod ---------------------------------------------------------------------------
    async def _api(self, method: str, path: str, body: Any = None, content_type: str = "application/json") -> Any:
        assert self._http is not None
        async with self._http.request(
            method, path, data=None if body is None else json.dumps(body), headers={"Content-Type": content_type}
        ) as response:
            data = await response.json()
            if response.status >= 400:
                raise ConfigError(data.get("message", f"HTTP {response.status}"))
            return data

    async def _patch_status(self, pod: Obj, status: Obj) -> None:
        meta = pod["metadata"]
        with contextlib.suppress(ConfigError):
            await self._api(
                "PATCH",
                f"/api/v1/namespaces/{meta['namespace']}/pods/{meta['name']}/status",
                {"status": status},
                "application/merge-patch+json",
            )

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

    async def _lookup(self, namespace: str, kind: str, name: str, key: str | None, optional: bool) -> Any:
        try:
            obj = await self._api("GET", f"/api/v1/namespaces/{namespace}/{kind}/{name}")
        except ConfigError:
            if optional:
                return None
            raise ConfigError(f'{kind[:-1]} "{name}" not found') from None
        data = obj.get("data") or {}
        if kind == "secrets":
            data = {k: base64.b64decode(v).decode() for k, v in data.items()}
        if key is None:
            return data
        if key not in data and not optional:
            raise ConfigError(f"couldn't find key {key} in {kind[:-1]} {namespace}/{name}")
        return data.get(key)

    async def _environment(self, pod: Obj, container: Obj, root: Path) -> dict[str, str]:
        meta, spec = pod["metadata"], pod.get("spec") or {}
        ns = meta["namespace"]
        env: dict[str, str] = {}
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
        }
        for item in container.get("env") or ():
            source = item.get("valueFrom") or {}
            if "value" in item or not source:
                env[item["name"]] = expand(str(item.get("value", "")), env)
            elif "fieldRef" in source:
                env[item["name"]] = fields.get(source["fieldRef"].get("fieldPath", ""), "")
            else:
                ref = source.get("secretKeyRef") or source.get("configMapKeyRef") or {}
                kind = "secrets" if "secretKeyRef" in source else "configmaps"
                value = await self._lookup(ns, kind, ref.get("name", ""), ref.get("key"), bool(ref.get("optional")))
                if value is not None:
                    env[item["name"]] = value
        return env

    async def _volumes(self, pod: Obj, container: Obj, root: Path) -> None:
        volumes = {v["name"]: v for v in (pod.get("spec") or {}).get("volumes") or ()}
        ns = pod["metadata"]["namespace"]
        for mount in container.get("volumeMounts") or ():
            volume = volumes.get(mount["name"], {})
            target = remap(root, mount["mountPath"]) / mount.get("subPath", "")
            files: dict[str, str] = {}
            if "projected" in volume:
                for source in volume["projected"].get("sources") or ():
                    if "serviceAccountToken" in source:
                        sat = source["serviceAccountToken"]
                        files[sat.get("path", "token")] = await self._token(
                            pod, sat.get("audience"), int(sat.get("expirationSeconds", 3600))
                        )
            elif "secret" in volume:
                files = (
                    await self._lookup(
                        ns,
                        "secrets",
                        volume["secret"].get("secretName", ""),
                        None,
                        bool(volume["secret"].get("optional")),
                    )
                    or {}
                )
            elif "configMap" in volume:
                files = (
                    await self._lookup(
                        ns,
                        "configmaps",
                        volume["configMap"].get("name", ""),
                        None,
                        bool(volume["configMap"].get("optional")),
                    )
                    or {}
                )
            target.mkdir(parents=True, exist_ok=True)
            for name, content in files.items():
                (target / name).write_text(content)

    async def _run_pod(self, pod: Obj) -> None:
        meta, spec = pod["metadata"], pod.get("spec") or {}
        key = (meta["namespace"], meta["name"])
        pod_dir = self._work_dir / meta["namespace"] / meta["name"]
        root = pod_dir / "root"
        if spec.get("restartPolicy", "Always") != "Never":
            await self._patch_status(
                pod,
                {
                    "phase": "Failed",
                    "reason": "Unsupported",
                    "message": "the local kubelet runs only restartPolicy: Never pods",
                },
            )
            return
        container = (spec.get("containers") or [{}])[0]
        await self._patch_status(
            pod,
            {
                "phase": "Pending",
                "conditions": [{"type": "PodScheduled", "status": "True", "lastTransitionTime": format_time(utcnow())}],
            },
        )
        while True:
            try:
                env = await self._environment(pod, container, root)
                await self._volumes(pod, container, root)
                break
            except ConfigError as exc:
                await self._patch_status(
                    pod,
                    {
                        "containerStatuses": [
                            {
                                **_identity(container),
                                "ready": False,
                                "state": {"waiting": {"reason": "CreateContainerConfigError", "message": str(exc)}},
                            }
                        ]
                    },
                )
                await asyncio.sleep(1.0)
                if key not in self._processes and self._stopping is not None and self._stopping.is_set():
                    return
        (root / "dev").mkdir(parents=True, exist_ok=True)
        token = await self._token(pod, None, 3600)
        kubeconfig = pod_dir / "kubeconfig"
        kubeconfig.write_text(
            yaml.safe_dump(
                {
                    "apiVersion": "v1",
                    "kind": "Config",
                    "current-context": "pod",
                    "clusters": [{"name": "local", "cluster": {
                        "server": self._server,
                        **({"certificate-authority-data": self._ca_data} if self._ca_data else {})}}],
                    "users": [{"name": "pod", "user": {"token": token}}],
                    "contexts": [
                        {"name": "pod", "context": {"cluster": "local", "user": "pod", "namespace": meta["namespace"]}}
                    ],
                }
            )
        )
        home = pod_dir / "home"
        home.mkdir(parents=True, exist_ok=True)
        process_env = {
            "PATH": os.environ.get("PATH", "/usr/bin:/bin"),
            "HOME": str(home),
            "LANG": os.environ.get("LANG", "C.UTF-8"),
            "KUBECONFIG": str(kubeconfig),
            "BURRITO_LOCAL_ROOT": str(root),
            "HOSTNAME": meta["name"],
            **env,
        }
        argv = [expand(a, process_env) for a in [*(container.get("command") or ()), *(container.get("args") or ())]]
        log_path = self._log_dir / meta["namespace"] / meta["name"] / f"{container.get('name', 'main')}.log"
        log_path.parent.mkdir(parents=True, exist_ok=True)
        cwd = remap(root, container["workingDir"]) if container.get("workingDir") else pod_dir
        cwd.mkdir(parents=True, exist_ok=True)
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
            self._processes[key] = process
            await self._patch_status(
                pod,
                {
                    "phase": "Running",
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
            code = await process.wait()
        self._processes.pop(key, None)
        message_file = remap(root, container.get("terminationMessagePath") or "/dev/termination-log")
        message = message_file.read_text()[-4096:] if message_file.exists() else ""
        if not message and code != 0 and container.get("terminationMessagePolicy") == "FallbackToLogsOnError":
            message = "".join(log_path.read_text(errors="replace").splitlines(keepends=True)[-20:])[-4096:]
        await self._finish(pod, container, code, "Completed" if code == 0 else "Error", message, started)

    async def _finish(self, pod: Obj, container: Obj, code: int, reason: str, message: str, started: str) -> None:
        terminated = {"exitCode": code, "reason": reason, "startedAt": started, "finishedAt": format_time(utcnow())}
        if message:
            terminated["message"] = message
        await self._patch_status(
            pod,
            {
                "phase": "Succeeded" if code == 0 else "Failed",
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

    async def _terminate(self, key: tuple[str, str]) -> None:
        process = self._processes.pop(key, None)
        if process is None or process.returncode is not None:
            return
        with contextlib.suppress(ProcessLookupError):
            os.killpg(process.pid, signal.SIGTERM)
        try:
            await asyncio.wait_for(process.wait(), self._grace)
        except TimeoutError:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(process.pid, signal.SIGKILL)
            await process.wait()
