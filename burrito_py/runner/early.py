"""The run and the layer, read while the rest of the runner imports (issue 31: the runner within 10 % of bare
Terraform; docs/architecture.md §14 "Runner start-up costs").

`burrito-py runner start` imports this module first (the Kubernetes client only: `http.client` and `ssl`) and starts
the two reads, which wait on the API server in a thread while the attempt's own modules import (~25 ms with a
core idle otherwise); `Runner.run` takes what they got. Nothing here decides: an environment that does not name the
run, the layer and the namespace reads nothing, and every failure is handed to the attempt as it came, which
reports it exactly as it does its own reads (the same order, the same exit codes).
"""

from __future__ import annotations

import threading
from collections.abc import Mapping
from typing import Any, NamedTuple

from burrito_py.runner.kube import Kube, KubeError

__all__ = ["Bodies", "EarlyReads", "read_run_and_layer"]

# What reading an object gave: its body, or the API's refusal.
Outcome = dict[str, Any] | KubeError


class Bodies(NamedTuple):
    """The run's outcome, then the layer's (None: not read, because the run's read failed)."""

    run: Outcome
    layer: Outcome | None


def read_run_and_layer(kube: Kube, namespace: str, run: str, layer: str) -> Bodies:
    """The run, then its layer, on `kube`'s one connection; the layer is not read when the run cannot be."""
    try:
        body = kube.get("terraformruns", namespace, run, "TerraformRun")
    except KubeError as exc:
        return Bodies(exc, None)
    try:
        return Bodies(body, kube.get("terraformlayers", namespace, layer, "TerraformLayer"))
    except KubeError as exc:
        return Bodies(body, exc)


class EarlyReads:
    """The API client and the two reads, begun in a thread by `start`. The attempt takes them (`take`) for the
    names it has checked, or they are `discard`ed: the client's private directory (inline key material of a
    kubeconfig) never outlives the process."""

    def __init__(self, names: tuple[str, str, str] | None) -> None:
        self.names = names  # (namespace, run, layer) as the environment gave them; None: nothing read
        self._kube: Kube | KubeError | None = None
        self._bodies: Bodies | None = None
        self._taken = False
        self._thread: threading.Thread | None = None
        if names is not None:
            self._thread = threading.Thread(target=self._read, name="burrito-py-runner-early", daemon=True)
            self._thread.start()

    @classmethod
    def start(cls, environ: Mapping[str, str]) -> EarlyReads:
        names = tuple(environ.get(name, "").strip() for name in
                      ("BURRITO_RUNNER_LAYER_NAMESPACE", "BURRITO_RUNNER_RUN", "BURRITO_RUNNER_LAYER_NAME"))
        return cls((names[0], names[1], names[2]) if all(names) else None)

    def _read(self) -> None:
        assert self.names is not None
        try:
            kube = Kube.from_config()
        except KubeError as exc:
            self._kube = exc
            return
        self._kube = kube
        self._bodies = read_run_and_layer(kube, *self.names)

    def take(self, namespace: str, run: str, layer: str) -> tuple[Kube | KubeError, Bodies | None] | None:
        """The client (or why there is none) and the bodies, for these names only; None: the attempt reads them
        itself. The client is the caller's from now on (its connection, and closing it)."""
        if self._thread is None or self._taken or self.names != (namespace, run, layer):
            return None
        self._thread.join()
        self._taken = True
        assert self._kube is not None
        return self._kube, self._bodies

    def discard(self) -> None:
        """Close the client unless the attempt took it."""
        if self._thread is None or self._taken:
            return
        self._thread.join()
        self._taken = True
        if self._kube is not None and not isinstance(self._kube, KubeError):
            self._kube.close()
