"""Layer names of 64 to 253 characters (issue 11, item 11): label values hold a truncation and a hash."""

from __future__ import annotations

import re

from burrito_py.api import annotations as ann
from burrito_py.controllers.layer.decide import CreateRun
from burrito_py.controllers.layer.outputs import secret_body
from burrito_py.controllers.layer.runs import run_body
from burrito_py.controllers.run.runner_pod import RunnerDefaults, build_runner_pod
from burrito_py.kube.inventory import Inventory

# kube-apiserver's label value rule: at most 63 characters, alphanumerics at both ends.
LABEL_VALUE = re.compile(r"^(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])?$")
LONG = "a" * 60 + "-" + "b" * 139  # 200 characters, a valid DNS subdomain


def layer(name: str) -> dict:
    return {"apiVersion": ann.API_VERSION, "kind": "TerraformLayer",
            "metadata": {"name": name, "namespace": "default", "uid": "u1", "generation": 1},
            "spec": {"repository": {"name": "repo"}, "branch": "main", "path": "app"}}


def test_short_names_are_their_own_label_and_long_ones_a_valid_truncation_with_a_hash():
    assert ann.layer_label("app") == "app"
    assert ann.layer_label("x" * 63) == "x" * 63
    for name in (LONG, "c" * 64, "d" * 253, "e" * 50 + "." + "f" * 100):
        value = ann.layer_label(name)
        assert len(value) == 63 and LABEL_VALUE.match(value), value
        assert value.startswith(name[:50])
    assert ann.layer_label("c" * 64) != ann.layer_label("c" * 65), "two long names sharing a prefix differ"


def test_every_object_labelled_for_a_long_layer_gets_a_valid_label():
    body = layer(LONG)
    run = run_body(body, CreateRun("plan", "c1"))
    assert run["metadata"]["labels"][ann.LABEL_LAYER] == ann.layer_label(LONG)
    assert run["spec"]["layer"]["name"] == LONG, "the full name lives in the spec"
    run["metadata"].update(name="r-plan-1", uid="ur")
    pod = build_runner_pod(run, body, 1, RunnerDefaults("img", "sa", "http://ds"))
    assert pod["metadata"]["labels"][ann.LABEL_LAYER] == ann.layer_label(LONG)
    env = {e["name"]: e["value"] for e in pod["spec"]["containers"][0]["env"]}
    assert env["BURRITO_RUNNER_LAYER_NAME"] == LONG
    assert secret_body(body, "out", {}, "r/1")["metadata"]["labels"][ann.LABEL_LAYER] == ann.layer_label(LONG)


def test_the_inventory_finds_a_long_layers_runs_by_its_label_and_confirms_the_spec():
    inv = Inventory()
    for name, layer_name in (("r1", LONG), ("r2", LONG[:-1] + "z")):
        run = run_body(layer(layer_name), CreateRun("plan", "c1"))
        run["metadata"].update(name=name, resourceVersion="1")
        inv.runs.observe(run)
    assert [r["metadata"]["name"] for r in inv.runs_of_layer("default", LONG)] == ["r1"]
