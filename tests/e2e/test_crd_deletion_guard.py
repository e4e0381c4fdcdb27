"""Deleting a CRD never destroys infrastructure (tofu-controller #1209: `helm uninstall` deleted the CRDs, so
every layer, so every layer's resources). End to end with real terraform: the TerraformLayer CRD, an AGL
kind's CRD, and an ApplicationDefinition are deleted under layers applied with `destroyResourcesOnDeletion`.

The tests delete CRDs, which every test of the session's control plane shares: this file runs on a real control
plane of its own (`own_cluster`, one for the module, docs/architecture.md §22.8), whose CRDs each test makes
again before it starts."""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from kubernetes import watch

from burrito_py.api import annotations as ann
from burrito_py.controllers.layer.crd_guard import LAYER_CRD
from tests.support.git_repos import TestRepo, make_repo
from tests.support.real_cluster import RealCluster, own_cluster

from .conftest import Platform, running_platform, wait_for
from .test_agl import BUCKET_TF, PLURAL, VERSION, Buckets, _condition, own_kind
from .test_layer_approval_destroy import QUIET, state_inputs

CRDS = "/apis/apiextensions.k8s.io/v1/customresourcedefinitions"
DEFINITIONS = "/apis/agl.burrito-py.io/v1alpha1/applicationdefinitions"


@pytest.fixture(scope="module")
def own(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RealCluster]:
    """This file's control plane, with its node, the CRDs and the admission policies."""
    with own_cluster(tmp_path_factory.mktemp("crd-guard")) as cluster:
        print(f"own control plane: {cluster.timings}")
        yield cluster


@pytest.fixture
def platform(tmp_path: Path, kubeconfig_path: Path, own: RealCluster) -> Iterator[Platform]:
    own.ensure_crds()  # an earlier test of the file deleted some
    with running_platform(tmp_path, kubeconfig_path, cluster=own) as p:
        yield p


@pytest.fixture
def buckets(platform: Platform, own: RealCluster) -> Iterator[Buckets]:
    with own_kind(platform, own) as kind:
        yield kind


@pytest.fixture
def modules(tmp_path: Path) -> TestRepo:
    r = make_repo(tmp_path / "modules")
    r.commit({"buckets/main.tf": BUCKET_TF}, "bucket module")
    return r


class RunCreations:
    """Every TerraformRun of the test's namespace created from now on, from a watch started at the listing's
    resourceVersion (runs owned by a deleted layer are garbage collected with it, so listing runs afterwards would
    not show a destroy that happened; a real API server has no request log to read instead). The watch ends when
    the runs' CRD is deleted: nothing can be created after that."""

    def __init__(self, platform: Platform) -> None:
        self.names: list[str] = []
        self._watch = watch.Watch()
        listing = platform.custom.list_namespaced_custom_object(ann.GROUP, ann.VERSION, platform.namespace,
                                                                "terraformruns")
        self._thread = threading.Thread(target=self._follow, args=(platform, listing["metadata"]["resourceVersion"]),
                                        daemon=True)
        self._thread.start()

    def _follow(self, platform: Platform, since: str) -> None:
        try:
            for event in self._watch.stream(platform.custom.list_namespaced_custom_object, ann.GROUP, ann.VERSION,
                                            platform.namespace, "terraformruns", resource_version=since,
                                            timeout_seconds=600):
                if event["type"] == "ADDED":
                    self.names.append(event["object"]["metadata"]["name"])
        except Exception:  # the CRD went mid-stream: nothing can be created any more
            return

    def created(self) -> list[str]:
        return list(self.names)

    def __enter__(self) -> RunCreations:
        return self

    def __exit__(self, *_: object) -> None:
        time.sleep(0.5)  # a creation just before leaving reaches the watch
        self._watch.stop()


def skipped_events(platform: Platform, layer: str) -> list[str]:
    events = platform.core.list_namespaced_event(platform.namespace,
                                                 field_selector=f"involvedObject.name={layer}").items
    return [e.message for e in events if e.type == "Warning" and e.reason == "DestroySkipped"]


