"""Bad layers get a Warning event and a condition naming the problem — no crash loop, no run storm."""

from __future__ import annotations

import time

from tests.support.git_repos import TestRepo

from .conftest import Platform, wait_for


def ready(platform: Platform, layer: str) -> dict[str, str] | None:
    for condition in (platform.layer(layer).get("status") or {}).get("conditions") or ():
        if condition["type"] == "Ready":
            return condition
    return None


def warnings(platform: Platform, name: str) -> list[str]:
    events = platform.core.list_namespaced_event(platform.namespace, field_selector=f"involvedObject.name={name}").items
    return [f"{e.reason}: {e.message}" for e in events if e.type == "Warning"]


def test_missing_repository(platform: Platform):
    platform.create_layer("orphan", "no-such-repo", "layers/app")
    wait_for(lambda: (ready(platform, "orphan") or {}).get("reason") == "RepositoryNotFound", 30,
             what="RepositoryNotFound")
    assert "no-such-repo" in ready(platform, "orphan")["message"]  # type: ignore[index]
    wait_for(lambda: any("no-such-repo" in w for w in warnings(platform, "orphan")), 10, what="a Warning event")
    time.sleep(2)
    assert platform.runs("orphan") == []


def test_branch_that_does_not_exist(platform: Platform, repo: TestRepo):
    platform.create_repository("repo", repo.url)
    platform.create_layer("lost", "repo", "layers/app", branch="nope")
    wait_for(lambda: (ready(platform, "lost") or {}).get("reason") == "BranchNotFound", 30, what="BranchNotFound")
    assert "nope" in ready(platform, "lost")["message"]  # type: ignore[index]
    wait_for(lambda: any("nope" in w for w in warnings(platform, "lost")), 10, what="a Warning event")
    time.sleep(3)
    assert platform.runs("lost") == []


def test_missing_path_fails_its_plan_with_a_message_and_stops(platform: Platform, repo: TestRepo):
    platform.create_repository("repo", repo.url)
    platform.create_layer("nowhere", "repo", "layers/does-not-exist", remediation={"onError": {"maxRetries": 1}})
    layer = platform.wait_state("nowhere", "MaxRetriesReached", timeout=60)
    assert "layers/does-not-exist" in layer["status"]["lastResult"]
    assert len(platform.runs("nowhere")) == 1
    run = platform.runs("nowhere")[0]["metadata"]["name"]
    wait_for(lambda: any("layers/does-not-exist" in w for w in warnings(platform, run)), 10, what="a Warning event")
    time.sleep(2)
    assert len(platform.runs("nowhere")) == 1


def test_invalid_version_constraint_is_named_and_runs_nothing(platform: Platform, repo: TestRepo):
    platform.create_repository("repo", repo.url)
    platform.create_layer("badversion", "repo", "layers/app", terraform={"version": ">= banana", "enabled": True})
    wait_for(lambda: (ready(platform, "badversion") or {}).get("reason") == "InvalidSpec", 30, what="InvalidSpec")
    assert "spec.terraform.version" in ready(platform, "badversion")["message"]  # type: ignore[index]
    time.sleep(2)
    assert platform.runs("badversion") == []


def test_unparsable_terraform_is_named_in_last_result_and_a_warning_and_stops(platform: Platform, repo: TestRepo):
    repo.commit({"layers/broken/main.tf": 'resource "terraform_data" "x" {\n'}, "unclosed block")
    platform.create_repository("repo", repo.url)
    platform.create_layer("broken", "repo", "layers/broken", remediation={"onError": {"maxRetries": 1}})
    layer = platform.wait_state("broken", "MaxRetriesReached", timeout=60)
    assert "Unclosed configuration block" in layer["status"]["lastResult"]
    run = platform.runs("broken")[0]["metadata"]["name"]
    wait_for(lambda: any("Unclosed configuration block" in w for w in warnings(platform, run)), 10,
             what="a Warning event")
    time.sleep(3)
    assert len(platform.runs("broken")) == 1  # retries exhausted: no new run, no crash loop
