"""Issue 16 end to end: runner pods on the emulator use the datastore's provider mirror over HTTPS (a test CA handed
to them by the controllers) without any Terraform change; a mirror that is down lets runs install directly and
is counted; `failClosed` fails the run naming the mirror. Real terraform, real runner processes."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from prometheus_client import REGISTRY

from burrito_py.datastore.in_process import free_port
from burrito_py.datastore.providercache.hashes import zip_h1
from tests.support.engines import OPENTOFU
from tests.support.git_repos import TestRepo
from tests.support.real_cluster import RealCluster

from ..support.fakes.registry import PLATFORMS, python_provider, running_upstream
from ..support.fakes.tls import make_tls
from .conftest import Platform, running_platform, wait_for

REGISTRY_NAME = "registry.example.test"


def pod_logs(platform: Platform, layer: str) -> str:
    return "\n".join(platform.core.read_namespaced_pod_log(pod.metadata.name, platform.namespace)
                     for pod in platform.pods(layer))


def archive_routes(route: str) -> float:
    """The datastore's count of provider archives asked for by that route (signed, prefetch): it runs in-process."""
    return REGISTRY.get_sample_value("burrito_py_provider_cache_archive_routes_total", {"route": route}) or 0.0


def fallbacks(namespace: str) -> float:
    return REGISTRY.get_sample_value("burrito_py_provider_mirror_fallbacks_total", {"namespace": namespace}) or 0.0


@pytest.fixture
def mirrored(tmp_path: Path, repo: TestRepo, real_cluster: RealCluster) -> Iterator[tuple[Platform, Any]]:
    tls = make_tls(tmp_path / "tls")
    with running_upstream(tls) as (upstream, served_at):
        port = free_port()
        datastore = {"tls_port": port, "tls_cert_file": tls.cert, "tls_key_file": tls.key,
                     "provider_cache_enabled": True, "provider_cache_registries": [],
                     "provider_cache_registry_urls": {REGISTRY_NAME: f"https://{served_at}"},
                     "upstream_ca_file": tls.ca}
        with running_platform(tmp_path / "p", tmp_path / "kubeconfig", datastore=datastore,
                              provider_mirror_url=f"https://127.0.0.1:{port}/providers/v1/",
                              provider_mirror_registries=[REGISTRY_NAME], mirror_ca_file=tls.ca,
                              cluster=real_cluster) as platform:
            platform.create_repository("infra", repo.url)
            yield platform, upstream


def test_runs_install_providers_through_the_mirror_over_https(mirrored: tuple[Platform, Any], repo: TestRepo,
                                                               tmp_path: Path) -> None:
    """A layer needing a provider (a real one, written in Python) plans: the runner pod's terraform installed it
    through the datastore's mirror, over HTTPS with the controllers' CA and the runner's own token; a second
    layer gets it from the cache, not from upstream; a third, with a lock file, from the runner's prefetch."""
    platform, upstream = mirrored
    upstream.publish("test", "tiny", "1.0.0", content=python_provider(f"{REGISTRY_NAME}/test/tiny"))
    code = ('terraform {\n  required_providers {\n    tiny = { source = "%s/test/tiny", version = "1.0.0" }\n'
            '  }\n}\nprovider "tiny" {}\nresource "terraform_data" "this" {\n  input = "%s"\n}\n')
    repo.commit({"layers/tiny/main.tf": code % (REGISTRY_NAME, "one"),
                 "layers/tiny2/main.tf": code % (REGISTRY_NAME, "two")}, "layers with a provider")
    before = fallbacks(platform.namespace)
    platform.create_layer("tiny", "infra", "layers/tiny", remediation={"onError": {"maxRetries": 0}})
    try:
        platform.wait_state("tiny", "ApplyNeeded", timeout=120)
    except AssertionError as exc:
        raise AssertionError(f"{exc}\nrunner logs:\n{pod_logs(platform, 'tiny')[-3000:]}") from None
    logs = pod_logs(platform, "tiny")
    assert "burrito-py: providers from the mirror https://127.0.0.1:" in logs
    assert "Installed registry.example.test/test/tiny v1.0.0" in logs
    assert "Plan: 1 to add" in logs and fallbacks(platform.namespace) == before
    archive = "/files/test/terraform-provider-tiny_1.0.0_linux_amd64.zip"
    assert upstream.requests.count(archive) == 1
    platform.create_layer("tiny2", "infra", "layers/tiny2")
    platform.wait_state("tiny2", "ApplyNeeded", timeout=120)
    assert upstream.requests.count(archive) == 1  # the second layer's from the cache

    # With a lock file (the h1 terraform records after a mirror install): the runner fetches the locked provider
    # from the datastore's packages/ route with its own token (auth on) and terraform installs it from the pod's
    # filesystem mirror, never asking the network mirror for its archive (§10.5).
    package = tmp_path / "tiny.zip"
    package.write_bytes(upstream.providers[("test", "tiny")]["1.0.0"]["linux_amd64"])
    lock = (f'provider "{REGISTRY_NAME}/test/tiny" {{\n  version     = "1.0.0"\n  constraints = "1.0.0"\n'
            f'  hashes = [\n    "{zip_h1(package)}",\n  ]\n}}\n')
    repo.commit({"layers/tiny3/main.tf": code % (REGISTRY_NAME, "three"), "layers/tiny3/.terraform.lock.hcl": lock},
                "a layer with a lock file")
    signed, prefetched = archive_routes("signed"), archive_routes("prefetch")
    platform.create_layer("tiny3", "infra", "layers/tiny3", remediation={"onError": {"maxRetries": 0}})
    try:
        platform.wait_state("tiny3", "ApplyNeeded", timeout=120)
    except AssertionError as exc:
        raise AssertionError(f"{exc}\nrunner logs:\n{pod_logs(platform, 'tiny3')[-3000:]}") from None
    logs = pod_logs(platform, "tiny3")
    assert "burrito-py: 1 locked provider(s) prefetched from the datastore in" in logs, logs[-3000:]
    assert "Plan: 1 to add" in logs
    assert archive_routes("signed") == signed and archive_routes("prefetch") >= prefetched + 1


