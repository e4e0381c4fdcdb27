"""Attribute-level diffs (plans/attributes.py): paths, sensitive and unknown values, replace-forcing attributes, the
parse's bounds, and, under hypothesis, that a value Terraform marks sensitive never comes out and that the diff is
exactly what changed."""

from __future__ import annotations

import json
from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from burrito_py.plans.attributes import (
    AttributeChange,
    Budget,
    Marker,
    attribute_changes,
    display,
    path_text,
)
from burrito_py.plans.masking import masked_model, values_to_hide
from burrito_py.plans.model import parse_plan

from .plan_fixtures import diff_fixture

OLD, NEW = "old-sensitive-password-1", "new-sensitive-password-2"  # the sensitive variable of diff/attributes.json


def diff(before: Any, after: Any, **change: Any) -> list[tuple[str, Any, Any, bool]]:
    found, cut = attribute_changes({"before": before, "after": after, **change})
    assert cut == 0
    return [(c.path, c.before, c.after, c.forces_replace) for c in found]


def test_a_real_terraform_plan_gives_each_changed_attribute() -> None:
    """terraform 1.11.4 (tests/fixtures/plans/make_fixtures.py, case `attributes`): nested input changes, a
    sensitive variable that changes, a replace forced by triggers_replace, a create."""
    plan = parse_plan(diff_fixture("attributes"), attributes=True)
    found = {rc.address: [(a.path, a.before, a.after, a.forces_replace) for a in rc.attributes]
             for rc in plan.changed()}
    unknown, sensitive = Marker.UNKNOWN, Marker.SENSITIVE
    web_output = found["terraform_data.web"][-1]
    assert found == {
        "terraform_data.db": [("id", found["terraform_data.db"][0][1], unknown, False),
                              ("output", "db-v1", unknown, False),
                              ("triggers_replace[0]", "v1", "v2", True)],
        "terraform_data.new": [("id", None, unknown, False), ("input", None, "fresh", False),
                               ("output", None, unknown, False)],
        # Terraform marks `input` sensitive on both sides; `output` (the old value, computed by terraform_data) it
        # does not mark, and prints it itself: the diff follows Terraform's markers.
        "terraform_data.secret": [("input", sensitive, sensitive, False), ("output", OLD, unknown, False)],
        "terraform_data.web": [("input.ingress[0].cidr_blocks[1]", "192.168.0.0/16", "172.16.0.0/12", False),
                               ("input.tags.Env", "dev", None, False),
                               ("input.tags.Name", "web-1", "web-2", False),
                               ("output", web_output[1], unknown, False)],
    }
    assert isinstance(web_output[1], dict) and web_output[1]["tags"]["kubernetes.io/role"] == "node"
    assert all(rc.attributes_cut == 0 for rc in plan.changed())
    assert NEW not in repr(plan) and OLD not in repr(found["terraform_data.secret"][0])
    # Without `attributes=True` (the controllers' reviews) nothing is computed.
    assert all(rc.attributes == () for rc in parse_plan(diff_fixture("attributes")).resource_changes)


def test_paths_flatten_maps_and_lists_and_quote_odd_keys() -> None:
    before = {"tags": {"Name": "a", "kubernetes.io/role": "x"}, "ingress": [{"cidr_blocks": ["1", "2"]}]}
    after = {"tags": {"Name": "b", "kubernetes.io/role": "y"}, "ingress": [{"cidr_blocks": ["1", "3", "4"]}]}
    assert diff(before, after) == [
        ("ingress[0].cidr_blocks[1]", "2", "3", False), ("ingress[0].cidr_blocks[2]", None, "4", False),
        ("tags.Name", "a", "b", False), ('tags["kubernetes.io/role"]', "x", "y", False)]
    assert path_text(["a", 0, "b c", 'q"', "x-y"]) == 'a[0]["b c"]["q\\""].x-y'


