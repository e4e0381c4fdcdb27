"""The little HTTP client the local kubelet and controller manager share: kubeconfig → server and bearer
token, JSON requests, and list+watch informers (resourceVersion resume, relist on 410 Expired)."""

from __future__ import annotations

import asyncio
import base64
import json
import logging
import ssl
import tempfile
import time
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import aiohttp
import yaml

log = logging.getLogger(__name__)
Obj = dict[str, Any]
Key = tuple[str, str]


# A request that failed on its way (connection reset or closed, no answer in time, a body that is not JSON): worth
# sending again, unlike an ApiFailure, which is the API's answer.
TRANSIENT = (aiohttp.ClientError, OSError, TimeoutError, ValueError)
# No call waits longer than this for its answer (aiohttp's default is 5 minutes): a stalled connection fails, and
# is retried, rather than holding a pod's start for that long.
CALL_TIMEOUT = aiohttp.ClientTimeout(total=30.0, sock_connect=10.0)


class ApiFailure(Exception):
    def __init__(self, status: int, message: str) -> None:
        super().__init__(message)
        self.status = status


def read_kubeconfig(path: Path) -> tuple[str, str | None]:
    """(server URL, bearer token or None) of the kubeconfig's current context."""
    config = yaml.safe_load(path.read_text()) or {}
    context = next(c["context"] for c in config["contexts"] if c["name"] == config["current-context"])
    server = next(c["cluster"]["server"] for c in config["clusters"] if c["name"] == context["cluster"])
    user = next((u.get("user") or {} for u in config.get("users") or () if u["name"] == context.get("user")), {})
    return str(server), user.get("token")


def cluster_ca(path: Path) -> bytes | None:
    """The PEM CA bundle of the current context's cluster (`certificate-authority-data`), if any."""
    config = yaml.safe_load(path.read_text()) or {}
    context = next(c["context"] for c in config["contexts"] if c["name"] == config["current-context"])
    cluster = next(c["cluster"] for c in config["clusters"] if c["name"] == context["cluster"])
    data = cluster.get("certificate-authority-data")
    return base64.b64decode(data) if data else None


def _user(path: Path) -> Obj:
    config = yaml.safe_load(path.read_text()) or {}
    context = next(c["context"] for c in config["contexts"] if c["name"] == config["current-context"])
    return next((u.get("user") or {} for u in config.get("users") or () if u["name"] == context.get("user")), {})


def _load_client_certificate(context: ssl.SSLContext, kubeconfig: Path) -> None:
    """Present the kubeconfig user's client certificate, if it has one (a node's identity on a real
    control plane: `CN=system:node:<name>, O=system:nodes`). ssl loads key pairs from files only, so
    embedded `-data` ones pass through a private temporary directory."""
    user = _user(kubeconfig)
    if user.get("client-certificate"):
        context.load_cert_chain(user["client-certificate"], user.get("client-key"))
    elif user.get("client-certificate-data"):
        with tempfile.TemporaryDirectory(prefix="burrito-py-client-") as tmp:
            cert, key = Path(tmp) / "tls.crt", Path(tmp) / "tls.key"
            cert.write_bytes(base64.b64decode(user["client-certificate-data"]))
            key.write_bytes(base64.b64decode(user.get("client-key-data") or ""))
            context.load_cert_chain(cert, key)


def client_session(kubeconfig: Path) -> aiohttp.ClientSession:
    """A session for the kubeconfig's server, trusting its CA (the emulator serves kubeconfigs over TLS:
    kubectl sends credentials only there) and presenting its user's client certificate, if any."""
    server = read_kubeconfig(kubeconfig)[0]
    ca = cluster_ca(kubeconfig)
    connector = None
    if ca:
        context = ssl.create_default_context(cadata=ca.decode())
        _load_client_certificate(context, kubeconfig)
        connector = aiohttp.TCPConnector(ssl=context)
    return aiohttp.ClientSession(server, connector=connector)


class KubeHttp:
    """JSON calls as the kubeconfig's user; the token is re-read when the file changes (it may be
    replaced, e.g. by `login_as_local_admin`)."""

    def __init__(self, kubeconfig: Path, session: aiohttp.ClientSession) -> None:
        self._kubeconfig = kubeconfig
        self._session = session
        self._stamp: float | None = None
        self._token: str | None = None

    def _headers(self) -> dict[str, str]:
        try:
            stamp: float | None = self._kubeconfig.stat().st_mtime
        except OSError:
            stamp = self._stamp
        if stamp != self._stamp:
            self._stamp = stamp
            self._token = read_kubeconfig(self._kubeconfig)[1]
        return {"Authorization": f"Bearer {self._token}"} if self._token else {}

    async def call(self, method: str, path: str, body: Any = None, content_type: str = "application/json",
                   params: dict[str, str] | None = None) -> Any:
        headers = {"Content-Type": content_type, **self._headers()}
        async with self._session.request(method, path, data=None if body is None else json.dumps(body),
                                         headers=headers, params=params, timeout=CALL_TIMEOUT) as response:
            data = await response.json(content_type=None)
            if response.status >= 400:
                message = data.get("message", f"HTTP {response.status}") if isinstance(data, dict) else str(data)
                raise ApiFailure(response.status, message)
            return data

    def stream(self, path: str, params: dict[str, str], idle: float | None = None) -> Any:
        """A streamed GET (a watch); `idle`: the longest wait for the next bytes (None: no limit)."""
        return self._session.get(path, params=params, headers=self._headers(),
                                 timeout=aiohttp.ClientTimeout(total=None, sock_read=idle))


