"""A real Kubernetes control plane for local use: the `controlplane/` binary (etcd, kube-apiserver,
kube-controller-manager and kube-scheduler in one process, built from the official Go modules) started
with its PKI, flag files and data directory (docs/architecture.md §22).

`ControlPlane(binary, config).start()` writes what the binary reads, starts it, waits until the API server
is ready, the controller manager has made the `default` ServiceAccount and the default StorageClass exists,
and writes an admin kubeconfig; `stop()` sends SIGTERM and waits for a clean exit. The binary comes from
`scripts/build-controlplane.sh` (built once per version of its sources, cached under ~/.cache/burrito-py).
Every failure is a `ControlPlaneError` whose message is one line naming the cause.
"""

from __future__ import annotations

import base64
import contextlib
import fcntl
import http.client
import ipaddress
import json
import os
import shutil
import signal
import socket
import ssl
import subprocess
import sys
import tempfile
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, Any, Self

import yaml

from burrito_local.kube_tls import API_SERVER_NAMES, CertificateAuthority, signing_key_pem

REPO_ROOT = Path(__file__).resolve().parents[2]
BUILD_SCRIPT = REPO_ROOT / "scripts" / "build-controlplane.sh"
BINARY_ENV = "BURRITO_CONTROLPLANE_BINARY"  # a binary to use instead of the build script's
ISSUER = "https://kubernetes.default.svc.cluster.local"
ADMIN_USER = "burrito-py-admin"
DEFAULT_STORAGE_CLASS = "standard"
APISERVER_KUBELET_CLIENT = "kube-apiserver-kubelet-client"  # the user the local kubelet's API admits


class ControlPlaneError(Exception):
    """The control plane could not be built, started or stopped; the message is one line."""


def binary_path(build: bool = True) -> Path:
    """The control-plane binary for this checkout's sources: $BURRITO_CONTROLPLANE_BINARY if set, else the
    build script's cached binary, built first when `build` (progress goes to stderr). Without Go, or when
    the build fails, a ControlPlaneError carries the script's last line."""
    override = os.environ.get(BINARY_ENV)
    if override:
        if not os.access(override, os.X_OK):
            raise ControlPlaneError(f"{BINARY_ENV}={override} is not an executable file")
        return Path(override)
    if not BUILD_SCRIPT.exists():
        raise ControlPlaneError(f"{BUILD_SCRIPT} is missing: the control plane is built from a checkout")
    result = subprocess.run(["bash", str(BUILD_SCRIPT), *([] if build else ["--cached"])],
                            stdout=subprocess.PIPE, stderr=None if build else subprocess.PIPE, text=True, check=False)
    if result.returncode != 0:
        lines = (result.stderr or "").strip().splitlines()
        why = lines[-1] if lines else f"{BUILD_SCRIPT.name} exited with {result.returncode} (its output is above)"
        raise ControlPlaneError(why)
    return Path(result.stdout.strip().splitlines()[-1])


PORT_ATTEMPTS = 5
PORT_IN_USE = ") is in use"  # the binary's line for a port it could not listen on: `port ADDR (WHO) is in use`


def free_port(host: str = "127.0.0.1") -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind((host, 0))
        return int(sock.getsockname()[1])


def _is_loopback(address: str) -> bool:
    return ipaddress.ip_address(address).is_loopback


@dataclass
class ControlPlaneConfig:
    """Where the control plane keeps its files and listens. Ports left at 0 are picked free at start."""

    data_dir: Path
    bind_address: str = "127.0.0.1"
    api_port: int = 0
    etcd_port: int = 0
    etcd_peer_port: int = 0
    service_cidr: str = "10.96.0.0/16"
    extra_hosts: list[str] = field(default_factory=list)  # more names/addresses for the serving certificate
    unsafe_no_fsync: bool = False  # tests: etcd skips fsync (a crash of the machine could lose data)
    ready_timeout: float = 180.0
    log_level: int = 0  # klog's -v for all components


class Pki:
    """The files of the control plane's PKI under `<data_dir>/pki` (see `ControlPlane._write_pki`)."""

    def __init__(self, directory: Path) -> None:
        self.dir = directory
        self.ca_crt, self.ca_key = directory / "ca.crt", directory / "ca.key"
        self.sa_key, self.sa_pub = directory / "sa.key", directory / "sa.pub"
        self.apiserver_crt, self.apiserver_key = directory / "apiserver.crt", directory / "apiserver.key"
        self.kubelet_client_crt = directory / "apiserver-kubelet-client.crt"
        self.kubelet_client_key = directory / "apiserver-kubelet-client.key"
        self.admin_crt, self.admin_key = directory / "admin.crt", directory / "admin.key"


