"""Sharding by namespace sets (kube/shards.py): who owns a namespace, what a shard lists at start-up,
and the settings that describe shards, with errors naming the variable."""

from __future__ import annotations

import logging
from typing import Any

import pytest
from pydantic import ValidationError

from burrito_py.controllers.layer.validation import validate_layer
from burrito_py.controllers.settings import ControllerSettings, settings_problem
from burrito_py.kube.shards import Scope, Shard, is_literal, owner_of

SHARDS = [
    Shard(name="a", namespaces="team-a-*,!*-sandbox"),
    Shard(name="b", namespaces=["team-*"]),
    Shard(name="c", namespaces="!kube-*"),  # leading negation: an implied catch-all first
]


@pytest.mark.parametrize(
    ("namespace", "owner"),
    [
        ("team-a-prod", "a"),
        ("team-a-sandbox", "b"),  # excluded from a by its negation, matched by b
        ("team-b", "b"),
        ("team-a", "b"),  # 'team-a-*' needs the dash
        ("payments", "c"),
        ("kube-system", None),  # no shard matches: nobody reconciles it
    ],
)
def test_first_listed_shard_whose_patterns_match_owns(namespace: str, owner: str | None) -> None:
    assert owner_of(namespace, SHARDS) == owner


def test_owner_follows_list_order_not_specificity() -> None:
    broad_first = [Shard(name="all", namespaces="*"), Shard(name="a", namespaces="team-a")]
    assert owner_of("team-a", broad_first) == "all"
    assert owner_of("team-a", list(reversed(broad_first))) == "a"


def test_a_list_of_patterns_is_a_union_but_one_pattern_reads_left_to_right() -> None:
    # kopf: later inclusive globs of ONE pattern only re-match what a negation excluded.
    assert owner_of("team-b", [Shard(name="x", namespaces="team-a,team-b")]) is None
    assert owner_of("team-b", [Shard(name="x", namespaces=["team-a", "team-b"])]) == "x"


def test_overlap_the_second_shard_ignores_and_warns_once_per_namespace(caplog: pytest.LogCaptureFixture) -> None:
    scope = Scope(patterns=["team-*"], shard="b", shards=SHARDS)
    with caplog.at_level(logging.WARNING, "burrito_py.kube.shards"):
        assert not scope.owns("team-a-prod")
        assert not scope.owns("team-a-prod")
        assert not scope.owns("team-a-dev")
        assert scope.owns("team-b")
        assert not scope.owns("payments")  # c's, and b does not even watch it: no warning
    warnings = [r.getMessage() for r in caplog.records]
    assert len(warnings) == 2
    assert "namespace team-a-prod matches the namespaces of shard 'b' but belongs to shard 'a'" in warnings[0]


def test_cluster_scoped_objects_and_cluster_work() -> None:
    first, second = (Scope(patterns=s.namespaces, shard=s.name, shards=SHARDS) for s in SHARDS[:2])
    assert first.owns(None) and second.owns(None)  # CRDs, definitions: read by every shard
    assert first.cluster_work and not second.cluster_work
    assert Scope().cluster_work and Scope(patterns=["x"]).cluster_work  # unsharded: everything is ours


def test_unsharded_scope_owns_what_it_watches() -> None:
    assert Scope().owns("anything")
    scope = Scope(patterns=["team-*,!*-sandbox"])
    assert scope.owns("team-a") and not scope.owns("team-a-sandbox") and not scope.owns("other")


@pytest.mark.parametrize(
    ("patterns", "literal"), [([], True), (["a", "b-c"], True), (["a-*"], False), (["!x"], False), (["a,b"], False)]
)
def test_literal_patterns(patterns: list[str], literal: bool) -> None:
    assert all(is_literal(p) for p in patterns) is literal
    assert Scope(patterns=patterns).literal is literal


def test_start_up_listing() -> None:
    assert Scope().listing(None) == [None]  # one cluster-wide listing per kind
    assert Scope(patterns=["b", "a"]).listing(None) == ["a", "b"]  # plain names: listed directly
    existing = ["team-a-prod", "team-a-sandbox", "team-b", "payments", "kube-system"]
    shard_b = Scope(patterns=SHARDS[1].namespaces, shard="b", shards=SHARDS)
    assert shard_b.listing(existing) == ["team-a-sandbox", "team-b"]  # not team-a-prod: a's
    shard_c = Scope(patterns=SHARDS[2].namespaces, shard="c", shards=SHARDS)
    assert shard_c.listing(existing) == ["payments"]
    overlapping_literals = Scope(patterns=["team-a-prod", "x"], shard="z",
                                 shards=[*SHARDS[:1], Shard(name="z", namespaces=["team-a-prod", "x"])])
    assert overlapping_literals.listing(None) == ["x"]


