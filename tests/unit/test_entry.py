"""The console script: `runner start` skips the CLI, everything else goes through it."""

from __future__ import annotations

import subprocess
import sys

ENTRY = [sys.executable, "-X", "importtime", "-c", "from burrito_py.entry import main; main()"]


def test_runner_start_goes_straight_to_the_runner() -> None:
    done = subprocess.run([*ENTRY, "runner", "start"], capture_output=True, text=True, env={}, check=False)
    assert done.returncode == 2  # the runner's "bad input": no BURRITO_RUNNER_* environment
    assert "error: missing environment variable(s): BURRITO_RUNNER_RUN" in done.stderr
    assert "| typer" not in done.stderr  # -X importtime lists every import: the CLI was never built


def test_the_runner_never_imports_httpx_cli_nor_trio() -> None:
    probe = ("import sys; sys.argv = ['burrito-py', 'runner', 'start']\n"
             "from burrito_py import entry\n"
             "for name in entry._RUNNER_SKIPPED_IMPORTS: sys.modules.setdefault(name, None)\n"
             "import httpx, httpcore._synchronization as s\n"
             "print(s.trio is None, 'rich' in sys.modules, httpx.Client is not None)")
    done = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, check=True)
    assert done.stdout.split() == ["True", "False", "True"]  # both libraries fell back, httpx works


def test_other_commands_go_through_the_cli() -> None:
    done = subprocess.run([*ENTRY, "runner", "start", "--help"], capture_output=True, text=True, check=False)
    assert done.returncode == 0
    assert "Run one attempt of the TerraformRun" in done.stdout
