"""Deleting a CRD never destroys infrastructure (tofu-controller #1209: `helm uninstall` deleted the CRDs, so
every layer, so every layer's resources). End to end with real terraform: the TerraformLayer CRD, an AGL
kind's CRD, and an ApplicationDefinition are deleted under layers applied with `destroyResourcesOnDeletion`."""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any

import httpx
import pytest

from burrito_py.api import annotations as ann
from burrito_py.controllers.layer.crd_guard import LAYER_CRD
from tests.support.git_repos import TestRepo, make_repo

from .conftest import Platform, wait_for
from .test_agl import BUCKET_TF, GROUP, PLURAL, _condition, create_bucket, define, wait_bucket
from .test_layer_approval_destroy import QUIET, state_inputs


@pytest.fixture
def platform(emulator_platform: Platform) -> Platform:
    """On the API emulator: this file is not ported to the real control plane yet (docs/architecture.md §22.8)."""
    return emulator_platform


CRDS = "/apis/apiextensions.k8s.io/v1/customresourcedefinitions"
RUNS = f"/apis/{ann.API_VERSION}/namespaces/default/terraformruns"
DEFINITIONS = "/apis/agl.burrito-py.io/v1alpha1/applicationdefinitions"


@pytest.fixture
def modules(tmp_path: Path) -> TestRepo:
    r = make_repo(tmp_path / "modules")
    r.commit({"buckets/main.tf": BUCKET_TF}, "bucket module")
    return r


def runs_created_since(platform: Platform, since: float) -> list[str]:
    """Every TerraformRun creation the API server answered after `since`: runs owned by a deleted layer are
    garbage collected with it, so listing runs afterwards would not show a destroy that happened."""
    return [r.path for r in list(platform.api.requests) if r.method == "POST" and r.path == RUNS and r.time >= since]


def skipped_events(platform: Platform, layer: str) -> list[str]:
    events = platform.core.list_namespaced_event("default", field_selector=f"involvedObject.name={layer}").items
    return [e.message for e in events if e.type == "Warning" and e.reason == "DestroySkipped"]


def gone(http: httpx.Client, path: str) -> bool:
    return http.get(path).status_code == 404


def test_deleting_the_terraformlayer_crd_releases_layers_without_destroying(platform: Platform, repo: TestRepo):
    platform.create_repository("repo", repo.url)
    platform.create_layer("app", "repo", "layers/app", auto_apply=True, destroyResourcesOnDeletion=True)
    platform.create_layer("other", "repo", "layers/other", auto_apply=True)
    platform.wait_state("app", "Idle", timeout=90)
    platform.wait_state("other", "Idle", timeout=60)
    assert state_inputs(platform, "app") == ["v1"] and state_inputs(platform, "other") == ["other"]
    state_before = platform.state_file("app").read_text()

    with httpx.Client(base_url=platform.api.url, timeout=10, headers=platform.api.admin_headers) as http:
        since = time.time()
        deleting = http.delete(f"{CRDS}/{LAYER_CRD}")
        assert deleting.status_code == 200 and deleting.json()["metadata"]["deletionTimestamp"]
        # The layer holding the destroy finalizer keeps the CRD terminating until the guard releases it.
        wait_for(lambda: gone(http, f"{CRDS}/{LAYER_CRD}"), 60, interval=0.1, what="the CRD to go")
        assert gone(http, f"/apis/{ann.API_VERSION}/namespaces/default/terraformlayers/app")
        assert gone(http, f"/apis/{ann.API_VERSION}/namespaces/default/terraformlayers/other")

    assert runs_created_since(platform, since) == [], "no destroy run"
    messages = wait_for(lambda: skipped_events(platform, "app"), 10, what="a DestroySkipped Warning")
    assert len(messages) == 1 and LAYER_CRD in messages[0] and "never a destroy request" in messages[0]
    assert skipped_events(platform, "other") == [], "a layer without the flag had nothing to skip"
    assert platform.state_file("app").read_text() == state_before, "the resources stay in the Terraform state"
    assert state_inputs(platform, "app") == ["v1"] and state_inputs(platform, "other") == ["other"]


def test_deleting_every_burrito_crd_at_once_like_an_uninstall_destroys_nothing(platform: Platform, repo: TestRepo):
    platform.create_repository("repo", repo.url)
    platform.create_layer("app", "repo", "layers/app", auto_apply=True, destroyResourcesOnDeletion=True)
    platform.wait_state("app", "Idle", timeout=90)
    state_before = platform.state_file("app").read_text()
    names = [f"{plural}.{ann.GROUP}" for plural in ("terraformruns", "terraformrepositories", "terraformlayers")]

    with httpx.Client(base_url=platform.api.url, timeout=10, headers=platform.api.admin_headers) as http:
        since = time.time()
        for name in names:  # runs and repositories go at once: nothing holds them
            assert http.delete(f"{CRDS}/{name}").status_code == 200
        wait_for(lambda: all(gone(http, f"{CRDS}/{name}") for name in names), 60, interval=0.1,
                 what="every CRD to go")
    assert runs_created_since(platform, since) == []
    messages = wait_for(lambda: skipped_events(platform, "app"), 10, what="a DestroySkipped Warning")
    assert LAYER_CRD in messages[0]
    assert platform.state_file("app").read_text() == state_before


SLOW_APPLY = """
terraform {
  backend "local" {}
}

resource "terraform_data" "this" {
  input = "slow"

  provisioner "local-exec" {
    command = "sleep 6"
  }
}
"""


