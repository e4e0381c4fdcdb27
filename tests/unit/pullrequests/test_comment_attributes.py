"""The comment's attribute diffs (pullrequests/comment_attributes.py): a real terraform plan rendered, the budget
(largest resources cut first, saying how many), hostile values inert (an attack test), and under hypothesis: never
over the limit, never a sensitive value."""

from __future__ import annotations

import re
from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st
from markdown_it import MarkdownIt

from burrito_py.gitproviders.github import COMMENT_LIMIT as GITHUB_LIMIT
from burrito_py.plans.masking import values_to_hide
from burrito_py.plans.model import parse_plan
from burrito_py.pullrequests.comment import MIN_LIMIT, LayerResult, PullRequestResults, render
from burrito_py.pullrequests.comment_attributes import attribute_sections

from ..plans.plan_fixtures import diff_fixture, hostile_plan
from ..plans.test_attributes import NEW, SECRET_PREFIX, _pair
from .test_comment import assert_balanced

HEAD = "4f1c2b9a7d3e5f60718293a4b5c6d7e8f9012345"


def layer(name: str, document: dict[str, Any], plan_text: str = "(the plan)", **kw: Any) -> LayerResult:
    return LayerResult("team-a", name, f"layers/{name}", "planned", parse_plan(document, attributes=True),
                       plan_text, **kw)


def comment(*layers: LayerResult, limit: int = GITHUB_LIMIT) -> str:
    return render(PullRequestResults("team-a/infra", 42, HEAD, tuple(layers)), limit)


def plan_of(*resources: tuple[str, list[str], Any, Any], **change: Any) -> dict[str, Any]:
    return {"format_version": "1.2", "resource_changes": [
        {"address": address, "type": address.split(".")[0], "name": address.split(".")[1],
         "change": {"actions": actions, "before": before, "after": after, **change}}
        for address, actions, before, after in resources]}


def test_a_real_terraform_plan_in_the_comment() -> None:
    """terraform 1.11.4's plan (diff/attributes.json): nested input changes, a sensitive variable that changes, a
    replace forced by triggers_replace, a create; masked as the controller masks it (the configuration declares the
    variable sensitive)."""
    document = diff_fixture("attributes")
    body = comment(layer("app", document, hide=values_to_hide(None, document)))
    section = body[body.index("<details><summary>Attribute changes of <code>team-a/app</code>: 4 resources"):]
    section = section[:section.index("</details>")]
    for line in ("@@ terraform_data.db: replace @@", '! triggers_replace[0]: "v1" → "v2"  # forces replacement',
                 '! output: "db-v1" → (known after apply)',
                 "@@ terraform_data.new: create @@", '+ input: "fresh"', "+ id: (known after apply)",
                 "@@ terraform_data.secret: update @@", "! input: (sensitive) → (sensitive)",
                 "@@ terraform_data.web: update @@",
                 '! input.ingress[0].cidr_blocks[1]: "192.168.0.0/16" → "172.16.0.0/12"',
                 '- input.tags.Env: "dev"', '! input.tags.Name: "web-1" → "web-2"'):
        assert f"\n{line}\n" in section, line
    assert NEW not in body
    assert_balanced(body)
    assert body.index("Attribute changes of") < body.index("<code>team-a/app</code>: Plan:")


def test_the_largest_resources_are_cut_first_and_the_comment_says_how_many() -> None:
    """1,000 changes whose attributes do not fit 64 KiB: the small ones stay, the largest go, and the section says
    how many were cut; a small layer beside it is whole."""
    resources = [(f"t.r{i:04d}", ["update"], {"v": "a"}, {"v": "b" * (10 + i % 100)}) for i in range(1000)]
    big = layer("big", plan_of(*resources))
    small = layer("small", plan_of(("t.only", ["update"], {"v": "a"}, {"v": "b"})))
    body = comment(big, small)
    assert len(body) <= GITHUB_LIMIT
    assert_balanced(body)
    found = re.search(r"… attribute changes of (\d+) resources cut to fit the comment: "
                      r"burrito-py plan download team-a/big has them all", body)
    assert found
    shown = re.findall(r"@@ t\.r(\d{4}): update @@", body)
    assert len(shown) + int(found.group(1)) == 1000 and len(shown) > 100
    lengths = sorted(10 + int(i) % 100 for i in shown)
    cut_lengths = sorted({10 + i % 100 for i in range(1000)} - set(lengths))
    assert not cut_lengths or max(lengths) <= min(cut_lengths)  # every resource shown is no larger than one cut
    assert "@@ t.only: update @@" in body and "cut to fit the comment: burrito-py plan download team-a/small" \
        not in body