def test_a_mirror_that_is_down_lets_runs_install_directly_and_is_counted(
    tmp_path: Path, repo: TestRepo, real_cluster: RealCluster
) -> None:
    tls = make_tls(tmp_path / "tls")
    closed = free_port()  # nothing listens there
    with running_platform(tmp_path / "p", tmp_path / "kubeconfig",
                          provider_mirror_url=f"https://127.0.0.1:{closed}/providers/v1/",
                          mirror_ca_file=tls.ca, cluster=real_cluster) as platform:
        before = fallbacks(platform.namespace)
        platform.create_repository("infra", repo.url)
        platform.create_layer("app", "infra", "layers/app")
        platform.wait_state("app", "ApplyNeeded", timeout=120)
        assert f"burrito-py: provider mirror unavailable: https://127.0.0.1:{closed}/providers/v1/" in pod_logs(
            platform, "app")
        wait_for(lambda: fallbacks(platform.namespace) >= before + 1, 30, what="the fallback counted")
        events = [e for e in platform.core.list_namespaced_event(platform.namespace).items
                  if e.reason == "ProviderMirrorUnavailable"]
        assert events and f"127.0.0.1:{closed}" in events[0].message


def test_fail_closed_fails_the_run_naming_the_mirror(tmp_path: Path, repo: TestRepo, real_cluster: RealCluster
                                                     ) -> None:
    tls = make_tls(tmp_path / "tls")
    closed = free_port()
    url = f"https://127.0.0.1:{closed}/providers/v1/"
    with running_platform(tmp_path / "p", tmp_path / "kubeconfig", provider_mirror_url=url,
                          provider_mirror_fail_closed=True, mirror_ca_file=tls.ca, max_retries=0,
                          cluster=real_cluster) as platform:
        platform.create_repository("infra", repo.url)
        platform.create_layer("app", "infra", "layers/app", remediation={"onError": {"maxRetries": 0}})

        def failed() -> str | None:
            result = (platform.layer("app").get("status") or {}).get("lastResult") or ""
            return result if result.startswith("Plan failed") else None

        result = wait_for(failed, 120, what="the plan to fail")
        assert f"provider mirror {url} is unavailable (failClosed)" in result


