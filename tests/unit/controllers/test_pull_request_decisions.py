"""The pull request decision (pure): one run per affected layer and head, named so a retry never doubles it; a new
head discards the old head's runs; a closed or merged pull request discards them all; downstream layers are shown,
never planned; the state and progress follow the runs."""

from __future__ import annotations

import dataclasses
from typing import Any

from hypothesis import given
from hypothesis import strategies as st

from burrito_py.controllers.pullrequest.decide import (
    PlanOutcome,
    PullRequestSnapshot,
    RunFacts,
    decide_pull_request,
    run_name,
)
from burrito_py.plans.model import parse_plan
from burrito_py.pullrequests.affected import Affected

from ..plans.plan_fixtures import fixture

NS = "team-a"
HEAD, OLD = "a" * 40, "b" * 40
LAYERS = {(NS, "app"): "layers/app", (NS, "db"): "layers/db", (NS, "web"): "layers/web"}


def spec(head: str = HEAD, state: str = "open") -> dict[str, Any]:
    return {"provider": "github", "repository": "infra", "project": "team/infra", "number": 7, "base": "main",
            "headSha": head, "state": state}


def snap(status: dict[str, Any] | None = None, runs: tuple[RunFacts, ...] = (), head: str = HEAD,
         state: str = "open", affected: Affected | None = None,
         outcomes: dict[str, PlanOutcome] | None = None) -> PullRequestSnapshot:
    return PullRequestSnapshot("infra-pr-7", NS, spec(head, state), status or {}, LAYERS, runs, outcomes or {},
                               affected)


def name(layer: str, head: str = HEAD) -> str:
    return run_name("infra-pr-7", (NS, layer), head, 7)


AFFECTED = Affected(((NS, "app"), (NS, "db")), ((NS, "web"),))


def test_a_new_head_asks_for_its_affected_layers_first() -> None:
    decision = decide_pull_request(snap({"headSha": OLD, "layers": []}))
    assert decision.needs_affected and not decision.create and not decision.discard


def test_each_affected_layer_gets_one_run_downstream_ones_none_and_the_old_heads_runs_go() -> None:
    old = RunFacts(name("app", OLD), (NS, "app"), "Running")
    decision = decide_pull_request(snap({"headSha": OLD}, runs=(old,), affected=AFFECTED))
    assert decision.create == (((NS, "app"), name("app")), ((NS, "db"), name("db")))
    assert decision.discard == (old,)
    assert decision.status["state"] == "Planning" and decision.status["progress"] == "0/2"
    assert [(r["name"], r.get("downstream", False), r["state"]) for r in decision.status["layers"]] == [
        ("app", False, "planning"), ("db", False, "planning"), ("web", True, "pending")]
    assert decision.results is not None and [r.downstream for r in decision.results.layers] == [False, False, True]

    # Decided again with the runs created: nothing more to create, and the names never change.
    listed = decision.status
    runs = (RunFacts(name("app"), (NS, "app"), "Running"), RunFacts(name("db"), (NS, "db"), None))
    again = decide_pull_request(snap(listed, runs=runs))
    assert again.create == () and again.discard == () and again.status["layers"] == listed["layers"]


def test_finished_runs_settle_the_state() -> None:
    listed = decide_pull_request(snap({}, affected=AFFECTED)).status
    plan = parse_plan(fixture("create"))
    planned = PlanOutcome("planned", plan.summary(), plan, "plan text")
    runs = (RunFacts(name("app"), (NS, "app"), "Succeeded", attempt=1),
            RunFacts(name("db"), (NS, "db"), "Failed", "exit code 1", attempt=4))
    # The failure is known before its log is read; the plan only once read.
    early = decide_pull_request(snap(listed, runs=runs))
    assert [r["state"] for r in early.status["layers"][:2]] == ["planning", "failed"]
    assert early.status["state"] == "Planning" and early.status["progress"] == "1/2"
    done = decide_pull_request(snap(listed, runs=runs, outcomes={
        name("app"): planned, name("db"): PlanOutcome("failed", "exit code 1", log_tail=("Error: boom",))}))
    assert done.status["state"] == "Failed" and done.status["progress"] == "2/2"
    assert done.results is not None and done.results.layers[1].log_tail == ("Error: boom",)
    allowed = decide_pull_request(snap(listed, runs=runs[:1], outcomes={name("app"): planned}))
    assert allowed.create == (((NS, "db"), name("db")),)  # its run was deleted by someone: made again
    denied = PlanOutcome("planned", plan.summary(), plan, verdict="Denied")
    both = (runs[0], RunFacts(name("db"), (NS, "db"), "Succeeded", attempt=1))
    assert decide_pull_request(snap(listed, runs=both, outcomes={name("app"): planned, name("db"): denied})
                               ).status["state"] == "Failed"
    assert decide_pull_request(snap(listed, runs=both, outcomes={name("app"): planned, name("db"): planned})
                               ).status["state"] == "Planned"


