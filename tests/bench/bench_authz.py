"""What authorizing every read as the caller costs (issue 24, finding 2): the server with auth on in front of the
emulator (RBAC enforced, SubjectAccessReviews answered), NAMESPACES namespaces of LAYERS layers and a run each, and
three callers: an operator (a ClusterRole), a tenant (a Role in one namespace) and a second tenant.

Prints:
- the SubjectAccessReview cache hit rate over a mixed sequence of REST and UI reads by the three callers (each read
  asks one to three questions; answers live 10 s);
- the authorization step alone: p50/p95 of `Access.require` with a warm cache and of a review the cache cannot
  answer (a SubjectAccessReview round trip to the emulator);
- p50/p95 of REST and UI reads end to end (request to last byte, loopback HTTP) with authorization, against the
  same reads on the same server with authorization answered at once (the review step replaced by `True`): the
  difference is what authorization adds per read. Target: <= 5 ms p50 with a warm cache.

Benches assert nothing. Run: python3 tests/bench/bench_authz.py [READS]
"""

from __future__ import annotations

import asyncio
import re
import statistics
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import httpx
import uvicorn
from burrito_local.apply import Applier
from burrito_local.identity import ensure_namespace, ensure_service_account, request_token

from burrito_py.api import annotations as ann
from burrito_py.api.crdgen import generate_crds
from burrito_py.datastore.auth import Principal
from burrito_py.datastore.in_process import free_port
from burrito_py.health import wait_healthy
from burrito_py.kube.client import Kube
from burrito_py.server.access import GET_RUNS, Access, AccessReviewer
from burrito_py.server.settings import ServerSettings
from tests.support.emulator import running_apiserver

NAMESPACES, LAYERS = 10, 20
RBAC = "/apis/rbac.authorization.k8s.io/v1"
READ = {"apiGroups": [ann.GROUP], "verbs": ["get", "list", "watch"],
        "resources": ["terraformlayers", "terraformruns", "terraformrepositories", "terraformpullrequests"]}


def _objects(kube: httpx.Client) -> None:
    applier = Applier(str(kube.base_url))
    for crd in generate_crds().values():
        applier.apply(crd)
    applier.close()
    for n in range(NAMESPACES):
        ns = f"team-{n}"
        ensure_namespace(kube, ns)
        for i in range(LAYERS):
            base = f"/apis/{ann.API_VERSION}/namespaces/{ns}"
            kube.post(f"{base}/terraformlayers", json={
                "apiVersion": ann.API_VERSION, "kind": "TerraformLayer", "metadata": {"name": f"layer-{i}"},
                "spec": {"repository": {"name": "repo"}, "branch": "main", "path": f"p/{i}"}}).raise_for_status()
            kube.post(f"{base}/terraformruns", json={
                "apiVersion": ann.API_VERSION, "kind": "TerraformRun",
                "metadata": {"name": f"layer-{i}-plan", "labels": {ann.LABEL_LAYER: f"layer-{i}"}},
                "spec": {"action": "plan", "layer": {"name": f"layer-{i}", "revision": "abc"}}}).raise_for_status()


def _grant(kube: httpx.Client, name: str, namespace: str | None, account: tuple[str, str]) -> None:
    scope, kind = (f"{RBAC}/namespaces/{namespace}", "Role") if namespace else (RBAC, "ClusterRole")
    kube.post(f"{scope}/{kind.lower()}s", json={"metadata": {"name": name}, "rules": [READ]}).raise_for_status()
    kube.post(f"{scope}/{kind.lower()}bindings", json={
        "metadata": {"name": name}, "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": kind, "name": name},
        "subjects": [{"kind": "ServiceAccount", "name": account[1], "namespace": account[0]}]}).raise_for_status()


