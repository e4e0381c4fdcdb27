"""The images' recipe, minus Docker: build the wheel from this checkout (`pip wheel --no-deps`, in a copy of the
files the Dockerfiles COPY, so the checkout stays untouched), install it into a fresh virtual environment and run
the installed `burrito-py --help`. Offline: the new environment sees the test environment's packages
(`--system-site-packages` of this interpreter's environment) instead of downloading the dependencies again."""

from __future__ import annotations

import re
import shutil
import subprocess
import sys
import sysconfig
from pathlib import Path

import pytest

REPO_ROOT = Path(__file__).resolve().parents[3]


@pytest.mark.slow
def test_the_wheel_installs_and_its_console_script_lists_every_command_group(tmp_path: Path) -> None:
    # What `COPY pyproject.toml README.md ./` and `COPY burrito_py ./burrito_py` give the build stage.
    src = tmp_path / "src"
    src.mkdir()
    for name in ("pyproject.toml", "README.md"):
        shutil.copy(REPO_ROOT / name, src / name)
    shutil.copytree(REPO_ROOT / "burrito_py", src / "burrito_py", ignore=shutil.ignore_patterns("__pycache__"))
    dist = tmp_path / "dist"
    subprocess.run([sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation", "--wheel-dir",
                    str(dist), str(src)], check=True, capture_output=True, timeout=300)
    [wheel] = dist.glob("burrito_py-*.whl")
    version = re.search(r'^version = "([^"]+)"', (REPO_ROOT / "pyproject.toml").read_text(), re.M)
    assert version and wheel.name == f"burrito_py-{version.group(1)}-py3-none-any.whl"

    # A fresh venv whose base is this test environment (its site-packages hold the dependencies).
    venv = tmp_path / "venv"
    subprocess.run([sys.executable, "-m", "venv", "--system-site-packages", "--without-pip", str(venv)], check=True,
                   timeout=120)
    python = venv / "bin/python"
    purelib = Path(subprocess.run([str(python), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
                                  check=True, capture_output=True, text=True).stdout.strip())
    # A venv made from a venv does not chain to it: point the new one at the test venv's packages explicitly.
    (purelib / "_test_env.pth").write_text(sysconfig.get_paths()["purelib"] + "\n")
    subprocess.run([sys.executable, "-m", "pip", "--python", str(python), "install", "--no-deps", "--no-index",
                    str(wheel)], check=True, capture_output=True, timeout=300)

    # The installed console script runs the installed package, not this checkout's (an editable install).
    located = subprocess.run([str(python), "-c", "import burrito_py; print(burrito_py.__file__)"], cwd=tmp_path,
                             check=True, capture_output=True, text=True).stdout.strip()
    assert Path(located).is_relative_to(purelib), located
    helped = subprocess.run([str(venv / "bin/burrito-py"), "--help"], cwd=tmp_path, capture_output=True, text=True,
                            timeout=120, check=False, env={"PATH": "/usr/bin:/bin", "COLUMNS": "200"})
    assert helped.returncode == 0, helped.stderr
    commands = set(re.findall(r"^│ (\w[\w-]*) ", helped.stdout, re.M))
    assert {"controllers", "datastore", "server", "runner"} <= commands, helped.stdout
