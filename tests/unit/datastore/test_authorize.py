"""The datastore's authorization decision, without I/O."""

from __future__ import annotations

import base64
import json

from hypothesis import given
from hypothesis import strategies as st

from burrito_py.datastore.auth import LayerArtifacts, Principal, RunnerScope, Sources, authorize, unverified_expiry
from burrito_py.kube.tokens import token_digest

SCOPE = RunnerScope("team", "app", "app-plan-1", "infra", "repo", attempt=2)
RUNNER = Principal("system:serviceaccount:team:burrito-py-runner", runner=SCOPE)
ADMIN = Principal("system:serviceaccount:burrito-py:burrito-py-controllers", admin=True)
NOBODY = Principal("system:serviceaccount:team:default")
names = st.sampled_from(["team", "other", "app", "app-plan-1", "app-plan-2", "repo", "infra"])


def test_a_runner_reads_its_own_run_and_writes_only_its_run() -> None:
    assert authorize(RUNNER, "read", LayerArtifacts("team", "app", "app-plan-1")) is None
    # Another run of its layer only when it is its apply's plan run (issue 24, P2: RunnerScope.reads).
    refused = authorize(RUNNER, "read", LayerArtifacts("team", "app", "app-plan-0"))
    assert refused is not None and "only read its own run's artifacts" in refused
    assert authorize(RUNNER, "write", LayerArtifacts("team", "app", "app-plan-1", 2)) is None
    reason = authorize(RUNNER, "write", LayerArtifacts("team", "app", "app-plan-0", 2))
    assert reason is not None and "own run" in reason and "app-plan-0" in reason


def test_a_runner_writes_only_the_attempt_its_pod_is_recorded_for() -> None:
    """Issue 24, finding 1 (a) and 10: tenant code writing attempt 7 of its own run (a plan a reader of "the
    latest attempt" would pick, or one more 100 MiB object per attempt number) is refused."""
    for attempt in (1, 3, 7, 1_000_000, None):
        reason = authorize(RUNNER, "write", LayerArtifacts("team", "app", "app-plan-1", attempt))
        assert reason is not None and "attempt 2, the attempt its pod is recorded for" in reason


def test_a_runner_reads_only_its_own_runs_inputs() -> None:
    assert authorize(RUNNER, "read-inputs", LayerArtifacts("team", "app", "app-plan-1")) is None
    reason = authorize(RUNNER, "read-inputs", LayerArtifacts("team", "app", "app-plan-0"))
    assert reason is not None and "its own run's inputs" in reason
    assert authorize(ADMIN, "read-inputs", LayerArtifacts("team", "app", "app-plan-0")) is None


def test_only_admins_delete_a_run_not_even_its_own_runner() -> None:
    own = LayerArtifacts("team", "app", "app-plan-1")
    assert authorize(ADMIN, "delete", own) is None
    reason = authorize(RUNNER, "delete", own)
    assert reason is not None and "may not delete" in reason and RUNNER.username in reason
    reason = authorize(NOBODY, "delete", own)
    assert reason is not None and "may not delete" in reason


def test_a_runner_reads_only_its_layers_repository_and_never_writes_sources() -> None:
    assert authorize(RUNNER, "read", Sources("infra", "repo")) is None
    assert authorize(RUNNER, "read", Sources("team", "repo")) is not None
    reason = authorize(RUNNER, "write", Sources("infra", "repo"))
    assert reason is not None and "may not write" in reason


def test_a_runner_of_the_same_layer_name_in_another_namespace_is_refused() -> None:
    assert authorize(RUNNER, "read", LayerArtifacts("other", "app", "app-plan-1")) is not None


@given(st.sampled_from(["read", "write", "delete"]), names, names, names)
def test_admins_may_do_everything_and_unscoped_callers_nothing(action: str, ns: str, a: str, b: str) -> None:
    for target in (LayerArtifacts(ns, a, b), Sources(ns, a)):
        assert authorize(ADMIN, action, target) is None  # type: ignore[arg-type]
        reason = authorize(NOBODY, action, target)  # type: ignore[arg-type]
        assert reason is not None and NOBODY.username in reason


@given(st.sampled_from(["read", "write", "delete", "review", "inputs", "read-inputs"]), names, names, names,
       st.none() | st.integers(0, 1_000_000))
