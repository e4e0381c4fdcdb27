"""Which pod-bound token is a run's runner (issue 11, item 14): `runner_pod_binding`, without I/O."""

from __future__ import annotations

from typing import Any

from burrito_py.datastore.auth import LayerArtifacts, Principal, authorize, runner_pod_binding

SA = "burrito-py-runner"
PR = "burrito-py-runner-pr"


def pod(name: str = "r-2", uid: str = "u2", account: str = SA) -> dict[str, Any]:
    return {"metadata": {"name": name, "namespace": "team", "uid": uid}, "spec": {"serviceAccountName": account}}


def run(state: str = "Running", attempts: list[dict[str, Any]] | None = None, **status: Any) -> dict[str, Any]:
    if attempts is None:
        attempts = [{"number": 1, "podName": "r-1", "podUid": "u1"}, {"number": 2, "podName": "r-2", "podUid": "u2"}]
    return {"metadata": {"name": "r", "namespace": "team"}, "status": {"state": state, "attempts": attempts, **status}}


def test_the_current_attempts_pod_under_the_runner_account_is_the_runner():
    assert runner_pod_binding(SA, "u2", pod(), run(), SA).ok
    assert runner_pod_binding(SA, "u2", pod(), run("Succeeded"), SA).ok  # it may still read after the end


def test_an_account_the_layer_names_is_the_runner_only_as_the_recorded_pods_account():
    """The run controller ran the pod as an account its writers opened to runners (api/runner_secrets.py): the
    pod it recorded, whose account cannot change, is the runner. It used to be refused, failing every such run."""
    assert runner_pod_binding("deployer", "u2", pod(account="deployer"), run(), SA).ok
    assert "does not run as service account 'deployer'" in runner_pod_binding("deployer", "u2", pod(), run(), SA).reason
    assert not runner_pod_binding("deployer", "u3", pod("r-3", "u3", "deployer"), run("Failed"), SA).ok


def test_the_pull_requests_account_runs_no_layers_run_and_a_pull_requests_plan_only_as_it():
    verdict = runner_pod_binding(PR, "u2", pod(account=PR), run(), SA, PR)
    assert not verdict.ok and not verdict.pending
    assert verdict.reason == ("the token's service account 'burrito-py-runner-pr' is the pull requests' runner "
                              "account: it runs no layer's run")
    plan = {**run(), "spec": {"action": "plan", "pullRequest": "pr-1"}}
    assert runner_pod_binding(PR, "u2", pod(account=PR), plan, SA, PR).ok
    for account in (SA, "deployer"):
        verdict = runner_pod_binding(account, "u2", pod(account=account), plan, SA, PR)
        assert not verdict.ok and "is not a pull request's run, whose runner account is" in verdict.reason
    apply = {**run(), "spec": {"action": "apply", "pullRequest": "pr-1"}}  # before merge: the layer's runner
    assert runner_pod_binding("deployer", "u2", pod(account="deployer"), apply, SA, PR).ok


def test_the_pod_must_run_as_the_tokens_account_and_be_the_tokens_pod():
    assert "does not run as service account" in runner_pod_binding(SA, "u2", pod(account="x"), run(), SA).reason
    assert "not the pod (uid) the token is bound to" in runner_pod_binding(SA, "other", pod(), run(), SA).reason
    assert not runner_pod_binding(SA, None, pod(), run(), SA).ok


def test_a_previous_attempts_pod_is_not_the_runner():
    verdict = runner_pod_binding(SA, "u1", pod("r-1", "u1"), run(), SA)
    assert not verdict.ok and not verdict.pending
    assert verdict.reason == "pod team/r-1 is not the current runner pod of run r (its current runner pod is r-2)"


def test_a_pod_recreated_under_the_recorded_name_is_not_the_runner():
    verdict = runner_pod_binding(SA, "u9", pod("r-2", "u9"), run(), SA)
    assert not verdict.ok and not verdict.pending and "has uid u2, not u9" in verdict.reason


def test_a_recorded_name_without_uid_binds_by_name():
    assert runner_pod_binding(SA, "u2", pod(), run(attempts=[{"number": 2, "podName": "r-2"}]), SA).ok
    assert runner_pod_binding(SA, "u2", pod(), run(attempts=[], runnerPod="r-2"), SA).ok


def test_the_next_attempts_pod_is_pending_until_recorded_but_only_while_the_run_goes_on():
    verdict = runner_pod_binding(SA, "u3", pod("r-3", "u3"), run(), SA)
    assert verdict.pending and not verdict.ok and verdict.reason == "run r does not record pod team/r-3 yet"
    first = runner_pod_binding(SA, "u1", pod("r-1", "u1"), run(attempts=[]), SA)
    assert first.pending
    for state in ("Succeeded", "Failed"):
        assert not runner_pod_binding(SA, "u3", pod("r-3", "u3"), run(state), SA).pending
    assert not runner_pod_binding(SA, "u4", pod("r-4", "u4"), run(), SA).pending  # not the next name


def test_a_refused_pod_bound_token_says_why_in_its_403():
    who = Principal("system:serviceaccount:team:default", not_runner="pod team/x runs as 'default'")
    reason = authorize(who, "write", LayerArtifacts("team", "app", "r"))
    assert reason == "system:serviceaccount:team:default may not use the datastore: pod team/x runs as 'default'"
