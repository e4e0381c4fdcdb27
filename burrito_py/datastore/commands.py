"""`burrito-py datastore start`."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

app = typer.Typer(no_args_is_help=True, help="The datastore of plans, logs and source archives.")


@app.command("start")
def start(
    data_dir: Annotated[Path | None, typer.Option(help="Filesystem backend directory.")] = None,
    host: Annotated[str | None, typer.Option(help="Address to bind.")] = None,
    port: Annotated[int | None, typer.Option(help="Port to listen on.")] = None,
) -> None:
    """Serve the datastore API until interrupted (settings also from BURRITO_PY_DATASTORE_*)."""
    import uvicorn

    from burrito_py.datastore.app import DatastoreSettings, create_app
    from burrito_py.datastore.storage import FilesystemStorage

    overrides = {k: v for k, v in {"data_dir": data_dir, "host": host, "port": port}.items() if v is not None}
    settings = DatastoreSettings(**overrides)  # type: ignore[arg-type]
    uvicorn.run(create_app(FilesystemStorage(settings.data_dir), settings), host=settings.host, port=settings.port)