def test_a_vanished_layer_is_dropped_and_closing_discards_every_run() -> None:
    listed = decide_pull_request(snap({}, affected=AFFECTED)).status
    gone = PullRequestSnapshot("infra-pr-7", NS, spec(), listed, {(NS, "app"): "layers/app"}, ())
    assert [r["name"] for r in decide_pull_request(gone).status["layers"]] == ["app"]
    runs = (RunFacts(name("app"), (NS, "app"), "Running"), RunFacts(name("db", OLD), (NS, "db"), "Succeeded"))
    for state, shown in (("closed", "Closed"), ("merged", "Merged")):
        closed = decide_pull_request(snap(listed, runs=runs, state=state))
        assert closed.discard == runs and closed.create == () and closed.results is None
        assert closed.status["state"] == shown and closed.status["layers"] == []
        # Reopened at the same head: its layers are found again.
        assert decide_pull_request(snap(closed.status, runs=())).needs_affected


@given(st.lists(st.sampled_from(sorted(LAYERS)), unique=True), st.lists(st.sampled_from(sorted(LAYERS)), unique=True),
       st.sampled_from([HEAD, OLD]))
def test_runs_are_only_ever_the_heads_affected_layers(affected: list[tuple[str, str]],
                                                      existing: list[tuple[str, str]], head_of_runs: str) -> None:
    """Whatever runs exist: every run wanted is at the head, created at most once, and every other run goes."""
    runs = tuple(RunFacts(name(layer[1], head_of_runs), layer, "Running") for layer in existing)
    decision = decide_pull_request(snap({"headSha": OLD}, runs=runs, affected=Affected(tuple(sorted(affected)), ())))
    wanted = {name(layer[1]) for layer in affected}
    created = [run for _, run in decision.create]
    assert len(created) == len(set(created)) and set(created) <= wanted
    assert set(created) | {r.name for r in runs if r.name in wanted} == wanted
    assert {r.name for r in decision.discard} == {r.name for r in runs} - wanted


def test_run_names_are_short_valid_and_distinct() -> None:
    long = run_name("x" * 253, (NS, "l" * 253), HEAD, 123456)
    assert len(long) <= 63 and long[0].isalnum() and long[-1].isalnum()
    assert name("app") != name("app", OLD) != name("db")


def test_a_plan_comment_replans_its_layers_once_under_a_name_of_its_own() -> None:
    """Issue 30: `/burrito-py plan db` (comment 42): db's run is replaced by one named by the comment, kept at the
    following decisions (the row remembers it); app's is untouched; the same comment decided again names the same
    run, so a second answer never makes a second one."""
    runs = (RunFacts(name("app"), (NS, "app"), "Succeeded"), RunFacts(name("db"), (NS, "db"), "Succeeded"))
    listed = decide_pull_request(snap({"headSha": OLD}, runs=runs, affected=AFFECTED)).status
    replanned = decide_pull_request(dataclasses.replace(snap(listed, runs=runs), replan={(NS, "db"): "42"}))
    new = run_name("infra-pr-7", (NS, "db"), HEAD, 7, "42")
    assert new != name("db") and replanned.create == (((NS, "db"), new),)
    assert [r.name for r in replanned.discard] == [name("db")]
    assert [row.get("replan") for row in replanned.status["layers"]] == [None, "42", None]
    later = decide_pull_request(snap(replanned.status, runs=(runs[0], RunFacts(new, (NS, "db"), "Running"))))
    assert later.create == () and later.discard == ()
    again = decide_pull_request(dataclasses.replace(snap(replanned.status, runs=(runs[0],)), replan={(NS, "db"): "42"}))
    assert again.create == (((NS, "db"), new),)
    # A new head forgets the re-plan: its runs are the head's own.
    pushed = decide_pull_request(snap(replanned.status, head="c" * 40, affected=AFFECTED))
    assert all("replan" not in row for row in pushed.status["layers"])