def key_of(obj: Obj) -> Key:
    return obj["metadata"].get("namespace") or "", obj["metadata"]["name"]


Handler = Callable[[str, Obj], Awaitable[None] | None]


# A watch that says nothing (no event, no bookmark) for this long is asked again from the last resourceVersion
# it gave: the server ends a watch after its timeoutSeconds (300 s), and a watch that stopped delivering without
# ending would otherwise hold back the node's pods that long (a pod then waits, Pending, for no reason). Asking
# again costs one request per idle half-minute and replays whatever the quiet watch did not say.
WATCH_IDLE_SECONDS = 30.0


class Informer:
    """A cache of one resource kept current by list+watch; `handler(event_type, obj)` sees each change
    (a relist reports vanished objects as DELETED)."""

    def __init__(self, http: KubeHttp, path: str, handler: Handler | None = None,
                 params: dict[str, str] | None = None, idle: float = WATCH_IDLE_SECONDS,
                 relist: float | None = None) -> None:
        """`params`: query parameters of both the list and the watch (e.g. a node's field selector); `idle`: see
        WATCH_IDLE_SECONDS; `relist`: list again at least this often (seconds), whatever the watch said, so an
        object a watch never delivered is seen within that time (the kubelet's pods: one listing a minute)."""
        self.http, self.path, self.handler, self.idle, self.relist = http, path, handler, idle, relist
        self._listed = 0.0
        self.params = dict(params or {})
        self.cache: dict[Key, Obj] = {}
        self.synced = asyncio.Event()
        # For a diagnosis (`describe`): listings and watches begun, events seen, and when the last one came.
        self.listings = self.watches = self.events = self.quiet = 0
        self.last_event: float | None = None

    async def _emit(self, event_type: str, obj: Obj) -> None:
        if self.handler is not None:
            result = self.handler(event_type, obj)
            if result is not None:
                await result

    def remember(self, obj: Obj) -> None:
        """Put our own write's answer in the cache at once (a watch event may come later)."""
        current = self.cache.get(key_of(obj))
        if current is None or int(current["metadata"]["resourceVersion"]) < int(obj["metadata"]["resourceVersion"]):
            self.cache[key_of(obj)] = obj

    def describe(self) -> str:
        ago = f"{time.monotonic() - self.last_event:.1f} s ago" if self.last_event is not None else "never"
        return (f"{self.listings} listing(s), {self.watches} watch(es) ({self.quiet} asked again after "
                f"{self.idle:g} s of silence), {self.events} event(s), the last {ago}")

    async def run(self) -> None:
        rv = ""
        while True:
            try:
                if self.relist is not None and time.monotonic() - self._listed >= self.relist:
                    rv = ""
                if not rv:
                    self.listings += 1
                    self._listed = time.monotonic()
                    listing = await self.http.call("GET", self.path, params=self.params or None)
                    rv = listing["metadata"]["resourceVersion"]
                    fresh = {key_of(o): o for o in listing["items"]}
                    for key in [k for k in self.cache if k not in fresh]:
                        await self._emit("DELETED", self.cache.pop(key))
                    for key, obj in fresh.items():
                        self.cache[key] = obj
                        await self._emit("ADDED", obj)
                    self.synced.set()
                until = 300 if self.relist is None else max(1, min(300, round(self._listed + self.relist
                                                                            - time.monotonic())))
                params = {**self.params, "watch": "true", "resourceVersion": rv, "timeoutSeconds": str(until),
                          "allowWatchBookmarks": "true"}
                self.watches += 1
                async with self.http.stream(self.path, params, self.idle) as response:
                    if response.status == 410:
                        rv = ""
                        continue
                    async for line in response.content:
                        if not line.strip():
                            continue
                        event = json.loads(line)
                        self.events, self.last_event = self.events + 1, time.monotonic()
                        obj = event["object"]
                        if event["type"] == "ERROR":
                            rv = ""  # 410 Expired: list again
                            break
                        rv = obj["metadata"]["resourceVersion"]
                        if event["type"] == "BOOKMARK":
                            continue
                        if event["type"] == "DELETED":
                            self.cache.pop(key_of(obj), None)
                        else:
                            self.cache[key_of(obj)] = obj
                        await self._emit(event["type"], obj)
            except asyncio.CancelledError:
                raise
            except aiohttp.SocketTimeoutError:  # a silent watch (its sock_read): ask again from the same version
                self.quiet += 1
            except Exception as exc:  # the API went away for a moment: retry
                log.warning("watch of %s failed: %s", self.path, exc)
                rv = ""
                await asyncio.sleep(0.5)
