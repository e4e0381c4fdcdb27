"""`burrito-py runner start`."""

from __future__ import annotations

import typer

app = typer.Typer(no_args_is_help=True, help="The runner pod program.")


@app.command("start")
def start() -> None:
    """Run one attempt of the TerraformRun named by BURRITO_RUNNER_* variables."""
    from burrito_py.runner.main import main

    raise typer.Exit(main())