def gone(http: httpx.Client, path: str) -> bool:
    return http.get(path).status_code == 404


def test_deleting_the_terraformlayer_crd_releases_layers_without_destroying(
    platform: Platform, repo: TestRepo
) -> None:
    platform.create_repository("repo", repo.url)
    platform.create_layer("app", "repo", "layers/app", auto_apply=True, destroyResourcesOnDeletion=True)
    platform.create_layer("other", "repo", "layers/other", auto_apply=True)
    platform.wait_state("app", "Idle", timeout=90)
    platform.wait_state("other", "Idle", timeout=60)
    assert state_inputs(platform, "app") == ["v1"] and state_inputs(platform, "other") == ["other"]
    state_before = platform.state_file("app").read_text()

    with platform.api_http() as http, RunCreations(platform) as creations:
        deleting = http.delete(f"{CRDS}/{LAYER_CRD}")
        assert deleting.status_code == 200 and deleting.json()["metadata"]["deletionTimestamp"]
        # The layer holding the destroy finalizer keeps the CRD terminating until the guard releases it.
        wait_for(lambda: gone(http, f"{CRDS}/{LAYER_CRD}"), 60, interval=0.1, what="the CRD to go")
        assert gone(http, f"/apis/{ann.API_VERSION}/namespaces/{platform.namespace}/terraformlayers/app")
        assert gone(http, f"/apis/{ann.API_VERSION}/namespaces/{platform.namespace}/terraformlayers/other")

    assert creations.created() == [], "no destroy run"
    messages = wait_for(lambda: skipped_events(platform, "app"), 10, what="a DestroySkipped Warning")
    assert len(messages) == 1 and LAYER_CRD in messages[0] and "never a destroy request" in messages[0]
    assert skipped_events(platform, "other") == [], "a layer without the flag had nothing to skip"
    assert platform.state_file("app").read_text() == state_before, "the resources stay in the Terraform state"
    assert state_inputs(platform, "app") == ["v1"] and state_inputs(platform, "other") == ["other"]


def test_deleting_every_burrito_crd_at_once_like_an_uninstall_destroys_nothing(
    platform: Platform, repo: TestRepo
) -> None:
    platform.create_repository("repo", repo.url)
    platform.create_layer("app", "repo", "layers/app", auto_apply=True, destroyResourcesOnDeletion=True)
    platform.wait_state("app", "Idle", timeout=90)
    state_before = platform.state_file("app").read_text()
    names = [f"{plural}.{ann.GROUP}" for plural in ("terraformruns", "terraformrepositories", "terraformlayers")]

    with platform.api_http() as http, RunCreations(platform) as creations:
        for name in names:  # runs and repositories go at once: nothing holds them
            assert http.delete(f"{CRDS}/{name}").status_code == 200
        wait_for(lambda: all(gone(http, f"{CRDS}/{name}") for name in names), 60, interval=0.1,
                 what="every CRD to go")
    assert creations.created() == []
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


def test_an_apply_running_when_the_crd_is_deleted_ends_and_no_destroy_follows(
    platform: Platform, repo: TestRepo
) -> None:
    repo.commit({"layers/app/main.tf": SLOW_APPLY}, "an apply that takes a while")
    platform.create_repository("repo", repo.url)
    platform.create_layer("app", "repo", "layers/app", auto_apply=True, destroyResourcesOnDeletion=True)
    wait_for(lambda: any(r["spec"]["action"] == "apply" and (r.get("status") or {}).get("state") == "Running"
                         for r in platform.runs("app")), 90, interval=0.1, what="the apply to run")

    with platform.api_http() as http, RunCreations(platform) as creations:
        assert http.delete(f"{CRDS}/{LAYER_CRD}").status_code == 200
        # The apply is waited for, never cut short; the verdict is kept on the layer meanwhile.
        marked = wait_for(lambda: platform.annotations("app").get(ann.SKIP_DESTROY), 20, interval=0.1,
                          what="the skip-destroy mark")
        assert LAYER_CRD in marked
        layer = platform.layer("app")
        assert layer["metadata"]["deletionTimestamp"] and layer["status"]["state"] == "Running"
        wait_for(lambda: gone(http, f"{CRDS}/{LAYER_CRD}"), 60, interval=0.1, what="the CRD to go")
    assert creations.created() == [], "no destroy run after the apply"
    assert state_inputs(platform, "app") == ["slow"], "the apply completed, and nothing destroyed it"
    messages = skipped_events(platform, "app")
    assert messages and all(LAYER_CRD in m for m in messages)


