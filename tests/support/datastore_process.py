"""The datastore as its own process (`burrito-py datastore start`), for tests and benchmarks that measure it
or kill it: its memory is its own, and a SIGKILL is a real crash."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path

from burrito_py.datastore.in_process import free_port
from burrito_py.health import wait_healthy


@dataclass
class DatastoreProcess:
    url: str
    process: subprocess.Popen[bytes]

    @property
    def pid(self) -> int:
        return self.process.pid

    def kill(self) -> None:
        """A crash: no shutdown, no cleanup."""
        self.process.send_signal(signal.SIGKILL)
        self.process.wait(30)


def rss_bytes(pid: int) -> int:
    """Resident set size of `pid`, from /proc."""
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) * 1024
    raise RuntimeError(f"no VmRSS for process {pid}")


@dataclass
class RssSampler:
    """Samples a process's RSS in a background thread; `peak` is the largest value seen."""

    pid: int
    interval: float = 0.01
    peak: int = 0
    _stop: threading.Event = field(default_factory=threading.Event)
    _thread: threading.Thread | None = None

    def __enter__(self) -> RssSampler:
        self.peak = rss_bytes(self.pid)

        def sample() -> None:
            while not self._stop.wait(self.interval):
                self.peak = max(self.peak, rss_bytes(self.pid))

        self._thread = threading.Thread(target=sample, name="rss-sampler", daemon=True)
        self._thread.start()
        return self

    def __exit__(self, *_: object) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join()
        self.peak = max(self.peak, rss_bytes(self.pid))


@contextmanager
def datastore_process(
    data_dir: Path, env: Mapping[str, str] | None = None, port: int = 0, args: tuple[str, ...] = ()
) -> Iterator[DatastoreProcess]:
    """`burrito-py datastore start` on loopback with auth off unless `env` turns it on; `env` adds
    BURRITO_PY_DATASTORE_* (backend, S3, encryption) and AWS_* settings."""
    port = port or free_port()
    environment = {**os.environ, "BURRITO_PY_DATASTORE_AUTH_ENABLED": "false", **(env or {})}
    command = [sys.executable, "-m", "burrito_py.cli", "datastore", "start", "--data-dir", str(data_dir),
               "--host", "127.0.0.1", "--port", str(port), *args]
    log = (data_dir.parent / f"datastore-{port}.log").open("wb")
    process = subprocess.Popen(command, env=environment, stdout=log, stderr=subprocess.STDOUT)
    url = f"http://127.0.0.1:{port}"
    try:
        if not wait_healthy(url, lambda: process.poll() is None, 60):
            raise RuntimeError(f"datastore did not start: {log.name}")
        yield DatastoreProcess(url, process)
    finally:
        if process.poll() is None:
            process.terminate()
            try:
                process.wait(30)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait(30)
        log.close()
