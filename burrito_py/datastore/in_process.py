"""A real datastore server on a free loopback port, for tests and `burrito-py dev`."""

from __future__ import annotations

import socket
import threading
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import uvicorn

from burrito_py.datastore.app import DatastoreSettings, create_app, server_options
from burrito_py.datastore.auth import Authenticator
from burrito_py.datastore.storage import FilesystemStorage, Storage
from burrito_py.datastore.tls import https_config
from burrito_py.health import wait_healthy


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


def _listening(host: str, port: int) -> socket.socket:
    """A socket bound and listening before the server starts: a port picked by number and bound later can be
    taken in between by another process (another test worker's datastore), whose /healthz would then answer
    for this one, and this one's requests would go to a stranger."""
    sock = socket.socket()
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    try:
        sock.bind((host, port))
        sock.listen(2048)
    except OSError:
        sock.close()
        raise
    return sock


@contextmanager
def running_datastore(
    data_dir: Path,
    port: int = 0,
    storage: Storage | None = None,
    auth_enabled: bool = False,
    kubeconfig: Path | None = None,
    admin_users: Sequence[str] = (),
    authenticator: Authenticator | None = None,
    tls_check_every: float = 10.0,
    **overrides: Any,
) -> Iterator[str]:
    """`storage` (e.g. S3 or encrypted) replaces the filesystem backend under `data_dir`. Auth is off unless
    asked for (tests of other things send no token); then tokens are reviewed by the API in `kubeconfig`
    and `admin_users` may do everything (`authenticator` replaces that review). `overrides` are further
    DatastoreSettings; with `tls_port` (and its certificate and key) the same app also listens with HTTPS there."""
    host = "127.0.0.1"
    sockets = [_listening(host, port)]
    if overrides.get("tls_port"):
        sockets.append(_listening(host, overrides["tls_port"]))
    try:
        settings = DatastoreSettings(
            data_dir=data_dir,
            host=host,
            port=sockets[0].getsockname()[1],
            auth_enabled=auth_enabled,
            kubeconfig=kubeconfig,
            auth_admin_users=list(admin_users),
            **overrides,
        )
        app = create_app(storage if storage is not None else FilesystemStorage(data_dir), settings, authenticator)
        options = server_options(settings)
        servers = [uvicorn.Server(
            uvicorn.Config(app, host=settings.host, port=settings.port, log_level="warning", lifespan="off", **options)
        )]
        if settings.tls_port:
            assert settings.tls_cert_file is not None and settings.tls_key_file is not None
            servers.append(uvicorn.Server(https_config(app, settings.host, settings.tls_port, settings.tls_cert_file,
                                                       settings.tls_key_file, tls_check_every, log_level="warning",
                                                       lifespan="off", **options)))
        threads = [threading.Thread(target=server.run, args=([sock],), name="burrito-py-datastore", daemon=True)
                   for server, sock in zip(servers, sockets, strict=True)]
        for thread in threads:
            thread.start()
        url = f"http://{settings.host}:{settings.port}"
        if not wait_healthy(url, threads[0].is_alive, 30):
            for server in servers:
                server.should_exit = True
            raise RuntimeError(f"datastore did not start on {url}")
        try:
            yield url
        finally:
            for server in servers:
                server.should_exit = True
            for thread in threads:
                thread.join(10)
    finally:
        for sock in sockets:  # closed by the server's shutdown too, unless it never started
            sock.close()
