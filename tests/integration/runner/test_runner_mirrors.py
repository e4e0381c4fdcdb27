"""The runner with the datastore's provider and tool mirrors (issue 16), against a fake mirror over HTTPS with
a test CA (tests/support/fakes/mirrors.py) and the real terraform 1.11.4: providers through terraform's network mirror
with the runner's token, a mirror that is down (direct install, or failClosed), terraform installed from the
tool mirror, and a tool download whose sum does not match."""

from __future__ import annotations

import io
import json
import os
import shutil
import stat
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest

from burrito_py.runner.mirror import CLI_CONFIG_NAME, FALLBACK_PREFIX, MirrorConfig, count_fallbacks, prepare
from burrito_py.runner.terraform import StepFailed, Steps
from burrito_py.runner.tools import Tool
from tests.integration.runner.runner_world import CODE, World, world
from tests.support.fakes.mirrors import FakeCa, FakeMirror, closed_port_url, make_ca, running_mirror, tool_zip

__all__ = ["world"]  # the fixture, used by name

TOKEN = "a-projected-token"  # what World writes as the runner's projected token
FAKE = ("registry.terraform.io", "hashicorp", "fake")
PROVIDER_CODE = """
terraform {
  backend "local" {}
  required_providers {
    fake = {
      source  = "registry.terraform.io/hashicorp/fake"
      version = "1.0.0"
    }
  }
}
"""
PINNED_CODE = """
terraform {
  required_version = "~> 1.11.0"
  backend "local" {}
}

resource "terraform_data" "this" {
  input = "v1"
}
"""
PACKAGE = ".terraform/providers/registry.terraform.io/hashicorp/fake/1.0.0/linux_amd64/terraform-provider-fake_v1.0.0"
TERRAFORM = shutil.which("terraform")
pytestmark = pytest.mark.skipif(TERRAFORM is None, reason="needs terraform on PATH")


@pytest.fixture(scope="module")
def ca(tmp_path_factory: pytest.TempPathFactory) -> FakeCa:
    return make_ca(tmp_path_factory.mktemp("ca"))


@pytest.fixture
def providers(ca: FakeCa) -> Iterator[FakeMirror]:
    with running_mirror(FakeMirror(token=TOKEN, providers={FAKE: ["1.0.0"]}), ca) as mirror:
        yield mirror


