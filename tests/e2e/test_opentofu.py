"""OpenTofu end to end (issue 27): layers run on the tofu built from its Go module (scripts/build-engines.sh),
either baked into the runner (BURRITO_RUNNER_TOOLS_PATH, as the runner image's tools) or installed by the runner
from the datastore's tool mirror, which reads through a release site serving the engines root's `mirror/` (the
production path: no runner ever talks to GitHub). State encryption works unchanged; the version comes from
version files when the spec names none; a version nobody has fails the run naming every place looked at; a
tampered release archive fails the run saying its checksum did not match."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from burrito_py.datastore.in_process import free_port
from tests.support.engines import OPENTOFU, engines_root, running_release_site
from tests.support.fakes.tls import make_tls
from tests.support.git_repos import TestRepo
from tests.support.real_cluster import RealCluster

from .conftest import Platform, layer_code, running_platform, wait_for

PASSPHRASE = "correct-horse-battery-staple-0123"

ENCRYPTED_TF = """
terraform {
  backend "local" {}
  encryption {
    key_provider "pbkdf2" "main" {
      passphrase = "PASSPHRASE"
    }
    method "aes_gcm" "main" {
      keys = key_provider.pbkdf2.main
    }
    state {
      method = method.aes_gcm.main
    }
    plan {
      method = method.aes_gcm.main
    }
  }
}

resource "terraform_data" "this" {
  input = "a secret kept in the state"
}

