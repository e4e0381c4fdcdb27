"""The engines built from their Go modules (engines/, scripts/build-engines.sh, docs/architecture.md §23): each
wrapper's binary is in the tenv root under tenv's layout and reports its own version, the machine's terraform
joins it, and the tool mirror's archives match their SHA256SUMS and unpack to the same binaries.

The binaries must be built first (scripts/test.sh does it when Go is present): without them these tests fail,
naming the command to run; they never skip."""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import subprocess
import zipfile
from pathlib import Path
from typing import Any

import pytest

ROOT = Path(__file__).resolve().parents[3]
SCRIPT = ROOT / "scripts" / "build-engines.sh"
LAYOUT = ROOT / "scripts" / "engines-layout.py"
WRAPPERS = sorted(p.name for p in (ROOT / "engines").iterdir() if (p / "go.mod").is_file())
FOLDERS = {"tofu": "OpenTofu", "terraform": "Terraform", "terragrunt": "Terragrunt"}


def _run(*args: str | Path, env: dict[str, str] | None = None,
         cwd: Path | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run([str(a) for a in args], capture_output=True, text=True, check=False, timeout=120,
                          env=env, cwd=cwd)


@pytest.fixture(scope="module")
def built() -> Path:
    """The directory scripts/build-engines.sh assembled for this checkout's wrappers (already built)."""
    result = _run("bash", SCRIPT, "--cached")
    if result.returncode != 0:
        lines = result.stderr.strip().splitlines()
        pytest.fail(f"the engines are not built ({lines[-1] if lines else result.returncode}): "
                    "run `bash scripts/build-engines.sh` (scripts/test.sh does when Go is on PATH)")
    return Path(result.stdout.strip().splitlines()[-1])


@pytest.fixture(scope="module")
def manifest(built: Path) -> dict[str, Any]:
    loaded: dict[str, Any] = json.loads((built / "engines.json").read_text())
    return loaded


def reported_version(tool: str, binary: Path) -> str:
    """What the binary says its version is, read the way the runner reads it. Without a CLI configuration: a
    TF_CLI_CONFIG_FILE naming a missing file makes tofu 1.12 print a warning on stdout, before the JSON."""
    env = {k: v for k, v in os.environ.items() if k not in ("TF_CLI_CONFIG_FILE", "TOFU_CLI_CONFIG_FILE")}
    env["CHECKPOINT_DISABLE"] = "1"
    if tool in ("tofu", "terraform"):
        result = _run(binary, "version", "-json", env=env)
        assert result.returncode == 0, result.stderr
        return str(json.loads(result.stdout)["terraform_version"])
    result = _run(binary, "--version", env=env)
    assert result.returncode == 0, result.stderr
    return result.stdout.strip()


def expected_output(tool: str, version: str) -> str:
    return version if tool in ("tofu", "terraform") else f"{tool} version v{version}"


def test_tenv_is_built_beside_the_root_and_reports_its_version(built: Path) -> None:
    [wrapper] = [w for w in WRAPPERS if w.startswith("tenv-")]
    version = wrapper.split("-", 1)[1]
    binary = built / "bin" / "tenv"
    assert os.access(binary, os.X_OK)
    assert reported_version("tenv", binary) == expected_output("tenv", version)
    assert not (built / "tenv" / "tenv").exists()  # tenv is not an engine of the root


@pytest.mark.parametrize("wrapper", [w for w in WRAPPERS if not w.startswith("tenv-")])
def test_each_wrapper_is_installed_in_the_tenv_root(built: Path, wrapper: str) -> None:
    tool, version = wrapper.split("-", 1)
    version_dir = built / "tenv" / FOLDERS[tool] / version
    # tenv's test of "installed" is that directory's existence, and it lists local versions from real
    # directories only (a symlink would be skipped).
    assert version_dir.is_dir() and not version_dir.is_symlink()
    binary = version_dir / tool
    assert os.access(binary, os.X_OK)
    assert reported_version(tool, binary) == expected_output(tool, version)


def test_the_root_holds_the_machines_terraform_besides_the_built_one(built: Path) -> None:
    host = shutil.which("terraform")
    assert host, "terraform is required on PATH"
    host_version = reported_version("terraform", Path(host))
    installed = sorted(p.name for p in (built / "tenv" / "Terraform").iterdir() if p.is_dir())
    assert host_version in installed
    assert len(installed) >= 2, installed  # 1.5.7 built here, and the machine's own
    assert reported_version("terraform", built / "tenv" / "Terraform" / host_version / "terraform") == host_version
    # Two OpenTofu versions at least, and Terragrunt.
    assert len([p for p in (built / "tenv" / "OpenTofu").iterdir() if p.is_dir()]) >= 2
    assert any((built / "tenv" / "Terragrunt").iterdir())


def test_the_manifest_names_every_engine(manifest: dict[str, Any]) -> None:
    named = {f"{e['tool']}-{e['version']}" for e in manifest["engines"]}
    assert set(WRAPPERS) <= named


def sums_entry(sums: str, name: str) -> str:
    """The digest tenv takes for `name`: the line that ends with that file name."""
    lines = [line for line in sums.splitlines() if line.endswith(name)]
    assert len(lines) == 1, sums
    digest, file_name = lines[0].split()
    assert file_name == name
    return digest


def test_the_mirror_serves_each_engine_as_tenv_downloads_it(built: Path, manifest: dict[str, Any],
                                                            tmp_path: Path) -> None:
    platform = manifest["platform"]
    for engine in manifest["engines"]:
        tool, version = engine["tool"], engine["version"]
        if tool == "tenv":
            continue
        artefact = built / engine["mirror"]["artefact"]
        sums = (built / engine["mirror"]["sha256sums"]).read_text()
        digest = hashlib.sha256(artefact.read_bytes()).hexdigest()
        assert sums_entry(sums, artefact.name) == digest == engine["mirror"]["sha256"]
        binary_sha = engine["sha256"]
        if tool == "terragrunt":
            # Terragrunt's release asset is the bare binary.
            assert artefact.name == f"terragrunt_{platform}"
            assert artefact.parent.name == f"v{version}" and (artefact.parent / "SHA256SUMS").is_file()
            assert digest == binary_sha
            continue
        assert artefact.name == f"{tool}_{version}_{platform}.zip"
        assert (artefact.parent / f"{tool}_{version}_SHA256SUMS").is_file()
        with zipfile.ZipFile(artefact) as zf:
            [info] = zf.infolist()
            assert info.filename == tool
            assert (info.external_attr >> 16) & 0o777 == 0o755  # tenv extracts with the entry's mode
            unpacked = tmp_path / f"{tool}-{version}" / tool
            unpacked.parent.mkdir()
            unpacked.write_bytes(zf.read(info))
        unpacked.chmod((info.external_attr >> 16) & 0o777)
        assert hashlib.sha256(unpacked.read_bytes()).hexdigest() == binary_sha
        assert reported_version(tool, unpacked) == expected_output(tool, version)


def test_the_mirror_zip_is_reproducible(tmp_path: Path) -> None:
    fake = tmp_path / "tofu"
    fake.write_text("#!/bin/sh\necho tofu\n")
    fake.chmod(0o755)
    digests = []
    for out in ("a", "b"):
        result = _run("python3", LAYOUT, "--out", tmp_path / out, "--platform", "linux_amd64",
                      "--engine", f"tofu=1.2.3={fake}")
        assert result.returncode == 0, result.stderr
        zipped = tmp_path / out / "mirror/opentofu/opentofu/releases/download/v1.2.3/tofu_1.2.3_linux_amd64.zip"
        digests.append(hashlib.sha256(zipped.read_bytes()).hexdigest())
    assert digests[0] == digests[1]


def test_a_wrong_version_string_fails_the_check_loudly(tmp_path: Path) -> None:
    # The two strings a build without its link flags prints: tofu's "-dev" and terragrunt's "latest".
    tofu = tmp_path / "tofu"
    tofu.write_text('#!/bin/sh\necho \'{"terraform_version": "1.12.6-dev", "platform": "linux_amd64"}\'\n')
    terragrunt = tmp_path / "terragrunt"
    terragrunt.write_text("#!/bin/sh\necho terragrunt version latest\n")
    for f in (tofu, terragrunt):
        f.chmod(0o755)
    result = _run("bash", SCRIPT, "--check", "tofu", "1.12.6", tofu)
    assert result.returncode == 1
    assert "tofu 1.12.6" in result.stderr and "expected '1.12.6', the binary reports '1.12.6-dev'" in result.stderr
    result = _run("bash", SCRIPT, "--check", "terragrunt", "1.1.3", terragrunt)
    assert result.returncode == 1
    assert "expected 'terragrunt version v1.1.3', the binary reports 'terragrunt version latest'" in result.stderr


def test_a_refused_module_is_named_and_the_other_tools_still_go(tmp_path: Path) -> None:
    """Offline (GOPROXY=off, empty module cache): the module can't be had, as when the proxy refuses it. Each
    failing tool gets its own line naming module@version and the error; all are tried; the exit is 1."""
    src = tmp_path / "engines"
    for name, require in (("tenv-4.14.8", "github.com/tofuutils/tenv/v4 v4.14.8"),
                          ("terragrunt-1.99.0", "github.com/gruntwork-io/terragrunt v1.99.0")):
        (src / name).mkdir(parents=True)
        module, _ = require.split()
        package = f"{module}/cmd/tenv" if name.startswith("tenv") else module
        (src / name / "go.mod").write_text(
            f"module burrito-py.invalid/engines/{name}\n\ngo 1.25\n\ntool {package}\n\nrequire {require} // indirect\n")
        (src / name / "go.sum").write_text("")
    (src / "tofu-1.0.0").mkdir()
    (src / "tofu-1.0.0" / "go.mod").write_text(
        "module x\n\ngo 1.25\n\ntool github.com/opentofu/opentofu/cmd/tofu\n\n"
        "require github.com/opentofu/opentofu v1.0.1 // indirect\n")
    (src / "tofu-1.0.0" / "go.sum").write_text("")
    env = {"PATH": os.environ["PATH"], "HOME": str(tmp_path), "BURRITO_ENGINES_SRC": str(src),
           "XDG_CACHE_HOME": str(tmp_path / "cache"), "GOMODCACHE": str(tmp_path / "mod"),
           "GOCACHE": str(tmp_path / "gocache"), "GOPROXY": "off"}
    result = _run("bash", SCRIPT, env=env)
    assert result.returncode == 1
    failed = [line for line in result.stderr.splitlines() if line.startswith("build-engines: FAILED")]
    assert failed == [
        "build-engines: FAILED tofu-1.0.0: the directory says 1.0.0 but go.mod requires "
        "github.com/opentofu/opentofu v1.0.1",
        "build-engines: FAILED tenv 4.14.8 (github.com/tofuutils/tenv/v4@v4.14.8): the Go module proxy refused a "
        "module: github.com/tofuutils/tenv/v4@v4.14.8: module lookup disabled by GOPROXY=off",
        "build-engines: FAILED terragrunt 1.99.0 (github.com/gruntwork-io/terragrunt@v1.99.0): the Go module proxy "
        "refused a module: github.com/gruntwork-io/terragrunt@v1.99.0: module lookup disabled by GOPROXY=off",
    ], result.stderr
    assert "3 of 3 engines failed" in result.stderr
    assert result.stdout == ""
    assert not list((tmp_path / "cache" / "burrito-py" / "engines").glob("root-*"))  # nothing built, nothing assembled

    # A go.mod that does not parse is named with go's own reason.
    (src / "tofu-1.0.0" / "go.mod").write_text("module x\n\nrequire github.com/opentofu/opentofu v9.0.0\n")
    result = _run("bash", SCRIPT, "tofu-1.0.0", env=env)
    assert result.returncode == 1
    assert "FAILED tofu-1.0.0: go.mod does not parse: " in result.stderr and "should be v0 or v1" in result.stderr


CONFIG = """
terraform {
  required_version = ">= 1.5"
}
resource "terraform_data" "greeting" {
  input = "hello from ${terraform.workspace}"
}
output "greeting" {
  value = terraform_data.greeting.output
}
"""


def _engine_env(tmp_path: Path) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k not in ("TF_CLI_CONFIG_FILE", "TOFU_CLI_CONFIG_FILE")}
    # No provider is needed (terraform_data is built in); a plugin cache directory that is empty proves nothing
    # came from elsewhere.
    env.update(CHECKPOINT_DISABLE="1", TF_IN_AUTOMATION="1", TF_PLUGIN_CACHE_DIR="", HOME=str(tmp_path))
    return env


