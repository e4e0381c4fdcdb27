"""What a runner's own token may write, as tenant code in the runner pod would try it (issue 24, findings 1 (a),
6 and 10): only the attempt its pod is recorded for, each object once, within the format's limit and its run's
and namespace's quotas. Real tokens from the emulator, reviewed by the datastore over HTTP."""

from __future__ import annotations

import contextlib
import hashlib
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
from burrito_local.identity import service_account_username

from burrito_py.datastore.client import DatastoreClient, DatastoreError
from burrito_py.datastore.in_process import running_datastore
from tests.integration.datastore.auth_platform import CONTROLLERS, NS, AuthPlatform, running_auth_platform

MiB = 1024 * 1024
BASE = f"/api/v1/layers/{NS}/app/runs/app-plan-1"  # the own runner's run; its pod is attempt 1


@pytest.fixture(scope="module")
def platform(tmp_path_factory: pytest.TempPathFactory) -> Iterator[AuthPlatform]:
    with running_auth_platform(tmp_path_factory.mktemp("writes")) as p:
        yield p


def runner(platform: AuthPlatform) -> dict[str, str]:
    return {"Authorization": f"Bearer {platform.tokens['own-runner']}"}


def admin(platform: AuthPlatform) -> dict[str, str]:
    return {"Authorization": f"Bearer {platform.admin_token}"}


