"""Apply before merge (issue 30 item 3, the per-layer part of item 2; docs/architecture.md §11.3 "Apply before
merge"): the command's decision, the run controller's admission of the apply run, the lock, and what the layer
controller holds back while a pull request holds the layer. Pure."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from burrito_py.api import annotations as ann
from burrito_py.api.run import TerraformRunSpec
from burrito_py.controllers.layer.decide import CreateRun, LayerDecision
from burrito_py.controllers.layer.pull_request_lock import CONDITION, hold_for_pull_request
from burrito_py.controllers.pullrequest.decide import (
    PlanOutcome,
    PullRequestSnapshot,
    RunFacts,
    decide_pull_request,
    run_name,
)
from burrito_py.datastore.auth import plan_readable, runner_pod_binding
from burrito_py.gitproviders.client import ReviewFacts
from burrito_py.kube.conditions import Cond
from burrito_py.pullrequests.apply import (
    apply_admission,
    apply_run_name,
    layer_apply_settings,
    lock_holder,
    release_due,
    release_plan,
    requirements_for,
)
from burrito_py.pullrequests.commands import CommandFacts, LayerApply, decide_command, parse

NS = "team"
HEAD, OLD = "a" * 40, "b" * 40
SUM = "sha256:" + "1" * 64
PR = "infra-pr-7"
APP = (NS, "app")
SPEC: dict[str, Any] = {"provider": "github", "number": 7, "headSha": HEAD, "state": "open", "base": "main",
                        "repository": "infra", "fromFork": False}
ROW = {"namespace": NS, "name": "app", "path": "stacks/app", "run": "pr7-app-1", "state": "planned",
       "planSum": SUM, "planAttempt": 2}
STATUS: dict[str, Any] = {"state": "Planned", "headSha": HEAD, "layers": [ROW]}
SETTINGS: dict[str, Any] = {"enabled": True, "commands": {"allowed": ["alice"]}}
WRITE = CommandFacts(may_write=True)
OPEN = LayerApply(opted_in=True)


def decide(text: str = "/burrito-py apply app", login: str = "alice", spec: dict[str, Any] | None = None,
           settings: dict[str, Any] | None = None, facts: CommandFacts = WRITE, seen: str = HEAD,
           layers: dict[tuple[str, str], LayerApply] | None = None, name: str = PR) -> Any:
    return decide_command(parse(text), "c1", login, SPEC if spec is None else spec, STATUS,
                          SETTINGS if settings is None else settings, facts, "", seen, name,
                          {APP: OPEN} if layers is None else layers)


# --- the command --------------------------------------------------------------------------------------------------

def test_an_opted_in_layer_applies_exactly_the_plan_shown_under_a_name_of_that_plan() -> None:
    answer = decide()
    assert answer.outcome == "done"
    (order,) = answer.apply
    assert (order.layer, order.plan_run, order.attempt, order.sum) == (APP, "pr7-app-1", 2, SUM)
    assert order.run == apply_run_name(PR, 7, APP, SUM)
    assert SUM in answer.reply and order.run in answer.reply and "locked to this pull request" in answer.reply


def test_without_the_opt_in_apply_is_refused_as_before() -> None:
    answer = decide(layers={APP: LayerApply()})
    assert answer.outcome == "refused" and not answer.apply
    assert "apply-before-merge is not enabled for app (spec.pullRequests.applyBeforeMerge)" in answer.reply


def test_attack_an_apply_command_on_a_forks_pull_request_is_refused() -> None:
    """An allowed commenter with write access, on an opted-in layer, a planned head: a fork's code would run with
    the layer's credentials, so nothing is applied."""
    answer = decide(spec={**SPEC, "fromFork": True})
    assert answer.outcome == "refused" and not answer.apply and "fork" in answer.reply
    # A pull request object that does not say (never written by our server): a fork too.
    unknown = decide(spec={k: v for k, v in SPEC.items() if k != "fromFork"})
    assert unknown.outcome == "refused" and not unknown.apply


