"""Migrating a layer's state between the datastore and the code's backend (issue 29 item 6, docs/architecture.md
§5.12, §10.6): the request (only `managed` or `code`, never a backend of the requester's), where the state lives
(`state_location`: a migration's record wins over the spec), the layer's decision (a run, or `NothingToMigrate`), the
run controller's record and Event, and the runner's comparison of both sides."""

from __future__ import annotations

import json
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from burrito_py.api import annotations as ann
from burrito_py.api.effective import state_location
from burrito_py.api.operations import STATE_ACTIONS, BadOperation, describe, parse_request
from burrito_py.api.run import TerraformRun
from burrito_py.controllers.layer.decide import decide_layer
from burrito_py.controllers.layer.runs import run_body, run_name
from burrito_py.controllers.layer.status import announcements
from burrito_py.controllers.run.results import AttemptFacts, migration_event, record_result
from burrito_py.controllers.run.state_lock import managed
from burrito_py.kube.conditions import merge_conditions
from burrito_py.runner.state import StateSummary, managed_backend, migration_problem, state_summary

from .test_layer_operations import NOW, asked, idle, snap

IN = json.dumps({"operation": "migrate-state", "to": "managed"})
OUT = json.dumps({"operation": "migrate-state", "to": "code"})
LOCATIONS = st.sampled_from([None, "managed", "code", "", "elsewhere"])


# -- the request ---------------------------------------------------------------------------------------------------
def test_a_migration_request_names_only_where_the_state_goes() -> None:
    kind, operation = parse_request(IN, "alice")
    assert (kind, operation.to, operation.requested_by) == ("migrate-state", "managed", "alice")
    assert describe(kind, operation) == "migrate-state to managed"
    assert parse_request(OUT, "alice")[1].to == "code"


@pytest.mark.parametrize(("request_", "message"), [
    # Attack: a destination of the requester's choosing. Only "managed" and "code" exist; any other field is named.
    ({"operation": "migrate-state", "to": "s3://attacker-bucket/stolen.tfstate"}, "to: Input should be 'managed' or "
     "'code'"),
    ({"operation": "migrate-state", "to": {"backend": "s3", "bucket": "attacker"}}, "to: Input should be 'managed' or "
     "'code'"),
    ({"operation": "migrate-state", "to": "code", "backendConfig": {"bucket": "attacker"}},
     "backendConfig: Extra inputs are not permitted"),
    ({"operation": "migrate-state", "to": "code", "path": "/tmp/stolen.tfstate"}, "path: Extra inputs are not "
     "permitted"),
    ({"operation": "migrate-state", "to": "code", "address": "terraform_data.a"}, "address: not a field of "
     "migrate-state"),
    ({"operation": "migrate-state"}, "to: required by migrate-state"),
    ({"operation": "state-rm", "address": "terraform_data.a", "to": "code"}, "to: not a field of state-rm"),
])
def test_a_migration_to_anywhere_else_is_refused_naming_the_field(request_: dict[str, Any], message: str) -> None:
    with pytest.raises(BadOperation) as refused:
        parse_request(json.dumps(request_), "mallory")
    assert message in str(refused.value)


@given(st.text(max_size=80).filter(lambda t: t not in ("managed", "code")))
def test_no_other_destination_parses(to: str) -> None:
    with pytest.raises(BadOperation):
        parse_request(json.dumps({"operation": "migrate-state", "to": to}), "mallory")


def test_the_run_model_refuses_a_migration_run_without_its_destination() -> None:
    from burrito_py.api.errors import InvalidSpec

    body = {"spec": {"action": "migrate-state", "layer": {"name": "app"}, "operation": {"requestedBy": "alice"}}}
    with pytest.raises(InvalidSpec, match="to: required by migrate-state"):
        TerraformRun.from_object(body)


# -- where the state lives -----------------------------------------------------------------------------------------
@given(LOCATIONS, st.booleans())
def test_a_migration_record_wins_over_the_spec(recorded: str | None, spec_managed: bool) -> None:
    where = state_location(recorded, spec_managed)
    if recorded in ("managed", "code"):
        assert where == recorded
    else:  # no record (or not one of ours): the spec says
        assert where == ("managed" if spec_managed else "code")


def test_the_run_controller_releases_orphaned_locks_where_the_state_lives() -> None:
    migrated_in = {"metadata": {"annotations": {ann.STATE_LOCATION: "managed"}}, "spec": {}}
    migrated_out = {"metadata": {"annotations": {ann.STATE_LOCATION: "code"}}, "spec": {"state": {"managed": True}}}
    assert managed(migrated_in, None) and not managed(migrated_out, None)
    assert managed({"metadata": {}, "spec": {}}, {"spec": {"state": {"managed": True}}})


