"""A layer name of 200 characters (issue 11, item 11): its labels hold a truncation and a hash, and it plans."""

from __future__ import annotations

from burrito_py.api import annotations as ann
from tests.support.git_repos import TestRepo

from .conftest import Platform

NAME = "app-" + "x" * 150 + "-" + "y" * 45  # 200 characters


def test_a_200_character_layer_name_plans(platform: Platform, repo: TestRepo):
    assert len(NAME) == 200
    platform.create_repository("repo", repo.url)
    platform.create_layer(NAME, "repo", "layers/app")
    layer = platform.wait_state(NAME, "ApplyNeeded", timeout=90)
    assert layer["metadata"]["annotations"][ann.PLAN_COMMIT] == repo.head
    assert layer["status"]["lastResult"] == "Plan: 1 to add, 0 to change, 0 to destroy"
    runs = platform.runs(None)
    assert len(runs) == 1 and runs[0]["spec"]["layer"]["name"] == NAME
    assert runs[0]["metadata"]["labels"][ann.LABEL_LAYER] == ann.layer_label(NAME)
    pods = platform.core.list_namespaced_pod(platform.namespace,
                                             label_selector=f"{ann.LABEL_LAYER}={ann.layer_label(NAME)}")
    assert len(pods.items) == 1 and pods.items[0].status.phase == "Succeeded"
