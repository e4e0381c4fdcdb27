"""The engine version decisions (runner/tool_choice.py): where a version comes from, where its binary comes
from, and the one clear failure when nothing has it. Pure: no files, no processes."""

from __future__ import annotations

import re

import pytest
from hypothesis import given
from hypothesis import strategies as st

from burrito_py.plans.versions import Version
from burrito_py.runner.tool_choice import (
    Candidate,
    VersionChoiceError,
    VersionRequest,
    choose_binary,
    request_version,
)

LOOKED = ["BURRITO_RUNNER_TOOLS_PATH /opt/tools", "TENV_ROOT /runner/tools", "PATH"]


# -- where the version comes from -----------------------------------------------------------------
def test_the_spec_wins_over_every_file_and_the_code() -> None:
    request = request_version("opentofu", "1.12.6", "spec.opentofu.version", {".opentofu-version": "1.10.10"},
                              ">= 1.6", [("", {".opentofu-version": "1.8.0"})])
    assert request == VersionRequest("1.12.6", "spec.opentofu.version")


def test_the_layers_version_file_wins_over_required_version_as_in_tenv() -> None:
    request = request_version("opentofu", None, "spec.opentofu.version", {".opentofu-version": "1.10.10\n"},
                              ">= 1.6", [])
    assert request == VersionRequest("1.10.10", ".opentofu-version in the layer directory")


def test_required_version_wins_over_a_parents_version_file() -> None:
    request = request_version("terraform", None, "spec.terraform.version", {}, "~> 1.11.0",
                              [("layers", {".terraform-version": "1.5.7"})])
    assert request == VersionRequest("~> 1.11.0", "required_version in the code")


def test_the_nearest_parents_file_wins_up_to_the_repository_root() -> None:
    parents = [("layers/team", {}), ("layers", {".terraform-version": "1.5.7"}), ("", {".terraform-version": "1.11.4"})]
    request = request_version("terraform", None, "spec.terraform.version", {}, None, parents)
    assert request == VersionRequest("1.5.7", "layers/.terraform-version")
    request = request_version("terraform", None, "spec.terraform.version", {}, None, [parents[0], parents[2]])
    assert request == VersionRequest("1.11.4", ".terraform-version at the repository root")


def test_another_engines_version_file_is_not_read() -> None:
    request = request_version("terraform", None, "spec.terraform.version", {".opentofu-version": "1.12.6"}, None,
                              [("", {".opentofu-version": "1.12.6"})])
    assert request.text is None


def test_terragrunt_reads_its_own_file() -> None:
    request = request_version("terragrunt", None, "spec.terragrunt.version", {".terragrunt-version": "1.1.3"}, None)
    assert request == VersionRequest("1.1.3", ".terragrunt-version in the layer directory")


@pytest.mark.parametrize(("content", "required", "text"), [
    ("latest\n", ">= 1.6", None),
    ("latest-stable", None, None),
    ("latest-allowed", "~> 1.10.0", "~> 1.10.0"),
    ("latest-allowed", None, None),
    ("# pinned\n\n  ~> 1.12.0  \n", None, "~> 1.12.0"),
])
def test_tenvs_keywords_and_comments(content: str, required: str | None, text: str | None) -> None:
    request = request_version("opentofu", None, "spec.opentofu.version", {".opentofu-version": content}, required)
    assert request.text == text


@pytest.mark.parametrize(("content", "message"), [
    ("", ".opentofu-version in the layer directory is empty"),
    ("one.two\n", ".opentofu-version in the layer directory: invalid version constraint 'one.two'"),
    ("min-required", ".opentofu-version in the layer directory: invalid version constraint 'min-required'"),
])
def test_a_bad_version_file_names_itself(content: str, message: str) -> None:
    with pytest.raises(VersionChoiceError, match=re.escape(message)):
        request_version("opentofu", None, "spec.opentofu.version", {".opentofu-version": content}, None)


def test_a_bad_spec_version_names_the_field() -> None:
    with pytest.raises(VersionChoiceError, match=r"spec\.terraform\.version: invalid version constraint '>= x'"):
        request_version("terraform", ">= x", "spec.terraform.version", {}, None)


_versions = st.builds(lambda a, b, c: f"{a}.{b}.{c}", st.integers(0, 2), st.integers(0, 12), st.integers(0, 12))
_maybe = st.none() | _versions


@given(spec=_maybe, layer_file=_maybe, required=_maybe, parents=st.lists(_maybe, max_size=4))
def test_the_first_source_in_order_always_decides(spec: str | None, layer_file: str | None, required: str | None,
                                                  parents: list[str | None]) -> None:
    layer_files = {".terraform-version": layer_file} if layer_file else {}
    parent_files = [(f"d{i}", {".terraform-version": v} if v else {}) for i, v in enumerate(parents)]
    request = request_version("terraform", spec, "spec.terraform.version", layer_files, required, parent_files)
    expected = next((v for v in [spec, layer_file, required, *parents] if v), None)
    assert request.text == expected


