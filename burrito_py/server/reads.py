"""Reads the REST API and the UI share: a layer's runs as the controllers order them, and where the datastore
keeps a run's artifacts."""

from __future__ import annotations

import functools
import json
import logging
import re
from collections.abc import Callable, Mapping
from typing import Any

import anyio.to_thread

from burrito_py.api import annotations as ann
from burrito_py.datastore.client import DatastoreClient, DatastoreError, PlanFormat
from burrito_py.kube.client import Body, Kube, crd_path
from burrito_py.kube.inventory import creation_order
from burrito_py.plans.masking import (
    SecretValues,
    load_json,
    masked_document,
    run_secret_variables,
    scrub_text,
    values_to_hide,
)
from burrito_py.plans.model import PlanFormatError
from burrito_py.server.views import run_layer

log = logging.getLogger(__name__)

# DNS-1123 label (namespaces) and subdomain (object names), as the Kubernetes API validates them.
NAMESPACE_PATTERN = r"^[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?$"
NAME_PATTERN = r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$"
NAME = re.compile(NAME_PATTERN)
NAMESPACE = re.compile(NAMESPACE_PATTERN)


class NoArtifacts(Exception):
    """The run names no layer whose artifacts the server may read (the message says why)."""


async def layer_runs(kube: Kube, namespace: str, name: str) -> list[Body]:
    """The layer's TerraformRuns, newest first (ordered as the controllers order them, sub-second ties too)."""
    selector = f"{ann.LABEL_LAYER}={ann.layer_label(name)}"  # a hash for names over 63 characters
    runs = await kube.list(crd_path("terraformruns", namespace), label_selector=selector)
    runs.sort(key=creation_order, reverse=True)
    # The label is how the controllers find a layer's runs; spec.layer confirms it.
    return [r for r in runs if run_layer(r) == (namespace, name)]


def artifacts_of(run: Body, visible: Callable[[str], bool]) -> tuple[str, str]:
    """(namespace, layer) under which the datastore keeps the run's plans and logs. Both come from the run's
    spec, which whoever may create runs writes: they become datastore path segments, read with the server's
    own (admin) token, so anything but a valid namespace and name (`/`, `..`, `#`, `?`) would let a run
    point the server at another object — another layer's outputs, say."""
    layer_ns, layer = run_layer(run)
    name = f"{run['metadata']['namespace']}/{run['metadata']['name']}"
    if layer is None or not NAME.fullmatch(layer) or len(layer) > 253 or not NAMESPACE.fullmatch(layer_ns):
        raise NoArtifacts(f"TerraformRun {name} names no valid layer, so it has no plans or logs")
    if layer_ns != run["metadata"]["namespace"]:
        # The controllers never run it (a run works only for a layer of its own namespace), so whatever is stored
        # under that layer is another run's, and this run's status (what its views mask) says nothing of it.
        raise NoArtifacts(f"TerraformRun {name} is for a layer of the namespace {layer_ns}: a run works only for a "
                          "layer of its own namespace, so it has no plans or logs")
    if not visible(layer_ns):
        raise NoArtifacts(f"TerraformRun {name} is for a layer in {layer_ns}, a namespace this server does not "
                          "manage")
    return layer_ns, layer


def recorded_attempts(run: Body) -> set[int]:
    """The attempts the controllers recorded on the run (`status.attempts[].number`)."""
    attempts = (run.get("status") or {}).get("attempts") or ()
    return {a["number"] for a in attempts if isinstance(a, Mapping) and isinstance(a.get("number"), int)}


class ReadFailure(Exception):
    """An answer other than success for a datastore read: 404 naming what is missing, 502/503 when the datastore
    failed. The REST API answers it as JSON, the UI as a page; the message never holds a value."""

    def __init__(self, status: int, message: str) -> None:
        super().__init__(message)
        self.status = status