def test_attack_an_apply_written_before_a_push_moved_the_head_is_refused() -> None:
    answer = decide(seen=OLD)
    assert answer.outcome == "refused" and not answer.apply and "the plan you saw is stale" in answer.reply


def test_attack_an_apply_by_a_commenter_without_write_permission_is_refused() -> None:
    assert decide(facts=CommandFacts()).ask == "permission"
    answer = decide(facts=CommandFacts(may_write=False))
    assert answer.outcome == "refused" and not answer.apply and "no write permission" in answer.reply
    outsider = decide(login="mallory")
    assert outsider.outcome == "refused" and not outsider.apply


def test_attack_a_repeated_apply_of_the_same_plan_applies_nothing_again() -> None:
    run = apply_run_name(PR, 7, APP, SUM)
    answer = decide(layers={APP: LayerApply(True, holder=PR, applies={run: "Succeeded"})})
    assert answer.outcome == "refused" and not answer.apply and f"applied by run {run}" in answer.reply
    failed = decide(layers={APP: LayerApply(True, holder=PR, applies={run: "Failed"})})
    assert failed.outcome == "refused" and not failed.apply and "failed" in failed.reply and "plan again" in (
        failed.reply.replace("plans again", "plan again"))
    # Another comment's apply of the same plan is still refused, whoever asks again.
    other = decide(layers={APP: LayerApply(True, holder=PR, applies={run: "Running"}, requested={run: "c0"})})
    assert other.outcome == "refused" and not other.apply


def test_an_apply_of_several_layers_cut_off_partway_is_finished_when_answered_again() -> None:
    """Fault test: `/burrito-py apply` of two layers locked both and created app's apply run; the process restarted
    (or the second create failed) before db's run and before the command was recorded. Answered again, the run of
    app looked like an earlier apply: the whole command was refused ("already applied ... Nothing applied again"),
    db was never applied and stayed locked to the pull request. The runs this very comment asked for are its own
    work: the command is answered with every order again, and the existing run's create meets it (409)."""
    db = (NS, "db")
    status = {**STATUS, "layers": [ROW, {**ROW, "name": "db", "path": "stacks/db", "run": "pr7-db-1"}]}
    run = apply_run_name(PR, 7, APP, SUM)
    layers = {APP: LayerApply(True, holder=PR, applies={run: "Running"}, requested={run: "c1"}),
              db: LayerApply(True, holder=PR)}
    answer = decide_command(parse("/burrito-py apply"), "c1", "alice", SPEC, status, SETTINGS, WRITE, "", HEAD, PR,
                            layers)
    assert answer.outcome == "done", answer.reply
    assert {o.layer for o in answer.apply} == {APP, db}


def test_a_layer_held_by_another_pull_request_is_refused_naming_it() -> None:
    answer = decide(layers={APP: LayerApply(True, holder="infra-pr-3")})
    assert answer.outcome == "refused" and not answer.apply
    assert "locked to pull request infra-pr-3" in answer.reply
    # Held by this very pull request (an earlier apply of another plan): it applies.
    assert decide(layers={APP: LayerApply(True, holder=PR)}).apply


def test_a_plan_without_its_recorded_sum_is_stale_and_not_applied() -> None:
    status = {**STATUS, "layers": [{k: v for k, v in ROW.items() if k != "planSum"}]}
    answer = decide_command(parse("/burrito-py apply app"), "c1", "alice", SPEC, status, SETTINGS, WRITE, "", HEAD,
                            PR, {APP: OPEN})
    assert answer.outcome == "refused" and not answer.apply and "stale" in answer.reply


