"""Issue 11, item 12: a layer added on a branch its repository has already synced gets its branch-commit at once,
not at the next repository poll (five minutes here, the default)."""

from __future__ import annotations

import time
from collections.abc import Iterator
from datetime import timedelta
from pathlib import Path

import pytest

from burrito_py.api import annotations as ann
from tests.e2e.conftest import Platform, running_platform
from tests.support.emulator import wait_for
from tests.support.git_repos import TestRepo
from tests.support.real_cluster import RealCluster

POLL = timedelta(minutes=5)


@pytest.fixture
def slow_poll(tmp_path: Path, kubeconfig_path: Path, real_cluster: RealCluster) -> Iterator[Platform]:
    with running_platform(tmp_path, kubeconfig_path, repository_poll_interval=POLL, cluster=real_cluster) as p:
        yield p


def test_a_second_layer_on_a_synced_branch_gets_its_commit_within_seconds(slow_poll: Platform, repo: TestRepo):
    slow_poll.create_repository("repo", repo.url)
    slow_poll.create_layer("first", "repo", "layers/app")
    slow_poll.wait_state("first", "ApplyNeeded", timeout=120)
    head = slow_poll.annotations("first")[ann.BRANCH_COMMIT]
    assert head == repo.head

    started = time.monotonic()
    slow_poll.create_layer("second", "repo", "layers/other")
    wait_for(lambda: slow_poll.annotations("second").get(ann.BRANCH_COMMIT), 10, 0.05,
             "the second layer's branch-commit")
    elapsed = time.monotonic() - started
    assert slow_poll.annotations("second")[ann.BRANCH_COMMIT] == head
    assert slow_poll.annotations("second")[ann.RELEVANT_COMMIT] == head
    assert elapsed < 5, f"the second layer waited {elapsed:.1f}s for its branch-commit"
    # …and it plans without waiting for a poll either.
    slow_poll.wait_state("second", "ApplyNeeded", timeout=120)
