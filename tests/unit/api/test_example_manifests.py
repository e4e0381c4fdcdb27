"""The bundled examples' manifests are valid objects of our kinds, and the stack example's dependencies name
layers it defines, in an order without cycles (what `burrito-py dev --example <name>` applies)."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from burrito_py.api.dependencies import dependencies_of, find_cycle
from burrito_py.api.layer import TerraformLayer
from burrito_py.api.repository import TerraformRepository

EXAMPLES = Path(__file__).resolve().parents[3] / "examples"
MODELS = {"TerraformLayer": TerraformLayer, "TerraformRepository": TerraformRepository}


@pytest.mark.parametrize("manifests", sorted(EXAMPLES.glob("*/manifests.yaml")), ids=lambda p: p.parent.name)
def test_example_objects_are_valid(manifests: Path) -> None:
    for document in yaml.safe_load_all(manifests.read_text()):
        model = MODELS.get(document["kind"])
        if model is not None:
            model.model_validate(document)


def test_the_stack_example_is_a_chain_of_three() -> None:
    layers = {doc["metadata"]["name"]: doc for doc in yaml.safe_load_all((EXAMPLES / "stack" / "manifests.yaml")
                                                                           .read_text()) if doc["kind"] ==
              "TerraformLayer"}
    graph = {("default", name): tuple(d.upstream for d in dependencies_of(doc["spec"], "default"))
             for name, doc in layers.items()}
    assert graph == {("default", "network"): (), ("default", "cluster"): (("default", "network"),),
                     ("default", "app"): (("default", "cluster"),)}
    assert all(find_cycle(key, graph) is None for key in graph)
    for name, doc in layers.items():
        main_tf = (EXAMPLES / "stack" / "terraform" / doc["spec"]["path"] / "main.tf").read_text()
        for dependency in doc["spec"].get("dependsOn") or ():
            upstream_tf = (EXAMPLES / "stack" / "terraform" / layers[dependency["name"]]["spec"]["path"] /
                           "main.tf").read_text()
            for variable, output in dependency["inputs"].items():
                assert f'variable "{variable}"' in main_tf, name
                assert f'output "{output}"' in upstream_tf, dependency["name"]
