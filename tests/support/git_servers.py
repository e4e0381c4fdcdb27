"""Real git servers on loopback for tests: smart HTTP behind basic auth, and OpenSSH with key auth.

- `running_http_git_server(root, username, password)`: a `http.server` bridge that checks HTTP basic auth
  and runs `git http-backend` as a CGI (GIT_PROJECT_ROOT=root, every repository exported). Enough for
  clone and fetch (upload-pack); a bare repository `root/name.git` is `server.url_for("name.git")`.
- `running_ssh_git_server(workdir)`: `/usr/sbin/sshd -D -e` as the current user on a free port, with a
  generated host key and one authorized client key; repositories are reached as
  `ssh://<user>@127.0.0.1:<port>/<absolute path>` and `known_hosts` is the line that trusts the host key.

Both are test fixtures' helpers only: the product never imports this module.
"""

from __future__ import annotations

import base64
import binascii
import contextlib
import getpass
import os
import socket
import subprocess
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from http import HTTPStatus
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

SSHD = "/usr/sbin/sshd"
_CGI_TIMEOUT = 60.0


# -- smart HTTP ---------------------------------------------------------------------------------------


@dataclass
class HttpGitServer:
    """A running smart-HTTP git server; `url_for(relative)` is the clone URL of `root/relative`."""

    root: Path
    port: int
    username: str
    password: str = field(repr=False)
    # Every request as `(method, path with query, authorized)`, for assertions about what git sent.
    requests: list[tuple[str, str, bool]] = field(default_factory=list)

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def url_for(self, relative: str) -> str:
        return f"{self.base_url}/{relative.lstrip('/')}"


class _GitHttpHandler(BaseHTTPRequestHandler):
    server_version = "burrito-py-test-git/1"
    git_server: HttpGitServer  # set on a per-server subclass

    def do_GET(self) -> None:
        self._handle()

    def do_POST(self) -> None:
        self._handle()

    def log_message(self, format: str, *args: Any) -> None:
        """Quiet: test output should show the test's own failures, not an access log."""

    def _handle(self) -> None:
        authorized = self._authorized()
        self.git_server.requests.append((self.command, self.path, authorized))
        if not authorized:
            body = b"authentication required\n"
            self.send_response(HTTPStatus.UNAUTHORIZED)
            self.send_header("WWW-Authenticate", 'Basic realm="git"')
            self.send_header("Content-Type", "text/plain")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)
            return
        self._run_backend(self._read_body())

    def _authorized(self) -> bool:
        header = self.headers.get("Authorization", "")
        scheme, _, encoded = header.partition(" ")
        if scheme.lower() != "basic":
            return False
        try:
            user, _, password = base64.b64decode(encoded.strip(), validate=True).decode().partition(":")
        except (binascii.Error, UnicodeDecodeError):
            return False
        return user == self.git_server.username and password == self.git_server.password

    def _read_body(self) -> bytes:
        if self.command != "POST":
            return b""
        if self.headers.get("Transfer-Encoding", "").lower() == "chunked":
            chunks: list[bytes] = []
            while True:
                size = int(self.rfile.readline().split(b";", 1)[0].strip(), 16)
                if size == 0:
                    self.rfile.readline()
                    return b"".join(chunks)
                chunks.append(self.rfile.read(size))
                self.rfile.readline()
        return self.rfile.read(int(self.headers.get("Content-Length") or 0))

    def _run_backend(self, body: bytes) -> None:
        parts = urlsplit(self.path)
        env = {
            "PATH": os.environ.get("PATH", "/usr/bin:/bin"),
            "GIT_PROJECT_ROOT": str(self.git_server.root),
            "GIT_HTTP_EXPORT_ALL": "1",
            "GIT_CONFIG_NOSYSTEM": "1",
            "GIT_CONFIG_GLOBAL": os.devnull,
            "REQUEST_METHOD": self.command,
            "PATH_INFO": parts.path,
            "QUERY_STRING": parts.query,
            "CONTENT_TYPE": self.headers.get("Content-Type", ""),
            "CONTENT_LENGTH": str(len(body)),
            "REMOTE_USER": self.git_server.username,
            "REMOTE_ADDR": self.client_address[0],
            "GATEWAY_INTERFACE": "CGI/1.1",
            "SERVER_PROTOCOL": self.request_version,
        }
        for header, variable in (("Git-Protocol", "HTTP_GIT_PROTOCOL"), ("Content-Encoding", "HTTP_CONTENT_ENCODING")):
            if self.headers.get(header):
                env[variable] = self.headers[header]
        result = subprocess.run(
            ["git", "http-backend"], input=body, env=env, capture_output=True, timeout=_CGI_TIMEOUT, check=False
        )
        head, separator, payload = result.stdout.partition(b"\r\n\r\n")
        if not separator:
            self.send_error(HTTPStatus.INTERNAL_SERVER_ERROR, result.stderr.decode(errors="replace")[:200])
            return
        status, headers = HTTPStatus.OK.value, []
        for line in head.decode("latin-1").split("\r\n"):
            name, _, value = line.partition(":")
            if name.lower() == "status":
                status = int(value.strip().split(" ", 1)[0])
            elif name:
                headers.append((name, value.strip()))
        self.send_response(status)
        for name, value in headers:
            self.send_header(name, value)
        self.send_header("Content-Length", str(len(payload)))
        self.end_headers()
        self.wfile.write(payload)


