"""The `burrito-py` command line: one entry point, one subcommand group per deployable.

Imports of heavy libraries (kopf, kubernetes, fastapi) stay inside the commands so that
`burrito-py runner start` does not pay for what only the controllers need.
"""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from burrito_py.controllers.commands import app as controllers_app

app = typer.Typer(no_args_is_help=True, add_completion=False, help="Kubernetes-native Terraform runner.")
crds_app = typer.Typer(no_args_is_help=True, help="CustomResourceDefinitions generated from the API models.")
local_app = typer.Typer(no_args_is_help=True, help="Local Kubernetes API emulator and kubelet.")
app.add_typer(crds_app, name="crds")
app.add_typer(local_app, name="local")
app.add_typer(controllers_app, name="controllers")


@app.command()
def version() -> None:
    """Print the burrito-py version."""
    from burrito_py import __version__

    typer.echo(__version__)


@crds_app.command("generate")
def crds_generate(
    out: Annotated[Path, typer.Option("--out", "-o", help="Directory for the CRD YAML.")] = Path("crds"),
) -> None:
    """Write crds/*.yaml from the pydantic API models."""
    from burrito_py.api.crdgen import write_crds

    for path in write_crds(out):
        typer.echo(f"wrote {path}")


@local_app.command("apiserver")
def local_apiserver(
    port: Annotated[int, typer.Option(help="Port to listen on (0 picks a free one).")] = 0,
    host: Annotated[str, typer.Option(help="Address to bind.")] = "127.0.0.1",
    kubeconfig: Annotated[
        Path | None, typer.Option(help="Write a kubeconfig pointing at the emulator here.")
    ] = None,
) -> None:
    """Run the Kubernetes API emulator standalone until interrupted."""
    from burrito_py.local.apiserver import serve_forever

    serve_forever(host=host, port=port, kubeconfig=kubeconfig)


if __name__ == "__main__":  # pragma: no cover
    app()
