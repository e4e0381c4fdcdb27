"""The `burrito-py` command line: one entry point, one subcommand group per deployable.

Imports of heavy libraries (kopf, kubernetes, fastapi) stay inside the commands so that
`burrito-py runner start` does not pay for what only the controllers need.
"""

from __future__ import annotations

from enum import StrEnum
from pathlib import Path
from typing import Annotated

import typer

from burrito_py.datastore.commands import app as datastore_app
from burrito_py.operator.commands import app as controllers_app
from burrito_py.runner.commands import app as runner_app
from burrito_py.server.commands import app as server_app

app = typer.Typer(no_args_is_help=True, add_completion=False, help="Kubernetes-native Terraform runner.")
crds_app = typer.Typer(no_args_is_help=True, help="CustomResourceDefinitions generated from the API models.")
local_app = typer.Typer(no_args_is_help=True, help="Local Kubernetes API emulator and kubelet.")
chart_app = typer.Typer(no_args_is_help=True, help="The Helm chart charts/burrito-py.")
app.add_typer(crds_app, name="crds")
app.add_typer(chart_app, name="chart")
app.add_typer(local_app, name="local")
app.add_typer(controllers_app, name="controllers")
app.add_typer(datastore_app, name="datastore")
app.add_typer(runner_app, name="runner")
app.add_typer(server_app, name="server")
plan_app = typer.Typer(no_args_is_help=True, help="Plans kept in the datastore.")
app.add_typer(plan_app, name="plan")


class PlanFormat(StrEnum):
    json = "json"
    pretty = "pretty"
    short = "short"
    bin = "bin"


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


@chart_app.command("generate")
def chart_generate(
    chart: Annotated[Path | None, typer.Option("--chart", help="Chart directory (default: charts/burrito-py).")] = None,
) -> None:
    """Write the chart's CRD templates, values.schema.json and values.yaml from the models."""
    from burrito_py.chart.chartgen import CHART_DIR, write_chart_files

    for path in write_chart_files(chart or CHART_DIR):
        typer.echo(f"wrote {path}")


def _require_local() -> None:
    """`dev` and `local` run on burrito-py-local (the emulator, the local kubelet), which the images never hold."""
    import importlib.util

    if importlib.util.find_spec("burrito_local") is None:
        typer.echo("error: this command needs the burrito-py-local package (the emulator and the local kubelet, "
                   "not in the images): pip install -e ./local from a checkout, or run scripts/dev.sh", err=True)
        raise typer.Exit(2)


@local_app.command("apiserver")
def local_apiserver(
    port: Annotated[int, typer.Option(help="Port to listen on (0 picks a free one).")] = 0,
    host: Annotated[str, typer.Option(help="Address to bind.")] = "127.0.0.1",
    kubeconfig: Annotated[Path | None, typer.Option(help="Write a kubeconfig pointing at the emulator here.")] = None,
) -> None:
    """Run the Kubernetes API emulator standalone until interrupted."""
    _require_local()
    from burrito_local.apiserver import serve_forever

    serve_forever(host=host, port=port, kubeconfig=kubeconfig)


@plan_app.command("download")
def plan_download(
    layer: Annotated[str, typer.Argument(help="NAMESPACE/LAYER")],
    run: Annotated[str | None, typer.Option(help="A run of the layer (default: the latest plan).")] = None,
    fmt: Annotated[PlanFormat, typer.Option("--format", "-f", help="Plan format.")] = PlanFormat.json,
    output: Annotated[Path | None, typer.Option("--output", "-o", help="Write here instead of stdout.")] = None,
    datastore_url: Annotated[
        str | None,
        typer.Option(envvar="BURRITO_DATASTORE_URL",
                     help="Datastore base URL (default: through the Kubernetes API's service proxy)."),
    ] = None,
    release_namespace: Annotated[
        str, typer.Option(envvar="BURRITO_PY_NAMESPACE", help="Namespace burrito-py is installed in.")
    ] = "burrito-py-system",
    kubeconfig: Annotated[Path | None, typer.Option(help="Kubeconfig (default: $KUBECONFIG or ~/.kube/config).")
                          ] = None,
) -> None:
    """Download a layer's latest plan (or a given run's) from the datastore, with only your kubeconfig."""
    from burrito_py.datastore.client import DatastoreError
    from burrito_py.kube.service_proxy import ServiceNotFound
    from burrito_py.plan_download import PlanNotFound, download

    try:
        download(layer, run, fmt.value, output, datastore_url, kubeconfig, release_namespace=release_namespace)
    except (PlanNotFound, DatastoreError, ServiceNotFound, ValueError) as exc:
        typer.echo(f"error: {exc}", err=True)
        raise typer.Exit(1) from None


@app.command()
def dev(
    manifests: Annotated[list[Path] | None, typer.Argument(help="Manifests (files or directories) to apply.")] = None,
    kubeconfig: Annotated[Path, typer.Option(help="Where to write the kubeconfig.")] = Path(".burrito-py/kubeconfig"),
    data_dir: Annotated[Path, typer.Option(help="State of the local run: git, datastore, pods.")] = Path(".burrito-py"),
    example: Annotated[list[str] | None, typer.Option(help="A bundled example to run, e.g. quickstart (repeatable).")
                       ] = None,
    drift_detection_period: Annotated[float, typer.Option(help="Seconds before a plan is stale.")] = 300.0,
    repository_poll_interval: Annotated[float, typer.Option(help="Seconds between git fetches.")] = 15.0,
    api_port: Annotated[int, typer.Option(help="Port of the API emulator (0 picks one).")] = 0,
    server_port: Annotated[int, typer.Option(help="Port of the server in in-process mode (0 picks one).")] = 0,
    mode: Annotated[str, typer.Option(help="chart: install charts/burrito-py into the emulator, components as pods "
                                      "under RBAC; in-process: components as threads (faster start).")] = "chart",
    cluster: Annotated[str, typer.Option(help="real: a Kubernetes control plane built from the official modules "
                                         "(the first run builds it: about 15 CPU-minutes), this machine its node; "
                                         "emulator: the API emulator (starts in a second).")] = "real",
) -> None:
    """Run everything on this machine: Kubernetes, kubelet, datastore, controllers, real terraform."""
    from datetime import timedelta

    _require_local()
    from burrito_local.dev import DevOptions, run_dev

    try:
        options = DevOptions(
            data_dir=data_dir,
            kubeconfig=kubeconfig,
            manifests=list(manifests or []),
            examples=list(example or []),
            drift_detection_period=timedelta(seconds=drift_detection_period),
            repository_poll_interval=timedelta(seconds=repository_poll_interval),
            api_port=api_port,
            server_port=server_port,
            mode=mode,
            cluster=cluster,
        )
    except ValueError as exc:
        typer.echo(f"error: {exc}", err=True)
        raise typer.Exit(2) from None
    run_dev(options)


if __name__ == "__main__":  # pragma: no cover
    app()
