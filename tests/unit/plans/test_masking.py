"""Masked plan views (plans/masking.py): every value that came from a Secret, or that Terraform or the configuration
marks sensitive, is gone from the masked JSON document, the model the UI renders and the text, wherever it was."""

from __future__ import annotations

import json
from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from burrito_py.plans.masking import (
    MAX_HIDDEN_VALUES,
    MIN_SUBSTRING,
    SecretValues,
    inputs_secret_names,
    masked_document,
    masked_model,
    scrub,
    scrub_text,
    secret_values,
    values_to_hide,
)
from burrito_py.plans.model import MASK, PlanFormatError, parse_plan

from .plan_fixtures import SECRET, fixture, fixture_names

PASSWORD = "s3cret-from-a-Secret"


def plan_with(value: Any, *, declared_sensitive: bool = False) -> dict[str, Any]:
    return {
        "format_version": "1.2", "terraform_version": "1.11.4",
        "variables": {"db_password": {"value": value}, "region": {"value": "eu-west-3"}},
        "resource_changes": [{
            "address": f'terraform_data.db["{PASSWORD}"]', "mode": "managed", "type": "terraform_data", "name": "db",
            "change": {"actions": ["create"], "before": None,
                       "after": {"input": f"user:{PASSWORD}@host", "list": [PASSWORD, "ok"], PASSWORD: 1},
                       "after_unknown": {}, "after_sensitive": {}}}],
        "resource_drift": [{"address": "terraform_data.old", "type": "terraform_data", "name": "old",
                            "change": {"actions": ["update"], "before": {"input": PASSWORD},
                                       "after": {"input": "x"}}}],
        "output_changes": {"dsn": {"actions": ["create"], "after": PASSWORD, "after_sensitive": False}},
        "prior_state": {"values": {"outputs": {"dsn": {"value": PASSWORD}}}},
        "configuration": {"root_module": {"variables": {"db_password": {"default": PASSWORD,
                                                                        "sensitive": declared_sensitive}}}},
    }


RECORD = {"digest": "sha256:0", "variables": {"db_password": PASSWORD}, "sensitive": [],
          "secretVariables": ["db_password"]}


def test_the_record_names_secret_and_sensitive_variables_and_absent_means_none() -> None:
    assert inputs_secret_names(RECORD) == {"db_password"}
    assert inputs_secret_names({"sensitive": ["up"], "secretVariables": ["a", 3]}) == {"up", "a"}
    assert inputs_secret_names({"digest": "x", "variables": {"a": "b"}}) == set()
    assert inputs_secret_names(None) == set()


def test_the_masked_document_never_holds_a_secret_fed_value() -> None:
    plan = plan_with(PASSWORD)
    document = masked_document(plan, values_to_hide(RECORD, plan))
    text = json.dumps(document)
    assert PASSWORD not in text
    assert document["variables"] == {"db_password": {"value": MASK}, "region": {"value": "eu-west-3"}}
    change = document["resource_changes"][0]
    assert change["address"] == f'terraform_data.db["{MASK}"]'
    assert change["change"]["after"] == {"input": f"user:{MASK}@host", "list": [MASK, "ok"], MASK: 1}
    assert document["resource_drift"][0]["change"]["before"] == {"input": MASK}
    # An allow-list: no prior state, planned values or configuration (which holds the default).
    assert set(document) == {"format_version", "terraform_version", "resource_changes", "resource_drift",
                             "output_changes", "errored", "applyable", "variables"}


def test_the_values_come_from_the_plan_when_the_record_has_names_only() -> None:
    plan = plan_with(PASSWORD)
    hide = values_to_hide({"secretVariables": ["db_password"]}, plan)
    assert PASSWORD not in json.dumps(masked_document(plan, hide))
    assert PASSWORD not in scrub_text(f"+ input = \"user:{PASSWORD}@host\"", hide)


def test_a_variable_declared_sensitive_is_masked_without_a_record() -> None:
    plan = plan_with(PASSWORD, declared_sensitive=True)
    assert PASSWORD not in json.dumps(masked_document(plan, values_to_hide(None, plan)))


def test_without_a_record_nothing_but_terraforms_markers_is_masked() -> None:
    plan = plan_with(PASSWORD)
    document = masked_document(plan, values_to_hide(None, plan))
    assert document["variables"]["db_password"] == {"value": PASSWORD}  # what today's records say: no names


def test_the_model_the_ui_renders_is_masked_too() -> None:
    plan = plan_with(PASSWORD)
    model = masked_model(parse_plan(plan), values_to_hide(RECORD, plan))
    assert PASSWORD not in repr(model)
    assert model.summary() == parse_plan(plan).summary()


def test_the_sensitive_fixture_loses_its_secret_everywhere() -> None:
    plan = fixture("sensitive")
    hide = values_to_hide(None, plan)  # declared sensitive in its configuration
    assert SECRET not in json.dumps(masked_document(plan, hide))
    assert SECRET not in repr(masked_model(parse_plan(plan), hide))


def test_every_fixture_still_parses_after_masking() -> None:
    hide = secret_values(["terraform_data"])
    for name in fixture_names():
        document = masked_document(fixture(name), hide)
        assert "terraform_data" not in json.dumps(document), name


