"""The `burrito-py` console script.

`burrito-py runner start` (a runner pod's whole command) goes straight to the runner: building the typer
CLI imports every command group (~0.15 s) that a runner never uses, on every attempt of every run. Every
other invocation, `runner start --help` included, goes through the CLI.
"""

from __future__ import annotations

import sys


def main() -> None:
    if sys.argv[1:] == ["runner", "start"]:
        from burrito_py.runner.main import exit_now
        from burrito_py.runner.main import main as run_attempt

        exit_now(run_attempt())
    from burrito_py.cli import app

    app()