# -- the layer's decision ------------------------------------------------------------------------------------------
def test_a_migration_makes_one_run_carrying_the_requester_and_re_plans_after() -> None:
    d = decide_layer(snap(asked(IN)), NOW)
    assert d.create_run is not None and d.create_run.action == "migrate-state"
    assert d.create_run.operation is not None and d.create_run.operation.to == "managed"
    layer = {"metadata": {"name": "app", "namespace": "ns", "uid": "u"}}
    assert run_name(layer, d.create_run, None, None).startswith("app-migrate-")
    body = run_body(layer, d.create_run)
    assert body["spec"]["operation"] == {"requestedBy": "alice", "to": "managed", "replace": [], "target": []}
    TerraformRun.from_object({**body, "metadata": {"name": "app-migrate-x", "namespace": "ns"}})
    assert "migrate-state" in STATE_ACTIONS  # the layer plans again after one: the plan shows nothing was lost


@given(st.sampled_from([IN, OUT]), LOCATIONS, st.booleans())
def test_a_migration_runs_only_when_the_state_is_elsewhere(value: str, recorded: str | None,
                                                          spec_managed: bool) -> None:
    a = asked(value, **({ann.STATE_LOCATION: recorded} if recorded is not None else {}))
    where = state_location(recorded, spec_managed)
    s = snap(a)
    from dataclasses import replace

    s = replace(s, state_location=where, state_migrated=recorded in ("managed", "code"), spec_managed=spec_managed)
    d = decide_layer(s, NOW)
    to = json.loads(value)["to"]
    accepted = next(c for c in d.conditions if c.type == "OperationAccepted")
    if to == where:
        assert d.create_run is None and not d.remove_operation
        assert (accepted.status, accepted.reason) == (False, "NothingToMigrate")
        assert "already" in accepted.message and ann.OPERATION in accepted.message
    else:
        assert d.create_run is not None and d.create_run.action == "migrate-state"
        assert accepted.status is True
    location = [c for c in d.conditions if c.type == "StateLocation"]
    if recorded in ("managed", "code"):  # reported once a migration moved it, True when the spec agrees
        assert len(location) == 1 and location[0].status is ((where == "managed") == spec_managed)
    else:
        assert location == []


def test_a_spec_that_disagrees_with_the_record_is_reported_once() -> None:
    from dataclasses import replace

    d = decide_layer(replace(snap(idle(**{ann.STATE_LOCATION: "managed"})), state_location="managed",
                             state_migrated=True, spec_managed=False), NOW)
    cond = next(c for c in d.conditions if c.type == "StateLocation")
    assert (cond.status, cond.reason) == (False, "Managed")
    assert "set spec.state.managed to true" in cond.message
    new = {"conditions": merge_conditions(None, [cond], NOW)}
    warned = [e for e in announcements({}, new, next(c for c in d.conditions if c.type == "IsRunning"))
              if e[1] == "StateLocationDiffersFromSpec"]
    assert len(warned) == 1
    assert [e for e in announcements(new, new, next(c for c in d.conditions if c.type == "IsRunning"))
            if e[1] == "StateLocationDiffersFromSpec"] == []


# -- the run controller --------------------------------------------------------------------------------------------
def _run(to: str = "managed", pull_request: str | None = None) -> dict[str, Any]:
    spec: dict[str, Any] = {"action": "migrate-state", "layer": {"name": "app", "revision": "c1"},
                            "operation": {"requestedBy": "alice", "to": to}}
    if pull_request:
        spec["pullRequest"] = pull_request
    return {"metadata": {"name": "app-migrate-1"}, "spec": spec}


@pytest.mark.parametrize("to", ["managed", "code"])
def test_a_succeeded_migration_records_where_the_state_now_lives(to: str) -> None:
    assert record_result(_run(to), 1, True, "t", AttemptFacts()).annotations == {ann.STATE_LOCATION: to}
    kind, reason, message = migration_event(_run(to), 1, True, "") or ("", "", "")
    assert (kind, reason) == ("Normal", "StateMigrated") and "asked by alice" in message