# -- where the binary comes from ------------------------------------------------------------------
def _choose(request: VersionRequest, installed: list[Candidate], on_path: Candidate | None = None,
            mirror: str | None = None, tenv: bool = False) -> tuple[Candidate | None, str | None, str | None]:
    choice = choose_binary("opentofu", request, installed, on_path, looked_at=LOOKED, mirror_url=mirror, tenv=tenv)
    return choice.use, choice.installer, choice.error


BAKED = Candidate("1.12.6", "/opt/tools/OpenTofu/1.12.6/tofu", "BURRITO_RUNNER_TOOLS_PATH /opt/tools")
OLDER = Candidate("1.10.10", "/runner/tools/OpenTofu/1.10.10/tofu", "TENV_ROOT /runner/tools")
ON_PATH = Candidate("1.12.6", "/usr/bin/tofu", "PATH")


def test_the_newest_installed_version_satisfying_the_request_is_used() -> None:
    assert _choose(VersionRequest(">= 1.6", "x"), [OLDER, BAKED], ON_PATH)[0] == BAKED
    assert _choose(VersionRequest("~> 1.10.0", "x"), [OLDER, BAKED], ON_PATH)[0] == OLDER


def test_installed_versions_come_before_path_and_path_before_installing() -> None:
    assert _choose(VersionRequest("1.12.6", "x"), [BAKED], ON_PATH, mirror="https://m/")[0] == BAKED
    assert _choose(VersionRequest("1.12.6", "x"), [OLDER], ON_PATH, mirror="https://m/")[0] == ON_PATH
    assert _choose(VersionRequest("1.9.0", "x"), [OLDER], ON_PATH, mirror="https://m/")[1] == "mirror"
    assert _choose(VersionRequest("1.9.0", "x"), [OLDER], ON_PATH, tenv=True)[1] == "tenv"
    # tenv installs whenever it is there: from the tool mirror when one is configured (tools.tenv_mirror_env)
    assert _choose(VersionRequest("1.9.0", "x"), [], None, mirror="https://m/", tenv=True)[1] == "tenv"


def test_terragrunt_comes_from_the_mirror_as_the_engines_do() -> None:
    choice = choose_binary("terragrunt", VersionRequest("1.1.3", "x"), [], None, looked_at=LOOKED,
                           mirror_url="https://m/", tenv=False)
    assert choice.installer == "mirror" and choice.error is None


def test_a_version_nobody_has_is_one_error_naming_the_version_and_every_place() -> None:
    use, installer, error = _choose(VersionRequest("1.9.0", ".opentofu-version in the layer directory"),
                                    [OLDER, BAKED], ON_PATH)
    assert use is None and installer is None
    assert error == (
        'no opentofu version satisfying "1.9.0" (from .opentofu-version in the layer directory): looked in '
        "BURRITO_RUNNER_TOOLS_PATH /opt/tools; TENV_ROOT /runner/tools; PATH (/usr/bin/tofu is 1.12.6); "
        "no tool mirror configured; versions found: 1.10.10, 1.12.6"
    )


@given(
    wanted=_versions,
    installed=st.lists(_versions, max_size=5),
    path=_maybe,
    mirror=st.booleans(),
    tenv=st.booleans(),
)
def test_nothing_runs_with_a_version_that_does_not_satisfy_the_request(
    wanted: str, installed: list[str], path: str | None, mirror: bool, tenv: bool
) -> None:
    request = VersionRequest(f"~> {wanted}", "spec.opentofu.version")
    candidates = [Candidate(v, f"/r/{v}/tofu", "TENV_ROOT /r") for v in installed]
    on_path = Candidate(path, "/usr/bin/tofu", "PATH") if path else None
    choice = choose_binary("opentofu", request, candidates, on_path, looked_at=LOOKED,
                           mirror_url="https://m/" if mirror else None, tenv=tenv)
    assert [choice.use is not None, choice.installer is not None, choice.error is not None].count(True) == 1
    if choice.use is not None:
        assert request.constraint.allows(choice.use.version)
        if choice.use.source != "PATH":  # the newest installed one that satisfies
            fitting = [v for v in installed if request.constraint.allows(v)]
            assert Version.parse(choice.use.version) == max(Version.parse(v) for v in fitting)
    elif choice.error is not None:
        assert f'"~> {wanted}"' in choice.error and "spec.opentofu.version" in choice.error
        assert all(place.split(" ")[0] in choice.error for place in LOOKED)
        assert not mirror and not tenv
