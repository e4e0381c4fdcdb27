from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest
from hypothesis import given
from hypothesis import strategies as st

from burrito_py.api import annotations as ann
from burrito_py.controllers.layer.sync_windows import Window, parse_duration, pod_budget_allows, sync_windows_allow
from burrito_py.controllers.run.lease_decisions import (
    LeaseVerdict,
    lease_name,
    lease_verdict,
    lock_key,
    other_runs_pods,
)
from burrito_py.controllers.run.leases import layer_lease_name
from burrito_py.controllers.run.runner_pod import RunnerDefaults, build_runner_pod

MONDAY_10 = datetime(2026, 11, 23, 10, 0, tzinfo=UTC)


@pytest.mark.parametrize(("text", "seconds"), [("1h", 3600), ("30m", 1800), ("1h30m", 5400), ("90s", 90)])
def test_parse_duration(text: str, seconds: int):
    assert parse_duration(text) == timedelta(seconds=seconds)


@pytest.mark.parametrize("text", ["", "1d", "h", "10", "1h x"])
def test_parse_duration_rejects_garbage_naming_it(text: str):
    with pytest.raises(ValueError, match="invalid duration"):
        parse_duration(text)


def test_deny_window_blocks_matching_action_and_layer_only():
    deny = Window("deny", "0 9 * * *", "2h", actions=("apply",), layers=("prod-*",))
    assert not sync_windows_allow([deny], "apply", "prod-vpc", MONDAY_10).allowed
    assert sync_windows_allow([deny], "plan", "prod-vpc", MONDAY_10).allowed
    assert sync_windows_allow([deny], "apply", "dev-vpc", MONDAY_10).allowed
    assert sync_windows_allow([deny], "apply", "prod-vpc", MONDAY_10 + timedelta(hours=1, minutes=1)).allowed


def test_allow_windows_require_one_open_and_deny_wins():
    allow = Window("allow", "0 9 * * 1-5", "8h")
    assert sync_windows_allow([allow], "apply", "x", MONDAY_10).allowed
    saturday = MONDAY_10 - timedelta(days=2)
    verdict = sync_windows_allow([allow], "apply", "x", saturday)
    assert not verdict.allowed and verdict.reason == "OutsideSyncWindow"
    deny = Window("deny", "0 10 * * *", "30m")
    assert not sync_windows_allow([allow, deny], "apply", "x", MONDAY_10).allowed


def test_pod_budget():
    assert pod_budget_allows(3, None).allowed
    assert pod_budget_allows(1, 2).allowed
    verdict = pod_budget_allows(2, 2)
    assert not verdict.allowed and "limit 2" in verdict.message


def test_the_controller_wide_runner_pod_limit_applies_on_top_of_the_repositorys():
    """burrito's controller.maxConcurrentRunnerPods: one cap over every runner pod the controllers run."""
    assert pod_budget_allows(0, None, active_total=4, max_total=5).allowed
    verdict = pod_budget_allows(0, None, active_total=5, max_total=5)
    assert not verdict.allowed and verdict.reason == "MaxConcurrentRunnerPods" and "controller-wide" in verdict.message
    assert not pod_budget_allows(2, 2, active_total=2, max_total=10).allowed, "the repository's limit still holds"
    assert pod_budget_allows(1, 2, active_total=100, max_total=0).allowed, "0: no controller-wide limit"


def test_the_lease_protects_the_state_repository_and_path_not_the_branch():
    """Issue 11 item 8: the same path of one repository on two branches is one state, one Lease."""
    a = lease_name(lock_key("ns", "repo", "layers/a"))
    assert a == lease_name(lock_key("ns", "repo", "layers/a/")) == lease_name(lock_key("ns", "repo", "./layers/a"))
    assert a != lease_name(lock_key("ns", "repo", "layers/b"))
    assert a != lease_name(lock_key("ns", "other", "layers/a"))
    assert a != lease_name(lock_key("other", "repo", "layers/a"))
    assert len(a) <= 63 and a.replace("-", "").isalnum()


def test_a_layer_may_name_its_own_lock_key_and_any_key_gives_a_valid_lease_name():
    own = lease_name(lock_key("ns", "repo", "layers/a", "team-a/state-prod"))
    assert own == lease_name(lock_key("ns", "other", "elsewhere", "team-a/state-prod"))
    assert own != lease_name(lock_key("ns", "repo", "layers/a"))
    assert own != lease_name(lock_key("ns", "repo", "layers/a", "team-a/state-dev"))
    for key in ("x" * 253, "UPPER/and spaces/ünïcode"):
        name = lease_name(lock_key("ns", "repo", "p", key))
        assert len(name) <= 63 and name.replace("-", "").isalnum() and name == name.lower()


def test_layer_lease_name_reads_the_layer_spec():
    def layer(branch: str, path: str, key: str | None = None) -> dict[str, object]:
        spec: dict[str, object] = {"repository": {"name": "repo"}, "branch": branch, "path": path}
        if key:
            spec["lockKey"] = key
        return {"metadata": {"name": f"l-{branch}", "namespace": "ns"}, "spec": spec}

    assert layer_lease_name(layer("main", "app")) == layer_lease_name(layer("feature/x", "app"))
    assert layer_lease_name(layer("main", "app", "k1")) != layer_lease_name(layer("feature/x", "app", "k2"))