output "message" {
  value = terraform_data.this.output
}
""".replace("PASSPHRASE", PASSPHRASE)


def pod_logs(platform: Platform, layer: str) -> str:
    return "\n".join(platform.core.read_namespaced_pod_log(pod.metadata.name, platform.namespace)
                     for pod in platform.pods(layer))


def last_result(platform: Platform, layer: str) -> str:
    return str((platform.layer(layer).get("status") or {}).get("lastResult") or "")


def failed_plan(platform: Platform, layer: str) -> str:
    def failed() -> str | None:
        result = last_result(platform, layer)
        return result if result.startswith("Plan failed") else None

    return wait_for(failed, 120, what=f"the plan of {layer} to fail")


def test_state_encryption_works_unchanged_in_a_layer(platform: Platform, repo: TestRepo) -> None:
    """A layer with an OpenTofu `encryption` block plans (its plan file encrypted too), applies from the saved
    plan, and the state file on disk is OpenTofu's encrypted envelope: the resource's value is not in it."""
    repo.commit({"layers/secret/main.tf": ENCRYPTED_TF}, "an encrypted layer")
    platform.create_repository("repo", repo.url)
    platform.create_layer("secret", "repo", "layers/secret", auto_apply=True, engine=OPENTOFU,
                          remediation={"onError": {"maxRetries": 0}})
    try:
        layer = platform.wait_state("secret", "Idle", timeout=120)
    except AssertionError as exc:
        raise AssertionError(f"{exc}\nrunner logs:\n{pod_logs(platform, 'secret')[-3000:]}") from None
    assert layer["status"]["lastResult"].startswith("Applied: Plan: 1 to add")
    assert layer["status"]["outputs"] == ["message"]
    text = platform.state_file("secret").read_text()
    state: dict[str, Any] = json.loads(text)
    assert "encrypted_data" in state and state.get("encryption_version") == "v0", sorted(state)
    assert "a secret kept in the state" not in text and "resources" not in state


def test_version_files_choose_the_version_and_a_missing_one_fails_naming_every_place(
    platform: Platform, repo: TestRepo
) -> None:
    """No version in the spec: the layer's `.opentofu-version` picks 1.10.10 among the baked ones; another layer
    whose repository-root file asks for a version nobody has fails once, naming it and every place looked."""
    repo.commit({"layers/pinned/main.tf": layer_code("pinned"), "layers/pinned/.opentofu-version": "1.10.10\n",
                 "layers/missing/main.tf": layer_code("missing"), ".opentofu-version": "1.9.0\n"}, "version files")
    platform.create_repository("repo", repo.url)
    for name in ("pinned", "missing"):
        override = {"extraInitArgs": [f"-backend-config=path={platform.state_file(name)}"],
                    "env": OPENTOFU.baked_env()}
        platform.create_layer(name, "repo", f"layers/{name}", remediation={"onError": {"maxRetries": 0}},
                              opentofu={"enabled": True}, overrideRunnerSpec=override)
    platform.wait_state("pinned", "ApplyNeeded", timeout=120)
    assert f"with opentofu 1.10.10 ({engines_root()}/tenv/OpenTofu/1.10.10/tofu)" in pod_logs(platform, "pinned")
    result = failed_plan(platform, "missing")  # the layer's lastResult: the message's start (it is cut short)
    assert 'no opentofu version satisfying "1.9.0" (from .opentofu-version at the repository root)' in result
    line = next(line for line in pod_logs(platform, "missing").splitlines() if line.startswith("error: "))
    for place in (f"BURRITO_RUNNER_TOOLS_PATH {engines_root()}/tenv", "; TENV_ROOT ", "; PATH",
                  "; no tool mirror configured", "; versions found: 1.10.10, 1.12.6"):
        assert place in line, (place, line)
    assert len(platform.runs("missing")) == 1 and not (platform.state_file("missing")).exists()


@pytest.fixture
def tool_mirrored(tmp_path: Path, repo: TestRepo, real_cluster: RealCluster) -> Iterator[tuple[Platform, Any]]:
    """The datastore's tool cache over HTTPS, its upstream a release site serving the engines root's mirror/;
    runners told to install from it; nothing baked into them."""
    tls = make_tls(tmp_path / "tls")
    with running_release_site(engines_root() / "mirror", tls) as (site, base):
        port = free_port()
        datastore = {"tls_port": port, "tls_cert_file": tls.cert, "tls_key_file": tls.key,
                     "tool_cache_enabled": True, "tool_cache_terraform_url": base,
                     "tool_cache_opentofu_url": f"{base}/opentofu/opentofu/releases/download",
                     "tool_cache_opentofu_index_url": f"{base}/tofu/api.json", "upstream_ca_file": tls.ca}
        with running_platform(tmp_path / "p", tmp_path / "kubeconfig", datastore=datastore,
                              tool_mirror_url=f"https://127.0.0.1:{port}/tools/v1/", mirror_ca_file=tls.ca,
                              max_retries=0, cluster=real_cluster) as platform:
            platform.create_repository("infra", repo.url)
            yield platform, site


ARCHIVE = "tofu_1.12.6_linux_amd64.zip"


def test_the_runner_installs_tofu_through_the_datastores_tool_mirror(tool_mirrored: tuple[Platform, Any]) -> None:
    platform, site = tool_mirrored
    platform.create_layer("app", "infra", "layers/app", auto_apply=True, remediation={"onError": {"maxRetries": 0}},
                          **OPENTOFU.spec())
    try:
        platform.wait_state("app", "Idle", timeout=180)
    except AssertionError as exc:
        raise AssertionError(f"{exc}\nrunner logs:\n{pod_logs(platform, 'app')[-3000:]}") from None
    logs = pod_logs(platform, "app")
    assert "burrito-py: installing opentofu 1.12.6 from the tool mirror (https://127.0.0.1:" in logs
    assert "with opentofu 1.12.6" in logs
    sha = json.loads((engines_root() / "engines.json").read_text())
    expected = next(e["mirror"]["sha256"] for e in sha["engines"] if e["tool"] == "tofu" and e["version"] == "1.12.6")
    assert f"installed opentofu 1.12.6 (sha256 {expected})" in logs
    # Two pods (plan, apply), one read from the release site: the second install came from the datastore.
    assert sum(1 for r in site.requests if r.endswith(ARCHIVE)) == 1
    assert json.loads(platform.state_file("app").read_text())["terraform_version"] == "1.12.6"


def test_a_tampered_release_archive_fails_the_run_saying_its_checksum_did_not_match(
    tool_mirrored: tuple[Platform, Any]
) -> None:
    """The attack: the upstream release site (or anything between it and the datastore) serves tofu's archive
    with one byte changed. The datastore refuses it against SHA256SUMS and stores nothing; the run fails with a
    line saying the checksum did not match, never running the tampered binary."""
    platform, site = tool_mirrored
    site.tampered.add(ARCHIVE)
    platform.create_layer("app", "infra", "layers/app", remediation={"onError": {"maxRetries": 0}},
                          **OPENTOFU.spec())
    result = failed_plan(platform, "app")
    assert "checksum did not match" in result and ARCHIVE in result, result
    assert "checksum did not match" in pod_logs(platform, "app")
    assert not any((platform.workdir / "datastore").rglob(ARCHIVE))