def test_unchanged_null_and_absent_are_left_out_and_a_whole_map_added_or_removed_is_flattened() -> None:
    assert diff({"a": 1, "b": None, "c": [1]}, {"a": 1, "c": [1]}) == []
    assert diff({"t": {"x": "1", "y": "2"}}, {"t": None}) == [("t.x", "1", None, False), ("t.y", "2", None, False)]
    assert diff({"t": None}, {"t": {"x": "1"}}) == [("t.x", None, "1", False)]
    assert diff({"t": {}}, {"t": None}) == [("t", {}, None, False)]
    assert diff({"n": 1}, {"n": 1.0}) == [] and diff({"n": 1}, {"n": True}) == [("n", 1, True, False)]
    assert diff({"d": {"k": "v"}}, {"d": "text"}) == [("d", {"k": "v"}, "text", False)]  # a dynamic type change


def test_sensitive_values_are_compared_raw_and_shown_masked() -> None:
    sens = {"password": True}
    assert diff({"password": "a"}, {"password": "b"}, before_sensitive=sens, after_sensitive=sens) == [
        ("password", Marker.SENSITIVE, Marker.SENSITIVE, False)]
    assert diff({"password": "a"}, {"password": "a"}, before_sensitive=sens, after_sensitive=sens) == []
    # Becoming sensitive, or no longer: both sides masked; null stays null (it holds nothing).
    assert diff({"password": "a"}, {"password": "b"}, after_sensitive=sens) == [
        ("password", Marker.SENSITIVE, Marker.SENSITIVE, False)]
    assert diff(None, {"password": "b"}, after_sensitive=sens) == [("password", None, Marker.SENSITIVE, False)]
    # A sensitive map is one attribute: its keys are not shown either.
    assert diff({"m": {"k1": "a"}}, {"m": {"k2": "a"}}, before_sensitive={"m": True}, after_sensitive={"m": True}) == [
        ("m", Marker.SENSITIVE, Marker.SENSITIVE, False)]
    # Sensitive inside a list, and a sensitive value that becomes unknown.
    assert diff({"l": ["x", "s1"]}, {"l": ["y", "s2"]}, before_sensitive={"l": [False, True]},
                after_sensitive={"l": [False, True]}) == [("l[0]", "x", "y", False),
                                                          ("l[1]", Marker.SENSITIVE, Marker.SENSITIVE, False)]
    assert diff({"p": "s"}, {}, after_unknown={"p": True}, before_sensitive={"p": True}) == [
        ("p", Marker.SENSITIVE, Marker.UNKNOWN, False)]
    # A map that meets a scalar shows its sensitive parts masked.
    assert diff({"d": {"k": "secret", "o": "ok"}}, {"d": "x"}, before_sensitive={"d": {"k": True}}) == [
        ("d", {"k": "(sensitive)", "o": "ok"}, "x", False)]


def test_unknown_values_and_maps_that_become_unknown() -> None:
    assert diff({"id": "i-1", "arn": "a"}, {"arn": "a"}, after_unknown={"id": True}) == [
        ("id", "i-1", Marker.UNKNOWN, False)]
    assert diff({"o": {"a": 1, "b": 2}}, {}, after_unknown={"o": True}) == [
        ("o", {"a": 1, "b": 2}, Marker.UNKNOWN, False)]
    assert diff(None, {"t": {"a": "1"}}, after_unknown={"t": {"b": True}, "id": True}) == [
        ("id", None, Marker.UNKNOWN, False), ("t.a", None, "1", False), ("t.b", None, Marker.UNKNOWN, False)]
    assert diff(None, {}, after_unknown={"l": [True]}) == [("l[0]", None, Marker.UNKNOWN, False)]


def test_attributes_under_or_over_a_replace_path_force_the_replace() -> None:
    assert diff({"ami": "a", "tags": {"x": "1"}, "triggers": ["v1"], "n": "1"},
                {"ami": "b", "tags": {"x": "2"}, "triggers": ["v2"], "n": "2"},
                replace_paths=[["ami"], ["triggers"], ["tags", "x", "deeper"]]) == [
        ("ami", "a", "b", True), ("n", "1", "2", False), ("tags.x", "1", "2", True), ("triggers[0]", "v1", "v2", True)]


