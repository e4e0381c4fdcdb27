"""Tool resolution: the version from the spec or the code, then tenv (a fake `tenv` on a temporary PATH that
records its arguments and installs shims in tenv's layout) or a binary on PATH (fake `terraform`)."""

from __future__ import annotations

import os
import stat
import zipfile
from collections.abc import Iterator
from pathlib import Path

import pytest

from burrito_py.api.common import ToolSpec
from burrito_py.api.effective import EffectiveTool
from burrito_py.runner.tools import (
    ToolError,
    ToolMirror,
    code_required_version,
    mirror_arch,
    resolve_tool,
    tenv_install_args,
    tenv_mirror_env,
    tenv_root,
    tool_for,
)
from tests.support.fakes.mirrors import FakeMirror, running_mirror, tool_zip

FAKE_TENV = r"""#!/bin/sh
printf '%s|' "$@" >> "$FAKE_TENV_LOG"; echo >> "$FAKE_TENV_LOG"
if [ -n "$FAKE_TENV_FAIL" ]; then echo "Installation failed" ; echo "$FAKE_TENV_FAIL" >&2; exit 1; fi
case "$1" in
  tf) folder=Terraform; bin=terraform ;;
  tofu) folder=OpenTofu; bin=tofu ;;
  tg) folder=Terragrunt; bin=terragrunt ;;
esac
version="$3"
case "$version" in [0-9]*) ;; *) version="$FAKE_TENV_RESOLVES" ;; esac
mkdir -p "$TENV_ROOT/$folder/$version"
if [ "$bin" = terragrunt ]; then
  printf '#!/bin/sh\necho "terragrunt version v%s"\n' "$version" > "$TENV_ROOT/$folder/$version/$bin"
else
  printf '#!/bin/sh\necho "{\\"terraform_version\\": \\"%s\\"}"\n' "$version" > "$TENV_ROOT/$folder/$version/$bin"
fi
chmod +x "$TENV_ROOT/$folder/$version/$bin"
"""


def executable(path: Path, text: str) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)
    path.chmod(path.stat().st_mode | stat.S_IXUSR | stat.S_IXGRP | stat.S_IXOTH)
    return path


def fake_terraform(bin_dir: Path, version: str, name: str = "terraform") -> Path:
    return executable(bin_dir / name, f'#!/bin/sh\necho \'{{"terraform_version": "{version}", "platform": "x"}}\'\n')