def kubeconfig_text(server: str, ca_pem: bytes, user: str, cert_pem: bytes, key_pem: bytes,
                    namespace: str = "default") -> str:
    """A kubeconfig for `server` as a client-certificate user (everything embedded)."""
    b64 = base64.b64encode
    return yaml.safe_dump({
        "apiVersion": "v1", "kind": "Config", "current-context": "burrito-py",
        "clusters": [{"name": "burrito-py", "cluster": {"server": server,
                                                         "certificate-authority-data": b64(ca_pem).decode()}}],
        "users": [{"name": user, "user": {"client-certificate-data": b64(cert_pem).decode(),
                                          "client-key-data": b64(key_pem).decode()}}],
        "contexts": [{"name": "burrito-py", "context": {"cluster": "burrito-py", "user": user,
                                                        "namespace": namespace}}],
    }, sort_keys=False)


def _write_private(path: Path, data: bytes | str) -> Path:
    """Write atomically, readable by this user only (keys and kubeconfigs)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.tmp")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "wb") as out:
        out.write(data.encode() if isinstance(data, str) else data)
    tmp.replace(path)
    return path


class AdminClient:
    """Just enough of a Kubernetes client for the launcher's own calls (JSON over HTTPS with the admin's
    client certificate): the product's clients are kopf and `kubernetes`, which need no help here."""

    def __init__(self, host: str, port: int, ca_pem: bytes, cert: Path, key: Path) -> None:
        self._host, self._port = host, port
        self._context = ssl.create_default_context(cadata=ca_pem.decode())
        self._context.load_cert_chain(cert, key)

    def call(self, method: str, path: str, body: Any = None, timeout: float = 10.0,
             content_type: str = "application/json") -> tuple[int, Any]:
        conn = http.client.HTTPSConnection(self._host, self._port, context=self._context, timeout=timeout)
        try:
            conn.request(method, path, body=None if body is None else json.dumps(body),
                         headers={"Content-Type": content_type, "Accept": "application/json"})
            response = conn.getresponse()
            raw = response.read()
        finally:
            conn.close()
        try:
            return response.status, json.loads(raw) if raw else None
        except ValueError:
            return response.status, raw.decode(errors="replace")


