"""`burrito-py runner start`."""

from __future__ import annotations

import typer

app = typer.Typer(no_args_is_help=True, help="The runner pod program.")


@app.command("start")
def start() -> None:
    """Run one attempt of the TerraformRun named by the BURRITO_RUNNER_* variables (exit codes: 0 success,
    1 a terraform step failed, 2 bad input or configuration, 3 the Kubernetes API or datastore unavailable,
    4 internal error)."""
    from burrito_py.runner.main import exit_now, main

    exit_now(main())  # ends the process (see exit_now); `start` is the runner pod's whole program
