"""Which layers a definition being deleted, with no instance left, deletes as the garbage collector would
(docs/architecture.md §21, "AGL"): pure."""

from __future__ import annotations

from typing import Any

from hypothesis import given
from hypothesis import strategies as st

from burrito_py.agl.compile import LABEL_APP_GROUP, LABEL_APP_KIND, LABEL_APP_NAME
from burrito_py.agl.instance_decisions import orphaned_layers

GROUP, KIND = "t1.apps.burrito-py.io", "Bucket"


def layer(name: str, owners: list[tuple[str, str]] | None, *, labelled: tuple[str, str] = (GROUP, KIND),
          deleting: bool = False) -> dict[str, Any]:
    meta: dict[str, Any] = {"name": name, "namespace": "team-a", "labels": {
        LABEL_APP_GROUP: labelled[0], LABEL_APP_KIND: labelled[1], LABEL_APP_NAME: name}}
    if owners is not None:
        meta["ownerReferences"] = [{"apiVersion": f"{g}/v1alpha1", "kind": k, "name": name, "uid": "u"}
                                   for g, k in owners]
    if deleting:
        meta["deletionTimestamp"] = "2026-11-27T08:00:00Z"
    return {"metadata": meta}


def names(layers: list[Any]) -> list[str]:
    return [str(x["metadata"]["name"]) for x in layers]


def test_only_the_kinds_own_layers_not_yet_being_deleted() -> None:
    layers = [
        layer("photos", [(GROUP, KIND)]),
        layer("deleting", [(GROUP, KIND)], deleting=True),  # its own deletion is under way
        layer("other-kind", [(GROUP, "Queue")], labelled=(GROUP, "Queue")),
    ]
    assert names(orphaned_layers(layers, GROUP, KIND)) == ["photos"]


def test_attack_a_layer_that_only_carries_the_kinds_labels_is_never_deleted() -> None:
    """A tenant's own layer labelled as the kind's: no owner, or another owner too, is not the collector's to
    delete, and so not ours."""
    layers = [layer("mine", None), layer("shared", [(GROUP, KIND), ("apps", "Deployment")]),
              layer("foreign", [("t2.apps.burrito-py.io", KIND)])]
    assert orphaned_layers(layers, GROUP, KIND) == []


owner = st.tuples(st.sampled_from([GROUP, "t2.apps.burrito-py.io", "apps"]), st.sampled_from([KIND, "Queue"]))


@given(st.lists(st.tuples(st.none() | st.lists(owner, max_size=3), st.booleans()), max_size=8))
def test_a_chosen_layer_is_owned_by_the_kind_alone_and_not_deleting(specs: list[tuple[Any, bool]]) -> None:
    layers = [layer(f"l{i}", owners, deleting=deleting) for i, (owners, deleting) in enumerate(specs)]
    chosen = names(orphaned_layers(layers, GROUP, KIND))
    for i, (owners, deleting) in enumerate(specs):
        expected = not deleting and bool(owners) and all(o == (GROUP, KIND) for o in owners)
        assert (f"l{i}" in chosen) == expected
