"""OpenTofu end to end (issue 27): layers run on the tofu built from its Go module (scripts/build-engines.sh),
either baked into the runner (BURRITO_RUNNER_TOOLS_PATH, as the runner image's tools) or installed by the runner
from the datastore's tool mirror, which reads through a release site serving the engines root's `mirror/` (the
production path: no runner ever talks to GitHub). State encryption works unchanged; the version comes from
version files when the spec names none; a version nobody has fails the run naming every place looked at; a
tampered release archive fails the run saying its checksum did not match."""

from __future__ import annotations

import json
import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from burrito_py.datastore.in_process import free_port
from tests.support.engines import OPENTOFU, TERRAGRUNT_RELEASES, engines_root, running_release_site
from tests.support.fakes.tls import make_tls
from tests.support.git_repos import TestRepo
from tests.support.real_cluster import RealCluster

from .conftest import Platform, layer_code, running_platform, wait_for
from .test_pull_requests import pull_request_world
from .test_terragrunt import ROOT_HCL, VPC_UNIT, vpc

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
                     "tool_cache_opentofu_index_url": f"{base}/tofu/api.json",
                     "tool_cache_terragrunt_url": f"{base}/{TERRAGRUNT_RELEASES}",
                     "tool_cache_terragrunt_index_url": f"{base}/terragrunt/releases", "upstream_ca_file": tls.ca}
        with running_platform(tmp_path / "p", tmp_path / "kubeconfig", datastore=datastore,
                              tool_mirror_url=f"https://127.0.0.1:{port}/tools/v1/", mirror_ca_file=tls.ca,
                              max_retries=0, cluster=real_cluster) as platform:
            platform.create_repository("infra", repo.url)
            yield platform, site


ARCHIVE = "tofu_1.12.6_linux_amd64.zip"


def test_the_runner_installs_tofu_and_terragrunt_through_the_datastores_tool_mirror(
    tool_mirrored: tuple[Platform, Any], repo: TestRepo, tmp_path: Path
) -> None:
    """Two layers at once with nothing baked: one on tofu, one a Terragrunt unit over tofu; every binary from the
    datastore's tool mirror, each read once from the release site."""
    platform, site = tool_mirrored
    units = tmp_path / "units-state"
    repo.commit({"root.hcl": ROOT_HCL.replace("@STATE@", str(units)), "modules/vpc/main.tf": vpc(),
                 "live/vpc/terragrunt.hcl": VPC_UNIT}, "a Terragrunt unit")
    platform.create_layer("app", "infra", "layers/app", auto_apply=True, remediation={"onError": {"maxRetries": 0}},
                          **OPENTOFU.spec())
    platform.create_layer("unit", "infra", "live/vpc", auto_apply=True, remediation={"onError": {"maxRetries": 0}},
                          terragrunt={"enabled": True, "version": "1.1.3"}, overrideRunnerSpec={},
                          **OPENTOFU.spec())
    for layer in ("app", "unit"):
        try:
            platform.wait_state(layer, "Idle", timeout=180)
        except AssertionError as exc:
            raise AssertionError(f"{exc}\nrunner logs:\n{pod_logs(platform, layer)[-3000:]}") from None
    unit_logs = pod_logs(platform, "unit")
    assert "burrito-py: installing terragrunt 1.1.3 from the tool mirror (https://127.0.0.1:" in unit_logs
    assert json.loads((units / "live" / "vpc" / "terraform.tfstate").read_text())["terraform_version"] == "1.12.6"
    assert sum(1 for r in site.requests if r.endswith("/v1.1.3/terragrunt_linux_amd64")) == 1
    logs = pod_logs(platform, "app")
    assert "burrito-py: installing opentofu 1.12.6 from the tool mirror (https://127.0.0.1:" in logs
    assert "with opentofu 1.12.6" in logs
    sha = json.loads((engines_root() / "engines.json").read_text())
    expected = next(e["mirror"]["sha256"] for e in sha["engines"] if e["tool"] == "tofu" and e["version"] == "1.12.6")
    assert f"installed opentofu 1.12.6 (sha256 {expected})" in logs
    # Two pods (plan, apply), one read from the release site: the second install came from the datastore.
    assert sum(1 for r in site.requests if r.endswith(ARCHIVE)) == 1
    assert json.loads(platform.state_file("app").read_text())["terraform_version"] == "1.12.6"


def test_runners_with_tenv_install_through_it_from_the_datastores_tool_mirror(
    tool_mirrored: tuple[Platform, Any]
) -> None:
    """The runner image's way (tenv on PATH, docs §9 step 3): tenv installs tofu from the datastore's tool mirror
    (its tenv layout, the runner's token as its password), and the runner runs the binary tenv installed."""
    platform, site = tool_mirrored
    path = f"{engines_root() / 'bin'}:{os.environ.get('PATH', '/usr/bin:/bin')}"
    platform.create_layer("app", "infra", "layers/app", auto_apply=True, remediation={"onError": {"maxRetries": 0}},
                          overrideRunnerSpec={"env": [{"name": "PATH", "value": path}],
                                              "extraInitArgs": [f"-backend-config=path={platform.state_file('app')}"]},
                          **OPENTOFU.spec())
    try:
        platform.wait_state("app", "Idle", timeout=180)
    except AssertionError as exc:
        raise AssertionError(f"{exc}\nrunner logs:\n{pod_logs(platform, 'app')[-3000:]}") from None
    logs = pod_logs(platform, "app")
    assert f"$ {engines_root() / 'bin' / 'tenv'} tofu install 1.12.6 --skip-signature" in logs, logs
    assert "installing opentofu" not in logs  # not the runner's own download
    assert "with opentofu 1.12.6" in logs
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


def test_a_pull_request_is_planned_on_opentofu(tmp_path: Path, repo: TestRepo, real_cluster: RealCluster) -> None:
    """Issue 27 item 3: a pull request's plan of a layer on OpenTofu runs tofu, and its comment and statuses are
    what they are on Terraform."""
    with pull_request_world(tmp_path, repo, "github", real_cluster, engine=OPENTOFU) as world:
        head = world.push(1, {"layers/app/main.tf": layer_code("on tofu")}, "change app")
        world.hook("opened", 1, head)
        done = world.wait_pr(1, head, "Planned")
        assert [(row["name"], row["state"]) for row in done["status"]["layers"]] == [("app", "planned")]
        assert len(world.ours()) == 1 and "1 to add" in world.ours()[0], world.ours()
        assert world.statuses(head)[f"burrito-py/{world.platform.namespace}/app"]["state"] == "success"
        run = done["status"]["layers"][0]["run"]
        pod = next(p for p in world.platform.pods("app") if p.metadata.name.startswith(f"{run}-"))
        logs = world.platform.core.read_namespaced_pod_log(pod.metadata.name, world.platform.namespace)
        assert f"with opentofu {OPENTOFU.version} ({engines_root()}/tenv/" in logs, logs
