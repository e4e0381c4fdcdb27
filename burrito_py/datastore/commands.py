"""`burrito-py datastore start`."""

from __future__ import annotations

import asyncio
import contextlib
import logging
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any

import typer

if TYPE_CHECKING:
    from burrito_py.datastore.app import DatastoreSettings
    from burrito_py.datastore.backends import StorageSettings

app = typer.Typer(no_args_is_help=True, help="The datastore of plans, logs and source archives.")


@app.command("start")
def start(
    data_dir: Annotated[Path | None, typer.Option(help="Filesystem backend directory.")] = None,
    host: Annotated[str | None, typer.Option(help="Address to bind.")] = None,
    port: Annotated[int | None, typer.Option(help="Port to listen on.")] = None,
    max_body_bytes: Annotated[int | None, typer.Option(help="Largest upload accepted (413 above).")] = None,
    backend: Annotated[str | None, typer.Option(help="Storage backend: filesystem (default) or s3.")] = None,
    s3_bucket: Annotated[str | None, typer.Option(help="S3 bucket (s3 backend).")] = None,
    s3_prefix: Annotated[str | None, typer.Option(help="Key prefix inside the bucket.")] = None,
    s3_endpoint_url: Annotated[str | None, typer.Option(help="S3-compatible endpoint; unset: AWS.")] = None,
    s3_region: Annotated[str | None, typer.Option(help="S3 region.")] = None,
    s3_path_style: Annotated[bool | None, typer.Option(help="Path-style addressing (MinIO, moto, Ceph).")] = None,
    s3_part_size: Annotated[int | None, typer.Option(help="Multipart part size in bytes (>= 5 MiB).")] = None,
    encryption: Annotated[bool | None, typer.Option(help="Encrypt objects at rest (AES-256-GCM).")] = None,
    encryption_secret_name: Annotated[str | None, typer.Option(help="Secret holding the keys by id.")] = None,
    encryption_secret_namespace: Annotated[str | None, typer.Option(help="Its namespace; unset: own.")] = None,
    encryption_active_key_id: Annotated[str | None, typer.Option(help="Key id new objects use.")] = None,
    retention: Annotated[bool | None, typer.Option(help="Delete unreferenced artifacts on a schedule.")] = None,
    retention_schedule: Annotated[str | None, typer.Option(help="Cron schedule of retention passes.")] = None,
    retention_grace_seconds: Annotated[
        int | None, typer.Option(help="How long a key stays unreferenced before it is deleted.")
    ] = None,
) -> None:
    """Serve the datastore API until interrupted (settings also from BURRITO_PY_DATASTORE_*)."""
    from pydantic import ValidationError

    from burrito_py.datastore.app import DatastoreSettings
    from burrito_py.datastore.backends import StorageSettings

    def given(**values: Any) -> dict[str, Any]:
        return {k: v for k, v in values.items() if v is not None}

    try:
        settings = DatastoreSettings(**given(data_dir=data_dir, host=host, port=port, max_body_bytes=max_body_bytes))
        storage_settings = StorageSettings(**given(
            data_dir=data_dir,
            backend=backend,
            s3_bucket=s3_bucket,
            s3_prefix=s3_prefix,
            s3_endpoint_url=s3_endpoint_url,
            s3_region=s3_region,
            s3_path_style=s3_path_style,
            s3_part_size=s3_part_size,
            encryption_enabled=encryption,
            encryption_secret_name=encryption_secret_name,
            encryption_secret_namespace=encryption_secret_namespace,
            encryption_active_key_id=encryption_active_key_id,
            retention_enabled=retention,
            retention_schedule=retention_schedule,
            retention_grace_seconds=retention_grace_seconds,
        ))
    except ValidationError as exc:
        problems = "; ".join(f"{'.'.join(map(str, e['loc'])) or 'settings'}: {e['msg']}" for e in exc.errors())
        typer.echo(f"invalid datastore settings: {problems}", err=True)
        raise typer.Exit(2) from None
    import uvloop

    # uvloop, as uvicorn would choose itself had it started the loop: an event loop started here (to serve HTTP
    # and HTTPS together) was asyncio's own, whose Python transports cost more of the datastore's time under load
    # than uvloop's (issue 31).
    with asyncio.Runner(loop_factory=uvloop.new_event_loop) as runner:
        runner.run(_serve(settings, storage_settings))


async def _serve(settings: DatastoreSettings, storage_settings: StorageSettings) -> None:
    import anyio.to_thread
    import uvicorn

    from burrito_py.datastore.app import create_app, read_cache_for, server_options
    from burrito_py.datastore.backends import build_storage, load_keyring
    from burrito_py.datastore.encryption import EncryptionError
    from burrito_py.datastore.kubeapi import KubeApiError, connect
    from burrito_py.datastore.retention import Retention, retention_loop
    from burrito_py.datastore.tls import https_config

    # uvicorn configures only its own loggers; retention and storage report through ours.
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    kubeconfig = str(settings.kubeconfig) if settings.kubeconfig else None
    try:
        keyring = await load_keyring(storage_settings, kubeconfig) if storage_settings.encryption_enabled else None
        api = await connect(kubeconfig) if storage_settings.retention_enabled else None
    except (EncryptionError, KubeApiError) as exc:
        typer.echo(f"datastore: {exc}", err=True)
        raise typer.Exit(2) from None
    # Behind the read cache here, not only in create_app: retention's deletes must drop what they delete from it.
    storage = read_cache_for(build_storage(storage_settings, keyring), settings)
    # Every storage call runs in a worker thread (boto3 is synchronous); as many threads as S3 connections, so a
    # request holding a pooled connection never waits for a thread (anyio's default is 40).
    anyio.to_thread.current_default_thread_limiter().total_tokens = max(40, storage_settings.s3_max_connections)
    app = create_app(storage, settings)
    options = server_options(settings)
    servers = [uvicorn.Server(uvicorn.Config(app, host=settings.host, port=settings.port, **options))]
    if settings.tls_port:
        if settings.tls_cert_file is None or settings.tls_key_file is None:
            typer.echo("datastore: tls_port needs tls_cert_file and tls_key_file", err=True)
            raise typer.Exit(2)
        servers.append(uvicorn.Server(https_config(app, settings.host, settings.tls_port, settings.tls_cert_file,
                                                   settings.tls_key_file, **options)))
    from datetime import timedelta

    from burrito_py.datastore.backends import sweep_abandoned_uploads

    abandoned = timedelta(seconds=storage_settings.s3_abandoned_upload_seconds)
    uploads = asyncio.create_task(
        sweep_abandoned_uploads(storage, abandoned, storage_settings.s3_upload_sweep_seconds)
    )
    sweeper: asyncio.Task[None] | None = None
    if api is not None:
        retention = Retention(storage, api, timedelta(seconds=storage_settings.retention_grace_seconds))
        sweeper = asyncio.create_task(retention_loop(retention, storage_settings.retention_schedule))
    try:
        await _serve_all(servers)
    finally:
        uploads.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await uploads
        if sweeper is not None:
            sweeper.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await sweeper
        if api is not None:
            await api.close()


async def _serve_all(servers: list[Any]) -> None:
    """Serve HTTP (and HTTPS); when one listener stops (a signal, a bind failure), the others stop too."""
    tasks = [asyncio.create_task(server.serve()) for server in servers]
    done, pending = await asyncio.wait(tasks, return_when=asyncio.FIRST_COMPLETED)
    for server in servers:
        server.should_exit = True
    await asyncio.gather(*pending, return_exceptions=True)
    for task in done:
        task.result()