def test_an_apply_running_when_the_crd_is_deleted_ends_and_no_destroy_follows(platform: Platform, repo: TestRepo):
    repo.commit({"layers/app/main.tf": SLOW_APPLY}, "an apply that takes a while")
    platform.create_repository("repo", repo.url)
    platform.create_layer("app", "repo", "layers/app", auto_apply=True, destroyResourcesOnDeletion=True)
    wait_for(lambda: any(r["spec"]["action"] == "apply" and (r.get("status") or {}).get("state") == "Running"
                         for r in platform.runs("app")), 90, interval=0.1, what="the apply to run")

    with httpx.Client(base_url=platform.api.url, timeout=10, headers=platform.api.admin_headers) as http:
        since = time.time()
        assert http.delete(f"{CRDS}/{LAYER_CRD}").status_code == 200
        # The apply is waited for, never cut short; the verdict is kept on the layer meanwhile.
        marked = wait_for(lambda: platform.annotations("app").get(ann.SKIP_DESTROY), 20, interval=0.1,
                          what="the skip-destroy mark")
        assert LAYER_CRD in marked
        layer = platform.layer("app")
        assert layer["metadata"]["deletionTimestamp"] and layer["status"]["state"] == "Running"
        wait_for(lambda: gone(http, f"{CRDS}/{LAYER_CRD}"), 60, interval=0.1, what="the CRD to go")
    assert runs_created_since(platform, since) == [], "no destroy run after the apply"
    assert state_inputs(platform, "app") == ["slow"], "the apply completed, and nothing destroyed it"
    messages = skipped_events(platform, "app")
    assert messages and all(LAYER_CRD in m for m in messages)


def bucket_state(platform: Platform) -> list[Any]:
    return list(json.loads((platform.workdir / "state" / "bucket-photos.tfstate").read_text())["resources"])


def applied_bucket(platform: Platform, modules: TestRepo) -> list[Any]:
    define(platform, modules, approvePlan="auto", destroyResourcesOnDeletion=True)
    create_bucket(platform, "photos", size=3)
    wait_bucket(platform, "photos", "Ready", "True", "Applied")
    state = bucket_state(platform)
    assert state, "the bucket's resources are in its state"
    assert platform.layer("bucket-photos")["metadata"]["finalizers"] == ["terraform.burrito-py.io/destroy"]
    return state


def test_deleting_an_agl_kinds_crd_removes_instances_and_layers_without_destroying(
    platform: Platform, modules: TestRepo
):
    state = applied_bucket(platform, modules)
    crd = f"{PLURAL}.{GROUP}"
    with httpx.Client(base_url=platform.api.url, timeout=10, headers=platform.api.admin_headers) as http:
        since = time.time()
        assert http.delete(f"{CRDS}/{crd}").status_code == 200
        layer = f"/apis/{ann.API_VERSION}/namespaces/default/terraformlayers/bucket-photos"
        wait_for(lambda: gone(http, layer), 60, interval=0.1, what="the bucket's layer to go")
        messages = wait_for(lambda: skipped_events(platform, "bucket-photos"), 10, what="a DestroySkipped Warning")
        # Named by its CRD while it terminates, by its kind once that is gone (the race decides which we see).
        assert crd in messages[-1] or f"Bucket.{GROUP}" in messages[-1]
        assert "never a destroy request" in messages[-1]
        assert runs_created_since(platform, since) == [], "no destroy run"
        assert bucket_state(platform) == state, "the resources stay in the Terraform state"
        # The definition still wants its kind: it is served again, empty.
        wait_for(lambda: http.get(f"/apis/{GROUP}/v1alpha1/namespaces/default/{PLURAL}").status_code == 200, 30,
                 interval=0.2, what="the definition to serve its kind again")
        assert http.get(f"/apis/{GROUP}/v1alpha1/namespaces/default/{PLURAL}").json()["items"] == []


def test_deleting_an_application_definition_never_destroys_and_neither_does_its_crd_going(
    platform: Platform, modules: TestRepo
):
    state = applied_bucket(platform, modules)
    with httpx.Client(base_url=platform.api.url, timeout=10, headers=platform.api.admin_headers) as http:
        since = time.time()
        assert http.delete(f"{DEFINITIONS}/buckets").status_code == 200
        wait_for(lambda: _condition(http.get(f"{DEFINITIONS}/buckets").json(), "Ready").get("reason")
                 == "InstancesRemain", 30, interval=0.1, what="the definition to wait for its instances")
        time.sleep(QUIET)
        assert runs_created_since(platform, since) == [], "a definition's deletion deletes no instance"
        assert not gone(http, f"/apis/{ann.API_VERSION}/namespaces/default/terraformlayers/bucket-photos")

        # Whoever then deletes the kind's CRD (an uninstall) deletes the instances, and still destroys nothing.
        assert http.delete(f"{CRDS}/{PLURAL}.{GROUP}").status_code == 200
        wait_for(lambda: gone(http, f"{DEFINITIONS}/buckets"), 60, interval=0.1, what="the definition released")
        assert gone(http, f"/apis/{ann.API_VERSION}/namespaces/default/terraformlayers/bucket-photos")
        assert gone(http, f"{CRDS}/{PLURAL}.{GROUP}")
    assert skipped_events(platform, "bucket-photos")
    assert runs_created_since(platform, since) == []
    assert bucket_state(platform) == state
