"""Layer outputs: after each successful apply, the names of its outputs go to `status.outputs` and, with
`spec.writeOutputsToSecret`, their values to that Secret in the layer's namespace.

The runner uploads `terraform output -json` under the apply's attempt and then sets `apply-run`
(`<run>/<attempt>`). `status.outputsSync` records which apply (and which writeOutputsToSecret) the status and
the Secret reflect, so the decision (`outputs_to_sync`) is pure and a layer whose last apply is already
reflected costs no datastore read and no API call: one datastore read per successful apply, or per change of
writeOutputsToSecret.

The Secret: one key per output (or per `old:new` mapping); strings as they are, other values JSON-encoded;
sensitive outputs included (it is a Secret); label `burrito-py.io/layer`, annotation
`burrito-py.io/outputs-run`, owned by the layer (deleted with it). A Secret of that name the layer does not own
is never overwritten. Output values are never logged nor put in events or status: only names are.

Known limits: a Secret deleted by hand comes back at the next apply (or change of writeOutputsToSecret), not
before, since nothing reads it at rest; removing writeOutputsToSecret leaves the Secret in place.
"""

from __future__ import annotations

import asyncio
import base64
import json
import logging
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Literal

from burrito_py.api import annotations as ann
from burrito_py.api.annotations import parse_plan_run
from burrito_py.api.patterns import object_name_problem
from burrito_py.api.runner_secrets import RUNNER_SECRET
from burrito_py.controllers.context import Context
from burrito_py.kube.client import KubeError, crd_path, path
from burrito_py.kube.events import post_event
from burrito_py.kube.inventory import Body

log = logging.getLogger(__name__)

OUTPUTS_RUN = "burrito-py.io/outputs-run"  # on the Secret: `<run>/<attempt>` its values come from
RETRY_SECONDS = 30.0

__all__ = [
    "OUTPUTS_RUN",
    "OutputsReading",
    "OutputsSync",
    "OutputsUnreadable",
    "missing_outputs",
    "output_text",
    "outputs_sync",
    "outputs_to_sync",
    "parse_outputs",
    "read_outputs_sync",
    "secret_body",
    "secret_data",
    "sync_outputs",
]


class OutputsUnreadable(ValueError):
    """The stored outputs are not what `terraform output -json` prints (the message never holds a value)."""


# -- decisions (pure) -------------------------------------------------------------------------------
def _secret_spec(value: object) -> Body | None:
    """writeOutputsToSecret as compared and recorded: name, and outputs only when set."""
    if not isinstance(value, Mapping) or not value.get("name"):
        return None
    spec: Body = {"name": value["name"]}
    if value.get("outputs") is not None:
        spec["outputs"] = list(value["outputs"])
    return spec


def outputs_to_sync(layer: Mapping[str, Any]) -> Body | None:
    """The `status.outputsSync` to reach, or None when the status (and Secret) already reflect the last apply."""
    annotations = layer["metadata"].get("annotations") or {}
    applied = parse_plan_run(annotations.get(ann.APPLY_RUN))
    if applied is None:
        return None
    wanted: Body = {"run": f"{applied[0]}/{applied[1]}"}
    secret = _secret_spec((layer.get("spec") or {}).get("writeOutputsToSecret"))
    if secret is not None:
        wanted["secret"] = secret
    recorded = (layer.get("status") or {}).get("outputsSync") or {}
    current: Body = {"run": recorded.get("run")}
    if _secret_spec(recorded.get("secret")) is not None:
        current["secret"] = _secret_spec(recorded.get("secret"))
    return None if current == wanted else wanted


def parse_outputs(raw: bytes) -> dict[str, Any]:
    """Output name → value, from `terraform output -json` (`{name: {value, type, sensitive}}`)."""
    try:
        document = json.loads(raw)
    except ValueError:
        raise OutputsUnreadable("are not JSON") from None
    if not isinstance(document, dict) or not all(isinstance(o, dict) and "value" in o for o in document.values()):
        raise OutputsUnreadable("are not what `terraform output -json` prints")
    return {str(name): output["value"] for name, output in document.items()}


def output_text(value: Any) -> str:
    """A Secret value: strings as they are, anything else as JSON (what `jsondecode` in Terraform reads back)."""
    return value if isinstance(value, str) else json.dumps(value, sort_keys=True)


def _mappings(selection: Sequence[str] | None, outputs: Mapping[str, Any]) -> list[tuple[str, str]]:
    if selection is None:
        return [(name, name) for name in sorted(outputs)]
    pairs = []
    for entry in selection:
        name, _, key = entry.partition(":")
        pairs.append((name, key or name))
    return pairs


