"""Layers generated from Terragrunt units (controllers/repository/generated.py): one per unit, owned by the
repository, kept in step with the tree and the settings, never taking over a layer it does not own."""

from __future__ import annotations

from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from burrito_py.api.repository import TerraformRepositorySpec
from burrito_py.controllers.repository.generated import (
    LABEL_GENERATED_BY,
    UNIT_ANNOTATION,
    decide_generated_layers,
    layer_name,
    owns,
)

UID = "uid-infra"


def repository(**generation: Any) -> dict[str, Any]:
    spec: dict[str, Any] = {"repository": {"url": "https://example.com/infra.git"}}
    if generation:
        spec["layersFromUnits"] = generation
    TerraformRepositorySpec.model_validate(spec)  # what the CRD would admit
    return {"apiVersion": "terraform.burrito-py.io/v1alpha1", "kind": "TerraformRepository",
            "metadata": {"name": "infra", "namespace": "team", "uid": UID}, "spec": spec}


def materialize(body: Any) -> dict[str, Any]:
    return {"metadata": dict(body["metadata"]), "spec": dict(body["spec"])}


def test_one_layer_per_unit_owned_and_labelled() -> None:
    repo = repository(branch="main", path="live", autoApply=True)
    decision = decide_generated_layers(repo, ("live/app", "live/eu_west/VPC"), [])
    assert [b["metadata"]["name"] for b in decision.create] == ["infra-live-app", "infra-live-eu-west-vpc"]
    app = decision.create[0]
    assert app["metadata"]["labels"] == {LABEL_GENERATED_BY: "infra"}
    assert app["metadata"]["annotations"] == {UNIT_ANNOTATION: "live/app"}
    assert owns(repo, app)
    assert app["spec"] == {"repository": {"name": "infra"}, "branch": "main", "path": "live/app",
                           "terragrunt": {"enabled": True}, "remediationStrategy": {"autoApply": True}}
    assert decision.condition is not None and decision.condition.status
    assert decision.delete == () and decision.patch == ()
    # Unset settings leave the repository's defaults in charge.
    [plain] = decide_generated_layers(repository(branch="main"), ("app",), []).create
    assert "remediationStrategy" not in plain["spec"] and "destroyResourcesOnDeletion" not in plain["spec"]


def test_kept_in_step_with_the_tree_and_the_settings() -> None:
    repo = repository(branch="main", path="live")
    layers = [materialize(b) for b in decide_generated_layers(repo, ("live/a", "live/b"), []).create]
    # Nothing changed: nothing to do.
    same = decide_generated_layers(repo, ("live/a", "live/b"), layers)
    assert (same.create, same.patch, same.delete) == ((), (), ())
    # A unit gone, a new one: one deleted, one created; a setting changed: the others patched back to it.
    changed = repository(branch="main", path="live", autoApply=True)
    decision = decide_generated_layers(changed, ("live/a", "live/c"), layers)
    assert [b["metadata"]["name"] for b in decision.create] == ["infra-live-c"]
    assert decision.delete == ("infra-live-b",)
    assert [(n, p["spec"]["remediationStrategy"]) for n, p in decision.patch] == [("infra-live-a", {"autoApply": True})]
    # A layer being deleted already is not deleted again; an unknown head changes nothing.
    layers[1]["metadata"]["deletionTimestamp"] = "2026-11-26T00:00:00Z"
    assert decide_generated_layers(repo, ("live/a",), layers).delete == ()
    unknown = decide_generated_layers(repo, None, layers)
    assert (unknown.create, unknown.delete) == ((), ())
    assert unknown.condition is not None and unknown.condition.reason == "BranchNotFound"
    # Generation turned off: every generated layer goes.
    off = decide_generated_layers(repository(), None, [materialize(layers[0])])
    assert off.delete == ("infra-live-a",)


def test_a_layer_it_does_not_own_is_never_taken_over_nor_deleted() -> None:
    repo = repository(branch="main", path="live")
    mine = {"metadata": {"name": "infra-live-a", "namespace": "team"}, "spec": {"path": "elsewhere"}}
    decision = decide_generated_layers(repo, ("live/a",), [mine])
    # Its name is taken: the unit gets the hashed name instead.
    [created] = decision.create
    assert created["metadata"]["name"].startswith("infra-live-a-") and len(created["metadata"]["name"]) == 21
    assert decision.delete == ()
    assert decide_generated_layers(repository(), None, [mine]).delete == ()
    both = frozenset({"infra-live-a", layer_name("infra-", "live/a", taken=True)})
    blocked = decide_generated_layers(repo, ("live/a",), [], both)
    assert blocked.create == ()
    assert blocked.condition is not None and blocked.condition.reason == "NameTaken"
    assert "live/a" in blocked.condition.message


@settings(max_examples=200, deadline=None)
@given(st.lists(st.from_regex(r"[a-zA-Z0-9_./-]{0,90}", fullmatch=True), max_size=8, unique=True))
def test_names_are_valid_and_distinct(units: list[str]) -> None:
    decision = decide_generated_layers(repository(branch="main"), tuple(units), [])
    names = [b["metadata"]["name"] for b in decision.create]
    assert len(set(names)) == len(names)
    for name in names:
        assert len(name) <= 63 and name.startswith("infra-")
        assert name[-1] != "-" and all(c.isdigit() or c == "-" or "a" <= c <= "z" for c in name)
