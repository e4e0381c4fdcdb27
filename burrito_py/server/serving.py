"""Run the server: its Kubernetes client, datastore client and authenticator live in uvicorn's event loop."""

from __future__ import annotations

import asyncio
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager

import uvicorn

from burrito_py.health import wait_healthy
from burrito_py.server.settings import ServerSettings


async def serve(settings: ServerSettings, holder: list[uvicorn.Server] | None = None,
                bound: list[int] | None = None) -> None:
    """Serve until stopped; `holder` receives the uvicorn server, so another thread can stop it, and `bound` the
    port the listener got (the one asked for, or the system's choice for port 0)."""
    from burrito_py.datastore.client import datastore_client
    from burrito_py.datastore.kube_auth import KubeAuthenticator
    from burrito_py.datastore.token_cache import CachedAuthenticator
    from burrito_py.kube.client import Kube
    from burrito_py.server.app import create_app

    kube = await Kube.connect(str(settings.kubeconfig) if settings.kubeconfig else None)
    datastore = datastore_client(settings.datastore_url, settings.datastore_token_path, settings.kubeconfig)
    authenticator = None
    if settings.auth_enabled:
        reviewer = KubeAuthenticator(
            settings.auth_audiences, settings.auth_admin_users, (), settings.kubeconfig,
            settings.runner_service_account, settings.runner_pull_request_service_account,
        )
        authenticator = CachedAuthenticator(reviewer, settings.auth_cache_ttl_seconds, 5.0)
    app = create_app(settings, kube, datastore, authenticator)
    app.state.webhooks.index.start()  # the repositories and webhook keys, followed before any delivery comes
    # X-Forwarded-For is believed only from the proxies named (uvicorn would otherwise trust 127.0.0.1).
    proxies = {"proxy_headers": True, "forwarded_allow_ips": ",".join(settings.forwarded_allow_ips)} \
        if settings.forwarded_allow_ips else {"proxy_headers": False}
    from burrito_py.datastore.admission import guarded_protocol

    # The public port faces slow clients (slowloris, stalled bodies): the datastore's timers, §11.2.
    guarded = guarded_protocol(settings.header_timeout_seconds, settings.read_timeout_seconds,
                               settings.write_timeout_seconds, "server")
    config = uvicorn.Config(app, host=settings.host, port=settings.port, log_level="warning", lifespan="off",
                            http=guarded, **proxies)
    sockets = [config.bind_socket()]
    if bound is not None:
        bound.append(sockets[0].getsockname()[1])
    if settings.ui_trusted_headers:
        # The trusted-header listener: the same app, on a port of its own that only the authenticating proxy
        # reaches; the UI tells it by the port of the socket a request came in on (routes.on_trusted_listener).
        trusted = uvicorn.Config(app, host=settings.host, port=settings.ui_trusted_headers_port, log_level="warning",
                                 http=guarded)
        sockets.append(trusted.bind_socket())
    server = uvicorn.Server(config)
    if holder is not None:
        holder.append(server)
    try:
        await server.serve(sockets=sockets)
    finally:
        await app.state.webhooks.index.close()
        for sock in sockets:
            sock.close()
        datastore.close()
        await kube.close()


@contextmanager
def running_server(settings: ServerSettings) -> Iterator[str]:
    """The server in a thread on `settings.host:port` (tests and `burrito-py dev`); yields its URL. Port 0: a port
    the system picks when the listener binds, so no other process can take it between a choice and the bind (a
    port picked beforehand by the caller could be, under a loaded test suite: "Address already in use")."""
    holder: list[uvicorn.Server] = []
    bound: list[int] = []
    failure: list[BaseException] = []

    def run() -> None:
        try:
            asyncio.run(serve(settings, holder=holder, bound=bound))
        except BaseException as exc:  # reported by the starting thread below
            failure.append(exc)

    thread = threading.Thread(target=run, name="burrito-py-server", daemon=True)
    thread.start()
    deadline = time.monotonic() + 30
    while not bound and thread.is_alive() and time.monotonic() < deadline:
        time.sleep(0.01)
    url = f"http://{settings.host}:{bound[0] if bound else settings.port}"
    if not bound or not wait_healthy(url, thread.is_alive, max(0.1, deadline - time.monotonic())):
        if holder:
            holder[0].should_exit = True
        raise RuntimeError(f"server did not start on {url}: {failure[0] if failure else 'no answer in 30 s'}")
    try:
        yield url
    finally:
        holder[0].should_exit = True
        thread.join(10)