def test_the_parse_keeps_at_most_its_bounds_and_counts_the_rest() -> None:
    before = {f"k{i:03d}": i for i in range(300)}
    after = {f"k{i:03d}": i + 1 for i in range(300)}
    found, cut = attribute_changes({"before": before, "after": after})
    assert (len(found), cut) == (200, 100) and found[0].path == "k000"
    budget = Budget(250)
    assert [len(attribute_changes({"before": before, "after": after}, budget)[0]) for _ in range(3)] == [200, 50, 0]
    assert budget.left == 0
    plan = {"resource_changes": [{"address": f"t.r{i}", "type": "t", "name": f"r{i}",
                                  "change": {"actions": ["update"], "before": before, "after": after}}
                                 for i in range(101)]}
    model = parse_plan(plan, attributes=True)
    assert sum(len(rc.attributes) for rc in model.resource_changes) == 20_000  # MAX_PER_PLAN
    assert model.resource_changes[-1].attributes == () and model.resource_changes[-1].attributes_cut == 300
    deleted = parse_plan({"resource_changes": [{"address": "t.d", "change": {"actions": ["delete"],
                                                                             "before": before, "after": None}}]},
                         attributes=True)
    assert deleted.resource_changes[0].attributes == ()  # a destroy is its address; its attributes all go


def test_values_nested_as_deep_as_json_allows_are_counted_not_a_crash() -> None:
    deep: Any = "x"
    for _ in range(5_000):
        deep = {"a": deep}
    found, cut = attribute_changes({"before": {"v": deep}, "after": {"v": {"a": deep}}})
    assert found == () and cut >= 1
    assert display(deep) == "(too deeply nested to show)"


def test_display_is_json_on_one_line_with_hiding_characters_escaped_and_long_values_cut() -> None:
    assert display(Marker.SENSITIVE) == "(sensitive)" and display("(sensitive)") == '"(sensitive)"'
    assert display(None) == "null" and display(True) == "true" and display(1.5) == "1.5" and display([]) == "[]"
    assert display("a\nb\u202ec\u2028d\x85") == '"a\\nb\\u202ec\\u2028d\\u0085"'
    assert display("x" * 500, 10) == '"xxxxxxxxxx"… (500 characters)'
    assert display({"a": "b" * 50}, 10) == '{"a":"bbbb… (58 characters)'
    assert path_text(["k\nx"]) == '["k\\nx"]'


def test_secret_fed_values_are_masked_in_paths_and_values() -> None:
    """A value from a Secret is not marked sensitive by Terraform: masked_model (plans/masking.py) replaces it in
    the attribute diff as everywhere else, in a path (a map key) and in both values."""
    secret = "s3cr3t-from-a-Secret"
    document = {"variables": {"token": {"value": secret}}, "resource_changes": [{
        "address": "terraform_data.x", "type": "terraform_data", "name": "x",
        "change": {"actions": ["update"], "before": {"input": "old", "m": {secret: "1"}, "n": "1"},
                   "after": {"input": f"Bearer {secret}", "m": {secret: "2"}, "n": secret}}}]}
    hide = values_to_hide({"variables": {"token": secret}, "secretVariables": ["token"]}, document)
    (rc,) = masked_model(parse_plan(document, attributes=True), hide).resource_changes
    shown = [(a.path, display(a.before), display(a.after)) for a in rc.attributes]
    assert secret not in json.dumps(shown)
    assert shown == [("input", '"old"', '"Bearer (sensitive value)"'), ('m["(sensitive value)"]', '"1"', '"2"'),
                     ("n", '"1"', '"(sensitive value)"')]


# -- properties ---------------------------------------------------------------------------------------------
SECRET_PREFIX = "S3CR3T"
PLAIN = st.text(alphabet="abcdefghijklm .-", max_size=6)
KEYS = st.text(alphabet="abcdefgh.-_", min_size=1, max_size=4)
SCALARS = st.one_of(st.none(), st.booleans(), st.integers(-5, 5), PLAIN)
SECRET_TEXT = st.text(alphabet="nopqrstuvwxyz", min_size=1, max_size=6).map(lambda t: f"{SECRET_PREFIX}{t}")


