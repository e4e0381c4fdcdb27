"""The `burrito-py` command line: one entry point, one subcommand group per deployable.

Imports of heavy libraries (kopf, kubernetes, fastapi) stay inside the commands so that
`burrito-py runner start` does not pay for what only the controllers need.
"""

from __future__ import annotations

from collections.abc import Callable
from enum import StrEnum
from pathlib import Path
from typing import Annotated, Any

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
state_app = typer.Typer(no_args_is_help=True, help="A managed-state layer's state versions, through the server.")
app.add_typer(state_app, name="state")
operation_app = typer.Typer(no_args_is_help=True, help="Ask for a day-2 operation on a layer, through the server: "
                            "burrito-py operation NAMESPACE/LAYER import|state-rm|state-mv|plan|force-unlock …")
app.add_typer(operation_app, name="operation")


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


# -- the server's REST API: state versions and day-2 operations (server_api.py) ------------------------------
LayerRef = Annotated[str, typer.Argument(help="NAMESPACE/LAYER", metavar="NAMESPACE/LAYER")]
ServerUrl = Annotated[str | None, typer.Option(
    envvar="BURRITO_SERVER_URL", help="The server's base URL (default: through the Kubernetes API's service proxy).")]
ReleaseNamespace = Annotated[str, typer.Option(envvar="BURRITO_PY_NAMESPACE",
                                               help="Namespace burrito-py is installed in.")]
Kubeconfig = Annotated[Path | None, typer.Option(help="Kubeconfig (default: $KUBECONFIG or ~/.kube/config); its "
                                                 "user's token is what the server authorizes.")]
AsJson = Annotated[bool, typer.Option("--json", help="Print the server's JSON answer.")]


def _with_server(server_url: str | None, kubeconfig: Path | None, release_namespace: str,
                 work: Callable[[Any], str | None]) -> None:
    """Run `work` with a client of the server; print what it returns; a refusal or failure is `error: …`, exit 1
    (2 for input the CLI refuses before asking)."""
    from burrito_py.kube.service_proxy import ServiceNotFound
    from burrito_py.server_api import ServerError, server_client

    try:
        with server_client(server_url, kubeconfig, release_namespace) as client:
            out = work(client)
    except ValueError as exc:
        typer.echo(f"error: {exc}", err=True)
        raise typer.Exit(2) from None
    except (ServerError, ServiceNotFound) as exc:
        typer.echo(f"error: {exc}", err=True)
        raise typer.Exit(1) from None
    if out:
        typer.echo(out, nl=False)


@state_app.command("versions")
def state_versions(layer: LayerRef, json_out: AsJson = False, server_url: ServerUrl = None,
                   release_namespace: ReleaseNamespace = "burrito-py-system", kubeconfig: Kubeconfig = None) -> None:
    """List the kept versions of a layer's state, newest first (needs get terraformruns in its namespace)."""
    from burrito_py.server_api import as_json, layer_ref, versions_table
    from burrito_py.server_api import state_versions as read

    _check_ref(layer, layer_ref)
    _with_server(server_url, kubeconfig, release_namespace,
                 lambda c: as_json(read(c, layer)) if json_out else versions_table(read(c, layer)))


@state_app.command("diff")
def state_diff(layer: LayerRef,
               from_serial: Annotated[int | None, typer.Option("--from", min=0, help="Older serial (default: the "
                                                               "version before --to).")] = None,
               to_serial: Annotated[int | None, typer.Option("--to", min=0, help="Newer serial (default: the "
                                                             "current version).")] = None,
               json_out: AsJson = False, server_url: ServerUrl = None,
               release_namespace: ReleaseNamespace = "burrito-py-system", kubeconfig: Kubeconfig = None) -> None:
    """What changed between two versions: resources added, removed, changed (attribute names), outputs; never a
    value."""
    from burrito_py.server_api import as_json, diff_text, layer_ref
    from burrito_py.server_api import state_diff as read

    _check_ref(layer, layer_ref)

    def work(client: Any) -> str:
        diff = read(client, layer, from_serial, to_serial)
        return as_json(diff) if json_out else diff_text(diff)

    _with_server(server_url, kubeconfig, release_namespace, work)


@state_app.command("rollback")
def state_rollback(layer: LayerRef,
                   serial: Annotated[int, typer.Argument(min=0, help="The kept version to restore (as a new one).")],
                   server_url: ServerUrl = None, release_namespace: ReleaseNamespace = "burrito-py-system",
                   kubeconfig: Kubeconfig = None) -> None:
    """Restore a kept version as the next one, recorded with your name (needs patch terraformlayers and get
    secrets; refused while a run holds the state's lock)."""
    from burrito_py.server_api import layer_ref
    from burrito_py.server_api import state_rollback as roll_back

    _check_ref(layer, layer_ref)

    def work(client: Any) -> str:
        answer = roll_back(client, layer, serial)
        return f"state of {layer} rolled back to version {serial} by {answer.get('by')}: new version " \
               f"{answer.get('serial')}\n"

    _with_server(server_url, kubeconfig, release_namespace, work)


