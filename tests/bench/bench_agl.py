"""AGL latency (issue 5): from `POST` of an instance to its TerraformLayer existing, with the whole controllers
process (layer, run, repository and AGL controllers) against the API emulator. Median over 25 instances
created one at a time, first on an empty kind, then with 500 instances of that kind already present."""

from __future__ import annotations

import json
import statistics
import tempfile
import threading
import time
from pathlib import Path

import httpx
from burrito_local.apiserver import ApiServer
from burrito_local.apply import Applier
from burrito_local.kube_authn import ADMIN_TOKEN

from burrito_py.api.crdgen import generate_crds
from burrito_py.controllers.settings import ControllerSettings
from burrito_py.operator.main import ControllerThread
from tests.support.emulator import wait_for

DEFS = "/apis/agl.burrito-py.io/v1alpha1/applicationdefinitions"
BUCKETS = "/apis/apps.burrito-py.io/v1alpha1/namespaces/default/buckets"
LAYERS = "/apis/terraform.burrito-py.io/v1alpha1/terraformlayers"
SAMPLES = 25
BACKGROUND = 500
DEFINITION = {
    "apiVersion": "agl.burrito-py.io/v1alpha1", "kind": "ApplicationDefinition", "metadata": {"name": "buckets"},
    "spec": {
        "application": {"kind": "Bucket", "plural": "buckets", "singular": "bucket", "openAPISchema": {
            "type": "object", "properties": {"size": {"type": "integer"}, "storagePool": {"type": "string"}}}},
        "backend": {"type": "Terraform", "terraform": {"repository": {"name": "modules"}, "branch": "main",
                                                       "path": "buckets", "prefix": "bucket-"}},
    },
}


class LayerArrivals(threading.Thread):
    """When each layer was first seen, from a watch (so measuring does not poll the server)."""

    def __init__(self, url: str) -> None:
        super().__init__(daemon=True)
        self.url = url
        self.seen: dict[str, float] = {}
        self.ready = threading.Event()

    def run(self) -> None:
        with httpx.stream("GET", self.url + LAYERS, params={"watch": "true"},
                          timeout=httpx.Timeout(10.0, read=None),
                          headers={"Authorization": f"Bearer {ADMIN_TOKEN}"}) as response:
            self.ready.set()
            for line in response.iter_lines():
                if line:
                    event = json.loads(line)
                    if event["type"] == "ADDED":
                        self.seen.setdefault(event["object"]["metadata"]["name"], time.monotonic())


def bucket(name: str) -> dict[str, object]:
    return {"apiVersion": "apps.burrito-py.io/v1alpha1", "kind": "Bucket", "metadata": {"name": name},
            "spec": {"size": 3, "storagePool": "fast"}}


def latencies(http: httpx.Client, arrivals: LayerArrivals, prefix: str) -> list[float]:
    out = []
    for i in range(SAMPLES):
        name = f"{prefix}-{i}"
        started = time.monotonic()
        assert http.post(BUCKETS, json=bucket(name)).status_code == 201
        wait_for(lambda n=name: f"bucket-{n}" in arrivals.seen, 30, interval=0.0005)  # type: ignore[misc]
        out.append((arrivals.seen[f"bucket-{name}"] - started) * 1000)
    return out


def main() -> None:
    with tempfile.TemporaryDirectory() as tmp, ApiServer(pod_log_dir=Path(tmp) / "logs") as api:
        kubeconfig = Path(tmp) / "kubeconfig"
        api.write_kubeconfig(kubeconfig)
        applier = Applier(api.url)
        for crd in generate_crds().values():
            applier.apply(crd)
        applier.close()
        settings = ControllerSettings(datastore_url="http://127.0.0.1:9", git_cache_dir=Path(tmp) / "git",
                                      metrics_port=0)
        with ControllerThread(settings, kubeconfig), \
                httpx.Client(base_url=api.url, timeout=30, headers=api.admin_headers) as http:
            arrivals = LayerArrivals(api.url)
            arrivals.start()
            arrivals.ready.wait(10)
            http.post(DEFS, json=DEFINITION)
            wait_for(lambda: http.get(BUCKETS).status_code == 200, 30, interval=0.01)
            time.sleep(0.5)  # let the definition's own writes settle

            empty = latencies(http, arrivals, "solo")

            started = time.monotonic()
            for i in range(BACKGROUND):
                assert http.post(BUCKETS, json=bucket(f"bulk-{i}")).status_code == 201
            wait_for(lambda: sum(n.startswith("bucket-bulk-") for n in arrivals.seen) == BACKGROUND, 300,
                     interval=0.05)
            bulk_seconds = time.monotonic() - started
            time.sleep(2.0)  # the layer controller's first pass over the new layers
            loaded = latencies(http, arrivals, "loaded")

    print(f"AGL instance -> layer: median {statistics.median(empty):.1f} ms, p90 "
          f"{statistics.quantiles(empty, n=10)[-1]:.1f} ms over {SAMPLES} instances (empty kind)")
    print(f"AGL instance -> layer: median {statistics.median(loaded):.1f} ms, p90 "
          f"{statistics.quantiles(loaded, n=10)[-1]:.1f} ms over {SAMPLES} instances ({BACKGROUND} already present)")
    print(f"AGL bulk: {BACKGROUND} instances created back to back -> all {BACKGROUND} layers in {bulk_seconds:.1f} s "
          f"({BACKGROUND / bulk_seconds:.0f} layers/s)")


if __name__ == "__main__":
    main()
