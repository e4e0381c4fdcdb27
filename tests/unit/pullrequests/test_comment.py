"""The pull request comment renderer: golden bodies for the issue's cases, never over the limit, balanced markdown
(checked with a CommonMark parser), and the status line, ⚠ block and summary table never cut (hypothesis)."""

from __future__ import annotations

import os
import re
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from markdown_it import MarkdownIt
from markdown_it.token import Token

from burrito_py.gitproviders.github import COMMENT_LIMIT as GITHUB_LIMIT
from burrito_py.gitproviders.gitlab import COMMENT_LIMIT as GITLAB_LIMIT
from burrito_py.plans.model import PlanModel, parse_plan
from burrito_py.pullrequests.comment import (
    MAX_WARNINGS,
    MIN_LIMIT,
    LayerResult,
    PullRequestResults,
    marker,
    render,
)

from ..plans.plan_fixtures import SECRET, fixture, generated_plan

GOLDEN = Path(__file__).resolve().parents[2] / "fixtures" / "comments"
UPDATE = os.environ.get("BURRITO_PY_UPDATE_GOLDEN") == "1"  # rewrite the golden files instead of comparing
HEAD = "4f1c2b9a7d3e5f60718293a4b5c6d7e8f9012345"
VERBS = {"create": ("+", "created"), "update": ("~", "updated in-place"), "delete": ("-", "destroyed"),
         "replace": ("-/+", "replaced")}


def plan_text(plan: PlanModel) -> str:
    """Terraform's human-readable plan, in its shape (what the runner stores as the `pretty` plan)."""
    lines = ["Terraform will perform the following actions:", ""]
    for change in plan.changed():
        symbol, verb = VERBS.get(change.action, ("~", change.action))
        lines += [f"  # {change.address} will be {verb}", f'  {symbol} resource "{change.type}" "{change.name}" {{',
                  '      ~ input = "old" -> "new"', "    }", ""]
    lines.append(plan.summary())
    return "\n".join(lines)


def planned(name: str, plan: dict[str, Any] | PlanModel, **kw: Any) -> LayerResult:
    model = plan if isinstance(plan, PlanModel) else parse_plan(plan, attributes=True)  # as the controller reads it
    return LayerResult("team-a", name, f"layers/{name}", "planned", model, plan_text(model), **kw)


def failed(name: str, lines: int = 60) -> LayerResult:
    log = tuple(f"line {i}: Error: Unsupported argument" if i == lines - 1 else f"line {i}" for i in range(lines))
    return LayerResult("team-a", name, f"layers/{name}", "failed", log_tail=log)


def results(*layers: LayerResult) -> PullRequestResults:
    return PullRequestResults("team-a/infra", 42, HEAD, tuple(layers))


CASES = {
    "one_layer": results(planned("app", fixture("create"))),
    "fifty_layers": results(*(planned(f"svc-{i:02d}", fixture("update" if i % 3 else "no_changes"))
                              for i in range(50))),
    "destroy": results(planned("db", fixture("delete"), verdict="Denied")),
    "replace": results(planned("db", fixture("replace_stateful"), verdict="GatesAutoApply"),
                       planned("app", fixture("update"))),
    "failure": results(planned("app", fixture("create")), failed("network")),
    "two_megabytes": results(planned("big", generated_plan(17_000)), planned("small", fixture("update"))),
    "planning": results(planned("app", fixture("create")),
                        LayerResult("team-a", "db", "layers/db", "planning"),
                        LayerResult("team-a", "cache", "layers/cache", "pending", downstream=True)),
}


def tokens(body: str) -> list[Token]:
    found: list[Token] = []
    stack = MarkdownIt("commonmark").enable("table").parse(body)
    while stack:
        token = stack.pop(0)
        found.append(token)
        stack[:0] = token.children or []
    return found


def assert_balanced(body: str) -> None:
    """Every `<details>` closed outside code, and every fence closed by its own markup (an unclosed fence would
    run to the end of the document)."""
    parsed = tokens(body)
    html = "".join(t.content for t in parsed if t.type in ("html_block", "html_inline"))
    assert html.count("<details") == html.count("</details>")
    lines = body.split("\n")
    for token in parsed:
        if token.type == "fence":
            assert token.map is not None
            assert lines[token.map[1] - 1].strip() == token.markup, "a fence runs to the end of the comment"