@contextlib.contextmanager
def running_http_git_server(root: Path, username: str, password: str) -> Iterator[HttpGitServer]:
    """Serve the bare repositories under `root` over smart HTTP on 127.0.0.1, for `username`/`password` only."""
    root.mkdir(parents=True, exist_ok=True)
    info = HttpGitServer(root.absolute(), 0, username, password)
    handler = type("_Handler", (_GitHttpHandler,), {"git_server": info})
    httpd = ThreadingHTTPServer(("127.0.0.1", 0), handler)
    httpd.daemon_threads = True
    info.port = int(httpd.server_address[1])
    thread = threading.Thread(target=httpd.serve_forever, name="test-git-http", daemon=True)
    thread.start()
    try:
        yield info
    finally:
        httpd.shutdown()
        httpd.server_close()
        thread.join(timeout=10)


# -- OpenSSH ------------------------------------------------------------------------------------------


@dataclass
class SshGitServer:
    """A running sshd. `client_key` is the authorized private key (OpenSSH format)."""

    port: int
    user: str
    host_public_key: str
    client_key: str = field(repr=False)
    log_path: Path

    @property
    def known_hosts(self) -> str:
        """The known_hosts line that trusts this server's host key."""
        return f"[127.0.0.1]:{self.port} {self.host_public_key}\n"

    def url_for(self, repository: Path) -> str:
        return f"ssh://{self.user}@127.0.0.1:{self.port}{repository.absolute()}"

    def log(self) -> str:
        return self.log_path.read_text(errors="replace") if self.log_path.exists() else ""


def generate_ssh_key(path: Path, comment: str = "burrito-py-tests") -> tuple[str, str]:
    """`ssh-keygen` an unencrypted ed25519 key at `path`; return (private key text, public key line)."""
    subprocess.run(
        ["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-C", comment, "-f", str(path)],
        check=True,
        capture_output=True,
        timeout=60,
    )
    return path.read_text(), path.with_name(path.name + ".pub").read_text().strip()


@contextlib.contextmanager
def running_ssh_git_server(workdir: Path) -> Iterator[SshGitServer]:
    """Start sshd as the current user on a free loopback port; stop it on exit.

    Raises RuntimeError when `/usr/sbin/sshd` is missing (`scripts/test.sh` installs openssh-server).
    """
    if not os.access(SSHD, os.X_OK):
        raise RuntimeError(f"{SSHD} is missing: install Debian openssh-server (scripts/test.sh does)")
    workdir.mkdir(parents=True, exist_ok=True)
    workdir = workdir.absolute()
    _, host_public = generate_ssh_key(workdir / "host_ed25519", "test-host")
    client_private, client_public = generate_ssh_key(workdir / "client_ed25519", "test-client")
    (workdir / "authorized_keys").write_text(client_public + "\n")
    if os.geteuid() == 0:
        # sshd started by root insists on its privilege-separation directory (systemd makes it at boot).
        Path("/run/sshd").mkdir(mode=0o755, exist_ok=True)
    user = getpass.getuser()
    host_key_type_and_key = " ".join(host_public.split()[:2])
    last_error = ""
    for _attempt in range(5):  # a free port may be taken between choosing it and sshd binding it
        port = _free_port()
        config = workdir / "sshd_config"
        config.write_text(_sshd_config(workdir, port, user))
        log_path = workdir / "sshd.log"
        with open(log_path, "wb") as log_file:
            command = [SSHD, "-D", "-e", "-f", str(config)]
            process = subprocess.Popen(command, stdout=log_file, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL)
        try:
            if _wait_for_banner(port, process):
                yield SshGitServer(port, user, host_key_type_and_key, client_private, log_path)
                return
            last_error = log_path.read_text(errors="replace")
        finally:
            process.terminate()
            try:
                process.wait(timeout=10)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait(timeout=10)
    raise RuntimeError(f"sshd did not start: {last_error.strip()[-1000:]}")


def _sshd_config(workdir: Path, port: int, user: str) -> str:
    return "\n".join(
        [
            f"Port {port}",
            "ListenAddress 127.0.0.1",
            f"HostKey {workdir / 'host_ed25519'}",
            f"PidFile {workdir / 'sshd.pid'}",
            f"AuthorizedKeysFile {workdir / 'authorized_keys'}",
            f"AllowUsers {user}",
            "StrictModes no",  # the test's temp directories are not owned the way sshd wants
            "UsePAM no",
            "PubkeyAuthentication yes",
            "PasswordAuthentication no",
            "KbdInteractiveAuthentication no",
            "PermitRootLogin prohibit-password",  # tests may run as root in containers
            "PrintMotd no",
            "LogLevel VERBOSE",
            "",
        ]
    )


def _free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def _wait_for_banner(port: int, process: subprocess.Popen[bytes], timeout: float = 30.0) -> bool:
    """True once sshd answers with its `SSH-2.0` banner; False when it exited first or never answered."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if process.poll() is not None:
            return False
        with contextlib.suppress(OSError), socket.create_connection(("127.0.0.1", port), timeout=2) as sock:
            sock.settimeout(5)
            if sock.recv(64).startswith(b"SSH-"):
                return True
        time.sleep(0.05)
    return False
