"""`burrito-py controllers start`: flags override `BURRITO_PY_*` variables, which override defaults."""

from __future__ import annotations

import asyncio
import logging
from datetime import timedelta
from pathlib import Path
from typing import Annotated, Any

import typer

app = typer.Typer(no_args_is_help=True, help="The layer, run, repository and AGL controllers.")


@app.command("start")
def start(
    namespace: Annotated[list[str] | None, typer.Option("--namespace", "-n", help="Watch only these.")] = None,
    datastore_url: Annotated[str | None, typer.Option(help="Datastore base URL.")] = None,
    git_cache_dir: Annotated[Path | None, typer.Option(help="Where repository mirrors live.")] = None,
    drift_detection_period: Annotated[float | None, typer.Option(help="Seconds before a plan is stale.")] = None,
    repository_poll_interval: Annotated[float | None, typer.Option(help="Seconds between git fetches.")] = None,
    failure_grace_period: Annotated[float | None, typer.Option(help="Base retry backoff, seconds.")] = None,
    max_retries: Annotated[int | None, typer.Option(help="Default retries of a failed run.")] = None,
    runner_image: Annotated[str | None, typer.Option(help="Image of runner pods.")] = None,
    host: Annotated[str | None, typer.Option(help="Address the metrics and health endpoints bind to.")] = None,
    metrics_port: Annotated[int | None, typer.Option(help="Prometheus port (0 disables).")] = None,
    health_port: Annotated[int | None, typer.Option(help="Liveness endpoint port, GET /healthz (0 disables).")] = None,
    kubeconfig: Annotated[Path | None, typer.Option(help="Kubeconfig (default: $KUBECONFIG or in-cluster).")] = None,
    agl: Annotated[bool | None, typer.Option("--agl/--no-agl", help="Run the AGL controller (default: on).")] = None,
    allow_file_repositories: Annotated[
        bool | None, typer.Option(help="Accept file:// repository URLs (local development only; default: off).")
    ] = None,
    allow_cross_namespace_repositories: Annotated[
        bool | None, typer.Option(help="Let layers use repositories of other namespaces (default: off).")
    ] = None,
    outbound_allowed_network: Annotated[
        list[str] | None,
        typer.Option(help="A CIDR that git fetches, pull request APIs and notifiers may reach although internal "
                     "(repeat for more; default: none)."),
    ] = None,
    outbound_allowed_host: Annotated[
        list[str] | None,
        typer.Option(help="A host name (or *.suffix) those calls may reach whatever it resolves to (repeat; "
                     "default: none)."),
    ] = None,
    leader_election: Annotated[
        bool | None,
        typer.Option("--leader-election/--no-leader-election", help="Act only while holding the leader Lease."),
    ] = None,
    leader_election_namespace: Annotated[
        str | None, typer.Option(help="Namespace of the leader Lease (default: the pod's).")
    ] = None,
    leader_election_name: Annotated[str | None, typer.Option(help="Name of the leader Lease.")] = None,
    leader_election_identity: Annotated[
        str | None, typer.Option(help="This candidate's identity (default: $POD_NAME, else the hostname).")
    ] = None,
    lease_duration: Annotated[float | None, typer.Option(help="Seconds until a silent leader's Lease expires.")] = None,
    renew_deadline: Annotated[float | None, typer.Option(help="Seconds a leader may fail to renew.")] = None,
    retry_period: Annotated[float | None, typer.Option(help="Seconds between two looks at the Lease.")] = None,
) -> None:
    """Run the controllers until interrupted."""
    from pydantic import ValidationError

    from burrito_py.controllers.settings import ControllerSettings, settings_problem
    from burrito_py.operator.main import run_controllers

    overrides: dict[str, Any] = {
        "namespaces": namespace or None,
        "datastore_url": datastore_url,
        "git_cache_dir": git_cache_dir,
        "drift_detection_period": _seconds(drift_detection_period),
        "repository_poll_interval": _seconds(repository_poll_interval),
        "failure_grace_period": _seconds(failure_grace_period),
        "max_retries": max_retries,
        "runner_image": runner_image,
        "host": host,
        "metrics_port": metrics_port,
        "health_port": health_port,
        "agl_enabled": agl,
        "allow_file_repositories": allow_file_repositories,
        "allow_cross_namespace_repositories": allow_cross_namespace_repositories,
        "outbound_allowed_networks": outbound_allowed_network or None,
        "outbound_allowed_hosts": outbound_allowed_host or None,
        "leader_election": leader_election,
        "leader_election_namespace": leader_election_namespace,
        "leader_election_name": leader_election_name,
        "leader_election_identity": leader_election_identity,
        "lease_duration": _seconds(lease_duration),
        "renew_deadline": _seconds(renew_deadline),
        "retry_period": _seconds(retry_period),
    }
    try:
        settings = ControllerSettings(**{k: v for k, v in overrides.items() if v is not None})
    except ValidationError as exc:
        typer.echo(f"invalid controller settings: {settings_problem(exc)}", err=True)
        raise typer.Exit(2) from None
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    asyncio.run(run_controllers(settings, kubeconfig))


def _seconds(value: float | None) -> timedelta | None:
    return None if value is None else timedelta(seconds=value)
