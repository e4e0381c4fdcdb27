"""The benches' floor: static files served by Go's net/http (`main.go`, standard library only), built with the `go`
on PATH into the user's cache the first time. A bench compares the product with it to tell what is the product's
and what is the machine's (or the protocol's)."""

from __future__ import annotations

import os
import shutil
import subprocess
import time
from collections.abc import Iterator
from contextlib import AbstractContextManager, contextmanager
from pathlib import Path

from burrito_py.datastore.in_process import free_port

SOURCE = Path(__file__).parent


def _binary() -> Path | None:
    go = shutil.which("go")
    if go is None:
        return None
    cache = Path(os.environ.get("XDG_CACHE_HOME", Path.home() / ".cache")) / "burrito-py" / "bench"
    binary = cache / "static_server"
    if not binary.exists() or binary.stat().st_mtime < (SOURCE / "main.go").stat().st_mtime:
        cache.mkdir(parents=True, exist_ok=True)
        subprocess.run([go, "build", "-o", str(binary), "."], cwd=SOURCE, check=True)
    return binary


@contextmanager
def _serving(args: list[str], url: str) -> Iterator[str]:
    binary = _binary()
    if binary is None:
        yield ""
        return
    server = subprocess.Popen([str(binary), *args])
    try:
        deadline = time.monotonic() + 10
        # Any HTTP answer (a proxy's upstream may say 404 or 403 to "/") means it listens.
        while subprocess.run(["curl", "-sk", "-o", "/dev/null", url], check=False).returncode != 0:
            if time.monotonic() > deadline:
                raise RuntimeError(f"the static server did not answer on {url}")
            time.sleep(0.1)
        yield url
    finally:
        server.terminate()
        server.wait(10)


def running_static_server(directory: Path, tls: tuple[Path, Path] | None = None) -> AbstractContextManager[str]:
    """`directory` served over HTTP (or HTTPS with `tls`: certificate, key): its base URL, or "" without Go."""
    port = free_port()
    scheme = "https" if tls else "http"
    return _serving([str(directory), f"127.0.0.1:{port}", *(str(part) for part in tls or ())],
                    f"{scheme}://127.0.0.1:{port}/")


def running_reverse_proxy(upstream: str) -> AbstractContextManager[str]:
    """A streaming reverse proxy to `upstream`: one more hop, and nothing else; its URL, or "" without Go."""
    port = free_port()
    return _serving(["-proxy", upstream, f"127.0.0.1:{port}"], f"http://127.0.0.1:{port}")