def test_a_layers_own_requirements_add_to_the_repositorys() -> None:
    layers = {APP: LayerApply(True, ("approved",))}
    assert decide(layers=layers).ask == "review"
    by_author = CommandFacts(True, ReviewFacts("carol", ("carol",), True, 0))
    refused = decide(layers=layers, facts=by_author)
    assert refused.outcome == "refused" and "approved: no reviewer other than the author" in refused.reply
    approved = CommandFacts(True, ReviewFacts("carol", ("dan",), True, 0))
    assert decide(layers=layers, facts=approved).apply
    assert requirements_for(["undiverged"], [("approved",), ()]) == ["approved", "undiverged"]
    assert requirements_for([], []) == []


def test_unlock_releases_this_pull_requests_layers_and_warns_they_stay_applied() -> None:
    none = decide("/burrito-py unlock", layers={APP: OPEN})
    assert none.outcome == "done" and not none.unlock and "holds no lock" in none.reply
    held = decide("/burrito-py unlock", layers={APP: LayerApply(True, holder=PR), (NS, "db"): LayerApply(
        True, holder="infra-pr-3")})
    assert held.outcome == "done" and held.unlock == (APP,) and "still live" in held.reply
    running = decide("/burrito-py unlock", layers={APP: LayerApply(True, holder=PR, applies={"r1": "Running"})})
    assert running.outcome == "refused" and not running.unlock and "still applying" in running.reply
    assert decide("/burrito-py unlock", login="mallory", layers={APP: LayerApply(True, holder=PR)}).unlock == ()


@given(fork=st.booleans(), opted=st.booleans(), holder=st.sampled_from([None, PR, "infra-pr-3"]),
       may_write=st.sampled_from([None, True, False]), seen=st.sampled_from([HEAD, OLD, ""]),
       state=st.sampled_from(["open", "closed", "merged"]), login=st.sampled_from(["alice", "mallory"]),
       applied=st.booleans())
def test_an_apply_is_ordered_only_when_every_check_passes(fork: bool, opted: bool, holder: str | None,
                                                          may_write: bool | None, seen: str, state: str, login: str,
                                                          applied: bool) -> None:
    applies = {apply_run_name(PR, 7, APP, SUM): "Succeeded"} if applied else {}
    answer = decide(login=login, spec={**SPEC, "fromFork": fork, "state": state},
                    facts=CommandFacts(may_write=may_write), seen=seen,
                    layers={APP: LayerApply(opted, holder=holder, applies=applies)})
    if answer.apply:
        assert (not fork and opted and holder in (None, PR) and may_write is True and seen in (HEAD, "")
                and state == "open" and login == "alice" and not applied)
        assert [(o.plan_run, o.attempt, o.sum) for o in answer.apply] == [("pr7-app-1", 2, SUM)]
    else:
        assert answer.outcome != "done" or not (not fork and opted and holder in (None, PR))


# --- settings, names, the lock ------------------------------------------------------------------------------------

def test_layer_settings_and_run_names() -> None:
    assert layer_apply_settings({"spec": {}}) == (False, ())
    assert layer_apply_settings({"spec": {"pullRequests": {"applyBeforeMerge": True,
                                                           "applyRequirements": ["mergeable"]}}}) == (
        True, ("mergeable",))
    names = {apply_run_name(PR, 7, APP, s) for s in (SUM, "sha256:" + "2" * 64)}
    assert len(names) == 2 and all(len(n) <= 63 and n.startswith("pr7-apply-app-") for n in names)
    assert apply_run_name(PR, 7, APP, SUM) == apply_run_name(PR, 7, APP, SUM)
    assert apply_run_name(PR, 7, APP, SUM) != run_name(PR, APP, HEAD, 7)


def _layer(holder: str | None, branch: str = "c1", locked_at: str = "c1") -> dict[str, Any]:
    annotations = {ann.BRANCH_COMMIT: branch}
    if holder:
        annotations |= {ann.PULL_REQUEST_LOCK: holder, ann.PULL_REQUEST_LOCK_BRANCH: locked_at}
    return {"metadata": {"name": "app", "namespace": NS, "annotations": annotations},
            "spec": {"pullRequests": {"applyBeforeMerge": True}}}