def sha(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


@pytest.mark.parametrize("attempt", [2, 7, 1_000_000])
def test_a_runner_token_may_not_write_another_attempt_of_its_run(platform: AuthPlatform, attempt: int) -> None:
    """Finding 1 (a): the crafted plan written as "attempt 7" of the runner's own run; finding 10: one more
    object per attempt number."""
    url = f"{platform.url}{BASE}/attempts/{attempt}/plan?format=bin"
    response = httpx.put(url, content=b"crafted plan", headers=runner(platform))
    assert response.status_code == 403
    assert (f"may only write the artifacts of attempt 1, the attempt its pod is recorded for, not artifacts of "
            f"{NS}/app run app-plan-1 attempt {attempt}") in response.json()["error"]
    assert httpx.get(url, headers=admin(platform)).status_code == 404  # nothing was stored


def test_a_runner_writes_each_object_once_and_the_datastore_says_its_sum(platform: AuthPlatform) -> None:
    """Finding 1 (a): a runner cannot replace its own plan once written (say after the controllers recorded its
    sum); a retried upload of the same bytes is fine."""
    url = f"{platform.url}{BASE}/attempts/1/plan?format=bin"
    plan, crafted = b"the plan terraform made", b"a crafted plan"
    first = httpx.put(url, content=plan, headers=runner(platform))
    assert first.status_code == 201, first.text
    overwrite = httpx.put(url, content=crafted, headers=runner(platform))
    assert overwrite.status_code == 409
    assert overwrite.json()["error"] == (f"plan.bin of this attempt is already stored with other content (sha256 "
                                         f"{sha(plan)}): an attempt's objects are written once")
    assert first.headers["X-Burrito-Sha256"] == first.json()["sha256"] == sha(plan)
    retried = httpx.put(url, content=plan, headers=runner(platform))
    assert (retried.status_code, retried.headers["X-Burrito-Sha256"]) == (200, sha(plan))
    got = httpx.get(url, headers=admin(platform))
    assert (got.content, got.headers["X-Burrito-Sha256"]) == (plan, sha(plan))
    head = httpx.head(url, headers=runner(platform))
    assert (head.status_code, head.headers["X-Burrito-Sha256"], head.headers["Content-Length"]) == (
        200, sha(plan), str(len(plan)))
    with DatastoreClient(platform.url, token=platform.admin_token) as store:
        recorded = store.stat_plan(NS, "app", "app-plan-1", 1, "bin")
        assert recorded is not None and (recorded.sha256, recorded.size) == (f"sha256:{sha(plan)}", len(plan))
        assert store.stat_plan(NS, "app", "app-plan-1", 1, "pretty") is None
        # The controllers may replace it (an admin's write is not write-once).
        assert store.put_plan(NS, "app", "app-plan-1", 1, "bin", crafted) == f"sha256:{sha(crafted)}"
    with DatastoreClient(platform.url, token=platform.tokens["own-runner"]) as store, \
            pytest.raises(DatastoreError) as refused:
        store.put_plan(NS, "app", "app-plan-1", 1, "bin", plan)
    assert refused.value.status_code == 409


@pytest.mark.parametrize("declared", [True, False], ids=["content-length", "chunked"])
def test_a_100_mib_plan_json_is_refused_before_it_is_stored(platform: AuthPlatform, declared: bool) -> None:
    """Finding 6: a 100 MiB plan.json (23 times that to parse) never reaches storage."""
    url = f"{platform.url}{BASE}/attempts/1/plan?format=pretty"
    block = b"x" * MiB

    def body() -> Iterator[bytes]:
        for _ in range(100):
            yield block

    content = block * 100 if declared else body()
    response = httpx.put(url.replace("pretty", "json"), content=content, headers=runner(platform), timeout=120)
    assert response.status_code == 413
    assert response.json() == {"error": "plan.json refused: plan.json may hold at most 8 MiB "
                                        "(BURRITO_PY_DATASTORE_MAX_PLAN_JSON_BYTES)", "limit": 8 * MiB}
    got = httpx.get(url.replace("pretty", "json"), headers=admin(platform))
    assert got.content == b'{"seeded": true}'  # what the controllers seeded, untouched
    assert not [p for p in platform.data_dir.rglob("*") if p.stat().st_size > MiB]  # no temp file, no object


def _datastore(platform: AuthPlatform, data: Path, **quotas: int) -> contextlib.AbstractContextManager[str]:
    return running_datastore(data, auth_enabled=True, kubeconfig=platform.kubeconfig,
                             admin_users=[service_account_username(*CONTROLLERS)], quota_recount_seconds=3600,
                             **quotas)


def test_a_run_over_its_quota_is_refused_naming_it(platform: AuthPlatform, tmp_path: Path) -> None:
    with _datastore(platform, tmp_path / "data", run_quota_bytes=2000) as url:
        first = httpx.put(f"{url}{BASE}/attempts/1/plan?format=bin", content=b"b" * 1200, headers=runner(platform))
        assert first.status_code == 201, first.text
        refused = httpx.put(f"{url}{BASE}/attempts/1/plan?format=pretty", content=b"p" * 1200,
                            headers=runner(platform))
        assert refused.status_code == 413
        error = refused.json()["error"]
        assert error.startswith("plan.txt refused: run app-plan-1 stores ") and error.endswith(
            " of its quota of 2000 bytes (BURRITO_PY_DATASTORE_RUN_QUOTA_BYTES)")
        assert httpx.get(f"{url}{BASE}/attempts/1/plan?format=pretty", headers=admin(platform)).status_code == 404
        # The controllers' own writes are counted, never refused: the log of the attempt still goes in.
        log = httpx.put(f"{url}{BASE}/attempts/1/logs", content=b"l" * 5000, headers=admin(platform))
        assert log.status_code == 201
        small = httpx.put(f"{url}{BASE}/attempts/1/plan?format=short", content=b"No changes.",
                          headers=runner(platform))
        assert small.status_code == 413 and "quota of 2000 bytes" in small.json()["error"]


def test_a_namespace_over_its_quota_is_refused_naming_it(platform: AuthPlatform, tmp_path: Path) -> None:
    with _datastore(platform, tmp_path / "data", namespace_quota_bytes=4000, run_quota_bytes=0) as url:
        with DatastoreClient(url, token=platform.admin_token) as store:  # another layer of the namespace
            store.put_logs(NS, "other", "other-plan-1", 1, b"o" * 3000)
        fits = httpx.put(f"{url}{BASE}/attempts/1/plan?format=short", content=b"No changes.",
                         headers=runner(platform))
        assert fits.status_code == 201, fits.text
        refused = httpx.put(f"{url}{BASE}/attempts/1/plan?format=bin", content=b"b" * 2000, headers=runner(platform))
        assert refused.status_code == 413
        assert refused.json()["error"].startswith(f"plan.bin refused: namespace {NS} stores ")
        assert "of its quota of 4000 bytes (BURRITO_PY_DATASTORE_NAMESPACE_QUOTA_BYTES)" in refused.json()["error"]