def _secret_tree(depth: int) -> st.SearchStrategy[Any]:
    """Anything: under a `true` sensitive marker, keys and values may all be secret."""
    leaf = st.one_of(SECRET_TEXT, st.integers(), st.none())
    if depth == 0:
        return leaf
    inner = _secret_tree(depth - 1)
    return st.one_of(leaf, st.lists(inner, max_size=3), st.dictionaries(st.one_of(SECRET_TEXT, KEYS), inner,
                                                                        max_size=3))


def _pair(depth: int) -> st.SearchStrategy[tuple[Any, Any]]:
    """(value, its sensitive marker structure): a secret leaf or subtree is marked `true`, nothing else is."""
    secret = _secret_tree(depth).map(lambda v: (v, True))
    plain = SCALARS.map(lambda v: (v, False))
    if depth == 0:
        return st.one_of(plain, secret)
    inner = _pair(depth - 1)
    mapping = st.dictionaries(KEYS, inner, max_size=4).map(
        lambda d: ({k: v for k, (v, _) in d.items()}, {k: s for k, (_, s) in d.items()}))
    listing = st.lists(inner, max_size=3).map(lambda items: ([v for v, _ in items], [s for _, s in items]))
    return st.one_of(plain, secret, mapping, listing)


@settings(max_examples=300, deadline=None)
@given(_pair(3), _pair(3), st.lists(st.lists(st.one_of(KEYS, st.integers(0, 3)), min_size=1, max_size=3),
                                    max_size=2))
def test_a_value_marked_sensitive_never_comes_out(before: tuple[Any, Any], after: tuple[Any, Any],
                                                  replace_paths: list[list[Any]]) -> None:
    found, _ = attribute_changes({"before": {"a": before[0]}, "after": {"a": after[0]},
                                  "before_sensitive": {"a": before[1]}, "after_sensitive": {"a": after[1]},
                                  "replace_paths": replace_paths})
    shown = " ".join(f"{c.path} {display(c.before, 10_000)} {display(c.after, 10_000)}" for c in found)
    assert SECRET_PREFIX not in shown
    assert all(c.before is not Marker.UNKNOWN for c in found)


JSON = st.recursive(SCALARS, lambda inner: st.lists(inner, max_size=3) | st.dictionaries(KEYS, inner, max_size=3),
                    max_leaves=12)


def _flat(value: Any, steps: tuple[Any, ...], out: dict[str, Any]) -> None:
    """An independent flattening: scalar leaves by path; null and empty maps and lists hold nothing."""
    if isinstance(value, dict):
        for key, item in value.items():
            _flat(item, (*steps, key), out)
    elif isinstance(value, list):
        for index, item in enumerate(value):
            _flat(item, (*steps, index), out)
    elif value is not None:
        out[path_text(steps)] = value


@settings(max_examples=300, deadline=None)
@given(JSON, JSON)
def test_the_diff_is_exactly_what_changed(before: Any, after: Any) -> None:
    """Without sensitive or unknown values: applying the diff's changes to the flattened `before` gives the flattened
    `after` (where a map or list meets a scalar, the diff names the container whole), and nothing unchanged is
    listed."""
    found, _ = attribute_changes({"before": {"v": before}, "after": {"v": after}})
    result: dict[str, Any] = {}
    flat_after: dict[str, Any] = {}
    _flat({"v": before}, (), result)
    _flat({"v": after}, (), flat_after)
    for change in found:
        assert (json.dumps(change.before, sort_keys=True), type(change.before)) != \
            (json.dumps(change.after, sort_keys=True), type(change.after))
        under = change.path
        for key in [k for k in result if k == under or k.startswith((under + ".", under + "["))]:
            del result[key]
        _flat(change.after, change.steps, result)
    assert result == flat_after
    if json.dumps(before) == json.dumps(after):
        assert found == ()


def test_attribute_change_kinds() -> None:
    assert AttributeChange(("a",), None, 1).kind == "add"
    assert AttributeChange(("a",), 1, None).kind == "remove"
    assert AttributeChange(("a",), Marker.SENSITIVE, Marker.SENSITIVE).kind == "change"
