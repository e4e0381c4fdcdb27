"""tenv itself (built from its Go module, scripts/build-engines.sh) installing every engine from the datastore's
tool mirror, as the runner calls it (docs/architecture.md §9 step 3): `tenv tf|tofu|tg install <request>` pointed at
the mirror's tenv layout (`/tools/tenv/`, HTTPS, the runner's token as the basic-auth password), the mirror
reading through a release site that serves the engines root's `mirror/`. A version tenv picks from the mirror's
listing is installed in tenv's layout and runs; an installed one costs no request; a tampered upstream archive is
refused by the datastore and the run's error says the checksum did not match."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import NamedTuple

import pytest

from burrito_py.api.common import ToolSpec
from burrito_py.api.effective import EffectiveTool
from burrito_py.datastore.auth import Principal, RunnerScope
from burrito_py.datastore.in_process import free_port, running_datastore
from burrito_py.runner.tools import ToolError, ToolMirror, resolve_tool
from tests.support.engines import TERRAGRUNT_RELEASES, ReleaseSite, engines_root, running_release_site
from tests.support.fakes.tls import make_tls

TOKEN = "runner-token"


class Mirrored(NamedTuple):
    site: ReleaseSite
    mirror: ToolMirror
    seen: list[str]  # the tokens the datastore was asked to authenticate


@pytest.fixture
def mirrored(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Mirrored]:
    """The datastore's tool cache over HTTPS with its upstream the release site; the real tenv first on PATH,
    an empty TENV_ROOT, nothing baked."""
    seen: list[str] = []

    class Tokens:
        async def authenticate(self, token: str) -> Principal:
            seen.append(token)
            if token == TOKEN:
                return Principal("system:serviceaccount:team:burrito-py-runner",
                                 runner=RunnerScope("team", "app", "run-1", "team", "infra", 1))
            return Principal("alice")

    tls = make_tls(tmp_path / "tls")
    with running_release_site(engines_root() / "mirror", tls) as (site, base):
        port = free_port()
        with running_datastore(tmp_path / "datastore", auth_enabled=True, authenticator=Tokens(), tls_port=port,
                               tls_cert_file=tls.cert, tls_key_file=tls.key, tool_cache_enabled=True,
                               tool_cache_terraform_url=base,
                               tool_cache_opentofu_url=f"{base}/opentofu/opentofu/releases/download",
                               tool_cache_opentofu_index_url=f"{base}/tofu/api.json",
                               tool_cache_terragrunt_url=f"{base}/{TERRAGRUNT_RELEASES}",
                               tool_cache_terragrunt_index_url=f"{base}/terragrunt/releases",
                               upstream_ca_file=tls.ca):
            monkeypatch.setenv("PATH", f"{engines_root() / 'bin'}{os.pathsep}/usr/bin{os.pathsep}/bin")
            monkeypatch.setenv("TENV_ROOT", str(tmp_path / "tenv-root"))
            monkeypatch.delenv("BURRITO_RUNNER_TOOLS_PATH", raising=False)
            yield Mirrored(site, ToolMirror(f"https://127.0.0.1:{port}/tools/v1/", TOKEN, tls.ca), seen)


def _version(binary: str, kind: str) -> str:
    if kind == "terragrunt":
        return subprocess.run([binary, "--version"], capture_output=True, text=True, check=True).stdout.strip()
    # No CLI configuration: a TF_CLI_CONFIG_FILE naming a missing file makes tofu 1.12 warn on stdout.
    env = {k: v for k, v in os.environ.items() if k not in ("TF_CLI_CONFIG_FILE", "TOFU_CLI_CONFIG_FILE")}
    out = subprocess.run([binary, "version", "-json"], capture_output=True, text=True, check=True,
                         env={**env, "CHECKPOINT_DISABLE": "1"}).stdout
    return str(json.loads(out)["terraform_version"])


@pytest.mark.parametrize(("kind", "request_text", "version", "folder", "archive"), [
    ("opentofu", "~> 1.10.0", "1.10.10", "OpenTofu", "tofu_1.10.10_linux_amd64.zip"),
    ("terraform", "< 1.6", "1.5.7", "Terraform", "terraform_1.5.7_linux_amd64.zip"),
])
def test_tenv_installs_the_version_it_picks_from_the_mirrors_listing(
        mirrored: Mirrored, tmp_path: Path, capfd: pytest.CaptureFixture[str], kind: str, request_text: str,
        version: str, folder: str, archive: str) -> None:
    effective = EffectiveTool(kind=kind, version=request_text, terragrunt=None)  # type: ignore[arg-type]
    tool = resolve_tool(effective, tmp_path, mirrored.mirror)
    installed = tmp_path / "tenv-root" / folder / version
    assert (tool.binary, tool.version) == (str(installed / ("tofu" if kind == "opentofu" else kind)), version)
    assert _version(tool.binary, kind) == version
    out = capfd.readouterr().out
    assert f"tenv {'tofu' if kind == 'opentofu' else 'tf'} install {request_text} --skip-signature" in out
    assert sum(1 for r in mirrored.site.requests if r.endswith(archive)) == 1  # read through once
    assert set(mirrored.seen) == {TOKEN}  # tenv's basic auth carried the runner's token, nothing else
    # Installed: the next run uses it without tenv or a request.
    before = len(mirrored.seen)
    assert resolve_tool(effective, tmp_path, mirrored.mirror).binary == tool.binary
    assert len(mirrored.seen) == before and "tenv " not in capfd.readouterr().out


def test_tenv_installs_terragrunt_from_the_mirror(mirrored: Mirrored, tmp_path: Path) -> None:
    effective = EffectiveTool(kind="opentofu", version="1.12.6", terragrunt=ToolSpec(enabled=True, version="1.1.3"))
    tool = resolve_tool(effective, tmp_path, mirrored.mirror)
    assert tool.terragrunt == str(tmp_path / "tenv-root" / "Terragrunt" / "1.1.3" / "terragrunt")
    assert _version(tool.terragrunt, "terragrunt") == "terragrunt version v1.1.3"
    assert _version(tool.binary, "opentofu") == "1.12.6"
    names = [r for r in mirrored.site.requests if r.endswith(("terragrunt_linux_amd64", "tofu_1.12.6_linux_amd64.zip"))]
    assert len(names) == 2


def test_attack_a_tampered_upstream_archive_is_never_installed_and_the_error_says_why(
        mirrored: Mirrored, tmp_path: Path) -> None:
    """Whoever serves the release site (or sits between it and the datastore) changes a byte of tofu's archive:
    the datastore refuses it against SHA256SUMS, tenv gets no binary and no digest, nothing is installed, and the
    run's error carries the mirror's reason."""
    mirrored.site.tampered.add("tofu_1.10.10_linux_amd64.zip")
    effective = EffectiveTool(kind="opentofu", version="1.10.10", terragrunt=None)
    with pytest.raises(ToolError) as failed:
        resolve_tool(effective, tmp_path, mirrored.mirror)
    message = str(failed.value)
    assert message.startswith("tenv could not install tofu 1.10.10: "), message
    assert "checksum did not match" in message and "tofu_1.10.10_linux_amd64.zip" in message, message
    assert TOKEN not in message
    assert not (tmp_path / "tenv-root" / "OpenTofu" / "1.10.10").exists()


def test_a_version_nobody_has_is_one_failure_naming_it_and_every_place_looked(
        mirrored: Mirrored, tmp_path: Path) -> None:
    (tmp_path / ".opentofu-version").write_text("~> 1.9.0\n")
    effective = EffectiveTool(kind="opentofu", version=None, terragrunt=None)
    with pytest.raises(ToolError) as failed:
        resolve_tool(effective, tmp_path, mirrored.mirror)
    message = str(failed.value)
    assert message.startswith("tenv could not install tofu ~> 1.9.0: "), message
    assert "the tool mirror https://127.0.0.1:" in message and "no opentofu version satisfying it (it has 1.12.6, " \
        "1.10.10)" in message, message
    assert 'wanted "~> 1.9.0" (from .opentofu-version in the layer directory)' in message, message
    assert f"TENV_ROOT {tmp_path / 'tenv-root'}" in message, message
    folder = tmp_path / "tenv-root" / "OpenTofu"
    assert not folder.exists() or not any(folder.iterdir())  # nothing installed


def test_a_caller_that_is_not_a_runner_gets_nothing_through_tenv(mirrored: Mirrored, tmp_path: Path) -> None:
    effective = EffectiveTool(kind="opentofu", version="1.10.10", terragrunt=None)
    with pytest.raises(ToolError) as failed:
        resolve_tool(effective, tmp_path, mirrored.mirror._replace(token="alice"))
    assert "403 Forbidden: alice may not use the mirror: only runners and the controllers" in str(failed.value)
    assert not (tmp_path / "tenv-root" / "OpenTofu" / "1.10.10").exists()


def test_tenv_finds_the_built_engines_in_its_root_without_any_download(tmp_path: Path) -> None:
    """A root seeded with the built engines (as the runner image's baked tools are) is all tenv needs: it lists
    them, resolves a version file's constraint among them and counts an exact version as installed, with its
    remote pointing where nothing listens."""
    root = tmp_path / "root"
    # Real directories (tenv skips symlinked ones), the binaries linked to the built ones.
    shutil.copytree(engines_root() / "tenv", root, copy_function=os.symlink)
    env = {"PATH": f"{engines_root() / 'bin'}{os.pathsep}/usr/bin{os.pathsep}/bin", "HOME": str(tmp_path),
           "TENV_ROOT": str(root), "TOFUENV_REMOTE": "http://127.0.0.1:9/", "TENV_REMOTE_CONF": os.devnull}

    def tenv(*args: str, cwd: Path = tmp_path) -> str:
        done = subprocess.run(["tenv", *args], capture_output=True, text=True, env=env, cwd=cwd, timeout=60,
                              check=False)
        assert done.returncode == 0, done.stdout + done.stderr
        return done.stdout + done.stderr

    listed = tenv("tofu", "list")
    assert "1.10.10" in listed and "1.12.6" in listed, listed
    layer = tmp_path / "layer"
    layer.mkdir()
    (layer / ".opentofu-version").write_text("~> 1.10.0\n")
    assert "OpenTofu 1.10.10 will be run from this directory." in tenv("tofu", "detect", cwd=layer)
    assert "1.12.6" in tenv("tofu", "install", "1.12.6")  # already installed: no remote asked