def bucket_state(platform: Platform) -> list[Any]:
    return list(json.loads((platform.workdir / "state" / "bucket-photos.tfstate").read_text())["resources"])


def applied_bucket(platform: Platform, buckets: Buckets, modules: TestRepo) -> list[Any]:
    buckets.define(modules, approvePlan="auto", destroyResourcesOnDeletion=True)
    buckets.create("photos", size=3)
    buckets.wait("photos", "Ready", "True", "Applied")
    state = bucket_state(platform)
    assert state, "the bucket's resources are in its state"
    assert platform.layer("bucket-photos")["metadata"]["finalizers"] == ["terraform.burrito-py.io/destroy"]
    return state


def test_deleting_an_agl_kinds_crd_removes_instances_and_layers_without_destroying(
    platform: Platform, buckets: Buckets, modules: TestRepo
) -> None:
    state = applied_bucket(platform, buckets, modules)
    crd = buckets.crd
    with platform.api_http() as http, RunCreations(platform) as creations:
        assert http.delete(f"{CRDS}/{crd}").status_code == 200
        layer = f"/apis/{ann.API_VERSION}/namespaces/{platform.namespace}/terraformlayers/bucket-photos"
        wait_for(lambda: gone(http, layer), 60, interval=0.1, what="the bucket's layer to go")
        messages = wait_for(lambda: skipped_events(platform, "bucket-photos"), 10, what="a DestroySkipped Warning")
        # Named by its CRD while it terminates, by its kind once that is gone (the race decides which we see).
        assert crd in messages[-1] or f"Bucket.{buckets.group}" in messages[-1]
        assert "never a destroy request" in messages[-1]
        assert creations.created() == [], "no destroy run"
        assert bucket_state(platform) == state, "the resources stay in the Terraform state"
        # The definition still wants its kind: it is served again, empty.
        instances = f"/apis/{buckets.group}/{VERSION}/namespaces/{platform.namespace}/{PLURAL}"
        wait_for(lambda: http.get(instances).status_code == 200, 30,
                 interval=0.2, what="the definition to serve its kind again")
        assert http.get(instances).json()["items"] == []


def test_deleting_an_application_definition_never_destroys_and_neither_does_its_crd_going(
    platform: Platform, buckets: Buckets, modules: TestRepo
) -> None:
    state = applied_bucket(platform, buckets, modules)
    with platform.api_http() as http, RunCreations(platform) as creations:
        assert http.delete(f"{DEFINITIONS}/{buckets.definition}").status_code == 200
        wait_for(lambda: _condition(http.get(f"{DEFINITIONS}/{buckets.definition}").json(), "Ready").get("reason")
                 == "InstancesRemain", 30, interval=0.1, what="the definition to wait for its instances")
        time.sleep(QUIET)
        assert creations.created() == [], "a definition's deletion deletes no instance"
        assert not gone(http, f"/apis/{ann.API_VERSION}/namespaces/{platform.namespace}/terraformlayers/bucket-photos")

        # Whoever then deletes the kind's CRD (an uninstall) deletes the instances, and still destroys nothing.
        assert http.delete(f"{CRDS}/{buckets.crd}").status_code == 200
        wait_for(lambda: gone(http, f"{DEFINITIONS}/{buckets.definition}"), 60, interval=0.1,
                 what="the definition released")
        assert gone(http, f"/apis/{ann.API_VERSION}/namespaces/{platform.namespace}/terraformlayers/bucket-photos")
        assert gone(http, f"{CRDS}/{buckets.crd}")
    assert skipped_events(platform, "bucket-photos")
    assert creations.created() == []
    assert bucket_state(platform) == state