@contextmanager
def _server(settings: ServerSettings, authorize: bool) -> Iterator[tuple[str, Access]]:
    """The server's app in a thread; with `authorize` off every SubjectAccessReview is answered `True` at once
    (the rest of the request is the same)."""
    from burrito_py.datastore.client import datastore_client
    from burrito_py.datastore.kube_auth import KubeAuthenticator
    from burrito_py.datastore.token_cache import CachedAuthenticator
    from burrito_py.server.app import create_app

    holder: list[tuple[uvicorn.Server, Access]] = []

    async def serve() -> None:
        kube = await Kube.connect(str(settings.kubeconfig))
        authenticator = CachedAuthenticator(KubeAuthenticator(settings.auth_audiences, (), (), settings.kubeconfig,
                                                              settings.runner_service_account), 30, 5)
        app = create_app(settings, kube, datastore_client(settings.datastore_url, None, None), authenticator)
        access: Access = app.state.access
        if not authorize:
            async def yes(*_: Any, **__: Any) -> bool:
                return True
            access.reviewer.allowed = yes  # type: ignore[method-assign]
        server = uvicorn.Server(uvicorn.Config(app, host="127.0.0.1", port=settings.port, log_level="warning",
                                               lifespan="off"))
        holder.append((server, access))
        await server.serve()
        await kube.close()

    thread = threading.Thread(target=lambda: asyncio.run(serve()), daemon=True)
    thread.start()
    url = f"http://127.0.0.1:{settings.port}"
    assert wait_healthy(url, thread.is_alive, 30)
    try:
        yield url, holder[0][1]
    finally:
        holder[0][0].should_exit = True
        thread.join(10)


def _login(url: str, token: str) -> httpx.Client:
    client = httpx.Client(base_url=url, timeout=30)
    csrf = re.search(r'name="csrf-token" content="([0-9a-f]+)"', client.get("/ui/login").text)
    assert csrf
    assert client.post("/ui/login", data={"csrf": csrf.group(1), "token": token}).status_code == 303
    return client


class Reader:
    """REST and UI clients of one server for the three callers, and the mixed sequence of reads."""

    def __init__(self, url: str, tokens: dict[str, str]) -> None:
        self.rest = {who: httpx.Client(base_url=url, headers={"Authorization": f"Bearer {t}"}, timeout=30)
                     for who, t in tokens.items()}
        self.ui = {who: _login(url, t) for who, t in tokens.items()}

    def calls(self, count: int) -> list[tuple[str, Callable[[], httpx.Response]]]:
        home = {"operator": "team-3", "tenant": "team-0", "tenant2": "team-1"}
        calls: list[tuple[str, Callable[[], httpx.Response]]] = []
        for i in range(count):
            who = ("operator", "tenant", "tenant2")[i % 3]
            ns, layer, rest, ui = home[who], f"layer-{i % LAYERS}", self.rest[who], self.ui[who]
            calls += [
                ("rest layer", lambda c=rest, n=ns, x=layer: c.get(f"/api/layers/{n}/{x}")),
                ("rest run", lambda c=rest, n=ns, x=layer: c.get(f"/api/runs/{n}/{x}-plan")),
                ("rest layers list", lambda c=rest: c.get("/api/layers")),
                ("ui layer page", lambda c=ui, n=ns, x=layer: c.get(f"/ui/layers/{n}/{x}")),
                ("ui layers page", lambda c=ui: c.get("/ui/layers")),
            ]
        return calls

    def close(self) -> None:
        for client in (*self.rest.values(), *self.ui.values()):
            client.close()


def _timed(call: Callable[[], httpx.Response], kind: str) -> float:
    started = time.perf_counter()
    answer = call()
    elapsed = time.perf_counter() - started
    assert answer.status_code == 200, (kind, answer.status_code, answer.text[:200])
    return elapsed


def _pct(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))] * 1000


def _step(kubeconfig: Path, rounds: int) -> tuple[list[float], list[float]]:
    """`Access.require` alone: warm (cached) and cold (a review each) times."""
    async def run() -> tuple[list[float], list[float]]:
        kube = await Kube.connect(str(kubeconfig))
        access = Access(AccessReviewer(kube))
        who = Principal("system:serviceaccount:team-0:tenant", groups=("system:authenticated",))
        cold, warm = [], []
        for i in range(rounds):
            started = time.perf_counter()
            await access.allowed(who, GET_RUNS, f"team-{i % NAMESPACES}", fresh=True)
            cold.append(time.perf_counter() - started)
        await access.allowed(who, GET_RUNS, "team-0")
        for _ in range(rounds * 10):
            started = time.perf_counter()
            await access.allowed(who, GET_RUNS, "team-0")
            warm.append(time.perf_counter() - started)
        await kube.close()
        return warm, cold

    return asyncio.run(run())