def test_text_forms_are_masked_escaped_quoted_and_line_by_line() -> None:
    quoted = 'pa"ss\\word'
    multi = "-----BEGIN KEY-----\nAAAABBBBCCCC\n-----END KEY-----"
    hide = secret_values([quoted, multi])
    text = f'x = "{json.dumps(quoted)[1:-1]}"\n  <<-EOT\n    AAAABBBBCCCC\n  EOT\n'
    out = scrub_text(text, hide)
    assert "AAAABBBBCCCC" not in out and 'pa\\"ss' not in out


def test_short_values_are_masked_only_whole() -> None:
    hide = secret_values(["on", 5432, "abc"])
    assert scrub({"a": "on", "b": "done", "c": 5432, "d": "port 5432", "e": 54321}, hide) == {
        "a": MASK, "b": "done", "c": MASK, "d": f"port {MASK}", "e": 54321}
    assert scrub_text('enabled = "on"\nconnection done\nname = "abc"', hide) == (
        f'enabled = "{MASK}"\nconnection done\nname = "{MASK}"')


def strings(value: Any) -> list[str]:
    if isinstance(value, str):
        return [value]
    if isinstance(value, dict):
        return [t for k, v in value.items() for t in [k, *strings(v)]]
    if isinstance(value, list):
        return [t for item in value for t in strings(item)]
    return []


texts = st.text(st.characters(codec="utf-8", exclude_categories=("Cs",)), min_size=MIN_SUBSTRING, max_size=12)


@settings(max_examples=300, deadline=None)
@given(secrets=st.lists(texts, min_size=1, max_size=3), around=st.lists(st.text(max_size=8), max_size=4))
def test_no_hidden_value_survives_in_text_or_json(secrets: list[str], around: list[str]) -> None:
    hide = secret_values(secrets)
    text = "".join(a + s for a, s in zip(around + [""] * len(secrets), secrets, strict=False)) + "".join(around)
    masked = scrub_text(text, hide)
    document = scrub({"k": text, text: [text, {"n": text}]}, hide)
    for secret in secrets:
        if secret in MASK:
            continue  # cannot be told from the mask once masked
        assert secret not in masked
        assert not [t for t in strings(document) if secret in t]


def _mask_a_crafted_plan(values: int, text_bytes: int) -> tuple[bool, bool]:
    """What a server view and the pull request comment do with a runner's plan: hide its sensitive variables'
    values in the masked JSON and in the pretty text. (whether a value leaked in either)."""
    leaves = [f"v{i:07d}" for i in range(values)]
    plan = plan_with(leaves, declared_sensitive=True)
    plan["resource_changes"][0]["change"]["after"]["input"] = leaves[-1]
    text = ("x" * 1000 + "\n") * (text_bytes // 1001) + leaves[-1] + "\n"
    hide = values_to_hide(None, plan)
    masked = scrub_text(text, hide)
    try:
        document = json.dumps(masked_document(plan, hide))
    except PlanFormatError as exc:  # refused: nothing shown
        document = str(exc)
    model = repr(masked_model(parse_plan(plan), hide))
    return leaves[-1] in masked, leaves[-1] in document or leaves[-1] in model


def _run_masking(out: Any, values: int, text_bytes: int) -> None:
    out.put(_mask_a_crafted_plan(values, text_bytes))


def test_attack_a_plan_naming_a_huge_number_of_sensitive_values_cannot_stall_masking() -> None:
    """Tenant code writes the plan JSON: a sensitive variable holding 200,000 distinct strings made every masked
    view (the server's plan and log pages, the controllers' pull request comment) scan each text once per value
    (here about 4 MiB x 200,000: minutes of one CPU, holding the shared process's interpreter lock). Past the bound a
    view hides everything instead, at once, and nothing leaks."""
    import multiprocessing

    context = multiprocessing.get_context("fork")
    out = context.Queue()
    worker = context.Process(target=_run_masking, args=(out, 200_000, 4 * 1024 * 1024))
    worker.start()
    worker.join(timeout=20)
    if worker.is_alive():
        worker.kill()
        worker.join()
        raise AssertionError("masking a plan with 200,000 sensitive values took more than 20 s")
    assert out.get(timeout=5) == (False, False)


def test_values_up_to_the_bound_are_still_each_masked() -> None:
    assert _mask_a_crafted_plan(MAX_HIDDEN_VALUES // 3, 64 * 1024) == (False, False)
    hide = secret_values([f"value-{i}" for i in range(MAX_HIDDEN_VALUES)])
    assert not hide.overflow and scrub_text("a value-7 b", hide) == f"a {MASK} b"
    over = secret_values([f"value-{i}" for i in range(MAX_HIDDEN_VALUES + 1)])
    assert over.overflow and "value-7" not in scrub_text("a value-7 b", over)
    assert over.merge(SecretValues()).overflow and SecretValues().merge(over).overflow
    assert scrub({"k": "plain"}, over) == {MASK: MASK}


def test_variables_fed_from_a_secret_through_the_environment_are_hidden_from_the_plan() -> None:
    from burrito_py.plans.masking import run_secret_variables, values_to_hide

    plan = {"variables": {"message": {"value": "s3cr3t-from-the-env"}, "region": {"value": "eu-west-1"}}}
    run = {"status": {"attempts": [{"number": 1}, {"number": 2, "secretVariables": ["message"]}]}}
    hide = values_to_hide(None, plan, run_secret_variables(run))
    assert "s3cr3t-from-the-env" in hide.long and "eu-west-1" not in hide.long
    assert values_to_hide(None, plan).empty