def test_a_tampered_provider_archive_fails_the_run_saying_its_checksum_did_not_match(
    mirrored: tuple[Platform, Any], repo: TestRepo
) -> None:
    """The attack: the registry (or anything between it and the datastore) serves a provider archive with one
    byte changed. The datastore refuses it (SHA256SUMS), terraform only says `bad response code: 502`; the run
    fails with a line saying the checksum did not match, and nothing is stored (issue 27 item 6)."""
    platform, upstream = mirrored
    upstream.publish("test", "tiny", "1.0.0", content=python_provider(f"{REGISTRY_NAME}/test/tiny"))
    # Every platform's file: this Python provider is one archive for all of them, and the mirror reads an archive
    # through from any origin that lists its digest until one's bytes verify (a single tampered file is then read
    # from another, verified, and served: docs/architecture.md §10.5).
    upstream.tampered.update(f"terraform-provider-tiny_1.0.0_{p}.zip" for p in PLATFORMS)
    code = ('terraform {\n  required_providers {\n    tiny = { source = "REGISTRY/test/tiny", version = "1.0.0" }\n'
            '  }\n}\nprovider "tiny" {}\n').replace("REGISTRY", REGISTRY_NAME)
    repo.commit({"layers/tiny/main.tf": code}, "a layer with a provider")
    platform.create_layer("tiny", "infra", "layers/tiny", remediation={"onError": {"maxRetries": 0}})

    def failed() -> str | None:
        result = (platform.layer("tiny").get("status") or {}).get("lastResult") or ""
        return result if result.startswith("Plan failed") else None

    result = wait_for(failed, 120, what="the plan to fail")
    assert "the provider mirror refused registry.example.test/test/tiny v1.0.0 (linux_amd64)" in result, result
    logs = pod_logs(platform, "tiny")
    line = next(line for line in logs.splitlines() if line.startswith("error: the provider mirror refused"))
    assert "checksum did not match" in line and "terraform-provider-tiny_1.0.0_linux_amd64.zip" in line, line
    assert "bad response code: 502" in logs  # what terraform alone says
    assert not any((platform.workdir / "datastore" / "providers" / "archives").glob("*.zip"))


def test_tofu_installs_registry_opentofu_org_providers_through_the_mirror(tmp_path: Path, repo: TestRepo,
                                                                          real_cluster: RealCluster) -> None:
    """OpenTofu 1.12.6 (from the engines root) installs a `registry.opentofu.org/…` provider through the datastore's
    network mirror, which reads it through from where the operator says that registry is served
    (`provider_cache_registry_urls`, the chart's providerCache.registryUrls) with the upstream's CA (issue 27)."""
    registry = "registry.opentofu.org"
    tls = make_tls(tmp_path / "tls")
    with running_upstream(tls) as (upstream, served_at):
        port = free_port()
        datastore = {"tls_port": port, "tls_cert_file": tls.cert, "tls_key_file": tls.key,
                     "provider_cache_enabled": True, "provider_cache_registries": [],
                     "provider_cache_registry_urls": {registry: f"https://{served_at}"}, "upstream_ca_file": tls.ca}
        with running_platform(tmp_path / "p", tmp_path / "kubeconfig", datastore=datastore,
                              provider_mirror_url=f"https://127.0.0.1:{port}/providers/v1/",
                              provider_mirror_registries=[registry], mirror_ca_file=tls.ca,
                              cluster=real_cluster) as platform:
            platform.create_repository("infra", repo.url)
            upstream.publish("test", "tiny", "1.0.0", content=python_provider(f"{registry}/test/tiny"))
            code = ('terraform {\n  required_providers {\n    tiny = { source = "test/tiny", version = "1.0.0" }\n'
                    '  }\n}\nprovider "tiny" {}\nresource "terraform_data" "this" {\n  input = "tofu"\n}\n')
            repo.commit({"layers/tofu/main.tf": code}, "a tofu layer with a provider")
            platform.create_layer("tofu", "infra", "layers/tofu", engine=OPENTOFU,
                                  remediation={"onError": {"maxRetries": 0}})
            try:
                platform.wait_state("tofu", "ApplyNeeded", timeout=120)
            except AssertionError as exc:
                raise AssertionError(f"{exc}\nrunner logs:\n{pod_logs(platform, 'tofu')[-3000:]}") from None
            logs = pod_logs(platform, "tofu")
            assert "with opentofu 1.12.6" in logs
            # tofu names providers of its default registry (registry.opentofu.org) by their short address.
            assert "- Installed test/tiny v1.0.0 (verified checksum)" in logs
            assert upstream.requests.count("/files/test/terraform-provider-tiny_1.0.0_linux_amd64.zip") == 1