def test_runner_rights_never_leave_its_layer(action: str, ns: str, layer: str, run: str, attempt: int | None
                                             ) -> None:
    allowed = authorize(RUNNER, action, LayerArtifacts(ns, layer, run, attempt)) is None  # type: ignore[arg-type]
    if allowed:
        assert (ns, layer) == ("team", "app")
        assert action == "read" or run == "app-plan-1"
        assert action in ("read", "read-inputs") or attempt == 2


def _jwt(claims: object) -> str:
    body = base64.urlsafe_b64encode(json.dumps(claims).encode()).rstrip(b"=").decode()
    return f"e30.{body}.c2ln"


def test_unverified_expiry_reads_exp_and_tolerates_anything_else() -> None:
    assert unverified_expiry(_jwt({"exp": 1700000000})) == 1700000000.0
    for token in ("", "a.b", "not-a-token", _jwt([1]), _jwt({"exp": "soon"}), _jwt({"exp": True}), "a.!!!.c"):
        assert unverified_expiry(token) is None


def test_token_digest_hides_the_token() -> None:
    token = _jwt({"exp": 1})
    assert token not in token_digest(token) and len(token_digest(token)) == 64
    assert token_digest(token) != token_digest(token + "x")


# Issue 24, P2: a pull request's runs and the layer's own runs read none of each other's artifacts.
PR_SCOPE = RunnerScope("team", "app", "pr4-app-0123456789", "infra", "repo", attempt=1, pull_request="infra-pr-4")
PR_RUNNER = Principal("system:serviceaccount:team:burrito-py-runner-pr", runner=PR_SCOPE)
APPLY = Principal("system:serviceaccount:team:burrito-py-runner",
                  runner=RunnerScope("team", "app", "app-apply-1", "infra", "repo", attempt=1, reads=("app-plan-1",)))


def test_a_pull_requests_runner_reads_no_plan_of_the_layer_and_the_layers_runners_none_of_its() -> None:
    for fmt_run in ("app-plan-1", "app-apply-1"):
        for action in ("read", "write", "read-inputs"):
            refused = authorize(PR_RUNNER, action, LayerArtifacts("team", "app", fmt_run, 1))  # type: ignore[arg-type]
            assert refused is not None, (action, fmt_run)
    assert authorize(PR_RUNNER, "read", LayerArtifacts("team", "app", "pr4-app-0123456789", 1)) is None
    for runner in (RUNNER, APPLY):
        for action in ("read", "write", "read-inputs"):
            target = LayerArtifacts("team", "app", "pr4-app-0123456789", 1)
            assert authorize(runner, action, target) is not None, action  # type: ignore[arg-type]
    # The apply reads the plan it applies, and only that one.
    assert authorize(APPLY, "read", LayerArtifacts("team", "app", "app-plan-1", 1)) is None
    assert authorize(APPLY, "read", LayerArtifacts("team", "app", "app-plan-0", 1)) is not None


def test_an_apply_may_read_only_a_plan_run_of_its_layer_never_a_pull_requests() -> None:
    from burrito_py.datastore.auth import plan_readable

    plan = {"spec": {"action": "plan", "layer": {"name": "app"}}}
    assert plan_readable(plan, "app")
    assert not plan_readable({"spec": {**plan["spec"], "pullRequest": "infra-pr-4"}}, "app")
    assert not plan_readable(plan, "other") and not plan_readable(None, "app")
    assert not plan_readable({"spec": {"action": "apply", "layer": {"name": "app"}}}, "app")


def test_a_pull_requests_pod_must_run_as_the_pull_request_account_and_a_layers_as_the_runners() -> None:
    from burrito_py.datastore.auth import runner_pod_binding

    def pod(account: str) -> dict[str, object]:
        return {"metadata": {"name": "p-1", "namespace": "team", "uid": "u"}, "spec": {"serviceAccountName": account}}

    def run(pull_request: str | None) -> dict[str, object]:
        return {"metadata": {"name": "r"}, "spec": {"action": "plan", **({"pullRequest": pull_request}
                                                                          if pull_request else {})},
                "status": {"attempts": [{"number": 1, "podName": "p-1", "podUid": "u"}]}}

    runner, pr = "burrito-py-runner", "burrito-py-runner-pr"
    assert runner_pod_binding(pr, "u", pod(pr), run("infra-pr-4"), runner, pr).ok
    assert runner_pod_binding(runner, "u", pod(runner), run(None), runner, pr).ok
    assert not runner_pod_binding(runner, "u", pod(runner), run("infra-pr-4"), runner, pr).ok
    assert not runner_pod_binding(pr, "u", pod(pr), run(None), runner, pr).ok