@pytest.mark.parametrize("wrapper", [w for w in WRAPPERS if not w.startswith(("terragrunt-", "tenv-"))])
def test_each_engine_applies_a_configuration(built: Path, wrapper: str, tmp_path: Path) -> None:
    tool, version = wrapper.split("-", 1)
    binary = built / "tenv" / FOLDERS[tool] / version / tool
    work = tmp_path / "layer"
    work.mkdir()
    (work / "main.tf").write_text(CONFIG)
    env = _engine_env(tmp_path)
    for args in (["init", "-input=false"], ["apply", "-auto-approve", "-input=false"]):
        result = _run(binary, *args, env=env, cwd=work)
        assert result.returncode == 0, result.stdout + result.stderr
    result = _run(binary, "output", "-json", env=env, cwd=work)
    assert json.loads(result.stdout)["greeting"]["value"] == "hello from default"
    state = json.loads((work / "terraform.tfstate").read_text())
    assert state["terraform_version"] == version


@pytest.mark.parametrize("engine", ["OpenTofu/1.12.6/tofu", "Terraform/1.5.7/terraform"])
def test_terragrunt_runs_a_unit_with_a_built_engine(built: Path, engine: str, tmp_path: Path) -> None:
    [terragrunt] = (built / "tenv" / "Terragrunt").glob("*/terragrunt")
    unit = tmp_path / "unit"
    unit.mkdir()
    (unit / "main.tf").write_text(CONFIG)
    (unit / "terragrunt.hcl").write_text("")
    env = {**_engine_env(tmp_path), "TG_TF_PATH": str(built / "tenv" / engine), "TG_NON_INTERACTIVE": "true",
           "TG_NO_COLOR": "true"}
    result = _run(terragrunt, "apply", "-auto-approve", env=env, cwd=unit)
    assert result.returncode == 0, result.stdout + result.stderr
    result = _run(terragrunt, "output", "-raw", "greeting", env=env, cwd=unit)
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == "hello from default"
    # Terragrunt 1.x runs the unit in a copy under .terragrunt-cache (auto-init included); its state is there.
    [state_file] = unit.rglob("terraform.tfstate")
    assert json.loads(state_file.read_text())["terraform_version"] == engine.split("/")[1]
