"""A one-node cluster in a private network namespace: the real control plane, the local kubelet as its Node,
and the pods, with routable addresses on the namespace's own loopback device (docs/architecture.md §22.3).

Why: kube-apiserver refuses loopback addresses in EndpointSlices and will not proxy to them, so the
emulator's 127.10.0.0/16 pod addresses cannot serve on a real control plane. Inside
`unshare --user --map-root-user --net --pid --mount-proc` the namespace's `lo` gets 10.244.0.1/16 (the node,
and the pods from 10.244.1.0/24) and 10.96.0.1/16 (Service cluster IPs): Linux treats the whole ranges as
local, as it treats 127/8, so every pod has its own global-unicast address and no traffic leaves the
namespace. Unprivileged user namespaces suffice (no root needed where the kernel allows them).

The host reaches the API server through two relays over a Unix socket (a file, so visible on both sides):
inside, `<workdir>/api.sock` → 10.244.0.1:6443; outside, 127.0.0.1:<free port> → `api.sock`. The serving
certificate names 127.0.0.1, so the host's kubeconfig verifies it as usual.

`NodeNamespace(workdir, binary).start()` runs `python -m burrito_local.netns <workdir> <binary>` in the
namespaces and waits for its `ready` line; `stop()` sends SIGTERM to it (the kubelet stops the pods, the
control plane stops cleanly) and `--kill-child` ends whatever is left if this process dies first.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import shutil
import signal
import ssl
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import IO, TYPE_CHECKING, Any, Self

if TYPE_CHECKING:
    import httpx

    from burrito_local.controlplane import AdminClient

NODE_ADDRESS = "10.244.0.1"
NODE_NETWORK = "10.244.0.0/16"
POD_CIDR = "10.244.1.0/24"
SERVICE_CIDR = "10.96.0.0/16"
SERVICE_ADDRESS = "10.96.0.1/16"  # on lo: the kubelet's Service proxy listens on each cluster IP
API_PORT = 6443
NODE_NAME = "burrito-py-node"
SETPRIV = ["setpriv", "--pdeathsig", "SIGKILL"]
UNSHARE = ["unshare", "--user", "--map-root-user", "--net", "--pid", "--fork", "--mount-proc", "--kill-child"]


class NamespaceError(Exception):
    """The namespaces could not be made or the cluster in them did not start; one line naming the cause."""


def probe() -> str | None:
    """None when this machine lets us make the namespaces; else the reason (for a clear error)."""
    if shutil.which("unshare") is None or shutil.which("ip") is None:
        return "unshare (util-linux) and ip (iproute2) are needed for the node's network namespace"
    result = subprocess.run([*UNSHARE, "ip", "link", "set", "lo", "up"], capture_output=True, text=True,
                            check=False, timeout=30)
    if result.returncode != 0:
        return f"cannot create a user+network namespace here: {result.stderr.strip() or result.returncode}"
    return None


# -- relays ---------------------------------------------------------------------------------------------
async def _pipe(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
    with contextlib.suppress(ConnectionError, OSError):
        while data := await reader.read(65536):
            writer.write(data)
            await writer.drain()
    with contextlib.suppress(ConnectionError, OSError):
        writer.close()


async def _splice(client: tuple[asyncio.StreamReader, asyncio.StreamWriter],
                  upstream: tuple[asyncio.StreamReader, asyncio.StreamWriter]) -> None:
    pipes = [asyncio.ensure_future(_pipe(client[0], upstream[1])), asyncio.ensure_future(_pipe(upstream[0], client[1]))]
    try:
        await asyncio.wait(pipes)
    finally:
        for pipe in pipes:
            pipe.cancel()
        await asyncio.wait(pipes)


class Relay:
    """Bytes both ways between a listener and a target (TCP ↔ Unix socket), in a thread of its own: TLS
    goes through untouched, end to end between kubectl and kube-apiserver."""

    def __init__(self, listen: str | tuple[str, int], target: str | tuple[str, int] | None,
                 preface: bytes = b"") -> None:
        """`target` None: each connection names its own in a first line `host:port` (the namespace's side of
        `NodeNamespace.forward`, which cannot know the Services' addresses in advance); `preface`: bytes sent
        upstream first (that line, from the host's side)."""
        self._listen, self._target, self._preface = listen, target, preface
        self._loop = asyncio.new_event_loop()
        self._server: asyncio.base_events.Server | None = None
        self.port = 0

    async def _handle(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            target = self._target
            if target is None:
                host, _, port = (await asyncio.wait_for(reader.readline(), 10)).decode().strip().rpartition(":")
                target = (host, int(port))
            if isinstance(target, str):
                upstream = await asyncio.open_unix_connection(target)
            else:
                upstream = await asyncio.open_connection(*target)
            if self._preface:
                upstream[1].write(self._preface)
        except (OSError, ValueError, TimeoutError):
            writer.close()
            return
        try:
            await _splice((reader, writer), upstream)
        except asyncio.CancelledError:  # stop() cancels open connections: not an error
            for end in (writer, upstream[1]):
                end.close()

    async def _start(self) -> None:
        if isinstance(self._listen, str):
            self._server = await asyncio.start_unix_server(self._handle, self._listen)
            os.chmod(self._listen, 0o600)  # the owner's only: the socket reaches inside the namespace
        else:
            self._server = await asyncio.start_server(self._handle, *self._listen)
            self.port = int(self._server.sockets[0].getsockname()[1])

    def start(self) -> Self:
        threading.Thread(target=self._loop.run_forever, name="burrito-py-relay", daemon=True).start()
        asyncio.run_coroutine_threadsafe(self._start(), self._loop).result(10)
        return self

    def stop(self) -> None:
        async def close() -> None:
            if self._server is not None:
                self._server.close()
            current = asyncio.current_task()
            open_connections = [task for task in asyncio.all_tasks() if task is not current]
            for task in open_connections:
                task.cancel()
            # Let each one see its cancellation before the loop stops (else asyncio logs them as destroyed).
            await asyncio.gather(*open_connections, return_exceptions=True)

        with contextlib.suppress(Exception):
            asyncio.run_coroutine_threadsafe(close(), self._loop).result(5)
        self._loop.call_soon_threadsafe(self._loop.stop)


# -- the host's side ------------------------------------------------------------------------------------
class NodeNamespace:
    """The control plane, the kubelet as its Node and the pods, in their own namespaces (see the module)."""

    def __init__(self, workdir: Path, binary: Path, ready_timeout: float = 240.0) -> None:
        self.workdir = workdir
        self.binary = binary
        self.ready_timeout = ready_timeout
        self.kubeconfig = workdir / "host.kubeconfig"
        self.log_path = workdir / "namespace.log"
        self.process: subprocess.Popen[bytes] | None = None
        self.timings: dict[str, float] = {}
        self._relay: Relay | None = None
        self._forwards: list[Relay] = []
        self._log: IO[bytes] | None = None

    def start(self) -> Self:
        reason = probe()
        if reason is not None:
            raise NamespaceError(reason)
        self.workdir.mkdir(parents=True, exist_ok=True)
        began = time.monotonic()
        self._log = self.log_path.open("ab")
        # setpriv --pdeathsig: if this process dies without stopping us (SIGKILL), unshare dies, its --kill-child
        # kills the namespace's init, and with it every process of the PID namespace: nothing is left running.
        self.process = subprocess.Popen(
            [*SETPRIV, *UNSHARE, sys.executable, "-m", "burrito_local.netns", str(self.workdir), str(self.binary)],
            stdout=subprocess.PIPE, stderr=self._log, stdin=subprocess.DEVNULL, start_new_session=True)
        try:
            report = self._wait_ready(began)
            self.timings = {"ready": time.monotonic() - began, **report.get("timings", {})}
            self._relay = Relay(("127.0.0.1", 0), str(self.workdir / "api.sock")).start()
            admin = self.workdir / "inside" / "cp" / "admin.kubeconfig"
            text = admin.read_text().replace(f"https://{NODE_ADDRESS}:{API_PORT}",
                                             f"https://127.0.0.1:{self._relay.port}")
            fd = os.open(self.kubeconfig, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
            with os.fdopen(fd, "w") as out:
                out.write(text)
        except BaseException:
            self.stop()
            raise
        return self

    def forward(self, host: str, port: int) -> int:
        """A port on this host's 127.0.0.1 whose connections reach `host:port` inside the namespace (a pod or a
        Service's cluster IP), through `<workdir>/connect.sock`: what `kubectl port-forward` gives on a cluster."""
        relay = Relay(("127.0.0.1", 0), str(self.workdir / "connect.sock"), f"{host}:{port}\n".encode()).start()
        self._forwards.append(relay)
        return relay.port

    def http_client(self) -> httpx.Client:
        """An httpx client to the API server as the cluster admin (its client certificate), from this host."""
        import httpx

        assert self._relay is not None, "the namespace is not started"
        pki = self.workdir / "inside" / "cp" / "pki"
        context = ssl.create_default_context(cafile=str(pki / "ca.crt"))
        context.load_cert_chain(pki / "admin.crt", pki / "admin.key")
        return httpx.Client(base_url=self.api_url, verify=context, timeout=30.0)

    @property
    def api_url(self) -> str:
        assert self._relay is not None, "the namespace is not started"
        return f"https://127.0.0.1:{self._relay.port}"

    @property
    def ca_file(self) -> Path:
        return self.workdir / "inside" / "cp" / "pki" / "ca.crt"

    def admin_client(self) -> AdminClient:
        """The cluster admin's client from this host (through the relay; the serving certificate names
        127.0.0.1): for callers that time requests, where a kubectl process's start would blur the figure."""
        from burrito_local.controlplane import AdminClient, Pki

        assert self._relay is not None, "the namespace is not started"
        pki = Pki(self.workdir / "inside" / "cp" / "pki")
        return AdminClient("127.0.0.1", self._relay.port, pki.ca_crt.read_bytes(), pki.admin_crt, pki.admin_key)

    def _wait_ready(self, began: float) -> dict[str, Any]:
        assert self.process is not None and self.process.stdout is not None
        lines: list[str] = []
        done = threading.Event()

        def read() -> None:
            assert self.process is not None and self.process.stdout is not None
            for raw in self.process.stdout:
                lines.append(raw.decode(errors="replace").strip())
                if lines[-1].startswith("ready "):
                    done.set()
                    return
            done.set()

        threading.Thread(target=read, name="netns-stdout", daemon=True).start()
        if not done.wait(self.ready_timeout) or not lines or not lines[-1].startswith("ready "):
            raise NamespaceError(f"the node's namespace did not start within {time.monotonic() - began:.0f}s: "
                                 f"{self.failure()} (log: {self.log_path})")
        return dict(json.loads(lines[-1].removeprefix("ready ")))

    def failure(self) -> str:
        try:
            text = self.log_path.read_text(errors="replace").strip().splitlines()
        except OSError:
            return "no log"
        ours = [line for line in text if line.startswith(("netns: ", "controlplane: "))]
        return (ours or text or ["no output"])[-1]

    @staticmethod
    def _inside_pid(process: subprocess.Popen[bytes]) -> int | None:
        """The namespace's init (our `python -m burrito_local.netns`), the child of `unshare`."""
        try:
            children = Path(f"/proc/{process.pid}/task/{process.pid}/children").read_text().split()
        except OSError:
            return None
        return int(children[0]) if children else None

    def stop(self, timeout: float = 90.0) -> None:
        for forward in self._forwards:
            forward.stop()
        self._forwards.clear()
        if self._relay is not None:
            self._relay.stop()
            self._relay = None
        process, self.process = self.process, None
        if process is not None and process.poll() is None:
            inside = self._inside_pid(process)
            with contextlib.suppress(ProcessLookupError):
                os.kill(inside if inside is not None else process.pid, signal.SIGTERM)
            try:
                process.wait(timeout)
            except subprocess.TimeoutExpired:
                with contextlib.suppress(ProcessLookupError):
                    os.killpg(process.pid, signal.SIGKILL)  # --kill-child takes the namespace's processes
                process.wait()
        if self._log is not None:
            self._log.close()
            self._log = None

    def __enter__(self) -> Self:
        return self.start()

    def __exit__(self, *_: object) -> None:
        self.stop()


# -- inside the namespaces ------------------------------------------------------------------------------
def _inside(workdir: Path, binary: Path) -> int:
    from burrito_local.controlplane import ControlPlane, ControlPlaneConfig, ControlPlaneError
    from burrito_local.kube_tls import CertificateAuthority
    from burrito_local.kubelet import LocalKubelet
    from burrito_local.kubelet_node import NodeMode

    def say(message: str) -> None:
        print(f"netns: {message}", file=sys.stderr, flush=True)

    began = time.monotonic()
    for address in (f"{NODE_ADDRESS}/16", SERVICE_ADDRESS):
        subprocess.run(["ip", "addr", "add", address, "dev", "lo"], check=True)
    subprocess.run(["ip", "link", "set", "lo", "up"], check=True)
    inside = workdir / "inside"
    stop = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: stop.set())
    signal.signal(signal.SIGINT, lambda *_: stop.set())
    plane = ControlPlane(binary, ControlPlaneConfig(inside / "cp", bind_address=NODE_ADDRESS, api_port=API_PORT,
                                                    service_cidr=SERVICE_CIDR, unsafe_no_fsync=True))
    kubelet: LocalKubelet | None = None
    relay: Relay | None = None
    connect: Relay | None = None
    try:
        plane.start()
        control_plane_ready = time.monotonic() - began
        ca = CertificateAuthority(plane.pki.ca_crt.read_bytes(), plane.pki.ca_key.read_bytes())
        serving_cert, serving_key = ca.issue_server(f"system:node:{NODE_NAME}", [NODE_ADDRESS, NODE_NAME])
        node_config = plane.user_kubeconfig(inside / "node.kubeconfig", f"system:node:{NODE_NAME}", ("system:nodes",))
        proxy_config = plane.user_kubeconfig(inside / "proxy.kubeconfig", "system:kube-proxy")
        mode = NodeMode(address=NODE_ADDRESS, pod_cidr=POD_CIDR, serving_cert_pem=serving_cert,
                        serving_key_pem=serving_key, client_ca_pem=plane.ca_pem, proxy_kubeconfig=proxy_config)
        kubelet = LocalKubelet(node_config, inside / "pod-logs", inside / "pods", node_name=NODE_NAME, node=mode)
        kubelet.start()
        client = plane.admin_client()
        deadline = time.monotonic() + 60
        while True:  # ready when the scheduler may place pods: the Node is there and Ready
            status, node = client.call("GET", f"/api/v1/nodes/{NODE_NAME}")
            conditions = {c["type"]: c["status"] for c in ((node or {}).get("status") or {}).get("conditions") or ()
                          } if status == 200 and isinstance(node, dict) else {}
            if conditions.get("Ready") == "True":
                break
            if time.monotonic() > deadline:
                raise ControlPlaneError(f"node {NODE_NAME} not Ready after 60s (HTTP {status})")
            time.sleep(0.1)
        relay = Relay(str(workdir / "api.sock"), (NODE_ADDRESS, API_PORT)).start()
        connect = Relay(str(workdir / "connect.sock"), None).start()  # NodeNamespace.forward's inside end
        timings = {"control_plane_ready": control_plane_ready, "node_ready": time.monotonic() - began,
                   "control_plane_rss_mb": plane.rss_bytes() / 2**20}
        print("ready " + json.dumps({"timings": timings}), flush=True)
        while not stop.wait(0.5):
            plane.check("while the node ran")
        return 0
    except (ControlPlaneError, subprocess.CalledProcessError, OSError) as exc:
        say(str(exc))
        return 1
    finally:
        if connect is not None:
            connect.stop()
        if relay is not None:
            relay.stop()
        if kubelet is not None:
            kubelet.stop()
        with contextlib.suppress(ControlPlaneError):
            plane.stop()


def main() -> None:
    import logging

    # The kubelet's own log lines go to the namespace's log file (the host process keeps its stderr there).
    logging.basicConfig(level=logging.INFO, format="netns-%(name)s %(levelname)s: %(message)s")
    workdir, binary = Path(sys.argv[1]), Path(sys.argv[2])
    sys.exit(_inside(workdir, binary))


if __name__ == "__main__":
    main()