def test_a_lock_holds_until_released_or_its_pull_request_is_gone() -> None:
    prs = {PR: {"spec": {"state": "open"}}, "infra-pr-3": {"spec": {"state": "merged"}}}
    assert lock_holder(_layer(PR), prs) == PR
    assert lock_holder(_layer("infra-pr-3"), prs) == "infra-pr-3"  # merged, not yet released
    assert lock_holder(_layer("infra-pr-gone"), prs) is None
    assert lock_holder(_layer(None), prs) is None


def test_a_merged_pull_request_releases_once_the_branch_has_moved_a_closed_one_at_once() -> None:
    now = datetime(2026, 11, 27, 7, 0, tzinfo=UTC)
    assert release_due("closed", _layer(PR), None, now)
    assert not release_due("merged", _layer(PR), None, now)  # the merge not recorded yet
    assert not release_due("merged", _layer(PR), now - timedelta(minutes=1), now)  # the branch not fetched yet
    assert release_due("merged", _layer(PR, branch="c2"), now - timedelta(minutes=1), now)
    assert release_due("merged", _layer(PR), now - timedelta(minutes=11), now)
    assert not release_due("open", _layer(PR, branch="c2"), now - timedelta(minutes=11), now)


def test_a_closed_pull_request_writes_its_notice_down_before_it_releases_and_keeps_it_until_posted() -> None:
    first = release_plan("closed", ["ns/app", "ns/db"], [])
    assert first.release == () and first.notice == ("ns/app", "ns/db") and first.recorded_first
    second = release_plan("closed", ["ns/app", "ns/db"], list(first.notice))
    assert second.release == ("ns/app", "ns/db") and second.notice == first.notice and not second.recorded_first
    later = release_plan("closed", [], list(first.notice))  # released, the provider refused the notice
    assert later.release == () and later.notice == first.notice and not later.recorded_first
    assert release_plan("merged", ["ns/app"], []) == (("ns/app",), (), False)  # a merge says nothing
    assert release_plan("open", [], ["ns/app"]) == ((), (), False)  # open again: a pending notice is dropped


@given(state=st.sampled_from(["open", "closed", "merged"]),
       due=st.lists(st.sampled_from(["ns/a", "ns/b", "ns/c"]), unique=True),
       pending=st.lists(st.sampled_from(["ns/a", "ns/b", "ns/c"]), unique=True))
def test_no_layer_of_a_closed_pull_request_is_released_before_its_notice_is_written_down(
        state: str, due: list[str], pending: list[str]) -> None:
    plan = release_plan(state, due, pending)
    if state == "closed":
        assert set(plan.release) <= set(pending), "released only once already named in status.releaseNotice"
        assert set(due) | set(pending) <= set(plan.notice), "nothing to say is forgotten"
    else:
        assert plan.notice == ()
    assert set(plan.release) <= set(due)
    assert plan.recorded_first == (state == "closed" and not set(due) <= set(pending))


def _decision(action: str | None) -> LayerDecision:
    create = CreateRun(action, "c1") if action else None  # type: ignore[arg-type]
    return LayerDecision("ApplyNeeded", (Cond("IsRunning", False, "NoRunInProgress"),), create, False,
                         remove_approval=action == "apply")


@pytest.mark.parametrize(("action", "held"), [("apply", True), ("import", True), ("state-rm", True),
                                              ("state-mv", True), ("force-unlock", True), ("migrate-state", True),
                                              ("plan", False), (None, False)])
def test_the_layers_own_applies_wait_visibly_while_a_pull_request_holds_it(action: str | None, held: bool) -> None:
    free = hold_for_pull_request(_decision(action), None)
    assert free == _decision(action)
    locked = hold_for_pull_request(_decision(action), PR)
    assert (locked.create_run is None) == (held or action is None)
    assert not locked.remove_approval  # the approval is kept for after the release
    cond = next(c for c in locked.conditions if c.type == CONDITION)
    assert not cond.status and cond.reason == "LockedByPullRequest" and PR in cond.message


