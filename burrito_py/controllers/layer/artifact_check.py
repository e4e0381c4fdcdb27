"""Which plan an apply may take: the controllers' decision, never a runner's claim (docs/architecture.md §5.2;
issue 24, design item 4). Pure.

The layer's `plan-run` / `plan-sum` annotations name the plan to apply. They are written by the run controller
(and an admission policy lets no one else set them), but the layer controller does not take them on trust: an
apply run is created only for a plan that is

(a) a plan run of that very layer, made by the controllers: in their inventory, owned by the layer (owner
    reference to its uid), carrying its layer label, naming it in `spec.layer`, `action: plan`, and not a pull
    request's plan (`spec.pullRequest`);
(b) Succeeded;
(c) at the attempt the run's status records as its last, successful attempt;
(d) whose `plan.bin` sum, recorded by the run controller from the datastore for that attempt, is `plan-sum`.

Anything else is refused with the reason (a condition and a Warning event on the layer), and never applied.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

from burrito_py.api import annotations as ann

if TYPE_CHECKING:
    from burrito_py.controllers.layer.run_view import RunView
CONDITION = "IsPlanArtifactValid"
REFUSED = "ArtifactRefused"


@dataclass(frozen=True, slots=True)
class LayerIdentity:
    uid: str
    namespace: str
    name: str


def parse_artifact(value: str | None) -> tuple[str, int] | None:
    """`<run>/<attempt>` → (run, attempt); None when absent or malformed."""
    if not value or "/" not in value:
        return None
    run, _, attempt = value.rpartition("/")
    if not run or not attempt.isdigit():
        return None
    return run, int(attempt)


def artifact_refusal(layer: LayerIdentity, plan_run: str | None, plan_sum: str | None, run: RunView | None
                     ) -> str | None:
    """None when the plan `plan_run` names (`<run>/<attempt>`) may be applied as `plan_sum`, else why not.
    `run`: the run of that name in the layer's namespace, as the controllers hold it (None: they hold none)."""
    where = parse_artifact(plan_run)
    if where is None or not plan_sum:
        return f"plan-run {plan_run!r} does not name a plan as <run>/<attempt> with a plan-sum"
    name, attempt = where
    if run is None or run.name != name:
        return f"run {name} is not a run the controllers hold in namespace {layer.namespace}"
    if layer.uid not in run.owners:
        return f"run {name} is not owned by this layer (uid {layer.uid})"
    if run.layer_label != ann.layer_label(layer.name):
        return f"run {name} does not carry this layer's label {ann.LABEL_LAYER}"
    if run.layer_name != layer.name or (run.layer_namespace or layer.namespace) != layer.namespace:
        return f"run {name} works for layer {run.layer_namespace or layer.namespace}/{run.layer_name}"
    if run.pull_request is not None:
        return f"run {name} is the plan of pull request {run.pull_request}, which is never applied"
    if run.action != "plan":
        return f"run {name} is an {run.action} run, not a plan run"
    if run.state != "Succeeded":
        return f"run {name} is {run.state or 'not started'}, not Succeeded"
    if run.result_attempt != attempt:
        last = f"attempt {run.result_attempt}" if run.result_attempt is not None else "no successful attempt"
        return f"attempt {attempt} is not the last successful attempt of run {name} (its status records {last})"
    if run.result_sum != plan_sum:
        return (f"plan-sum {plan_sum} is not the sum the controllers recorded for run {name} attempt {attempt} "
                f"({run.result_sum or 'none'})")
    return None
