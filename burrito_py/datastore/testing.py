"""A real datastore server on a free loopback port, for tests and `burrito-py dev`."""

from __future__ import annotations

import socket
import threading
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path

import uvicorn

from burrito_py.datastore.app import DatastoreSettings, create_app
from burrito_py.datastore.storage import FilesystemStorage, Storage
from burrito_py.health import wait_healthy


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


@contextmanager
def running_datastore(
    data_dir: Path,
    port: int = 0,
    storage: Storage | None = None,
    auth_enabled: bool = False,
    kubeconfig: Path | None = None,
    admin_users: Sequence[str] = (),
) -> Iterator[str]:
    """`storage` (e.g. S3 or encrypted) replaces the filesystem backend under `data_dir`. Auth is off unless
    asked for (tests of other things send no token); then tokens are reviewed by the API in `kubeconfig`
    and `admin_users` may do everything."""
    settings = DatastoreSettings(
        data_dir=data_dir,
        host="127.0.0.1",
        port=port or free_port(),
        auth_enabled=auth_enabled,
        kubeconfig=kubeconfig,
        auth_admin_users=list(admin_users),
    )
    app = create_app(storage if storage is not None else FilesystemStorage(data_dir), settings)
    server = uvicorn.Server(
        uvicorn.Config(app, host=settings.host, port=settings.port, log_level="warning", lifespan="off")
    )
    thread = threading.Thread(target=server.run, name="burrito-py-datastore", daemon=True)
    thread.start()
    url = f"http://{settings.host}:{settings.port}"
    if not wait_healthy(url, thread.is_alive, 30):
        server.should_exit = True
        raise RuntimeError(f"datastore did not start on {url}")
    try:
        yield url
    finally:
        server.should_exit = True
        thread.join(10)
