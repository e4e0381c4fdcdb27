"""What the datastore imports before it listens (issue 31 item 4: `dev`'s chart mode waited on the datastore's
readiness): the Kubernetes client (kubernetes_asyncio, half a second of CPU) only when something needs it, and
then in a thread of its own rather than before listening or in the event loop's thread (datastore/kubeapi.py)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

SERVE = """
import importlib.abc, sys, tempfile, threading
from pathlib import Path
importers = []  # the threads that import the Kubernetes client


class Spy(importlib.abc.MetaPathFinder):
    def find_spec(self, name, path, target=None):
        if name == "kubernetes_asyncio.client":
            importers.append(threading.current_thread().name)
        return None


sys.meta_path.insert(0, Spy())
from burrito_py.datastore.app import DatastoreSettings, create_app
from burrito_py.datastore.backends import StorageSettings, build_storage
# Everything `datastore start` imports before it listens (commands._serve)
import burrito_py.datastore.kubeapi, burrito_py.datastore.retention, burrito_py.datastore.tls
data = Path(tempfile.mkdtemp())
settings = DatastoreSettings(data_dir=data, auth_enabled={auth})
create_app(build_storage(StorageSettings(), None), settings)
print("imported" if "kubernetes_asyncio.client" in sys.modules else "not imported")
"""


def _run(code: str) -> str:
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120,
                          cwd=Path(__file__).resolve().parents[3], check=False)
    assert done.returncode == 0, done.stderr
    return done.stdout.strip()


def test_without_auth_the_datastore_never_imports_the_kubernetes_client() -> None:
    assert _run(SERVE.format(auth=False)) == "not imported"


def test_with_auth_the_client_is_imported_in_a_thread_of_its_own_once_the_app_is_made() -> None:
    code = SERVE.format(auth=True) + (
        "import time\n"
        "deadline = time.monotonic() + 60\n"
        "while not importers:\n"
        "    assert time.monotonic() < deadline\n"
        "    time.sleep(0.05)\n"
        "print(importers)\n")
    assert _run(code).splitlines()[-1] == "['import-kube-client']"


def test_a_review_that_comes_during_the_warm_up_waits_without_stalling_the_event_loop() -> None:
    """The first token review before the warm-up's import is done: it waits for that import in a worker thread.
    Waiting in the event loop's thread (a plain `from kubernetes_asyncio import client` while another thread imports
    it) stalled every request for the rest of the import: the loop's longest stall is measured against the import's
    own duration, which a loaded machine stretches alike."""
    code = (
        "import asyncio, time\n"
        "from burrito_py.datastore import kubeapi\n"
        "async def main():\n"
        "    stalls = []\n"
        "    async def ticker():\n"
        "        last = time.monotonic()\n"
        "        while True:\n"
        "            await asyncio.sleep(0.005)\n"
        "            now = time.monotonic()\n"
        "            stalls.append(now - last)\n"
        "            last = now\n"
        "    began = time.monotonic()\n"
        "    kubeapi.warm_up()\n"
        "    ticking = asyncio.create_task(ticker())\n"
        "    await asyncio.sleep(0.02)  # the import is under way in the warm-up's thread\n"
        "    await kubeapi.imported()\n"
        "    from kubernetes_asyncio import client  # imported whole by now: no wait\n"
        "    took = time.monotonic() - began\n"
        "    await asyncio.sleep(0.02)\n"
        "    ticking.cancel()\n"
        "    print(max(stalls), took)\n"
        "asyncio.run(main())\n")
    stall, took = map(float, _run(code).split())
    assert took > 0.1, took  # the import did take time: the measure means something
    assert stall < took / 2, (stall, took)