def test_sections_that_do_not_fit_at_all_are_counted() -> None:
    plans = [(f"ns/l{i}", parse_plan(plan_of(("t.r", ["update"], {"v": "a"}, {"v": "b"})), attributes=True))
             for i in range(100)]
    sections = attribute_sections(plans, 2_000)
    assert sum(len(s) + 2 for s in sections) <= 2_000
    assert re.fullmatch(r"Attribute changes of \d+ more layers cut to fit the comment\.", sections[-1])
    assert len(sections) - 1 + int(sections[-1].split()[3]) == 100


def test_attack_hostile_values_render_inert() -> None:
    """Attack test: a pull request's author sets attribute values, map keys and for_each keys to HTML and markdown
    (closing the `<details>`, an image with an onerror handler, a link, a fence breaker). Rendered by a CommonMark
    parser with HTML on (as GitHub reads it before sanitizing), none of it becomes an element or a link, and every
    `<details>` stays balanced: it is all code."""
    body = comment(layer("app", hostile_plan(), plan_text="(text)"))
    assert len(body) <= GITHUB_LIMIT
    assert_balanced(body)
    rendered = MarkdownIt("commonmark").enable("table").render(body)
    assert "<img" not in rendered and "<script" not in rendered and "<a " not in rendered
    assert "<h1" not in rendered and "<li>item" not in rendered
    assert rendered.count("<details>") == rendered.count("</details>") == 2
    assert "\u202e" not in body  # a right-to-left override would reorder what the reviewer reads
    section = next(t.content for t in MarkdownIt("commonmark").parse(body) if t.type == "fence")  # the diff's code
    assert '! input: "old" → "</details><img src=x onerror=alert(1)>"' in section  # shown, as text
    assert '! input: "old" → "[click here](https://evil.example/steal)"' in section


PLAIN_RESOURCES = st.lists(st.tuples(st.sampled_from(["create", "update", "replace"]),
                                     st.dictionaries(st.text("abcxyz", min_size=1, max_size=5),
                                                     st.text(max_size=300), max_size=8)), min_size=1, max_size=60)


@settings(max_examples=40, deadline=None)
@given(st.lists(PLAIN_RESOURCES, min_size=1, max_size=6), st.integers(MIN_LIMIT, 70_000))
def test_the_comment_never_exceeds_its_limit(layers: list[list[tuple[str, dict[str, str]]]], limit: int) -> None:
    results = []
    for n, resources in enumerate(layers):
        document = plan_of(*((f"t.r{i}", ["delete", "create"] if action == "replace" else [action],
                              None if action == "create" else {"k": "old"}, values)
                             for i, (action, values) in enumerate(resources)), replace_paths=[["k"]])
        results.append(layer(f"l{n}", document, plan_text="x\n" * (n * 500)))
    body = comment(*results, limit=limit)
    assert len(body) <= limit
    assert_balanced(body)


@settings(max_examples=150, deadline=None)
@given(st.lists(st.tuples(_pair(3), _pair(3)), min_size=1, max_size=5), st.integers(MIN_LIMIT, 70_000))
def test_a_sensitive_value_never_reaches_the_comment(pairs: list[tuple[tuple[Any, Any], tuple[Any, Any]]],
                                                      limit: int) -> None:
    document = {"resource_changes": [
        {"address": f"t.r{i}", "type": "t", "name": f"r{i}",
         "change": {"actions": ["update"], "before": {"a": before[0]}, "after": {"a": after[0]},
                    "before_sensitive": {"a": before[1]}, "after_sensitive": {"a": after[1]}}}
        for i, (before, after) in enumerate(pairs)]}
    body = comment(layer("app", document, plan_text=""), limit=limit)
    assert SECRET_PREFIX not in body


def test_a_secret_fed_value_is_masked_in_the_attribute_diffs() -> None:
    """A value from a Secret (not marked sensitive by Terraform) in an attribute's value and in a map key: the
    comment masks it there as in the plan text (LayerResult.masked, plans/masking.py)."""
    secret = "s3cr3t-fed-from-a-Secret"
    document = hostile_plan([secret])
    hide = values_to_hide({"variables": {"token": secret}, "secretVariables": ["token"]}, document)
    body = comment(layer("app", document, plan_text=f"+ input = {secret}", hide=hide))
    assert secret not in body
    assert '! input: "old" → "(sensitive value)"' in body and '! m["(sensitive value)"]: "1" → "2"' in body
