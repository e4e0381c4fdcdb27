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