@pytest.mark.parametrize("case", sorted(CASES))
@pytest.mark.parametrize("limit", [GITHUB_LIMIT, GITLAB_LIMIT, MIN_LIMIT])
def test_golden_bodies_fit_and_balance(case: str, limit: int) -> None:
    body = render(CASES[case], limit)
    assert len(body) <= limit
    assert body.startswith(marker("team-a/infra", 42) + "\n\n**burrito-py** at `4f1c2b9a7d3e`")
    assert_balanced(body)
    assert SECRET not in body
    if limit == GITHUB_LIMIT:
        golden = GOLDEN / f"{case}.md"
        if UPDATE:
            golden.write_text(body)
        assert body == golden.read_text(), f"{golden} differs: rerun with BURRITO_PY_UPDATE_GOLDEN=1 and review"


def test_the_warnings_come_first_with_terraforms_reasons() -> None:
    body = render(CASES["replace"])
    warning = body.index("[!WARNING]")
    assert warning < body.index("| layer |") < body.index("<details>")
    assert "`aws_db_instance.main` (replace; replace_because_cannot_update; because of triggers_replace)" in body
    assert "| `team-a/db` | `layers/db` | +1 ~0 -1 ±1 | GatesAutoApply |" in body


def _outside_code(rendered: str) -> str:
    """Rendered HTML without what is inside `<code>` and `<pre>` (where nothing is a link, an element or a mention)."""
    return re.sub(r"<pre>.*?</pre>|<code>.*?</code>", "", rendered, flags=re.S)


def test_attack_destroyed_and_replaced_resources_render_inert_in_the_warnings() -> None:
    """Attack test: the plan JSON a pull request's runner uploads is written by the code it runs (§5.9), so a
    pull request's author chooses the addresses of the resources it destroys and replaces, and their
    `action_reason` and `replace_paths`. The warning block wrote the reason as markdown and the address in a code
    span a blank line ends: rendered, the bot's comment held an image, links ("Approve here") and a mention of a
    team, in the burrito-py comment everyone trusts. Now each is one line, and what is not a plain word is code."""
    hostile = "x\n\n<img src=x onerror=alert(1)>\n\n[Approve here](https://evil.example/login) @org/admins"
    plan = {"format_version": "1.2", "terraform_version": "1.11.4", "resource_changes": [
        {"address": "terraform_data.a", "mode": "managed", "type": "terraform_data", "name": "a",
         "action_reason": "replace_because_cannot_update <a href=\"https://evil.example\">Approve here</a> @org/admins",
         "replace_paths": [["triggers", "[click](https://evil.example/steal) @org/admins"]],
         "change": {"actions": ["delete", "create"], "before": {"input": "a"}, "after": {"input": "b"}}},
        {"address": f"terraform_data.b[\"{hostile}\"]", "mode": "managed", "type": "terraform_data", "name": "b",
         "change": {"actions": ["delete"], "before": {"input": "a"}, "after": None}}]}
    body = render(results(planned("app", plan)))
    assert_balanced(body)
    rendered = MarkdownIt("commonmark").enable("table").render(body)
    assert "<img" not in rendered and "<a " not in rendered and "href" not in _outside_code(rendered)
    assert "@org/admins" not in _outside_code(rendered)
    warning = body[body.index("> [!WARNING]"):body.index("| layer |")].strip().split("\n")
    assert len(warning) == 4 and all(line.startswith("> ") for line in warning)  # nothing broke a line


def test_a_failure_shows_its_last_40_log_lines() -> None:
    body = render(CASES["failure"])
    assert "❌ <code>team-a/network</code>: the plan failed" in body and "**1 failed**" in body
    assert "line 59: Error: Unsupported argument" in body and "line 20\n" in body and "line 19\n" not in body


def test_a_two_megabyte_plan_is_cut_with_a_way_to_the_whole() -> None:
    big = CASES["two_megabytes"]
    assert len(big.layers[0].plan_text) > 2_000_000
    body = render(big)
    assert len(body) <= GITHUB_LIMIT
    assert "`burrito-py plan download team-a/big`" in body
    small = body.index("<code>team-a/small</code>: Plan: 0 to add, 1 to change, 0 to destroy")
    assert "cut to fit" not in body[small:body.index("</details>", small)]  # the small plan is whole
    assert f"… and {17_000 // 2 - MAX_WARNINGS} more" in body  # deletes and replaces: every other change