def lease(holder: str | None) -> dict[str, object]:
    return {"spec": {"holderIdentity": holder}}


def test_lease_verdicts():
    assert lease_verdict(None, "r1", None, False) is LeaseVerdict.CREATE
    assert lease_verdict(lease("r1"), "r1", "Running", True) is LeaseVerdict.HELD
    assert lease_verdict(lease("r0"), "r1", "Running", True) is LeaseVerdict.WAIT
    assert lease_verdict(lease("r0"), "r1", None, False) is LeaseVerdict.TAKE_OVER
    assert lease_verdict(lease("r0"), "r1", "Failed", True) is LeaseVerdict.TAKE_OVER
    assert lease_verdict(lease(None), "r1", None, False) is LeaseVerdict.TAKE_OVER


@given(
    st.sampled_from(["r0", "r1", None]),
    st.sampled_from([None, "Initial", "Running", "Retrying", "FailureGracePeriod", "Succeeded", "Failed"]),
    st.booleans(),
)
def test_a_live_holder_other_than_us_is_never_taken_over(holder: str | None, state: str | None, exists: bool):
    verdict = lease_verdict(lease(holder), "r1", state, exists)
    if holder == "r0" and exists and state not in ("Succeeded", "Failed"):
        assert verdict is LeaseVerdict.WAIT


LAYER = {"metadata": {"name": "app", "namespace": "team"},
         "spec": {"repository": {"name": "infra"}, "branch": "main", "path": "app"}}
LEASE = layer_lease_name(LAYER)


def runner_pod(run: str, uid: str, phase: str | None = "Running", **meta: object) -> dict[str, object]:
    """A runner pod as build_runner_pod makes it (its labels, its owner), in `phase`."""
    pod = build_runner_pod({"metadata": {"name": run, "namespace": "team", "uid": uid}, "spec": {"action": "apply"}},
                           LAYER, 1, RunnerDefaults("img", "runner", "http://ds"))
    pod["metadata"].update(meta)
    pod["status"] = {"phase": phase} if phase else {}
    return pod


def test_a_deleted_runs_pod_still_running_keeps_the_lease_from_a_new_run():
    """An applying run is deleted (or its layer deleted and made again): its Lease goes with it at once, its pod
    runs on until its grace period ends (or for good, --cascade=orphan, which also drops its owner reference).
    The layer's next run must not take the free Lease, or two Terraforms run on one state (§7)."""
    old = runner_pod("app-apply-1", "u-old")
    assert old["metadata"]["labels"][ann.LABEL_LEASE] == LEASE
    others = other_runs_pods([old], "team", LEASE, "app", "u-new")
    assert others == ["app-apply-1-1"]
    assert lease_verdict(None, "app-apply-2", None, False, others) is LeaseVerdict.WAIT_FOR_POD
    assert lease_verdict(lease("app-apply-1"), "app-apply-2", None, False, others) is LeaseVerdict.WAIT_FOR_POD
    terminating = runner_pod("app-apply-1", "u-old", deletionTimestamp="2026-11-23T10:02:00Z", ownerReferences=[])
    assert other_runs_pods([terminating], "team", LEASE, "app", "u-new") == ["app-apply-1-1"]
    # The same name again (run names are deterministic): told apart by uid.
    assert other_runs_pods([old], "team", LEASE, "app", "u-old") == [], "the run's own pods are its own to follow"
    # A Lease left by a deleted run of the same name (`--cascade=orphan`) names this run too: it waits all the same.
    assert lease_verdict(lease("app-apply-2"), "app-apply-2", "Running", True, others) is LeaseVerdict.WAIT_FOR_POD
    assert lease_verdict(lease("app-apply-2"), "app-apply-2", "Running", True, []) is LeaseVerdict.HELD


def test_only_live_pods_on_the_same_state_hold_a_run_back():
    ended = [runner_pod("a", "u-a", "Succeeded"), runner_pod("b", "u-b", "Failed")]
    assert other_runs_pods(ended, "team", LEASE, "app", "u-new") == []
    assert other_runs_pods([runner_pod("p", "u-p", "Pending"), runner_pod("n", "u-n", None)], "team", LEASE, "app",
                           "u-new") == ["n-1", "p-1"]
    elsewhere = runner_pod("a", "u-a")
    elsewhere["metadata"]["namespace"] = "other"
    other_state = runner_pod("b", "u-b")
    other_state["metadata"]["labels"][ann.LABEL_LEASE] = "burrito-py-layer-" + "0" * 24
    assert other_runs_pods([elsewhere, other_state], "team", LEASE, "app", "u-new") == []
    # A pod made before pods carried their Lease: its layer's label stands for it.
    before = runner_pod("c", "u-c")
    del before["metadata"]["labels"][ann.LABEL_LEASE]
    assert other_runs_pods([before], "team", LEASE, "app", "u-new") == ["c-1"]
    assert other_runs_pods([before], "team", LEASE, "other-layer", "u-new") == []
    assert lease_verdict(None, "r1", None, False, []) is LeaseVerdict.CREATE