@pytest.fixture(scope="module")
def terraform_release(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A release zip of the real terraform binary on PATH (1.11.4), as the datastore would serve it."""
    assert TERRAFORM is not None
    return tool_zip(tmp_path_factory.mktemp("release") / "terraform_1.11.4_linux.zip", Path(TERRAFORM), "terraform")


def mirror_env(url: str, ca: FakeCa, fail_closed: bool = False) -> dict[str, str]:
    return {"BURRITO_PROVIDER_MIRROR_URL": url, "BURRITO_PROVIDER_MIRROR_FAIL_CLOSED": str(fail_closed).lower(),
            "BURRITO_MIRROR_CA_PEM": ca.ca_pem}


# -- providers ------------------------------------------------------------------------------------
def test_terraform_init_installs_through_the_generated_cli_config(
    tmp_path: Path, ca: FakeCa, providers: FakeMirror
) -> None:
    assert TERRAFORM is not None
    home, layer = tmp_path / "home", tmp_path / "layer"
    layer.mkdir()
    (layer / "main.tf").write_text(PROVIDER_CODE.replace('  backend "local" {}\n', ""))
    setup = prepare(MirrorConfig(providers.provider_url, True, "", ca.ca_pem), TOKEN, home, {}, say=lambda _: None)
    assert setup.provider_mirror
    out = io.StringIO()
    steps = Steps(Tool("terraform", TERRAFORM, "1.11.4"), layer, env={**os.environ, "HOME": str(home), **setup.env},
                  out=out)
    steps.init()
    assert "Installed hashicorp/fake v1.0.0 (verified checksum)" in out.getvalue()
    assert (layer / PACKAGE).is_file()
    # terraform sent the token of the `credentials "127.0.0.1:<port>"` block to the JSON routes, and no
    # token to the archive (served without auth).
    assert providers.authorizations("/index.json") == [f"Bearer {TOKEN}"]
    assert providers.authorizations("/1.0.0.json") == [f"Bearer {TOKEN}"]
    assert providers.authorizations("/archives/") == [None]

    # Without the token the mirror refuses, so the credentials block is what made the difference.
    shutil.rmtree(layer / ".terraform")
    (layer / ".terraform.lock.hcl").unlink()
    setup = prepare(MirrorConfig(providers.provider_url, True, "", ca.ca_pem), None, home, {}, say=lambda _: None)
    steps = Steps(Tool("terraform", TERRAFORM, "1.11.4"), layer, env={**os.environ, "HOME": str(home), **setup.env},
                  out=io.StringIO())
    with pytest.raises(StepFailed):
        steps.init()
    assert providers.authorizations("/index.json")[-1] is None


def test_runner_installs_providers_from_the_mirror_with_its_token(
    world: World, ca: FakeCa, providers: FakeMirror
) -> None:
    revision = world.commit({"layers/app/main.tf": PROVIDER_CODE})
    world.layer()
    world.run("app-plan-1", "plan", revision)
    result = world.runner("app-plan-1", "plan", **mirror_env(providers.provider_url, ca, fail_closed=True))
    assert f"burrito-py: providers from the mirror {providers.provider_url}" in result.stdout
    assert "- Installed hashicorp/fake v1.0.0 (verified checksum)" in result.stdout
    assert "Terraform has been successfully initialized!" in result.stdout
    # The synthetic provider cannot run, so the plan fails after init; init is what the mirror serves.
    assert result.code == 1 and "error: terraform plan failed" in result.stderr, result.stderr
    assert providers.authorizations("/index.json") == [f"Bearer {TOKEN}"]
    assert providers.authorizations("/1.0.0.json") == [f"Bearer {TOKEN}"]
    assert providers.authorizations("/healthz") == [None]
    assert TOKEN not in result.stdout + result.stderr
    config = world.tmp / "home" / CLI_CONFIG_NAME
    assert f'token = "{TOKEN}"' in config.read_text() and stat.S_IMODE(config.stat().st_mode) == 0o600
    assert "TF_PLUGIN_CACHE_DIR" not in config.read_text()
    assert count_fallbacks(result.stdout) == 0


def test_mirror_down_installs_directly_after_one_line(world: World, ca: FakeCa) -> None:
    url = closed_port_url()
    revision = world.commit({"layers/app/main.tf": CODE % "v1"})
    world.layer()
    world.run("app-plan-1", "plan", revision)
    result = world.runner("app-plan-1", "plan", **mirror_env(url, ca))
    assert result.code == 0, result.stderr
    lines = [line for line in result.stdout.splitlines() if line.startswith(FALLBACK_PREFIX)]
    assert len(lines) == 1 and lines[0].startswith(f"{FALLBACK_PREFIX} {url}: ConnectError"), lines
    assert count_fallbacks(result.stdout) == 1
    assert "Plan: 1 to add, 0 to change, 0 to destroy." in result.stdout
    config = (world.tmp / "home" / CLI_CONFIG_NAME).read_text()
    assert "provider_installation" not in config and "network_mirror" not in config


def test_mirror_down_fails_closed(world: World, ca: FakeCa) -> None:
    url = closed_port_url()
    revision = world.commit({"layers/app/main.tf": CODE % "v1"})
    world.layer()
    world.run("app-plan-1", "plan", revision)
    result = world.runner("app-plan-1", "plan", **mirror_env(url, ca, fail_closed=True))
    assert result.code == 2
    assert result.stderr.startswith(f"error: provider mirror {url} is unavailable (failClosed): ConnectError")
    assert "Traceback" not in result.stderr and "Initializing" not in result.stdout
    assert world.termination_message("app-plan-1").startswith(f"provider mirror {url} is unavailable (failClosed)")
    assert FALLBACK_PREFIX not in result.stdout


# -- tools ----------------------------------------------------------------------------------------
TENV_ROOT = "/runner/tools"  # the runner pod's emptyDir: under the local kubelet, below the pod's root


def tenv_root(world: World) -> Path:
    return world.pod_root("app-plan-1", 1) / TENV_ROOT.lstrip("/")


def tool_env(world: World, mirror: FakeMirror, ca: FakeCa) -> dict[str, str]:
    tenv_root(world).mkdir(parents=True, exist_ok=True)
    # No terraform on PATH (the real one is in /usr/local/bin) and no tenv: only the mirror has 1.11.4.
    return {"PATH": "/usr/bin:/bin", "TENV_ROOT": TENV_ROOT, "BURRITO_TOOL_MIRROR_URL": mirror.tool_url,
            "BURRITO_MIRROR_CA_PEM": ca.ca_pem}


def test_terraform_is_installed_from_the_tool_mirror(world: World, ca: FakeCa, terraform_release: Path) -> None:
    assert shutil.which("terraform", path="/usr/bin:/bin") is None
    revision = world.commit({"layers/app/main.tf": PINNED_CODE})
    world.layer()
    world.run("app-plan-1", "plan", revision)
    with running_mirror(FakeMirror(token=TOKEN, tools={"terraform": {"1.11.4": terraform_release}}), ca) as mirror:
        result = world.runner("app-plan-1", "plan", **tool_env(world, mirror, ca))
    assert result.code == 0, result.stdout + result.stderr
    installed = tenv_root(world) / "Terraform" / "1.11.4" / "terraform"
    assert f"with terraform 1.11.4 ({installed})" in result.stdout
    assert "Plan: 1 to add, 0 to change, 0 to destroy." in result.stdout
    assert stat.S_IMODE(installed.stat().st_mode) == 0o755
    version = subprocess.run([str(installed), "version", "-json"], capture_output=True, text=True, check=True)
    assert json.loads(version.stdout)["terraform_version"] == "1.11.4"
    assert [p.name for p in tenv_root(world).iterdir()] == ["Terraform"]
    assert mirror.authorizations("/tools/v1/") == [f"Bearer {TOKEN}"] * 2
    assert TOKEN not in result.stdout + result.stderr


def test_a_tool_whose_sum_does_not_match_is_refused(world: World, ca: FakeCa, terraform_release: Path) -> None:
    revision = world.commit({"layers/app/main.tf": PINNED_CODE})
    world.layer()
    world.run("app-plan-1", "plan", revision)
    fake = FakeMirror(token=TOKEN, tools={"terraform": {"1.11.4": terraform_release}},
                      tool_sums={("terraform", "1.11.4"): "ab" * 32})
    with running_mirror(fake, ca) as mirror:
        result = world.runner("app-plan-1", "plan", **tool_env(world, mirror, ca))
    assert result.code == 2
    assert result.stderr.startswith("error: terraform 1.11.4 from the tool mirror: checksum did not match: "
                                    "the download's sha256 ")
    assert f"is not the X-Burrito-Sha256 {'ab' * 32}; not installed" in result.stderr
    assert list(tenv_root(world).iterdir()) == []
    assert "Initializing" not in result.stdout