def test_a_failed_migration_records_nothing_and_says_the_source_is_untouched() -> None:
    assert record_result(_run(), 1, False, "t", AttemptFacts()).annotations == {}
    kind, reason, message = migration_event(_run(), 2, False, "init failed (exit code 1)") or ("", "", "")
    assert (kind, reason) == ("Warning", "StateMigrationFailed")
    assert "attempt 2" in message and "the source state in the backend the layer's code declares is untouched" \
        in message
    assert migration_event({"metadata": {"name": "p"}, "spec": {"action": "plan"}}, 1, True, "") is None


def test_a_run_naming_no_known_destination_records_nothing() -> None:
    forged = _run()
    forged["spec"]["operation"]["to"] = "s3://attacker"
    assert record_result(forged, 1, True, "t", AttemptFacts()).annotations == {}
    assert migration_event(forged, 1, True, "") is None


# -- the runner's comparison ---------------------------------------------------------------------------------------
def _state(lineage: str, serial: int, resources: list[dict[str, Any]]) -> bytes:
    return json.dumps({"version": 4, "lineage": lineage, "serial": serial, "resources": resources}).encode()


RESOURCES = [
    {"mode": "managed", "type": "terraform_data", "name": "single", "instances": [{"attributes": {}}]},
    {"mode": "managed", "type": "terraform_data", "name": "many", "each": "map",
     "instances": [{"index_key": "x"}, {"index_key": "y"}]},
    {"module": "module.net[0]", "mode": "data", "type": "aws_vpc", "name": "main", "instances": [{"index_key": 0}]},
]


def test_a_state_is_summarised_by_its_resource_instances() -> None:
    summary = state_summary(_state("L", 7, RESOURCES))
    assert summary == StateSummary("L", 7, frozenset({
        "terraform_data.single", 'terraform_data.many["x"]', 'terraform_data.many["y"]',
        "module.net[0].data.aws_vpc.main[0]"}))
    assert state_summary(b"") == StateSummary("", 0, frozenset())  # `state pull` of no state prints nothing
    with pytest.raises(ValueError, match="not JSON"):
        state_summary(b"{not json")


ADDRESSES = st.frozensets(st.from_regex(r"terraform_data\.[a-z]{1,6}(\[[0-9]\])?", fullmatch=True), max_size=8)


@given(ADDRESSES, ADDRESSES, st.integers(0, 20), st.integers(0, 20), st.booleans(), st.booleans())
def test_a_migration_is_accepted_only_when_every_instance_is_kept(
    before: frozenset[str], after: frozenset[str], serial_before: int, serial_after: int, same: bool,
    same_lineage: bool,
) -> None:
    problem = migration_problem(StateSummary("L", serial_before, before),
                                StateSummary("L" if same else "M", serial_after, after), same_lineage)
    ok = before == after and (not same_lineage or (same and serial_after >= serial_before))
    assert (problem is None) == ok
    if before - after:
        assert problem is not None and "missing from the destination" in problem


def test_a_migrated_layer_keeps_its_backend_block_and_the_override_replaces_it(tmp_path: Any) -> None:
    from burrito_py.runner.state import OVERRIDE_FILE, ManagedStateError

    (tmp_path / "main.tf").write_text('terraform {\n  backend "s3" {}\n}\n')
    with pytest.raises(ManagedStateError, match="migrate-state"):  # not migrated: refused, naming the way in
        managed_backend(tmp_path, "terraform", "http://ds", "ns", "app", "tok")
    backend = managed_backend(tmp_path, "terraform", "http://ds", "ns", "app", "tok", migrated=True)
    assert (tmp_path / OVERRIDE_FILE).exists()
    # The code's own -backend-config arguments belong to its s3 backend: left out of the http backend's init.
    assert backend.extra_init_args(["-backend-config=bucket=b", "-upgrade"]) == ["-upgrade"]


def test_terraform_reaches_the_datastore_by_address_only_under_the_local_kubelet(tmp_path: Any) -> None:
    from burrito_py.runner.state import terraform_reachable

    hosts = tmp_path / "ns.hosts"
    hosts.write_text("127.20.0.7 burrito-py-datastore.system.svc.cluster.local burrito-py-datastore.system\n")
    url = "http://burrito-py-datastore.system.svc.cluster.local:8080/"
    assert terraform_reachable(url, {}) == url  # a real cluster: cluster DNS answers terraform too
    local = {"BURRITO_LOCAL_HOSTS": str(hosts)}
    assert terraform_reachable(url, local) == "http://127.20.0.7:8080/"
    https = "https://burrito-py-datastore.system.svc.cluster.local:8443/"
    assert terraform_reachable(https, local) == https  # the certificate names the host
    assert terraform_reachable("http://elsewhere:1/", local) == "http://elsewhere:1/"