class Artifacts:
    """A run's plans and logs as the server shows them, masked (docs/architecture.md §11.2): every value that came
    from a Secret (the run inputs record's `secretVariables`), passed in as a sensitive upstream output, or declared
    sensitive, replaced by Terraform's `(sensitive value)` wherever it occurs. Read with the server's admin token:
    callers authorize first."""

    def __init__(self, datastore: DatastoreClient) -> None:
        self.datastore = datastore

    async def _read(self, call: Callable[[], bytes], missing: str) -> bytes:
        try:
            return await anyio.to_thread.run_sync(call)
        except DatastoreError as exc:
            if exc.status_code == 404:
                raise ReadFailure(404, missing) from None
            log.warning("server: datastore error: %s", exc)
            if exc.status_code is None:
                raise ReadFailure(503, "the datastore is unavailable") from None
            raise ReadFailure(502, f"the datastore refused the server's request (HTTP {exc.status_code})") from None

    async def _optional(self, call: Callable[[], bytes]) -> bytes | None:
        try:
            return await self._read(call, "")
        except ReadFailure as exc:
            if exc.status == 404:
                return None
            raise

    async def state_versions(self, ns: str, layer: str) -> list[dict[str, Any]]:
        """The records of a managed-state layer's kept versions (docs/architecture.md §10.6), oldest first; [] when
        it has none."""
        raw = await self._optional(functools.partial(self.datastore.state_versions, ns, layer))
        parsed = json.loads(raw) if raw else []
        return [item for item in parsed if isinstance(item, dict)] if isinstance(parsed, list) else []

    async def state_version(self, ns: str, layer: str, serial: int) -> bytes:
        """One version's state as stored, unmasked: only for callers who may read the namespace's Secrets."""
        return await self._read(functools.partial(self.datastore.get_state_version, ns, layer, serial),
                                f"layer {ns}/{layer} has no state version {serial}")

    async def store_rollback(self, ns: str, layer: str, body: bytes, serial: int, by: str) -> dict[str, Any]:
        """Store `body` (an earlier version, re-serialled) as the next version, recorded as a rollback by `by`. A 409
        (locked, or a run wrote meanwhile) is a ReadFailure 409 with the datastore's reason."""
        try:
            return await anyio.to_thread.run_sync(self.datastore.post_state, ns, layer, body, serial, by)
        except DatastoreError as exc:
            if exc.status_code == 409:
                raise ReadFailure(409, f"rollback refused: {exc}") from None
            log.warning("server: datastore error: %s", exc)
            if exc.status_code is None:
                raise ReadFailure(503, "the datastore is unavailable") from None
            raise ReadFailure(502, f"the datastore refused the server's request (HTTP {exc.status_code})") from None

    async def raw_plan(self, where: tuple[str, str], run: str, attempt: int | None, fmt: PlanFormat,
                       missing: str) -> bytes:
        """The stored bytes, unmasked: only for callers who may read the layer namespace's Secrets."""
        return await self._read(functools.partial(self.datastore.get_plan, *where, run, attempt, fmt), missing)

    async def hidden_values(self, run: Body, where: tuple[str, str], plan: Mapping[str, Any] | None = None,
                            *, plan_attempt: int | None = None) -> SecretValues:
        """What masked views of this run hide: from its inputs record and plan (`plan` when already read), and,
        for an apply, from the plan run it applies. A datastore failure is a ReadFailure (never shown unmasked)."""
        name = str(run["metadata"]["name"])
        sources: list[tuple[str, int | None, Mapping[str, Any] | None]] = [(name, plan_attempt, plan)]
        artifact = (run.get("spec") or {}).get("artifact") or {}
        if isinstance(artifact, Mapping) and isinstance(artifact.get("run"), str) and NAME.fullmatch(artifact["run"]):
            number = artifact.get("attempt")
            sources.append((artifact["run"], number if isinstance(number, int) and number > 0 else None, None))
        hide = SecretValues()
        env_secrets = run_secret_variables(run)  # the same pods' environment for the plan run it applies
        for run_name, attempt, known in sources:
            raw = await self._optional(functools.partial(self.datastore.get_inputs, *where, run_name))
            record = load_json(raw) if raw is not None else None
            document = known
            if document is None:
                stored = await self._optional(functools.partial(self.datastore.get_plan, *where, run_name, attempt,
                                                                "json"))
                document = load_json(stored) if stored is not None else None
            hide = hide.merge(values_to_hide(record, document, env_secrets))
        return hide

    @staticmethod
    def require_own(run: Body, attempt: int | None, missing: str) -> None:
        """Masked views read only what the run's own attempts stored (`attempt`, or any when None): what they mask
        comes from the run's status (its pods' Secret-fed variables), so artifacts stored under its name by an
        earlier run of that name (one trimmed from history, its objects kept) must not be shown masked by this
        one's status: a look-alike run that never ran would show them unmasked. 404 `missing` otherwise."""
        recorded = recorded_attempts(run)
        if not recorded or (attempt is not None and attempt not in recorded):
            raise ReadFailure(404, missing)

    async def masked_plan(self, run: Body, where: tuple[str, str], attempt: int | None, fmt: str,
                          missing: str) -> bytes:
        """`pretty` or `short` text, or `masked-json` (the allow-listed JSON document), masked: of the run's own
        attempts only (`require_own`)."""
        self.require_own(run, attempt, missing)
        name = str(run["metadata"]["name"])
        stored_json = await self._optional(functools.partial(self.datastore.get_plan, *where, name, attempt, "json"))
        document = load_json(stored_json) if stored_json is not None else None
        if fmt == "masked-json":
            if stored_json is None:
                raise ReadFailure(404, missing)
            if document is None:
                raise ReadFailure(502, "the stored plan JSON is not a JSON object")
            hide = await self.hidden_values(run, where, document, plan_attempt=attempt)
            try:
                masked = masked_document(document, hide)
            except PlanFormatError as exc:
                raise ReadFailure(502, f"the stored plan cannot be read: {exc}") from None
            return json.dumps(masked, indent=2).encode()
        text = await self._read(functools.partial(self.datastore.get_plan, *where, name, attempt, fmt), missing)  # type: ignore[arg-type]
        hide = await self.hidden_values(run, where, document, plan_attempt=attempt)
        return text if hide.empty else scrub_text(text.decode("utf-8", "replace"), hide).encode()

    async def logs(self, run: Body, where: tuple[str, str], attempt: int, missing: str,
                   hide: SecretValues | None = None) -> bytes:
        """An attempt's log, masked as the plan views are (the runner masks Secret values already; this also covers
        what it could not know). `hide`: `hidden_values` of the run, when already known. Of the run's own
        attempts only (`require_own`)."""
        self.require_own(run, attempt, missing)
        data = await self._read(functools.partial(self.datastore.get_logs, *where, str(run["metadata"]["name"]),
                                                  attempt), missing)
        if hide is None:
            hide = await self.hidden_values(run, where)
        return data if hide.empty else scrub_text(data.decode("utf-8", "replace"), hide).encode()