class ControlPlane:
    """One control-plane process. Not thread-safe; start and stop from one thread."""

    def __init__(self, binary: Path, config: ControlPlaneConfig) -> None:
        self.binary = binary
        self.config = config
        self.data_dir = config.data_dir
        self.pki = Pki(self.data_dir / "pki")
        self.kubeconfig = self.data_dir / "admin.kubeconfig"
        self.log_path = self.data_dir / "controlplane.log"
        self.process: subprocess.Popen[bytes] | None = None
        self.started_at = 0.0
        self.ready_seconds = 0.0
        self._log: IO[bytes] | None = None
        self._ready = threading.Event()
        self._stdout_lines: list[str] = []

    # -- addresses ---------------------------------------------------------------------------------
    @property
    def host(self) -> str:
        return self.config.bind_address

    @property
    def server(self) -> str:
        return f"https://{self.host}:{self.config.api_port}"

    @property
    def ca_pem(self) -> bytes:
        return self.pki.ca_crt.read_bytes()

    # -- files -------------------------------------------------------------------------------------
    def _write_pki(self) -> None:
        """The CA and the service-account signing key are kept across restarts of one data directory (the
        tokens and certificates in etcd stay valid); the leaf certificates are issued anew each start."""
        pki = self.pki
        pki.dir.mkdir(parents=True, exist_ok=True)
        if pki.ca_crt.exists() and pki.ca_key.exists():
            ca = CertificateAuthority(pki.ca_crt.read_bytes(), pki.ca_key.read_bytes())
        else:
            ca = CertificateAuthority.create("burrito-py-controlplane-ca")
            _write_private(pki.ca_key, ca.key_pem)
            pki.ca_crt.write_bytes(ca.cert_pem)
        if not (pki.sa_key.exists() and pki.sa_pub.exists()):
            private, public = signing_key_pem()
            _write_private(pki.sa_key, private)
            pki.sa_pub.write_bytes(public)
        first_service_ip = str(next(ipaddress.ip_network(self.config.service_cidr).hosts()))
        hosts = [*API_SERVER_NAMES, self.host, first_service_ip, *self.config.extra_hosts]
        cert, key = ca.issue_server("kube-apiserver", hosts)
        pki.apiserver_crt.write_bytes(cert)
        _write_private(pki.apiserver_key, key)
        cert, key = ca.issue_client(APISERVER_KUBELET_CLIENT)
        pki.kubelet_client_crt.write_bytes(cert)
        _write_private(pki.kubelet_client_key, key)
        for name, user, groups in (("admin", ADMIN_USER, ("system:masters",)),
                                   ("controller-manager", "system:kube-controller-manager", ()),
                                   ("scheduler", "system:kube-scheduler", ())):
            cert, key = ca.issue_client(user, groups)
            _write_private(self.data_dir / f"{name}.kubeconfig",
                           kubeconfig_text(self.server, ca.cert_pem, user, cert, key))
            if name == "admin":
                pki.admin_crt.write_bytes(cert)
                _write_private(pki.admin_key, key)

    def user_kubeconfig(self, path: Path, user: str, groups: tuple[str, ...] = ()) -> Path:
        """A kubeconfig for `user` in `groups` (a client certificate the cluster CA signs), e.g. a node
        (`system:node:<name>` in `system:nodes`)."""
        ca = CertificateAuthority(self.pki.ca_crt.read_bytes(), self.pki.ca_key.read_bytes())
        cert, key = ca.issue_client(user, groups)
        return _write_private(path, kubeconfig_text(self.server, ca.cert_pem, user, cert, key))

    def _flag_files(self) -> dict[str, Path]:
        c, pki, d = self.config, self.pki, self.data_dir
        verbosity = [f"--v={c.log_level}"]
        apiserver = [
            f"--etcd-servers=http://127.0.0.1:{c.etcd_port}",
            f"--bind-address={self.host}",
            f"--secure-port={c.api_port}",
            f"--advertise-address={self.host}",
            f"--tls-cert-file={pki.apiserver_crt}",
            f"--tls-private-key-file={pki.apiserver_key}",
            f"--client-ca-file={pki.ca_crt}",
            f"--service-account-issuer={ISSUER}",
            f"--service-account-key-file={pki.sa_pub}",
            f"--service-account-signing-key-file={pki.sa_key}",
            "--authorization-mode=Node,RBAC",
            # On top of the default set (NamespaceLifecycle, ServiceAccount, DefaultStorageClass,
            # ValidatingAdmissionPolicy, the webhooks, ...): a node may only touch its own objects.
            "--enable-admission-plugins=NodeRestriction",
            f"--service-cluster-ip-range={c.service_cidr}",
            "--allow-privileged=true",
            f"--kubelet-client-certificate={pki.kubelet_client_crt}",
            f"--kubelet-client-key={pki.kubelet_client_key}",
            "--kubelet-preferred-address-types=InternalIP",
            "--profiling=false",
            *verbosity,
        ]
        if _is_loopback(self.host):
            # The `kubernetes` Service's EndpointSlice may not hold a loopback address (validation refuses
            # it), so the endpoint reconciler is off unless the control plane has a routable address.
            apiserver.append("--endpoint-reconciler-type=none")
        controller_manager = [
            f"--kubeconfig={d / 'controller-manager.kubeconfig'}",
            "--secure-port=0",
            "--leader-elect=false",
            "--use-service-account-credentials=true",
            f"--service-account-private-key-file={pki.sa_key}",
            f"--root-ca-file={pki.ca_crt}",
            f"--cluster-signing-cert-file={pki.ca_crt}",
            f"--cluster-signing-key-file={pki.ca_key}",
            # Every controller on by default, plus the bootstrap tokens' cleaner (off by default upstream).
            "--controllers=*,tokencleaner",
            # PersistentVolumes for claims of the default StorageClass: a directory per claim under
            # /tmp/hostpath_pv on this machine (kube-controller-manager's development provisioner).
            "--enable-hostpath-provisioner=true",
            "--cluster-name=burrito-py",
            *verbosity,
        ]
        scheduler = [f"--kubeconfig={d / 'scheduler.kubeconfig'}", "--secure-port=0", "--leader-elect=false",
                     *verbosity]
        files = {}
        for name, flags in (("apiserver", apiserver), ("controller-manager", controller_manager),
                            ("scheduler", scheduler)):
            files[name] = d / "flags" / f"{name}.flags"
            files[name].parent.mkdir(parents=True, exist_ok=True)
            files[name].write_text("\n".join(flags) + "\n")
        return files

    # -- lifecycle ---------------------------------------------------------------------------------
    def _refuse_if_in_use(self) -> None:
        refuse_if_in_use(self.data_dir)

    def start(self) -> Self:
        """Start and wait until ready. Ports left at 0 are picked free here; a port picked so can be taken by
        another process before the binary listens on it (any client's outgoing connection on a busy machine),
        so a start refused for a port in use is tried again on fresh ports, up to PORT_ATTEMPTS times."""
        c = self.config
        picked = [name for name in ("api_port", "etcd_port", "etcd_peer_port") if not getattr(c, name)]
        for attempt in range(1, PORT_ATTEMPTS + 1):
            for name in picked:
                setattr(c, name, free_port(self.host if name == "api_port" else "127.0.0.1"))
            try:
                return self._start_once()
            except ControlPlaneError as exc:
                if not (picked and attempt < PORT_ATTEMPTS and PORT_IN_USE in str(exc)):
                    raise
        raise AssertionError("unreachable")

    def _start_once(self) -> Self:
        c = self.config
        self.data_dir.mkdir(parents=True, exist_ok=True)
        self._refuse_if_in_use()
        self._write_pki()
        files = self._flag_files()
        argv = [str(self.binary), f"--data-dir={self.data_dir}",
                f"--etcd-client-url=http://127.0.0.1:{c.etcd_port}",
                f"--etcd-peer-url=http://127.0.0.1:{c.etcd_peer_port}",
                f"--apiserver-args={files['apiserver']}", f"--controller-manager-args={files['controller-manager']}",
                f"--scheduler-args={files['scheduler']}", f"--ready-ca={self.pki.ca_crt}",
                f"--ready-timeout={int(c.ready_timeout)}s"]
        if c.unsafe_no_fsync:
            argv.append("--unsafe-no-fsync")
        self._log = self.log_path.open("ab")
        self.started_at = time.monotonic()
        try:
            self.process = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=self._log, stdin=subprocess.DEVNULL,
                                            start_new_session=True)
        except OSError as exc:
            raise ControlPlaneError(f"cannot run {self.binary}: {exc}") from None
        threading.Thread(target=self._read_stdout, name="controlplane-stdout", daemon=True).start()
        try:
            self._wait_ready()
        except BaseException:
            self.stop()
            raise
        self.ready_seconds = time.monotonic() - self.started_at
        return self

    def _read_stdout(self) -> None:
        assert self.process is not None and self.process.stdout is not None
        for raw in self.process.stdout:
            line = raw.decode(errors="replace").strip()
            self._stdout_lines.append(line)
            if line.startswith("ready"):
                self._ready.set()

    def failure(self) -> str:
        """The binary's own one-line reason for stopping (its last `controlplane:` line), or its last line."""
        try:
            lines = self.log_path.read_text(errors="replace").strip().splitlines()
        except OSError:
            return "no log"
        ours = [line for line in lines if line.startswith("controlplane: ") and "recovering" not in line]
        return (ours or lines or ["no output"])[-1]

    def check(self, what: str = "") -> None:
        """Raise a ControlPlaneError naming the cause if the process has ended (a killed control plane)."""
        if self.process is None:
            raise ControlPlaneError("the control plane is not running")
        code = self.process.poll()
        if code is not None:
            raise ControlPlaneError(f"the control plane exited with code {code}{' ' + what if what else ''}: "
                                    f"{self.failure()} (log: {self.log_path})")

    def _wait_ready(self) -> None:
        deadline = self.started_at + self.config.ready_timeout
        while not self._ready.wait(0.1):
            self.check("before it was ready")
            if time.monotonic() > deadline:
                raise ControlPlaneError(f"the control plane was not ready after {self.config.ready_timeout:g}s"
                                        f" (log: {self.log_path})")
        client = self.admin_client()
        # The StorageClass the chart's PersistentVolumeClaims get (DefaultStorageClass admission), provisioned
        # by the controller manager's hostPath provisioner.
        storage_class = {
            "apiVersion": "storage.k8s.io/v1", "kind": "StorageClass",
            "metadata": {"name": DEFAULT_STORAGE_CLASS,
                         "annotations": {"storageclass.kubernetes.io/is-default-class": "true"}},
            "provisioner": "kubernetes.io/host-path", "reclaimPolicy": "Delete", "volumeBindingMode": "Immediate",
        }
        status, body = client.call("POST", "/apis/storage.k8s.io/v1/storageclasses", storage_class)
        if status not in (201, 409):
            raise ControlPlaneError(f"creating the default StorageClass failed: HTTP {status} {body}")
        # The controller manager runs once it has made the `default` namespace's ServiceAccount, which every
        # pod there needs (the ServiceAccount admission plugin refuses pods without it).
        while True:
            status, _ = client.call("GET", "/api/v1/namespaces/default/serviceaccounts/default")
            if status == 200:
                return
            self.check("while the controller manager started")
            if time.monotonic() > deadline:
                raise ControlPlaneError("the controller manager made no default ServiceAccount after"
                                        f" {self.config.ready_timeout:g}s (log: {self.log_path})")
            time.sleep(0.1)

    def admin_client(self) -> AdminClient:
        return AdminClient(self.host, self.config.api_port, self.ca_pem, self.pki.admin_crt, self.pki.admin_key)

    def write_kubeconfig(self, path: Path) -> Path:
        """A copy of the admin kubeconfig (a cluster admin, in `system:masters`) at `path`."""
        return _write_private(path, self.kubeconfig.read_bytes())

    def alive(self) -> bool:
        return self.process is not None and self.process.poll() is None

    def stop(self, timeout: float = 60.0) -> None:
        """SIGTERM, then wait for the clean stop (the API server drains, etcd closes its files); SIGKILL
        after `timeout`. Raises when the stop was not clean."""
        process, self.process = self.process, None
        if process is None:
            return
        try:
            if process.poll() is None:
                process.send_signal(signal.SIGTERM)
                try:
                    process.wait(timeout)
                except subprocess.TimeoutExpired:
                    with contextlib.suppress(ProcessLookupError):
                        os.killpg(process.pid, signal.SIGKILL)
                    process.wait()
                    raise ControlPlaneError(f"the control plane did not stop within {timeout:g}s of SIGTERM:"
                                            " killed") from None
                if process.returncode != 0:
                    raise ControlPlaneError(f"the control plane stopped with code {process.returncode} after "
                                            f"SIGTERM: {self.failure()} (log: {self.log_path})")
        finally:
            if self._log is not None:
                self._log.close()
                self._log = None

    def rss_bytes(self) -> int:
        """The resident memory of the control-plane process (all four components)."""
        assert self.process is not None
        for line in Path(f"/proc/{self.process.pid}/status").read_text().splitlines():
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) * 1024
        return 0

    def __enter__(self) -> Self:
        return self.start()

    def __exit__(self, *_: object) -> None:
        self.stop()