# --- the run controller's admission and the datastore -------------------------------------------------------------

def _plan_run(pr: str = PR, head: str = HEAD, state: str = "Succeeded", plan_sum: str = SUM) -> dict[str, Any]:
    return {"metadata": {"name": "pr7-app-1", "namespace": NS},
            "spec": {"action": "plan", "pullRequest": pr, "layer": {"name": "app", "revision": head}},
            "status": {"state": state, "attempts": [{"number": 1}, {"number": 2, "planSum": plan_sum}]}}


def _apply_run(revision: str = HEAD, plan_sum: str = SUM) -> dict[str, Any]:
    return {"metadata": {"name": apply_run_name(PR, 7, APP, SUM), "namespace": NS},
            "spec": {"action": "apply", "pullRequest": PR, "layer": {"name": "app", "revision": revision},
                     "artifact": {"run": "pr7-app-1", "attempt": 2, "sum": plan_sum}}}


PULL = {"spec": SPEC}


def test_the_run_controller_admits_exactly_the_reviewed_apply() -> None:
    assert apply_admission(_apply_run(), _layer(PR), PULL, _plan_run()) is None


@pytest.mark.parametrize(("run", "layer", "pull", "plan", "why"), [
    (_apply_run(), _layer(PR), {"spec": {**SPEC, "fromFork": True}}, _plan_run(), "a fork's"),
    (_apply_run(), _layer(PR), {"spec": {**SPEC, "state": "closed"}}, _plan_run(), "is closed"),
    (_apply_run(), _layer(PR), None, _plan_run(), "does not exist"),
    (_apply_run(), {**_layer(PR), "spec": {}}, PULL, _plan_run(), "applyBeforeMerge"),
    (_apply_run(), _layer("infra-pr-3"), PULL, _plan_run(), "is not locked to pull request"),
    (_apply_run(), _layer(None), PULL, _plan_run(), "is not locked to pull request"),
    (_apply_run(revision=OLD), _layer(PR), PULL, _plan_run(), "but the head is"),
    (_apply_run(), _layer(PR), PULL, _plan_run(head=OLD), "is not pull request"),
    (_apply_run(), _layer(PR), PULL, _plan_run(pr="infra-pr-3"), "is not pull request"),
    (_apply_run(), _layer(PR), PULL, None, "is not pull request"),
    (_apply_run(), _layer(PR), PULL, _plan_run(state="Failed"), "last successful attempt"),
    (_apply_run(plan_sum="sha256:" + "9" * 64), _layer(PR), PULL, _plan_run(), "is not the one recorded"),
])
def test_attack_the_run_controller_refuses_an_apply_it_was_not_asked_for(
        run: dict[str, Any], layer: dict[str, Any], pull: dict[str, Any] | None, plan: dict[str, Any] | None,
        why: str) -> None:
    """A TerraformRun made by anyone who may create runs (or left from an old head): the runner pod would get the
    layer's identity, so the run controller checks it all again and starts nothing."""
    refusal = apply_admission(run, layer, pull, plan)
    assert refusal is not None and why in refusal


def test_the_datastore_lets_a_pull_requests_apply_read_its_own_plan_only_and_run_as_the_layers_runner() -> None:
    mine = _plan_run()
    assert plan_readable(mine, "app", PR)
    assert not plan_readable(_plan_run(pr="infra-pr-3"), "app", PR)
    assert not plan_readable(mine, "app")  # a layer's apply never reads a pull request's plan
    assert not plan_readable({**mine, "spec": {**mine["spec"], "pullRequest": None}}, "app", PR)
    pod = {"metadata": {"namespace": NS, "name": "p", "uid": "u"}, "spec": {"serviceAccountName": "burrito-py-runner"}}
    assert runner_pod_binding("burrito-py-runner", "u", pod, _apply_run(), "burrito-py-runner").reason != (
        "the token's service account 'burrito-py-runner' is not a pull request's run, whose runner account is "
        "'burrito-py-runner-pr'")
    plan_pod = {**pod, "spec": {"serviceAccountName": "burrito-py-runner"}}
    refused = runner_pod_binding("burrito-py-runner", "u", plan_pod, _plan_run(), "burrito-py-runner")
    assert not refused.ok and "pull request" in refused.reason


