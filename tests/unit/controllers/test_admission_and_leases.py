from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest
from hypothesis import given
from hypothesis import strategies as st

from burrito_py.controllers.layer.sync_windows import Window, parse_duration, pod_budget_allows, sync_windows_allow
from burrito_py.controllers.run.lease_decisions import LeaseVerdict, lease_name, lease_verdict, lock_key
from burrito_py.controllers.run.leases import layer_lease_name

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
