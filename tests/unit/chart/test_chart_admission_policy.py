"""The chart's ValidatingAdmissionPolicies are `policy_objects`, named after the release: the run-namespace one
(issue 11, item 15) refuses exactly the cross-namespace runs, the layer-annotations one lets only the server set
a plan policy override, only the controllers set the `runner.burrito-py.io/` annotations, and a runner change
no layer at all (issue 24), when the emulator's admission evaluates them."""

from __future__ import annotations

from typing import Any

import pytest
from burrito_local.kube_admission_policy import AdmissionRequest, admit

from burrito_py.api import annotations as ann
from burrito_py.chart.admission_policy import (
    ANNOTATION_MESSAGE,
    MESSAGE,
    OPERATION_BY_MESSAGE,
    OPERATION_RUN_MESSAGE,
    OVERRIDE_MESSAGE,
    RUNNER_MESSAGE,
    policy_objects,
)
from burrito_py.chart.chart import render_chart


def admission_objects(values: dict[str, object], release: str = "rel") -> list[dict[str, object]]:
    return [d for d in render_chart(values, release, "ns") if d["kind"].startswith("ValidatingAdmissionPolicy")]


def test_the_chart_renders_policy_objects_under_the_release_name():
    rendered = admission_objects({})
    for doc in rendered:
        assert doc["metadata"]["labels"]["app.kubernetes.io/instance"] == "rel"  # type: ignore[index]
        del doc["metadata"]["labels"]  # type: ignore[attr-defined]
    assert rendered == policy_objects("rel", ["system:serviceaccount:ns:rel-server"], "burrito-py-runner",
                                      ["system:serviceaccount:ns:rel-controllers"])
    assert [d["metadata"]["name"] for d in rendered] == ["rel-run-namespace", "rel-run-namespace",  # type: ignore[index]
                                                         "rel-layer-annotations", "rel-layer-annotations"]
    assert admission_objects({"admissionPolicy": {"enabled": False}}) == []


def test_the_controllers_honour_overrides_only_where_the_policy_guards_them():
    """Without the policy anyone who may patch a layer writes its override naming anyone: the controllers are told
    (BURRITO_PY_ADMISSION_POLICY), and then honour none (plan_review.UNGUARDED_OVERRIDE)."""
    def told(values: dict[str, object]) -> object:
        config = next(d for d in render_chart(values, "rel", "ns")
                      if d["kind"] == "ConfigMap" and d["metadata"]["name"] == "rel-controllers")  # type: ignore[index]
        return config["data"]["BURRITO_PY_ADMISSION_POLICY"]  # type: ignore[index]

    assert (told({}), told({"admissionPolicy": {"enabled": False}})) == ("true", "false")


def test_the_policy_refuses_a_cross_namespace_run_and_admits_the_others():
    policy, binding = policy_objects("burrito-py", [SERVER], RUNNER, [CONTROLLERS])[:2]

    def outcome(layer: dict[str, str]) -> str | None:
        run = {"metadata": {"name": "r", "namespace": "tenant"}, "spec": {"action": "plan", "layer": layer}}
        request = AdmissionRequest("CREATE", "terraform.burrito-py.io", "v1alpha1", "terraformruns", "TerraformRun",
                                   "r", "tenant", run)
        denial = admit([policy], [binding], request).denial
        return None if denial is None else denial.message

    assert outcome({"name": "l", "namespace": "default"}) == (
        'terraformruns.terraform.burrito-py.io "r" is forbidden: ValidatingAdmissionPolicy '
        f"'burrito-py-run-namespace' with binding 'burrito-py-run-namespace' denied request: {MESSAGE}")
    assert outcome({"name": "l", "namespace": "tenant"}) is None
    assert outcome({"name": "l"}) is None


SERVER = "system:serviceaccount:burrito-py-system:burrito-py-server"
CONTROLLERS = "system:serviceaccount:burrito-py-system:burrito-py-controllers"
RUNNER = "burrito-py-runner"
OVERRIDE = {ann.OVERRIDE_POLICY: '{"sum": "sha256:aa", "user": "alice", "groups": []}'}