def secret_data(outputs: Mapping[str, Any], selection: Sequence[str] | None) -> dict[str, str]:
    """Secret `data` (base64): every output, or those `selection` lists (`name` or `old:new`) that exist."""
    return {
        key: base64.b64encode(output_text(outputs[name]).encode()).decode()
        for name, key in _mappings(selection, outputs)
        if name in outputs
    }


def missing_outputs(outputs: Mapping[str, Any], selection: Sequence[str] | None) -> list[str]:
    """Outputs `selection` names that the apply did not produce."""
    return [name for name, _ in _mappings(selection, outputs) if name not in outputs]


def _owner(layer: Mapping[str, Any]) -> Body:
    meta = layer["metadata"]
    return {
        "apiVersion": layer.get("apiVersion", ann.API_VERSION),
        "kind": "TerraformLayer",
        "name": meta["name"],
        "uid": meta["uid"],
        "controller": True,
        "blockOwnerDeletion": True,
    }


def owned_by(secret: Mapping[str, Any], layer: Mapping[str, Any]) -> bool:
    uid = layer["metadata"].get("uid")
    return any(ref.get("uid") == uid for ref in secret.get("metadata", {}).get("ownerReferences") or ())


def secret_body(layer: Mapping[str, Any], name: str, data: Mapping[str, str], run: str) -> Body:
    meta = layer["metadata"]
    return {
        "apiVersion": "v1",
        "kind": "Secret",
        "type": "Opaque",
        "metadata": {
            "name": name,
            "namespace": meta["namespace"],
            "labels": {ann.LABEL_LAYER: ann.layer_label(meta["name"])},
            # Open to the namespace's runners (api/runner_secrets.py): any of its layers reads these outputs through
            # dependsOn anyway, and a layer may take them as varsFrom.
            "annotations": {OUTPUTS_RUN: run, RUNNER_SECRET: "true"},
            "ownerReferences": [_owner(layer)],
        },
        "data": dict(data),
    }


@dataclass(frozen=True, slots=True)
class OutputsReading:
    """What syncing the outputs had to read (`read_outputs_sync`): the apply's outputs, or why not, and the Secret
    of that name as it is (None: absent, or not read)."""

    wanted: Body  # the status.outputsSync to reach (outputs_to_sync)
    outputs: Mapping[str, Any] | None  # None: they cannot be read now (retried) or at all (`problem`)
    problem: str | None = None  # why they are unreadable for good ("are not in the datastore", …)
    secret: Body | None = None
    secret_error: str | None = None  # the Secret could not be read: `<status> <reason>` of the API's answer


@dataclass(frozen=True, slots=True)
class OutputsSync:
    """What to do about them (pure, `outputs_sync`), in order: events before, the Secret to write (create, or
    replace at the resourceVersion read), events after it is written, the status patch; or wait and retry."""

    retry: bool = False  # after `before`, nothing else: read again in RETRY_SECONDS
    before: tuple[tuple[Literal["Normal", "Warning"], str, str], ...] = ()
    secret: Body | None = None
    replace_secret: bool = False
    after_secret: tuple[tuple[Literal["Normal", "Warning"], str, str], ...] = ()
    status: Body | None = None  # the merge patch of status.outputs and status.outputsSync


def outputs_sync(layer: Mapping[str, Any], reading: OutputsReading) -> OutputsSync:
    """Deciding: the writes that bring `status.outputs` and the Secret up to the last apply."""
    wanted = reading.wanted
    if reading.outputs is None and reading.problem is None:
        return OutputsSync(retry=True)
    before: list[tuple[Literal["Normal", "Warning"], str, str]] = []
    outputs = reading.outputs or {}
    if reading.problem is not None:  # recorded all the same: retrying cannot bring them back; the next apply will
        before.append(("Warning", "OutputsMissing", f"the outputs of apply {wanted['run']} {reading.problem}; "
                       "the outputs Secret is left as it was"))
    patch: Body = {"status": {"outputs": sorted(outputs), "outputsSync": wanted}}
    secret = wanted.get("secret")
    if reading.problem is not None or secret is None:
        return OutputsSync(before=tuple(before), status=patch)
    namespace, secret_name = layer["metadata"]["namespace"], secret["name"]
    existing = reading.secret
    if reading.secret_error is not None:
        before.append(("Warning", "OutputsSecretFailed",
                       f"cannot write Secret {namespace}/{secret_name}: {reading.secret_error}"))
        return OutputsSync(retry=True, before=tuple(before))
    if existing is not None and not owned_by(existing, layer):
        before.append(("Warning", "OutputsSecretNotOwned",
                       f"Secret {namespace}/{secret_name} exists and is not this layer's; its outputs are not "
                       "written there (delete it or choose another writeOutputsToSecret.name)"))
        return OutputsSync(retry=True, before=tuple(before))
    body = secret_body(layer, secret_name, secret_data(outputs, secret.get("outputs")), wanted["run"])
    if existing is not None:
        body["metadata"]["resourceVersion"] = existing["metadata"].get("resourceVersion")
    after: list[tuple[Literal["Normal", "Warning"], str, str]] = []
    missing = missing_outputs(outputs, secret.get("outputs"))
    if missing:
        after.append(("Warning", "OutputsMissing", "writeOutputsToSecret.outputs names outputs apply "
                      f"{wanted['run']} did not produce: " + ", ".join(missing)))
    after.append(("Normal", "OutputsWritten", f"outputs of apply {wanted['run']} written to Secret "
                  f"{namespace}/{secret_name}"))
    return OutputsSync(before=tuple(before), secret=body, replace_secret=existing is not None,
                       after_secret=tuple(after), status=patch)


