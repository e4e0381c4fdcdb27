"""`burrito-py server start`."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Any

import typer

app = typer.Typer(no_args_is_help=True, help="Webhooks, the REST API and the web UI (/ui/).")


@app.command("start")
def start(
    host: Annotated[str | None, typer.Option(help="Address to bind.")] = None,
    port: Annotated[int | None, typer.Option(help="Port to listen on.")] = None,
    namespace: Annotated[list[str] | None, typer.Option("--namespace", "-n", help="Serve only these.")] = None,
    datastore_url: Annotated[str | None, typer.Option(help="Datastore base URL.")] = None,
    kubeconfig: Annotated[Path | None, typer.Option(help="Kubeconfig (default: $KUBECONFIG or in-cluster).")] = None,
    max_webhook_bytes: Annotated[int | None, typer.Option(help="Largest webhook body accepted (413 above).")] = None,
) -> None:
    """Serve POST /api/webhook and the REST API until interrupted (settings also from BURRITO_PY_SERVER_*)."""
    import asyncio
    import logging

    from burrito_py.server.serving import serve
    from burrito_py.server.settings import ServerSettings

    overrides: dict[str, Any] = {"host": host, "port": port, "namespaces": namespace or None,
                                 "datastore_url": datastore_url, "kubeconfig": kubeconfig,
                                 "max_webhook_bytes": max_webhook_bytes}
    settings = ServerSettings(**{k: v for k, v in overrides.items() if v is not None})
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    asyncio.run(serve(settings))