def refuse_if_in_use(data_dir: Path) -> None:
    """The binary locks `<data_dir>/lock` while it runs; check it before rewriting or removing any file of a
    running control plane (its kubeconfigs, certificates and flags). ControlPlaneError when it is held."""
    path = data_dir / "lock"
    if not path.exists():
        return
    with path.open("a+") as lock:
        try:
            fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            lock.seek(0)
            raise ControlPlaneError(f"data directory {data_dir} is in use by another control plane "
                                    f"(pid {lock.read().strip()})") from None
        fcntl.flock(lock, fcntl.LOCK_UN)


def scratch_data_dir(prefix: str = "burrito-py-controlplane-") -> Path:
    """A fresh data directory under the temporary directory (removed by `remove_data_dir`)."""
    return Path(tempfile.mkdtemp(prefix=prefix))


def remove_data_dir(path: Path) -> None:
    shutil.rmtree(path, ignore_errors=True)


def main(argv: list[str] | None = None) -> int:
    """`python -m burrito_local.controlplane DATA_DIR [--port N]`: run the control plane in the
    foreground until SIGTERM or Ctrl-C, then stop it cleanly."""
    import argparse

    parser = argparse.ArgumentParser(prog="python -m burrito_local.controlplane")
    parser.add_argument("data_dir", type=Path)
    parser.add_argument("--port", type=int, default=6443, help="kube-apiserver's port on 127.0.0.1")
    args = parser.parse_args(argv)
    stop = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: stop.set())
    signal.signal(signal.SIGINT, lambda *_: stop.set())
    try:
        plane = ControlPlane(binary_path(build=True), ControlPlaneConfig(args.data_dir, api_port=args.port)).start()
    except ControlPlaneError as exc:
        print(f"controlplane: {exc}", file=sys.stderr)
        return 1
    print(f"ready in {plane.ready_seconds:.1f}s: KUBECONFIG={plane.kubeconfig}", flush=True)
    try:
        while not stop.wait(0.5):
            plane.check("while running")
    except ControlPlaneError as exc:
        print(f"controlplane: {exc}", file=sys.stderr)
        return 1
    finally:
        plane.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main())