# -- gathering and acting ---------------------------------------------------------------------------
async def read_outputs_sync(ctx: Context, layer: Mapping[str, Any]) -> OutputsReading | None:
    """Gathering: when the status (or the Secret) lags the last apply, its outputs from the datastore and the
    Secret as it is. None: nothing to sync (or no datastore, or the layer is being deleted)."""
    if layer["metadata"].get("deletionTimestamp") or ctx.datastore is None:
        return None
    wanted = outputs_to_sync(layer)
    if wanted is None:
        return None
    from burrito_py.datastore.client import DatastoreError

    namespace, name = layer["metadata"]["namespace"], layer["metadata"]["name"]
    run, attempt = wanted["run"].rsplit("/", 1)
    try:
        outputs = parse_outputs(await asyncio.to_thread(ctx.datastore.get_outputs, namespace, name, run, int(attempt)))
    except DatastoreError as exc:
        if exc.status_code != 404:  # unavailable or refused: try again soon
            log.warning("layer %s/%s: cannot read the outputs of %s: %s", namespace, name, wanted["run"], exc)
            return OutputsReading(wanted, None)
        return OutputsReading(wanted, None, "are not in the datastore")
    except OutputsUnreadable as exc:
        return OutputsReading(wanted, None, str(exc))
    secret = wanted.get("secret")
    existing = None
    if secret is not None:
        problem = object_name_problem(secret.get("name"))
        if problem is not None:  # a path in the name would reach another namespace's Secret: never read or written
            return OutputsReading(wanted, outputs, secret_error=f"spec.writeOutputsToSecret.name: {problem}")
        try:
            existing = await ctx.kube.get(path("v1", "secrets", namespace, secret["name"]))
        except KubeError as exc:  # e.g. 403 without RBAC on Secrets; the API's message carries no Secret data
            return OutputsReading(wanted, outputs, secret_error=f"{exc.status} {exc.reason}")
    return OutputsReading(wanted, outputs, None, existing)


async def sync_outputs(ctx: Context, layer: Body, sync: OutputsSync) -> None:
    """Executing `sync` (outputs_sync)."""
    key = (layer["metadata"]["namespace"], layer["metadata"]["name"])
    for type_, reason, message in sync.before:
        await post_event(ctx.kube, layer, type_, reason, message)
    if sync.retry:
        ctx.wake_layer(key, RETRY_SECONDS)
        return
    if sync.secret is not None:
        secret_name = sync.secret["metadata"]["name"]
        try:
            if sync.replace_secret:
                await ctx.kube.replace(path("v1", "secrets", key[0], secret_name), sync.secret)
            else:
                await ctx.kube.create(path("v1", "secrets", key[0]), sync.secret)
        except KubeError as exc:  # e.g. 403 without RBAC on Secrets; the API's message carries no Secret data
            await post_event(ctx.kube, layer, "Warning", "OutputsSecretFailed",
                             f"cannot write Secret {key[0]}/{secret_name}: {exc.status} {exc.reason}")
            ctx.wake_layer(key, RETRY_SECONDS)
            return
        for type_, reason, message in sync.after_secret:
            await post_event(ctx.kube, layer, type_, reason, message)
    if sync.status is None:
        return
    try:
        updated = await ctx.kube.merge_patch(crd_path("terraformlayers", key[0], key[1], "status"), sync.status)
    except KubeError as exc:
        log.warning("layer %s/%s: cannot record its outputs in the status: %s", key[0], key[1], exc)
        ctx.wake_layer(key, RETRY_SECONDS)
        return
    ctx.inventory.layers.observe(updated)