@pytest.fixture
def bin_dir(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """An empty PATH directory in front of the system's basic tools (the real terraform lives elsewhere)."""
    directory = tmp_path / "bin"
    directory.mkdir()
    monkeypatch.setenv("PATH", f"{directory}{os.pathsep}/usr/bin{os.pathsep}/bin")
    return directory


class Tenv:
    def __init__(self, bin_dir: Path, root: Path, log: Path) -> None:
        self.bin_dir, self.root, self.log = bin_dir, root, log

    def calls(self) -> list[list[str]]:
        if not self.log.exists():
            return []
        return [line.rstrip("|").split("|") for line in self.log.read_text().splitlines()]


@pytest.fixture
def tenv(bin_dir: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Tenv:
    executable(bin_dir / "tenv", FAKE_TENV)
    root, log = tmp_path / "tenv-root", tmp_path / "tenv.log"
    monkeypatch.setenv("TENV_ROOT", str(root))
    monkeypatch.setenv("FAKE_TENV_LOG", str(log))
    monkeypatch.setenv("FAKE_TENV_RESOLVES", "1.9.8")
    return Tenv(bin_dir, root, log)


@pytest.fixture
def layer(tmp_path: Path) -> Path:
    directory = tmp_path / "layer"
    directory.mkdir()
    (directory / "main.tf").write_text('resource "terraform_data" "x" {\n  input = "a"\n}\n')
    return directory


# -- required_version -------------------------------------------------------------------------------
def test_required_version_joins_every_terraform_block(layer: Path) -> None:
    (layer / "versions.tf").write_text('terraform {\n  required_version = ">= 1.5, < 2.0"\n  backend "local" {}\n}\n')
    (layer / "extra.tf.json").write_text('{"terraform": {"required_version": "!= 1.6.0"}}')
    (layer / "z.tf").write_text('terraform {\n  required_version = "~> 1.9"\n}\n')
    assert code_required_version(layer) == "!= 1.6.0, >= 1.5, < 2.0, ~> 1.9"  # in file name order


def test_no_required_version(layer: Path) -> None:
    assert code_required_version(layer) is None


def test_tofu_files_count_for_opentofu_only(layer: Path) -> None:
    (layer / "versions.tofu").write_text('terraform {\n  required_version = ">= 1.8"\n}\n')
    assert code_required_version(layer, "terraform") is None
    assert code_required_version(layer, "opentofu") == ">= 1.8"


def test_unparsable_hcl_names_the_file(layer: Path) -> None:
    (layer / "broken.tf").write_text('terraform {\n  required_version = \n}\n')
    with pytest.raises(ToolError, match=r"cannot parse broken\.tf to read required_version: Unexpected token"):
        code_required_version(layer)


def test_invalid_required_version_names_the_file(layer: Path) -> None:
    (layer / "versions.tf").write_text('terraform {\n  required_version = ">= banana"\n}\n')
    with pytest.raises(ToolError, match=r"versions\.tf: required_version: .*'banana' is not a version"):
        code_required_version(layer)


# -- binaries on PATH -------------------------------------------------------------------------------
def test_path_binary_satisfying_the_code(bin_dir: Path, layer: Path) -> None:
    terraform = fake_terraform(bin_dir, "1.11.4")
    (layer / "versions.tf").write_text('terraform {\n  required_version = "~> 1.11.0"\n}\n')
    tool = tool_for("terraform", None, layer)
    assert (tool.kind, tool.binary, tool.version, tool.terragrunt) == ("terraform", str(terraform), "1.11.4", None)


def test_path_binary_not_satisfying_fails_clearly(bin_dir: Path, layer: Path) -> None:
    fake_terraform(bin_dir, "1.11.4")
    with pytest.raises(ToolError) as error:
        tool_for("terraform", ">= 2.0", layer)
    assert str(error.value).startswith('no terraform version satisfying ">= 2.0" (from spec.terraform.version): '
                                       "looked in TENV_ROOT ")
    assert str(error.value).endswith(f"; PATH ({bin_dir}/terraform is 1.11.4); no tool mirror configured")


def test_spec_version_wins_over_the_code(bin_dir: Path, layer: Path) -> None:
    fake_terraform(bin_dir, "1.11.4")
    (layer / "versions.tf").write_text('terraform {\n  required_version = ">= 2.0"\n}\n')
    assert tool_for("terraform", "1.11.4", layer).version == "1.11.4"


def test_opentofu_uses_tofu(bin_dir: Path, layer: Path) -> None:
    fake_terraform(bin_dir, "1.11.4")
    tofu = fake_terraform(bin_dir, "1.8.3", name="tofu")
    tool = tool_for("opentofu", "~> 1.8.0", layer)
    assert (tool.kind, tool.binary, tool.version) == ("opentofu", str(tofu), "1.8.3")


def test_missing_binary(bin_dir: Path, layer: Path) -> None:
    with pytest.raises(ToolError, match=r'no opentofu version satisfying ">= 1.8" \(from spec.opentofu.version\): '
                       r"looked in TENV_ROOT .*; PATH; no tool mirror configured$"):
        tool_for("opentofu", ">= 1.8", layer)


def test_binary_that_prints_no_version(bin_dir: Path, layer: Path) -> None:
    executable(bin_dir / "terraform", "#!/bin/sh\necho not json\n")
    with pytest.raises(ToolError, match="printed no terraform_version"):
        tool_for("terraform", None, layer)


def test_invalid_spec_version_names_the_field(bin_dir: Path, layer: Path) -> None:
    fake_terraform(bin_dir, "1.11.4")
    with pytest.raises(ToolError, match=r"spec\.terraform\.version: invalid version constraint '>= x'"):
        tool_for("terraform", ">= x", layer)


# -- tenv -------------------------------------------------------------------------------------------
def test_tenv_install_args() -> None:
    assert tenv_install_args("terraform", "1.11.4") == ["tenv", "tf", "install", "1.11.4"]
    assert tenv_install_args("opentofu", "~> 1.8") == ["tenv", "tofu", "install", "~> 1.8"]
    assert tenv_install_args("terragrunt", None) == ["tenv", "tg", "install", "latest-stable"]


def test_tenv_root_follows_tenv(monkeypatch: pytest.MonkeyPatch) -> None:
    assert tenv_root({"TENV_ROOT": "/a", "TFENV_ROOT": "/b"}) == Path("/a")
    assert tenv_root({"TFENV_ROOT": "/b"}) == Path("/b")
    monkeypatch.setenv("HOME", "/home/runner")
    assert tenv_root({}) == Path("/home/runner/.tenv")


def test_tenv_installs_an_exact_version(tenv: Tenv, layer: Path) -> None:
    fake_terraform(tenv.bin_dir, "1.11.4")  # on PATH too, but tenv wins
    tool = tool_for("terraform", "1.9.8", layer)
    assert tenv.calls() == [["tf", "install", "1.9.8"]]
    assert tool.binary == str(tenv.root / "Terraform" / "1.9.8" / "terraform")
    assert tool.version == "1.9.8"


def test_tenv_resolves_a_constraint_from_the_code(tenv: Tenv, layer: Path) -> None:
    (layer / "versions.tf").write_text('terraform {\n  required_version = "~> 1.9"\n}\n')
    tool = tool_for("terraform", None, layer)
    assert tenv.calls() == [["tf", "install", "~> 1.9"]]
    assert (tool.binary, tool.version) == (str(tenv.root / "Terraform" / "1.9.8" / "terraform"), "1.9.8")


def test_tenv_installs_opentofu(tenv: Tenv, layer: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("FAKE_TENV_RESOLVES", "1.8.3")
    tool = tool_for("opentofu", ">= 1.8", layer)
    assert tenv.calls() == [["tofu", "install", ">= 1.8"]]
    assert (tool.binary, tool.version) == (str(tenv.root / "OpenTofu" / "1.8.3" / "tofu"), "1.8.3")


def test_tenv_without_any_constraint_installs_latest_stable(tenv: Tenv, layer: Path) -> None:
    assert tool_for("terraform", None, layer).version == "1.9.8"
    assert tenv.calls() == [["tf", "install", "latest-stable"]]


def test_an_installed_match_is_used_without_calling_tenv(tenv: Tenv, layer: Path) -> None:
    for version in ("1.5.7", "1.9.2", "1.10.0-beta1"):
        fake_terraform(tenv.root / "Terraform" / version, version)
    tool = tool_for("terraform", ">= 1.5, < 2.0", layer)
    assert tenv.calls() == []
    assert tool.binary == str(tenv.root / "Terraform" / "1.9.2" / "terraform")
    tool_for("terraform", "~> 1.9.5", layer)  # 1.9.2 does not satisfy it: install
    assert tenv.calls() == [["tf", "install", "~> 1.9.5"]]


def test_tools_baked_into_the_image_are_found_before_installing(
    tenv: Tenv, layer: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    baked, other = tmp_path / "baked", tmp_path / "other"
    fake_terraform(baked / "OpenTofu" / "1.8.5", "1.8.5", name="tofu")
    fake_terraform(tenv.root / "OpenTofu" / "1.8.2", "1.8.2", name="tofu")
    monkeypatch.setenv("BURRITO_RUNNER_TOOLS_PATH", f"{other}{os.pathsep}{baked}")
    tool = tool_for("opentofu", "~> 1.8", layer)
    assert (tool.binary, tool.version) == (str(baked / "OpenTofu" / "1.8.5" / "tofu"), "1.8.5")
    assert tool_for("opentofu", "1.8.2", layer).binary == str(tenv.root / "OpenTofu" / "1.8.2" / "tofu")
    assert tenv.calls() == []  # nothing downloaded
    tool_for("opentofu", "1.9.0", layer)
    assert tenv.calls() == [["tofu", "install", "1.9.0"]]


def test_without_tenv_the_baked_tools_come_before_path(
    bin_dir: Path, layer: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """An image without tenv (the local build, docs §18) has its tools baked and none on PATH: they are found."""
    baked = tmp_path / "baked"
    fake_terraform(baked / "Terraform" / "1.11.4", "1.11.4")
    monkeypatch.setenv("BURRITO_RUNNER_TOOLS_PATH", str(baked))
    monkeypatch.setenv("TENV_ROOT", str(tmp_path / "tenv-root"))
    tool = tool_for("terraform", None, layer)
    assert (tool.binary, tool.version) == (str(baked / "Terraform" / "1.11.4" / "terraform"), "1.11.4")
    fake_terraform(bin_dir, "1.5.7")
    assert tool_for("terraform", "1.5.7", layer).binary == str(bin_dir / "terraform")  # then PATH
    with pytest.raises(ToolError, match=r"no terraform version satisfying \"1\.9\.0\".*versions found: 1\.11\.4"):
        tool_for("terraform", "1.9.0", layer)


def test_tenv_failure_is_reported(tenv: Tenv, layer: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("FAKE_TENV_FAIL", "no compatible version found")
    with pytest.raises(ToolError, match=r"tenv could not install terraform >= 9\.0: no compatible version found"):
        tool_for("terraform", ">= 9.0", layer)


def test_tenv_install_that_yields_no_match(tenv: Tenv, layer: Path) -> None:
    # tenv "succeeds" but what it installed does not satisfy the constraint: refuse rather than run it.
    with pytest.raises(ToolError, match=r"tenv installed terraform >= 2\.0 but no version satisfying it"):
        tool_for("terraform", ">= 2.0", layer)


def test_terragrunt_through_tenv(tenv: Tenv, layer: Path) -> None:
    effective = EffectiveTool(kind="terraform", version="1.9.8", terragrunt=ToolSpec(enabled=True, version="0.67.0"))
    tool = resolve_tool(effective, layer)
    assert tenv.calls() == [["tf", "install", "1.9.8"], ["tg", "install", "0.67.0"]]
    assert tool.terragrunt == str(tenv.root / "Terragrunt" / "0.67.0" / "terragrunt")
    assert tool.terragrunt_version == "0.67.0"
    assert tool.binary == str(tenv.root / "Terraform" / "1.9.8" / "terraform")


def test_terragrunt_on_path(bin_dir: Path, layer: Path) -> None:
    fake_terraform(bin_dir, "1.11.4")
    terragrunt = executable(bin_dir / "terragrunt", '#!/bin/sh\necho "terragrunt version v0.68.1"\n')
    effective = EffectiveTool(kind="terraform", version=None, terragrunt=ToolSpec(enabled=True, version="~> 0.68"))
    tool = resolve_tool(effective, layer)
    assert (tool.terragrunt, tool.terragrunt_version) == (str(terragrunt), "0.68.1")
    with pytest.raises(ToolError, match=r'no terragrunt version satisfying "< 0\.60" '
                       r"\(from spec\.terragrunt\.version\): looked in .*PATH \(.*/terragrunt is 0\.68\.1\)"):
        resolve_tool(EffectiveTool(kind="terraform", version=None, terragrunt=ToolSpec(enabled=True, version="< 0.60")),
                     layer)


def test_terragrunt_from_tenv_layout_without_tenv(bin_dir: Path, layer: Path, tmp_path: Path,
                                                  monkeypatch: pytest.MonkeyPatch) -> None:
    """No tenv to install it: a Terragrunt already in tenv's layout (a baked root, then TENV_ROOT) is used before
    PATH's, the latest satisfying the spec's constraint (the engines' root, docs/architecture.md §23.4)."""
    fake_terraform(bin_dir, "1.11.4")
    executable(bin_dir / "terragrunt", '#!/bin/sh\necho "terragrunt version v0.50.0"\n')
    baked, root = tmp_path / "baked", tmp_path / "tenv-root"
    for base, version in ((baked, "1.1.3"), (root, "1.2.0"), (root, "0.99.1")):
        executable(base / "Terragrunt" / version / "terragrunt", f'#!/bin/sh\necho "terragrunt version v{version}"\n')
    monkeypatch.setenv("BURRITO_RUNNER_TOOLS_PATH", str(baked))
    monkeypatch.setenv("TENV_ROOT", str(root))

    def terragrunt(constraint: str | None) -> tuple[str | None, str | None]:
        tool = resolve_tool(EffectiveTool(kind="terraform", version=None,
                                          terragrunt=ToolSpec(enabled=True, version=constraint)), layer)
        assert tool.binary == str(bin_dir / "terraform")  # terraform itself: PATH, as before
        return tool.terragrunt, tool.terragrunt_version

    assert terragrunt(None) == (str(root / "Terragrunt" / "1.2.0" / "terragrunt"), "1.2.0")
    assert terragrunt("~> 1.1.0") == (str(baked / "Terragrunt" / "1.1.3" / "terragrunt"), "1.1.3")
    # Nothing in the layout satisfies it: PATH's, checked as before.
    assert terragrunt("< 0.60") == (str(bin_dir / "terragrunt"), "0.50.0")


def test_prefetched_version_is_used_once(bin_dir: Path, layer: Path, tmp_path: Path) -> None:
    from burrito_py.runner.tools import prefetch_version

    log = tmp_path / "calls"
    executable(bin_dir / "terraform", f'#!/bin/sh\necho "$*" >> {log}\necho \'{{"terraform_version": "1.11.4"}}\'\n')
    prefetch_version("terraform")
    assert tool_for("terraform", "~> 1.11.0", layer).version == "1.11.4"
    assert log.read_text() == "version -json\n"  # the prefetched answer, not a second run
    tool_for("terraform", None, layer)
    assert log.read_text() == "version -json\n" * 2


def test_no_prefetch_with_tenv(tenv: Tenv, layer: Path, tmp_path: Path) -> None:
    from burrito_py.runner.tools import prefetch_version

    log = tmp_path / "calls"
    executable(tenv.bin_dir / "terraform", f'#!/bin/sh\necho "$*" >> {log}\n')
    prefetch_version("terraform")
    assert tool_for("terraform", "1.9.8", layer).binary == str(tenv.root / "Terraform" / "1.9.8" / "terraform")
    assert not log.exists()


def test_no_prefetch_when_versions_are_installed(bin_dir: Path, layer: Path, tmp_path: Path,
                                                 monkeypatch: pytest.MonkeyPatch) -> None:
    """With baked versions at hand PATH's terraform is asked only when none satisfies: no process is started for
    nothing, and one that is needed still runs."""
    from burrito_py.runner.tools import prefetch_version

    log = tmp_path / "calls"
    executable(bin_dir / "terraform", f'#!/bin/sh\necho "$*" >> {log}\necho \'{{"terraform_version": "1.5.7"}}\'\n')
    baked = tmp_path / "baked"
    executable(baked / "Terraform" / "1.11.4" / "terraform", "#!/bin/sh\n")
    monkeypatch.setenv("BURRITO_RUNNER_TOOLS_PATH", str(baked))
    prefetch_version("terraform")
    assert tool_for("terraform", "1.11.4", layer).binary == str(baked / "Terraform" / "1.11.4" / "terraform")
    assert not log.exists()
    assert tool_for("terraform", "1.5.7", layer).binary == str(bin_dir / "terraform")
    assert log.read_text() == "version -json\n"


# -- the datastore's tool mirror --------------------------------------------------------------------
MIRROR_TOKEN = "mirror-token-123"


@pytest.fixture
def tool_mirror(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[FakeMirror]:
    """A plain-http tool mirror with fake terraform 1.9.8, 1.10.0 and 1.11.4 and tofu 1.8.5; TENV_ROOT empty."""
    releases = tmp_path / "releases"
    releases.mkdir()
    tools: dict[str, dict[str, Path]] = {"terraform": {}, "opentofu": {}}
    for kind, name, versions in (("terraform", "terraform", ("1.9.8", "1.10.0", "1.11.4")),
                                 ("opentofu", "tofu", ("1.8.5",))):
        for version in versions:
            binary = fake_terraform(releases / f"{kind}-{version}", version, name=name)
            tools[kind][version] = tool_zip(releases / f"{kind}_{version}.zip", binary, name)
    monkeypatch.setenv("TENV_ROOT", str(tmp_path / "tenv-root"))
    monkeypatch.delenv("BURRITO_RUNNER_TOOLS_PATH", raising=False)
    with running_mirror(FakeMirror(token=MIRROR_TOKEN, tools=tools)) as mirror:
        yield mirror


def _mirror(fake: FakeMirror, token: str | None = MIRROR_TOKEN) -> ToolMirror:
    return ToolMirror(fake.tool_url, token)


def test_mirror_installs_the_newest_satisfying_version_in_tenvs_layout(
    bin_dir: Path, layer: Path, tool_mirror: FakeMirror, tmp_path: Path
) -> None:
    tool = tool_for("terraform", "~> 1.10", layer, _mirror(tool_mirror))
    installed = tmp_path / "tenv-root" / "Terraform" / "1.11.4" / "terraform"
    assert (tool.binary, tool.version) == (str(installed), "1.11.4")
    assert stat.S_IMODE(installed.stat().st_mode) == 0o755
    assert sorted(p.name for p in (tmp_path / "tenv-root").iterdir()) == ["Terraform"]  # no staging left
    paths = [seen.path for seen in tool_mirror.requests]
    assert paths == ["/tools/v1/terraform/versions", f"/tools/v1/terraform/1.11.4/linux/{mirror_arch()}"]
    assert tool_mirror.authorizations("/tools/") == [f"Bearer {MIRROR_TOKEN}"] * 2
    # Installed now: found in TENV_ROOT as tenv's own installs are, without asking the mirror again.
    assert tool_for("terraform", "1.11.4", layer, _mirror(tool_mirror)).binary == str(installed)
    assert len(tool_mirror.requests) == 2
    tofu = tool_for("opentofu", None, layer, _mirror(tool_mirror))
    assert (tofu.binary, tofu.version) == (str(tmp_path / "tenv-root" / "OpenTofu" / "1.8.5" / "tofu"), "1.8.5")


def test_mirror_comes_after_baked_and_installed_versions_and_a_matching_path_binary(
    bin_dir: Path, layer: Path, tool_mirror: FakeMirror, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    baked = tmp_path / "baked"
    fake_terraform(baked / "Terraform" / "1.10.0", "1.10.0")
    monkeypatch.setenv("BURRITO_RUNNER_TOOLS_PATH", str(baked))
    assert tool_for("terraform", "~> 1.10.0", layer, _mirror(tool_mirror)).version == "1.10.0"
    fake_terraform(bin_dir, "1.9.8")
    assert tool_for("terraform", "1.9.8", layer, _mirror(tool_mirror)).binary == str(bin_dir / "terraform")
    assert tool_mirror.requests == []
    # The PATH binary does not satisfy: the mirror, not an error.
    assert tool_for("terraform", "1.11.4", layer, _mirror(tool_mirror)).version == "1.11.4"


def test_with_a_mirror_tenv_installs_from_it_and_its_path_proxy_is_skipped(
    tenv: Tenv, layer: Path, tool_mirror: FakeMirror, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    fake_terraform(tenv.bin_dir, "1.11.4")  # stands for tenv's `terraform` proxy, which would download itself
    # The fake tenv records the remote it was pointed at: the tool mirror's tenv layout, never tenv's default.
    executable(tenv.bin_dir / "tenv", FAKE_TENV.replace('printf \'%s|\' "$@"', 'printf \'%s|\' "$TFENV_REMOTE" "$@"'))
    tool = tool_for("terraform", "1.11.4", layer, _mirror(tool_mirror))
    assert tool.binary == str(tenv.root / "Terraform" / "1.11.4" / "terraform")
    remote = tool_mirror.tool_url.removesuffix("v1/") + "tenv/"
    assert tenv.calls() == [[remote, "tf", "install", "1.11.4", "--skip-signature"]]


def test_tenv_is_pointed_at_the_mirrors_tenv_layout_with_the_token_as_its_password(tmp_path: Path) -> None:
    mirror = ToolMirror("https://datastore.burrito.svc:8443/tools/v1/", "the-token", tmp_path / "ca.crt")
    assert tenv_mirror_env(mirror, "opentofu") == {
        "TOFUENV_REMOTE": "https://datastore.burrito.svc:8443/tools/tenv/",
        "TOFUENV_LIST_URL": "https://datastore.burrito.svc:8443/tools/tenv/",
        "TOFUENV_INSTALL_MODE": "direct", "TOFUENV_LIST_MODE": "html", "TENV_REMOTE_CONF": os.devnull,
        "TOFUENV_REMOTE_USER": "burrito-py-runner", "TOFUENV_REMOTE_PASSWORD": "the-token",
        "SSL_CERT_FILE": str(tmp_path / "ca.crt"),
    }
    assert set(tenv_mirror_env(ToolMirror("http://m/tools/v1/"), "terragrunt")) == {
        "TG_REMOTE", "TG_LIST_URL", "TG_INSTALL_MODE", "TG_LIST_MODE", "TENV_REMOTE_CONF"}
    assert tenv_install_args("terragrunt", "1.1.3", mirror=True) == ["tenv", "tg", "install", "1.1.3"]
    assert tenv_install_args("terraform", None, mirror=True) == ["tenv", "tf", "install", "latest-stable",
                                                                  "--skip-signature"]


def test_mirror_refuses_a_download_whose_sum_does_not_match(
    bin_dir: Path, layer: Path, tool_mirror: FakeMirror, tmp_path: Path
) -> None:
    tool_mirror.tool_sums[("terraform", "1.11.4")] = "0" * 64
    with pytest.raises(ToolError, match=r"^terraform 1\.11\.4 from the tool mirror: checksum did not match: "
                                        r"the download's sha256 [0-9a-f]{64} is not the X-Burrito-Sha256 0{64}; "
                                        r"not installed$"):
        tool_for("terraform", "1.11.4", layer, _mirror(tool_mirror))
    assert list((tmp_path / "tenv-root").iterdir()) == []


def test_mirror_errors_name_what_is_missing(bin_dir: Path, layer: Path, tool_mirror: FakeMirror) -> None:
    with pytest.raises(ToolError, match=r'no terraform version satisfying ">= 2\.0" on the tool mirror .* '
                                        r"\(it has 1\.11\.4, 1\.10\.0, 1\.9\.8\)"):
        tool_for("terraform", ">= 2.0", layer, _mirror(tool_mirror))
    with pytest.raises(ToolError, match=r"cannot list terraform versions on the tool mirror .*: 401 Unauthorized") as e:
        tool_for("terraform", "1.11.4", layer, _mirror(tool_mirror, token="wrong-token"))
    assert "wrong-token" not in str(e.value)


def test_mirror_that_sends_no_sum_or_no_binary(bin_dir: Path, layer: Path, tool_mirror: FakeMirror,
                                               tmp_path: Path) -> None:
    tool_mirror.tool_sums[("terraform", "1.11.4")] = " "
    with pytest.raises(ToolError, match="the mirror sent no X-Burrito-Sha256 header; not installed"):
        tool_for("terraform", "1.11.4", layer, _mirror(tool_mirror))
    empty = tmp_path / "empty.zip"
    with zipfile.ZipFile(empty, "w") as archive:
        archive.writestr("README", "no binary")
    tool_mirror.tools["terraform"]["1.11.4"] = empty
    tool_mirror.tool_sums.clear()
    with pytest.raises(ToolError, match="the release archive holds no terraform binary"):
        tool_for("terraform", "1.11.4", layer, _mirror(tool_mirror))
    assert list((tmp_path / "tenv-root").iterdir()) == []


def test_mirror_arch() -> None:
    assert (mirror_arch("x86_64"), mirror_arch("aarch64"), mirror_arch("arm64")) == ("amd64", "arm64", "arm64")
    with pytest.raises(ToolError, match="machine 'riscv64'"):
        mirror_arch("riscv64")


# -- version files and baked engines without tenv (issue 27 item 2) ----------------------------------
def test_version_files_walk_up_to_the_repository_root_only(
    bin_dir: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Engines baked into the image (tenv's layout, BURRITO_RUNNER_TOOLS_PATH) serve without tenv and without a
    mirror; the version comes from the nearest `.opentofu-version` up to the repository root, never above it."""
    baked = tmp_path / "baked"
    for version in ("1.10.10", "1.12.6"):
        fake_terraform(baked / "OpenTofu" / version, version, name="tofu")
    monkeypatch.setenv("BURRITO_RUNNER_TOOLS_PATH", str(baked))
    monkeypatch.setenv("TENV_ROOT", str(tmp_path / "tenv-root"))
    source = tmp_path / "outside" / "source"
    layer_dir = source / "layers" / "app"
    layer_dir.mkdir(parents=True)
    (layer_dir / "main.tf").write_text('terraform {\n  required_version = ">= 1.6"\n}\n')
    (tmp_path / "outside" / ".opentofu-version").write_text("9.9.9\n")  # above the repository root: ignored
    (source / ".opentofu-version").write_text("1.10.10\n")
    tool = resolve_tool(EffectiveTool("opentofu", None, None), layer_dir, source_root=source)
    assert tool.version == "1.12.6"  # required_version wins over a parent's file (tenv's order)
    (layer_dir / "main.tf").write_text('resource "terraform_data" "x" {}\n')
    tool = resolve_tool(EffectiveTool("opentofu", None, None), layer_dir, source_root=source)
    assert (tool.version, tool.binary) == ("1.10.10", str(baked / "OpenTofu" / "1.10.10" / "tofu"))
    (layer_dir / ".opentofu-version").write_text("1.12.6\n")
    assert resolve_tool(EffectiveTool("opentofu", None, None), layer_dir, source_root=source).version == "1.12.6"
    assert resolve_tool(EffectiveTool("opentofu", "1.10.10", None), layer_dir, source_root=source
                        ).version == "1.10.10"  # the spec wins over every file


def test_a_version_file_nobody_has_fails_naming_the_file_and_every_place(
    bin_dir: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, tool_mirror: FakeMirror
) -> None:
    baked = tmp_path / "baked"
    fake_terraform(baked / "OpenTofu" / "1.12.6", "1.12.6", name="tofu")
    fake_terraform(bin_dir, "1.12.6", name="tofu")
    monkeypatch.setenv("BURRITO_RUNNER_TOOLS_PATH", str(baked))
    layer_dir = tmp_path / "src" / "app"
    layer_dir.mkdir(parents=True)
    (layer_dir / ".opentofu-version").write_text("1.9.0\n")
    with pytest.raises(ToolError) as error:
        resolve_tool(EffectiveTool("opentofu", None, None), layer_dir, _mirror(tool_mirror), source_root=layer_dir)
    message = str(error.value)
    assert message.startswith("no opentofu version satisfying \"1.9.0\" on the tool mirror "), message
    assert "; wanted \"1.9.0\" (from .opentofu-version in the layer directory); also looked in" in message
    assert f"BURRITO_RUNNER_TOOLS_PATH {baked}" in message and "TENV_ROOT " in message and "PATH" in message


def test_a_bad_version_file_names_it(bin_dir: Path, layer: Path) -> None:
    (layer / ".terraform-version").write_text("one.two\n")
    with pytest.raises(ToolError,
                       match=r"\.terraform-version in the layer directory: invalid version constraint 'one\.two'"):
        tool_for("terraform", None, layer)


def test_mirror_installs_terragrunt_as_its_bare_binary(bin_dir: Path, layer: Path, tool_mirror: FakeMirror,
                                                       tmp_path: Path) -> None:
    """Terragrunt is released as the binary itself (no zip): installed as it came, checked against the mirror's
    sum, into tenv's layout beside the engine it drives."""
    for version in ("0.99.1", "1.1.3"):
        tool_mirror.tools.setdefault("terragrunt", {})[version] = executable(
            tmp_path / "releases" / f"terragrunt_{version}", f'#!/bin/sh\necho "terragrunt version v{version}"\n')
    effective = EffectiveTool(kind="terraform", version="1.11.4", terragrunt=ToolSpec(enabled=True, version="~> 1.1"))
    tool = resolve_tool(effective, layer, _mirror(tool_mirror))
    installed = tmp_path / "tenv-root" / "Terragrunt" / "1.1.3" / "terragrunt"
    assert (tool.terragrunt, tool.terragrunt_version) == (str(installed), "1.1.3")
    assert stat.S_IMODE(installed.stat().st_mode) == 0o755
    assert installed.read_bytes() == (tmp_path / "releases" / "terragrunt_1.1.3").read_bytes()
    assert f"/tools/v1/terragrunt/1.1.3/linux/{mirror_arch()}" in [seen.path for seen in tool_mirror.requests]
    tool_mirror.tool_sums[("terragrunt", "0.99.1")] = "0" * 64
    with pytest.raises(ToolError, match=r"^terragrunt 0\.99\.1 from the tool mirror: checksum did not match"):
        resolve_tool(EffectiveTool(kind="terraform", version="1.11.4",
                                   terragrunt=ToolSpec(enabled=True, version="0.99.1")), layer, _mirror(tool_mirror))
    assert not (tmp_path / "tenv-root" / "Terragrunt" / "0.99.1").exists()
