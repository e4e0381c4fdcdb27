"""Notification bodies stay within 1 KiB whatever they carry, say what happened, and sign as documented; the
controllers' choice of notifications sends each event once."""

from __future__ import annotations

import json
from datetime import UTC, datetime

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from burrito_py.api import annotations as ann
from burrito_py.controllers.layer.notifications import notifications_due
from burrito_py.notify.message import BODY_LIMIT, Notification, render
from burrito_py.notify.sign import signature, verify

NOW = datetime(2026, 11, 24, 12, 0, tzinfo=UTC)


def note(**changes: object) -> Notification:
    base = dict(event="DriftDetected", namespace="team-a", layer="db", plan_sum="sha256:" + "a" * 64,
                summary="Plan: 0 to add, 2 to change, 0 to destroy", addresses=("terraform_data.a", "aws_db.b"),
                address_count=2, rules=("team-a/p/no-destroy",), reason=None, link="https://burrito/api/layers/a/db",
                occurred_at=NOW)
    base.update(changes)
    return Notification(**base)  # type: ignore[arg-type]


@pytest.mark.parametrize("kind", ["slack", "teams", "webhook"])
def test_bodies_say_what_happened(kind: str) -> None:
    body = render(kind, note())
    text = body.decode()
    assert "team-a" in text and "db" in text and "terraform_data.a" in text and len(body) <= BODY_LIMIT
    if kind == "webhook":
        data = json.loads(body)
        assert data["event"] == "DriftDetected" and data["addressCount"] == 2 and data["deliveryId"]
    if kind == "teams":
        assert json.loads(body)["attachments"][0]["contentType"] == "application/vnd.microsoft.card.adaptive"


MARKUP = "<!channel> <https://evil.example|Approve the plan here> [Approve](https://evil.example) **now** &amp;"


def test_attack_runner_and_plan_text_is_never_markup_in_slack_or_teams() -> None:
    """The summary comes from the runner (the branch's code) and addresses from the plan: in Slack's text they
    pinged the channel and showed a link of the author's choosing; in a Teams TextBlock, Markdown links render."""
    n = note(event="PolicyDenied", summary=MARKUP, addresses=(f'terraform_data.x["{MARKUP}"]',), address_count=1,
             reason=MARKUP)
    slack = json.loads(render("slack", n))["text"]
    assert "&lt;!channel&gt;" in slack and "&lt;https://evil.example|Approve the plan here&gt;" in slack
    assert "<!channel>" not in slack and "<https://evil" not in slack and "&amp;amp;" in slack
    assert slack.endswith("\n<https://burrito/api/layers/a/db|Open the layer>")  # the controllers' own link stays
    card = json.loads(render("teams", n))["attachments"][0]["content"]
    texts = [element for element in card["body"] if "evil.example" in json.dumps(element)]
    assert texts and all(e["type"] == "RichTextBlock" and [i["type"] for i in e["inlines"]] == ["TextRun"]
                         for e in texts), texts  # a TextRun renders no Markdown


TEXT = st.text(min_size=0, max_size=3000)


@settings(max_examples=100, deadline=None)
@given(st.sampled_from(["slack", "teams", "webhook"]), st.lists(TEXT, max_size=40), st.lists(TEXT, max_size=40),
       st.none() | TEXT, st.none() | TEXT, st.text(min_size=1, max_size=300), st.none() | TEXT)
def test_every_body_fits_in_one_kib(kind: str, addresses: list[str], rules: list[str], reason: str | None,
                                    summary: str | None, layer: str, link: str | None) -> None:
    n = note(addresses=tuple(addresses), address_count=len(addresses) + 7, rules=tuple(rules), reason=reason,
             summary=summary, layer=layer, link=link)
    body = render(kind, n)
    assert len(body) <= BODY_LIMIT
    json.loads(body)


def test_many_addresses_say_how_many_more() -> None:
    body = render("slack", note(addresses=tuple(f"aws_instance.r{i}" for i in range(40)), address_count=40)).decode()
    assert "(+35 more)" in body


def test_signature() -> None:
    body = render("webhook", note())
    header = signature(body, b"k")
    assert header.startswith("sha256=") and verify(body, header, b"k")
    assert not verify(body + b" ", header, b"k") and not verify(body, header, b"other") and not verify(body, None, b"k")
    assert note().delivery_id == note(occurred_at=datetime(2030, 1, 1, tzinfo=UTC)).delivery_id  # retries match


def status(**fields: object) -> dict[str, object]:
    return {"state": "Idle", **fields}