def test_the_model_lets_a_pull_request_apply_only_its_plan_with_a_sum() -> None:
    TerraformRunSpec.model_validate(_apply_run()["spec"])
    with pytest.raises(ValueError, match=r"spec\.artifact with its sum"):
        TerraformRunSpec.model_validate({**_apply_run()["spec"], "artifact": {"run": "pr7-app-1", "attempt": 2}})
    with pytest.raises(ValueError, match="never a destroy"):
        TerraformRunSpec.model_validate({**_apply_run()["spec"], "destroy": True})


# --- the pull request's runs --------------------------------------------------------------------------------------

def _snap(runs: tuple[RunFacts, ...], state: str = "open", head: str = HEAD) -> PullRequestSnapshot:
    status = {"headSha": HEAD, "state": "Planned", "layers": [{"namespace": NS, "name": "app", "path": "a",
                                                                "state": "planned"}]}
    outcomes = {run_name(PR, APP, HEAD, 7): PlanOutcome("planned", "Plan: 1 to add")}
    return PullRequestSnapshot(PR, NS, {**SPEC, "state": state, "headSha": head}, status, {APP: "a"}, runs, outcomes)


def test_apply_runs_are_never_discarded_nor_the_plan_a_live_one_applies() -> None:
    plan = RunFacts(run_name(PR, APP, HEAD, 7), APP, "Succeeded", attempt=2, plan_sum=SUM)
    live = RunFacts("apply-1", APP, "Running", attempt=1, action="apply", artifact_run=plan.name, revision=HEAD)
    done = RunFacts("apply-0", APP, "Succeeded", attempt=1, action="apply", artifact_run="old", revision=OLD)
    decision = decide_pull_request(_snap((plan, live, done)))
    assert decision.discard == ()
    row = decision.status["layers"][0]
    assert (row["planSum"], row["planAttempt"]) == (SUM, 2) and row["applyRun"] in ("apply-1", "apply-0")
    for state in ("merged", "closed"):
        assert decide_pull_request(_snap((plan, live, done), state)).discard == ()
        finished = RunFacts("apply-1", APP, "Succeeded", attempt=1, action="apply", artifact_run=plan.name)
        assert decide_pull_request(_snap((plan, finished), state)).discard == (plan,)
    # An apply that never started, of a head that is no longer the head: dropped.
    stale = RunFacts("apply-2", APP, None, action="apply", artifact_run=plan.name, revision=OLD)
    moved = decide_pull_request(_snap((plan, stale), head=HEAD))
    assert stale in moved.discard


@given(action=st.sampled_from([None, "plan", "apply", "import", "state-rm", "state-mv", "force-unlock"]),
       holder=st.sampled_from([None, PR]), approval=st.booleans(), operation=st.booleans())
def test_a_held_layer_never_creates_a_run_that_writes_its_state(action: str | None, holder: str | None,
                                                                approval: bool, operation: bool) -> None:
    create = CreateRun(action, "c1") if action else None  # type: ignore[arg-type]
    decision = LayerDecision("ApplyNeeded", (), create, False, remove_approval=approval, remove_operation=operation)
    held = hold_for_pull_request(decision, holder)
    if holder is None:
        assert held == decision
        return
    assert held.create_run is None or held.create_run.action == "plan"
    assert [c.type for c in held.conditions] == [CONDITION]
    if held.create_run is None and action is not None:
        assert not held.remove_approval and not held.remove_operation