@state_app.command("download")
def state_download(layer: LayerRef, serial: Annotated[int, typer.Argument(min=0, help="The version's serial.")],
                   output: Annotated[Path | None, typer.Option("--output", "-o", help="Write here instead of "
                                                               "stdout.")] = None,
                   server_url: ServerUrl = None, release_namespace: ReleaseNamespace = "burrito-py-system",
                   kubeconfig: Kubeconfig = None) -> None:
    """Download one version's state as stored: it holds every secret of the layer (needs get secrets)."""
    import sys

    from burrito_py.server_api import layer_ref
    from burrito_py.server_api import state_download as read

    _check_ref(layer, layer_ref)

    def work(client: Any) -> str:
        data = read(client, layer, serial)
        if output is None:
            sys.stdout.buffer.write(data)
            sys.stdout.flush()
            return ""
        # Only readable by its owner: a state holds secrets.
        output.touch(mode=0o600, exist_ok=True)
        output.chmod(0o600)
        output.write_bytes(data)
        return f"wrote version {serial} of {layer} to {output} ({len(data)} bytes)\n"

    _with_server(server_url, kubeconfig, release_namespace, work)


def _check_ref(layer: str, parse: Callable[[str], Any]) -> None:
    try:
        parse(layer)
    except ValueError as exc:
        typer.echo(f"error: {exc}", err=True)
        raise typer.Exit(2) from None


@operation_app.callback()
def operation_layer(ctx: typer.Context, layer: LayerRef, server_url: ServerUrl = None,
                    release_namespace: ReleaseNamespace = "burrito-py-system", kubeconfig: Kubeconfig = None) -> None:
    """The layer and the server for the operation that follows (checked by the server, which records you as the
    requester; the controllers run it as a TerraformRun). Needs patch terraformlayers in the layer's namespace."""
    from burrito_py.server_api import layer_ref

    _check_ref(layer, layer_ref)
    ctx.obj = (layer, server_url, kubeconfig, release_namespace)


def _ask(ctx: typer.Context, body: dict[str, Any]) -> None:
    from burrito_py.server_api import operation

    layer, server_url, kubeconfig, release_namespace = ctx.obj

    def work(client: Any) -> str:
        answer = operation(client, layer, body)
        return f"asked for {answer.get('operation')} on {layer} (as {answer.get('by')}, at " \
               f"{answer.get('requestedAt')}): the controllers run it as a TerraformRun\n"

    _with_server(server_url, kubeconfig, release_namespace, work)


@operation_app.command("import")
def operation_import(ctx: typer.Context, address: Annotated[str, typer.Argument(help="Resource address.")],
                     object_id: Annotated[str, typer.Argument(metavar="ID", help="The provider's ID.")]) -> None:
    """terraform import ADDRESS ID."""
    _ask(ctx, {"operation": "import", "address": address, "id": object_id})


@operation_app.command("state-rm")
def operation_state_rm(ctx: typer.Context, address: Annotated[str, typer.Argument(help="Resource address.")]) -> None:
    """terraform state rm ADDRESS."""
    _ask(ctx, {"operation": "state-rm", "address": address})


@operation_app.command("state-mv")
def operation_state_mv(ctx: typer.Context, source: Annotated[str, typer.Argument(help="Address to move.")],
                       destination: Annotated[str, typer.Argument(help="Where to move it.")]) -> None:
    """terraform state mv SOURCE DESTINATION."""
    _ask(ctx, {"operation": "state-mv", "source": source, "destination": destination})


@operation_app.command("plan")
def operation_plan(ctx: typer.Context,
                   replace: Annotated[list[str] | None, typer.Option(help="-replace=ADDRESS (repeatable).")] = None,
                   target: Annotated[list[str] | None, typer.Option(help="-target=ADDRESS (repeatable).")] = None
                   ) -> None:
    """A plan with -replace and/or -target, approved like any plan."""
    _ask(ctx, {"operation": "plan", "replace": list(replace or ()), "target": list(target or ())})


@operation_app.command("force-unlock")
def operation_force_unlock(ctx: typer.Context,
                           lock_id: Annotated[str, typer.Argument(metavar="LOCK_ID", help="The lock ID terraform "
                                                                  "printed.")]) -> None:
    """terraform force-unlock LOCK_ID."""
    _ask(ctx, {"operation": "force-unlock", "lockId": lock_id})


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
    caches: Annotated[bool, typer.Option("--caches", help="Chart mode: turn on the datastore's provider and tool "
                                         "caches (providerCache, toolCache), runner pods pointed at them.")] = False,
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
            caches=caches,
        )
    except ValueError as exc:
        typer.echo(f"error: {exc}", err=True)
        raise typer.Exit(2) from None
    run_dev(options)


if __name__ == "__main__":  # pragma: no cover
    app()