def layer_update(user: str, old: dict[str, str] | None, new: dict[str, str]) -> str | None:
    policy, binding = policy_objects("burrito-py", [SERVER], RUNNER, [CONTROLLERS])[2:]

    def body(annotations: dict[str, str] | None) -> dict[str, Any]:
        meta: dict[str, Any] = {"name": "app", "namespace": "team"}
        if annotations is not None:
            meta["annotations"] = annotations
        return {"metadata": meta, "spec": {}}

    request = AdmissionRequest("UPDATE" if old is not None else "CREATE", "terraform.burrito-py.io", "v1alpha1",
                               "terraformlayers", "TerraformLayer", "app", "team", body(new),
                               body(old) if old is not None else None, user={"username": user})
    denial = admit([policy], [binding], request).denial
    return None if denial is None else denial.message


RUNNER_SA = f"system:serviceaccount:team:{RUNNER}"
PLAN = {ann.PLAN_RUN: "app-plan-1/1", ann.PLAN_SUM: "sha256:aa"}


@pytest.mark.parametrize(("user", "old", "new", "denied"), [
    (SERVER, {}, OVERRIDE, None),                                        # the server sets it
    ("alice", {}, OVERRIDE, OVERRIDE_MESSAGE),                           # nobody else does, not even alice
    ("alice", None, OVERRIDE, OVERRIDE_MESSAGE),                         # nor on create
    ("alice", OVERRIDE, {**OVERRIDE, "x": "y"}, None),                   # others may leave it as it is
    (CONTROLLERS, OVERRIDE, {}, None),                                   # and remove it
    (CONTROLLERS, {}, PLAN, None),                                       # the controllers record a plan
    (CONTROLLERS, PLAN, {**PLAN, ann.PLAN_RUN: "app-plan-2/1"}, None),   # and the next one
    # Issue 24, finding 1 (b): a runner (tenant code) may change nothing of a layer, its "own" annotations neither.
    (RUNNER_SA, {}, {ann.PLAN_SUM: "sha256:aa"}, RUNNER_MESSAGE),
    (RUNNER_SA, PLAN, {**PLAN, ann.PLAN_RUN: "app-pr-7/1"}, RUNNER_MESSAGE),
    (RUNNER_SA, {}, {ann.APPROVE_PLAN: "sha256:aa"}, RUNNER_MESSAGE),    # never approves
    (RUNNER_SA, {ann.SYNC_NOW: "x"}, {}, RUNNER_MESSAGE),                # nor removes others'
    (RUNNER_SA, {}, {"unrelated": "x"}, RUNNER_MESSAGE),                 # nor anything else
    (RUNNER_SA, PLAN, PLAN, RUNNER_MESSAGE),                             # not even a no-op
    (RUNNER_SA, {}, OVERRIDE, OVERRIDE_MESSAGE),
    # A tenant user with `patch` on layers cannot point the layer at a plan of their choosing either.
    ("alice", {}, PLAN, ANNOTATION_MESSAGE),
    ("alice", None, PLAN, ANNOTATION_MESSAGE),                           # not on create
    ("alice", PLAN, {**PLAN, ann.PLAN_SUM: "sha256:ff"}, ANNOTATION_MESSAGE),
    ("alice", PLAN, {**PLAN, ann.APPROVE_PLAN: "sha256:aa"}, None),      # approving leaves them as they are
    ("alice", PLAN, {}, None),                                           # removing them plans again: allowed
    ("alice", {}, {ann.APPROVE_PLAN: "sha256:aa"}, None),
    # Where a migration put the state (§5.12): only the controllers write it, and nobody else removes it (runs would
    # follow the spec to the copy the migration left behind: a split state).
    (CONTROLLERS, {}, {ann.STATE_LOCATION: "managed"}, None),
    (CONTROLLERS, {ann.STATE_LOCATION: "managed"}, {ann.STATE_LOCATION: "code"}, None),
    ("alice", {}, {ann.STATE_LOCATION: "managed"}, ANNOTATION_MESSAGE),
    ("alice", {ann.STATE_LOCATION: "managed"}, {ann.STATE_LOCATION: "code"}, ANNOTATION_MESSAGE),
    ("alice", {**PLAN, ann.STATE_LOCATION: "managed"}, {ann.STATE_LOCATION: "managed"}, None),
    ("alice", {**PLAN, ann.STATE_LOCATION: "managed"}, PLAN, ANNOTATION_MESSAGE),
])
def test_layer_annotations(user: str, old: dict[str, str] | None, new: dict[str, str], denied: str | None) -> None:
    message = layer_update(user, old, new)
    if denied is None:
        assert message is None
    else:
        assert message is not None and message.endswith(denied), message