def main(count: int = 60) -> None:
    with tempfile.TemporaryDirectory() as tmp, running_apiserver(Path(tmp), kubeconfig=Path(tmp) / "kc") as api, \
            httpx.Client(base_url=api.url, headers=api.admin_headers, timeout=60) as kube:
        _objects(kube)
        tokens = {}
        for who, ns in (("operator", "team-3"), ("tenant", "team-0"), ("tenant2", "team-1")):
            ensure_service_account(kube, ns, who)
            _grant(kube, who, None if who == "operator" else ns, (ns, who))
            tokens[who] = request_token(kube, ns, who, ["burrito-py"])
        base = ServerSettings(host="127.0.0.1", kubeconfig=Path(tmp) / "kc", auth_enabled=True,
                              datastore_url="http://127.0.0.1:9")
        results: dict[bool, list[tuple[str, float]]] = {True: [], False: []}
        with _server(base.model_copy(update={"port": free_port()}), True) as (url, access), \
                _server(base.model_copy(update={"port": free_port()}), False) as (plain_url, _):
            readers = {True: Reader(url, tokens), False: Reader(plain_url, tokens)}
            for reader in readers.values():  # warm-up: connections, the layer index, the caches
                for kind, call in reader.calls(6):
                    _timed(call, kind)
            before = (access.reviewer.stats.hits, access.reviewer.stats.misses)
            # Alternating, read by read, and which server goes first too, so both see the same machine load (the
            # two servers share this process).
            pairs = zip(readers[True].calls(count), readers[False].calls(count), strict=True)
            for i, ((kind, with_authz), (_, plain)) in enumerate(pairs):
                order = ((True, with_authz), (False, plain)) if i % 2 else ((False, plain), (True, with_authz))
                for authorized, call in order:
                    results[authorized].append((kind, _timed(call, kind)))
            hits = access.reviewer.stats.hits - before[0]
            misses = access.reviewer.stats.misses - before[1]
            for reader in readers.values():
                reader.close()
        print(f"{NAMESPACES} namespaces x {LAYERS} layers; {len(results[True])} reads by 3 callers, alternating "
              "between the two servers (the machine is shared: compare within a run)")
        print(f"SubjectAccessReview cache: {hits} hits, {misses} reviews, hit rate {hits / (hits + misses):.1%}")
        warm, cold = _step(Path(tmp) / "kc", 40)
        print(f"authorization step: warm p50 {_pct(warm, .5):.3f} ms p95 {_pct(warm, .95):.3f} ms; "
              f"a review (cold) p50 {_pct(cold, .5):.2f} ms p95 {_pct(cold, .95):.2f} ms")
        kinds = sorted({kind for kind, _ in results[True]})
        print(f"{'read':<18} {'with authz p50/p95 ms':>22} {'answered at once p50/p95 ms':>28} {'added p50 ms':>13}")
        for kind in kinds:
            with_ = [t for k, t in results[True] if k == kind]
            without = [t for k, t in results[False] if k == kind]
            # A list answered "yes" at once shows the tenants every namespace: a larger answer, not comparable.
            added = "n/a" if "list" in kind or "layers page" in kind else f"{_pct(with_, .5) - _pct(without, .5):.2f}"
            print(f"{kind:<18} {_pct(with_, .5):>10.1f} / {_pct(with_, .95):<9.1f} "
                  f"{_pct(without, .5):>13.1f} / {_pct(without, .95):<12.1f} {added:>10}")
        single = [kind for kind in kinds if "list" not in kind and "layers page" not in kind]
        overall = statistics.median([t for k, t in results[True] if k in single]) - statistics.median(
            [t for k, t in results[False] if k in single])
        print(f"single-object reads: added p50 {overall * 1000:.2f} ms (within the noise of a shared machine; the "
              "step itself is the warm figure above, asked 1-3 times per read)")

if __name__ == "__main__":
    main(*(int(a) for a in sys.argv[1:2]))