# -- settings ------------------------------------------------------------------------------------------------
def _problem(**kwargs: Any) -> str:
    with pytest.raises(ValidationError) as failure:
        ControllerSettings(**kwargs)
    return settings_problem(failure.value)


def test_a_shard_watches_its_own_namespaces(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("BURRITO_PY_SHARDS", '[{"name": "a", "namespaces": "team-a-*,!*-sandbox"}, '
                                            '{"name": "b", "namespaces": ["team-*", "ops"]}]')
    monkeypatch.setenv("BURRITO_PY_SHARD", "b")
    settings = ControllerSettings()
    assert settings.namespaces == ["team-*", "ops"]
    assert [s.name for s in settings.shards] == ["a", "b"]
    assert settings.scope() is settings.scope()  # one scope per settings: warnings are not repeated
    assert ControllerSettings(shards=SHARDS, shard="a", namespaces=["team-a-*,!*-sandbox"]).shard == "a"


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"shard": "a"}, "BURRITO_PY_SHARD: 'a' is not one of BURRITO_PY_SHARDS (none)"),
        ({"shards": SHARDS}, "BURRITO_PY_SHARD: required when BURRITO_PY_SHARDS lists shards"),
        ({"shards": SHARDS, "shard": "d"}, "BURRITO_PY_SHARD: 'd' is not one of BURRITO_PY_SHARDS ('a', 'b', 'c')"),
        ({"shards": [*SHARDS, SHARDS[0]], "shard": "a"}, "BURRITO_PY_SHARDS: shard name(s) 'a' listed more than once"),
        ({"shards": [{"name": "Team_A", "namespaces": "x"}], "shard": "Team_A"},
         "BURRITO_PY_SHARDS[0].name: String should match pattern"),
        ({"shards": [{"name": "a", "namespaces": []}], "shard": "a"}, "BURRITO_PY_SHARDS[0].namespaces: List should"),
        ({"shards": [{"name": "a", "namespaces": "x,,y"}], "shard": "a"},
         "BURRITO_PY_SHARDS[0].namespaces: 'x,,y' has an empty glob"),
        ({"shards": [{"name": "a", "namespaces": "x", "labels": {}}], "shard": "a"},
         "BURRITO_PY_SHARDS[0].labels: Extra inputs are not permitted"),
        ({"namespaces": ["team-a,!"]}, "BURRITO_PY_NAMESPACES: 'team-a,!' has an empty glob"),
        ({"shards": SHARDS, "shard": "a", "namespaces": ["team-*"]},
         "BURRITO_PY_NAMESPACES: ['team-*'] is not shard 'a''s namespaces ['team-a-*,!*-sandbox']"),
    ],
)
def test_bad_shard_settings_name_the_variable(kwargs: dict[str, Any], message: str) -> None:
    assert message in _problem(**kwargs)


def test_a_repository_outside_the_shard_is_not_found_saying_why() -> None:
    settings = ControllerSettings(shards=SHARDS, shard="a", allow_cross_namespace_repositories=True)
    layer = {"metadata": {"namespace": "team-a-prod", "name": "app"},
             "spec": {"repository": {"name": "infra", "namespace": "team-b"}, "branch": "main", "path": "."}}
    ready = validate_layer(layer, None, settings).ready
    assert (ready.reason, ready.status) == ("RepositoryNotFound", False)
    assert ready.message == ("spec.repository: TerraformRepository team-b/infra is not visible: namespace 'team-b' "
                             "is outside shard 'a' (it belongs to shard 'b')")
    same = {**layer, "spec": {**layer["spec"], "repository": {"name": "infra", "namespace": "team-a-dev"}}}
    # Inside the shard, another namespace's missing repository reads as one not shared (whether it exists is never
    # told); the layer's own namespace's is said not to exist.
    assert validate_layer(same, None, settings).ready.message.endswith(
        "team-a-dev/infra is not shared with namespace 'team-a-prod': its spec.allowedNamespaces must name it (or '*')")
    own = {**layer, "spec": {**layer["spec"], "repository": {"name": "infra"}}}
    assert validate_layer(own, None, settings).ready.message.endswith("team-a-prod/infra does not exist")