A = {ann.PLAN_SUM: "sha256:aa", ann.PLAN_SUMMARY: "Plan: 0 to add, 1 to change, 0 to destroy"}
DRIFTED = {"state": "Drifted", "since": "2026-11-24T11:00:00Z", "planSum": "sha256:aa", "resources": 1,
           "addresses": ["terraform_data.a"]}


def due(old: dict[str, object], new: dict[str, object],
        annotations: dict[str, str] = A) -> tuple[list[str], dict[str, str]]:
    notes, notified = notifications_due(old, new, annotations, "default", "app", NOW, None)
    return [n.event for n in notes], notified


def test_drift_is_notified_once_per_drift_and_resolved_once() -> None:
    events, notified = due(status(), status(drift=DRIFTED))
    assert events == ["DriftDetected"]
    # The next check: a new plan, a new sum, the same drift (same since): nothing.
    assert due(status(notified=notified), status(drift={**DRIFTED, "planSum": "sha256:bb"}, notified=notified),
               {**A, ann.PLAN_SUM: "sha256:bb"})[0] == []
    events, resolved = due(status(notified=notified), status(drift={"state": "InSync"}, notified=notified))
    assert events == ["DriftResolved"]
    assert due(status(notified=resolved), status(drift={"state": "InSync"}, notified=resolved))[0] == []
    # A new drift later has a new since: notified again.
    again = {**DRIFTED, "since": "2026-11-24T13:00:00Z"}
    assert due(status(notified=resolved), status(drift=again, notified=resolved))[0] == ["DriftDetected"]


def test_pending_plans_policy_denials_failures_and_applies() -> None:
    pending = {"sum": "sha256:aa", "reason": "a policy gates auto-apply"}
    policy = {"planSum": "sha256:aa", "verdict": "GatesAutoApply", "plan": {"addresses": ["terraform_data.a"],
              "resources": 1}, "denied": [{"policy": "default/p", "rule": "r", "addresses": ["terraform_data.a"],
                                           "count": 1}]}
    events, notified = due(status(), status(state="ApplyNeeded", pendingPlan=pending, policy=policy))
    assert events == ["PlanPendingApproval", "PolicyDenied"]
    # The same content planned again (a new sum): not again.
    same = {**A, ann.PLAN_SUM: "sha256:bb"}
    assert due(status(notified=notified), status(state="ApplyNeeded", pendingPlan={**pending, "sum": "sha256:bb"},
                                                  policy={**policy, "planSum": "sha256:bb"}, notified=notified),
               same)[0] == []
    failed = status(state="MaxRetriesReached", exhaustedApply={"run": "app-apply-1", "reason": "RetryLimitReached"})
    assert due(status(), failed)[0] == ["RunFailed"]
    reasons = {r: notifications_due(status(), status(state="MaxRetriesReached", exhaustedApply={
        "run": "app-apply-1", "reason": r}), A, "team", "app", NOW, None)[0][0].reason
        for r in ("RetryLimitReached", "TimedOut")}
    assert reasons == {"RetryLimitReached": "run app-apply-1 failed after its last retry (RetryLimitReached)",
                       "TimedOut": "run app-apply-1 was stopped at its timeout, not retried"}
    applied = {**A, ann.APPLY_SUM: "sha256:aa", ann.APPLY_RUN: "app-apply-2/1"}
    events, notified = due(status(), status(lastResult="Applied: Plan: 0 to add, 1 to change, 0 to destroy"), applied)
    assert events == ["ApplySucceeded"]
    assert due(status(notified=notified), status(lastResult="Applied: x", notified=notified), applied)[0] == []


def test_a_drift_ended_by_a_commit_is_resolved_too() -> None:
    """Issue 25 item 4: Drifted, then a commit's plan (a code change, not a correction), then its apply: in sync.
    The DriftResolved notification is due at the end, and the layer controller posts its event with it."""
    events, notified = due(status(), status(drift=DRIFTED))
    code_change = {"state": "CodeChange", "planSum": "sha256:cc", "resources": 1}
    assert due(status(drift=DRIFTED, notified=notified), status(drift=code_change, notified=notified),
               {**A, ann.PLAN_SUM: "sha256:cc"})[0] == []
    events, _ = due(status(drift=code_change, notified=notified), status(drift={"state": "InSync"}, notified=notified),
                    {**A, ann.PLAN_SUM: "sha256:cc", ann.APPLY_SUM: "sha256:cc"})
    assert events == ["DriftResolved"]