STATE_RM = {ann.OPERATION: '{"operation": "state-rm", "address": "aws_s3_bucket.logs"}'}


@pytest.mark.parametrize(("user", "old", "new", "denied"), [
    # A day-2 operation's request (§5.12) names its author: a user names only themselves...
    ("alice", {}, {**STATE_RM, ann.OPERATION_BY: "alice"}, None),
    ("alice", {}, {**STATE_RM, ann.OPERATION_BY: "bob"}, OPERATION_BY_MESSAGE),   # not someone else
    ("alice", {}, STATE_RM, OPERATION_BY_MESSAGE),                               # nor nobody
    ("alice", None, {**STATE_RM, ann.OPERATION_BY: "bob"}, OPERATION_BY_MESSAGE),
    # ...nor changes the request under another's name (or their name under another request)
    ("alice", {**STATE_RM, ann.OPERATION_BY: "bob"}, {ann.OPERATION: "{}", ann.OPERATION_BY: "bob"},
     OPERATION_BY_MESSAGE),
    ("alice", {**STATE_RM, ann.OPERATION_BY: "bob"}, {**STATE_RM, ann.OPERATION_BY: "carol"}, OPERATION_BY_MESSAGE),
    ("alice", {**STATE_RM, ann.OPERATION_BY: "bob"}, {**STATE_RM, ann.OPERATION_BY: "bob", "x": "y"}, None),
    (CONTROLLERS, {**STATE_RM, ann.OPERATION_BY: "bob"}, {}, None),             # the controllers consume it
    (SERVER, {}, {**STATE_RM, ann.OPERATION_BY: "bob"}, None),                  # the server names its caller
    (RUNNER_SA, {}, {**STATE_RM, ann.OPERATION_BY: RUNNER_SA}, RUNNER_MESSAGE),  # a runner asks for nothing
])
def test_operation_requests_name_their_author(user: str, old: dict[str, str] | None, new: dict[str, str],
                                              denied: str | None) -> None:
    message = layer_update(user, old, new)
    if denied is None:
        assert message is None
    else:
        assert message is not None and message.endswith(denied), message


def test_only_the_controllers_write_a_run_with_an_operation() -> None:
    policy, binding = policy_objects("burrito-py", [SERVER], RUNNER, [CONTROLLERS])[:2]
    operation = {"requestedBy": "alice", "address": "a.b"}

    def outcome(user: str, spec: dict[str, Any], old: dict[str, Any] | None = None) -> str | None:
        def run(s: dict[str, Any]) -> dict[str, Any]:
            return {"metadata": {"name": "r", "namespace": "tenant"}, "spec": s}

        request = AdmissionRequest("UPDATE" if old else "CREATE", "terraform.burrito-py.io", "v1alpha1",
                                   "terraformruns", "TerraformRun", "r", "tenant", run(spec),
                                   run(old) if old else None, user={"username": user})
        denial = admit([policy], [binding], request).denial
        return None if denial is None else denial.message

    rm = {"action": "state-rm", "layer": {"name": "l"}, "operation": operation}
    assert outcome(CONTROLLERS, rm) is None
    assert (outcome("alice", rm) or "").endswith(OPERATION_RUN_MESSAGE)     # a forged requester, say
    assert (outcome(SERVER, rm) or "").endswith(OPERATION_RUN_MESSAGE)
    assert outcome("alice", {"action": "plan", "layer": {"name": "l"}}) is None  # other runs as before
    changed = {**rm, "operation": {**operation, "requestedBy": "bob"}}
    assert (outcome("alice", changed, rm) or "").endswith(OPERATION_RUN_MESSAGE)
    assert outcome("alice", {**rm, "destroy": False}, rm) is None          # left as it is