def test_while_planning_the_status_line_counts() -> None:
    body = render(CASES["planning"])
    assert "planning 1/2 layers…" in body
    assert "| `team-a/cache` (downstream) | `layers/cache` | waiting | — |" in body


def test_fences_outlast_backticks_in_what_they_hold() -> None:
    tricky = planned("app", fixture("create"))
    tricky = LayerResult(tricky.namespace, tricky.name, tricky.path, tricky.state, tricky.plan,
                         "```\n</details>\n````\n" + tricky.plan_text)
    body = render(results(tricky))
    assert_balanced(body)
    assert "`````diff" in body


def test_a_limit_below_the_minimum_is_refused() -> None:
    with pytest.raises(ValueError, match="limit"):
        render(CASES["one_layer"], 1000)


def test_two_thousand_layers_keep_the_status_and_say_how_many_rows_are_left_out() -> None:
    many = results(*(planned(f"svc-{i:04d}", fixture("update")) for i in range(2000)))
    body = render(many)
    assert len(body) <= GITHUB_LIMIT and "2000 layers planned, 2000 with changes" in body
    assert "more layers (`kubectl get tfl` lists them all)" in body
    assert_balanced(body)


PLANS = [fixture(name) for name in ("create", "update", "delete", "replace", "replace_stateful", "no_changes",
                                    "moved", "import")]
LAYER = st.builds(
    lambda index, state, plan, lines: (
        LayerResult("ns", f"layer-{index}", f"layers/{index}", "failed",
                    log_tail=tuple(f"log {i} `x`" for i in range(lines))) if state == "failed" else
        planned(f"layer-{index}", plan) if state == "planned" else
        LayerResult("ns", f"layer-{index}", f"layers/{index}", state)),
    st.integers(0, 10_000), st.sampled_from(["planned", "planned", "failed", "planning", "pending"]),
    st.one_of(st.sampled_from(PLANS), st.integers(1, 400).map(generated_plan)), st.integers(0, 80))


@settings(max_examples=60, deadline=None)
@given(st.lists(LAYER, max_size=20, unique_by=lambda r: r.name), st.integers(MIN_LIMIT, 70_000))
def test_status_warnings_and_table_are_never_cut(layers: list[LayerResult], limit: int) -> None:
    """Up to 20 layers (the warnings are bounded by MAX_WARNINGS, the table by its rows): the first three parts
    are whole in every body, whatever the limit ≥ 4 KB; the body fits and balances."""
    pr = results(*layers)
    body = render(pr, limit)
    whole = render(pr, 10_000_000)
    essential = whole.split("\n\n<details")[0].split("\n\nNo changes in")[0]
    assert len(body) <= limit
    assert body.startswith(essential)
    assert_balanced(body)


def test_the_comment_masks_every_secret_fed_value_wherever_it_appears() -> None:
    """Issue 24, P2 item 5 (left by P3): a value that came from a Secret into an ordinary variable is not marked
    sensitive by Terraform; it shows in the plan text, the resource changes and a failed plan's log. The comment
    masks the inputs record's `secretVariables` values (plans/masking.py) in all of them."""
    from burrito_py.plans.masking import values_to_hide
    from burrito_py.plans.model import parse_plan

    secret = "s3cr3t-from-a-Secret"
    document = {"format_version": "1.2", "variables": {"token": {"value": secret}},
                "resource_changes": [{"address": f'terraform_data.x["{secret}"]', "mode": "managed",
                                      "type": "terraform_data", "name": "x", "index": secret,
                                      "change": {"actions": ["create"], "before": None,
                                                 "after": {"input": secret}, "after_unknown": {}}}]}
    hide = values_to_hide({"variables": {"token": secret}, "secretVariables": ["token"]}, document)
    planned = LayerResult("team", "app", "layers/app", "planned", plan=parse_plan(document),
                          plan_text=f'  + input = "{secret}"\n', hide=hide)
    failed = LayerResult("team", "db", "layers/db", "failed", log_tail=(f"Error: bad token {secret}",), hide=hide)
    body = render(PullRequestResults("team/infra", 4, "a" * 40, (planned, failed)))
    assert secret not in body
    assert body.count("(sensitive value)") >= 2  # the plan text and the log line, each masked
