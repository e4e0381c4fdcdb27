"""The kopf operator running the three controllers. Handlers only feed the inventory and wake the
right reconcile; every decision lives in the pure modules beside this one.

Why event handlers and our own work queue instead of kopf's change handlers and timers: change
handlers persist progress on every object (an API write per event) and timers cost a task each,
while watching is free and idle layers should cost nothing.
"""

from __future__ import annotations

import asyncio
import functools
import logging
import signal
import threading
import time
from collections.abc import Callable, Coroutine, Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any

import kopf

from burrito_py.api import annotations as ann
from burrito_py.controllers import metrics
from burrito_py.controllers.context import Context
from burrito_py.controllers.layer.crd_guard import CRDS
from burrito_py.controllers.layer.dependencies import wake_related
from burrito_py.controllers.layer.destroy import DESTROY_FINALIZER
from burrito_py.controllers.layer.reconcile import reconcile_layer
from burrito_py.controllers.planpolicy.reconcile import reconcile_plan_policy
from burrito_py.controllers.pullrequest.poll import poll_pull_requests
from burrito_py.controllers.pullrequest.reconcile import reconcile_pull_request
from burrito_py.controllers.repository.decide import sync_requested
from burrito_py.controllers.repository.reconcile import reconcile_repository, wake_layers
from burrito_py.controllers.run.decide import TERMINAL
from burrito_py.controllers.run.reconcile import reconcile_run
from burrito_py.controllers.settings import ControllerSettings
from burrito_py.controllers.vanished import forget_vanished
from burrito_py.datastore.client import datastore_client
from burrito_py.kube.client import Kube, KubeError, crd_path, path
from burrito_py.kube.forbidden import ForbiddenReporter
from burrito_py.kube.inventory import Store, key_of
from burrito_py.kube.kubeconfig import kubeconfig_login
from burrito_py.kube.leader.decide import Timing
from burrito_py.kube.leader.election import LeaderConfig, follow_flag, run_with_leader_election
from burrito_py.kube.pod_paths import own_namespace
from burrito_py.kube.scheduler import STOP_GRACE, Scheduler
from burrito_py.policy.sandbox import PolicySandbox

if TYPE_CHECKING:
    pass

log = logging.getLogger(__name__)
RUNNER_SELECTOR = f"{ann.LABEL_COMPONENT}={ann.COMPONENT_RUNNER}"


def _needs_attention(run: Mapping[str, Any]) -> bool:
    status = run.get("status") or {}
    if status.get("state") not in TERMINAL:
        return True
    return any(not a.get("logsUploaded") for a in status.get("attempts") or ())


def build_registry(config: ControllerSettings, kubeconfig: Path | None = None) -> kopf.OperatorRegistry:
    registry = kopf.OperatorRegistry()
    holder: dict[str, Context] = {}
    scope = config.scope()

    def owned(namespace: str | None, **_: Any) -> bool:
        """Shards (kube/shards.py): kopf watches the shard's patterns; objects of a namespace another
        shard owns (overlapping patterns) are dropped here, before they reach the inventory."""
        return scope.owns(namespace)

    def ctx() -> Context:
        return holder["ctx"]

    @kopf.on.login(registry=registry)
    def login(**kwargs: Any) -> kopf.ConnectionInfo | None:
        if kubeconfig is not None:
            return kubeconfig_login(kubeconfig)
        return kopf.login_via_client(**kwargs)

    @kopf.on.startup(registry=registry)
    async def startup(settings: kopf.OperatorSettings, memo: kopf.Memo, **_: Any) -> None:
        check_kopf_settings(settings)
        kube = await Kube.connect(str(kubeconfig) if kubeconfig else None)
        datastore = datastore_client(config.datastore_url, config.datastore_token_path, kubeconfig)
        context = Context(settings=config, kube=kube, datastore=datastore,
                          sandbox=PolicySandbox(config.policy_limits()))
        wire_inventory(context)
        holder["ctx"] = context
        metrics.watch_inventory(context.inventory)
        forbidden = ForbiddenReporter(kube)
        inventory = context.inventory
        context.layers = Scheduler("layers", forbidden.wrap(
            "layer", lambda key: reconcile_layer(context, key), inventory.layers.get))
        context.runs = Scheduler("runs", forbidden.wrap(
            "run", lambda key: reconcile_run(context, key), inventory.runs.get))
        context.repositories = Scheduler("repositories", forbidden.wrap(
            "repository", lambda key: reconcile_repository(context, key), inventory.repositories.get))
        context.pull_requests = Scheduler("pull_requests", forbidden.wrap(
            "pull request", lambda key: reconcile_pull_request(context, key), inventory.pull_requests.get))
        context.pull_request_polls = Scheduler("pull_request_polls", forbidden.wrap(
            "pull request poll", lambda key: poll_pull_requests(context, key), inventory.repositories.get),
            concurrency=4)
        context.plan_policies = Scheduler("plan_policies", forbidden.wrap(
            "plan policy", lambda key: reconcile_plan_policy(context, key), context.policies.get), concurrency=2)
        started = time.monotonic()
        await _prime(context)
        memo["tasks"] = [
            asyncio.create_task(context.layers.run()),
            asyncio.create_task(context.runs.run()),
            asyncio.create_task(context.repositories.run()),
            asyncio.create_task(context.pull_requests.run()),
            asyncio.create_task(context.pull_request_polls.run()),
            asyncio.create_task(context.plan_policies.run()),
            asyncio.create_task(_resync_forever(context)),
            asyncio.create_task(_report_startup(context, started)),
        ]
        log.info(
            "controllers started: %d repositories, %d layers, %d runs",
            len(context.inventory.repositories),
            len(context.inventory.layers),
            len(context.inventory.runs),
        )

    @kopf.on.cleanup(registry=registry)
    async def cleanup(memo: kopf.Memo, **_: Any) -> None:
        tasks = memo.get("tasks", [])
        for task in tasks:
            task.cancel()
        if tasks:  # the schedulers' handlers end (and give back what they hold) before what they use is closed
            await asyncio.wait(tasks, timeout=2 * STOP_GRACE)
        if "ctx" in holder:
            await holder["ctx"].notifications.close()
            await holder["ctx"].sandbox.close()
            await holder["ctx"].kube.close()
            if holder["ctx"].datastore is not None:
                holder["ctx"].datastore.close()

    def observe(store: Store, event: Mapping[str, Any]) -> dict[str, Any] | None:
        body = event.get("object") or {}
        if not body.get("metadata"):
            return None
        if event.get("type") == "DELETED":
            store.forget(body)
            return None
        store.observe(body)
        return dict(body)

    @kopf.on.event(ann.GROUP, ann.VERSION, "terraformrepositories", when=owned, registry=registry)
    async def on_repository(event: kopf.RawEvent, **_: Any) -> None:
        if "ctx" not in holder:
            return
        c = ctx()
        raw = event.get("object") or {}
        previous = c.inventory.repositories.get(key_of(raw)) if raw.get("metadata") else None
        body = observe(c.inventory.repositories, event)
        if body is None:
            if event.get("type") == "DELETED" and raw.get("metadata"):
                c.wake_repository(key_of(raw))  # its reconcile withdraws its webhook key
            return
        # Our own status writes come back as events: fetch again only when asked to or when the spec changed.
        # Its layers are woken by the store (wire_inventory), which also hears of our own writes.
        if previous is None or _generation(previous) != _generation(body) or sync_requested(body):
            c.wake_repository(key_of(body))
        if previous is None or _generation(previous) != _generation(body):
            c.wake_pull_request_poll(key_of(body))  # it keeps to its interval (poll.py)

    @kopf.on.event(ann.GROUP, ann.VERSION, "terraformlayers", when=owned, registry=registry)
    async def on_layer(event: kopf.RawEvent, **_: Any) -> None:
        if "ctx" not in holder:
            return
        c = ctx()
        raw = event.get("object") or {}
        previous = c.inventory.layers.get(key_of(raw)) if raw.get("metadata") else None
        body = observe(c.inventory.layers, event)  # dependents and upstreams are woken by the store's on_change
        if body is not None:
            c.wake_layer(key_of(body))
            if previous is None:
                # Each kind has its own watch: a run's event can come before its layer's, and the run's reconcile
                # then found no layer and returned. Nothing else would wake it.
                for run in c.inventory.runs_of_layer(*key_of(body)):
                    if _needs_attention(run):
                        c.wake_run(key_of(run))
            # A new or re-specified layer without a commit learns it from its repository's next sync: ask for
            # that sync now rather than at the next poll, minutes away (once per spec change, not per event).
            changed = previous is None or _generation(previous) != _generation(body)
            if changed and ann.BRANCH_COMMIT not in (body["metadata"].get("annotations") or {}):
                repository = c.inventory.repository_of(body)
                if repository is not None:
                    c.wake_repository(key_of(repository))

    @kopf.on.event(ann.GROUP, ann.VERSION, "terraformruns", when=owned, registry=registry)
    async def on_run(event: kopf.RawEvent, **_: Any) -> None:
        if "ctx" not in holder:
            return
        c = ctx()
        body = observe(c.inventory.runs, event)
        raw = event.get("object") or {}
        spec = raw.get("spec") or {}
        namespace = (raw.get("metadata") or {}).get("namespace", "")
        if spec.get("pullRequest"):  # a pull request's plan: the layer never reads it
            c.wake_pull_request((namespace, spec["pullRequest"]))
        elif (spec.get("layer") or {}).get("name"):
            c.wake_layer((namespace, spec["layer"]["name"]))
        if body is not None and _needs_attention(body):
            c.wake_run(key_of(body))

    @kopf.on.event(ann.GROUP, ann.VERSION, "terraformpullrequests", when=owned, registry=registry)
    async def on_pull_request(event: kopf.RawEvent, **_: Any) -> None:
        """A new pull request, or a new head or state from a webhook (a spec change); our status writes are not."""
        if "ctx" not in holder:
            return
        c = ctx()
        raw = event.get("object") or {}
        previous = c.inventory.pull_requests.get(key_of(raw)) if raw.get("metadata") else None
        body = observe(c.inventory.pull_requests, event)
        if body is not None and (previous is None or _generation(previous) != _generation(body)):
            c.wake_pull_request(key_of(body))

    @kopf.on.event(ann.GROUP, ann.VERSION, "terraformplanpolicies", when=owned, registry=registry)
    async def on_plan_policy(event: kopf.RawEvent, **_: Any) -> None:
        """A policy judges its namespace's layers: wake them, and those whose plan may still be applied are
        reviewed again (plan_review.py: the policies' digest changed)."""
        if "ctx" in holder:
            _policy_changed(ctx(), event)

    @kopf.on.event(ann.GROUP, ann.VERSION, "terraformnotifiers", when=owned, registry=registry)
    async def on_notifier(event: kopf.RawEvent, **_: Any) -> None:
        if "ctx" in holder:
            observe(ctx().notifications.notifiers, event)

    @kopf.on.event(ann.GROUP, ann.VERSION, "clusterterraformplanpolicies", registry=registry)
    async def on_cluster_plan_policy(event: kopf.RawEvent, **_: Any) -> None:
        if "ctx" in holder:
            _policy_changed(ctx(), event)

    @kopf.on.event("apiextensions.k8s.io", "v1", "customresourcedefinitions", registry=registry)
    async def on_crd(event: kopf.RawEvent, **_: Any) -> None:
        """The destroy guard's view of CRDs (crd_guard.py): a CRD turning terminating wakes the layers being
        deleted, whose destroy it may cancel."""
        if "ctx" not in holder:
            return
        c = ctx()
        body = event.get("object") or {}
        if not body.get("metadata"):
            return
        if event.get("type") == "DELETED":
            c.crds.forget(body)
        elif c.crds.observe(body):
            _wake_deleting_layers(c)

    @kopf.on.event("", "v1", "pods", labels={ann.LABEL_COMPONENT: ann.COMPONENT_RUNNER},
                  when=owned, registry=registry)
    async def on_pod(event: kopf.RawEvent, **_: Any) -> None:
        if "ctx" not in holder:
            return
        c = ctx()
        raw = event.get("object") or {}
        if event.get("type") == "DELETED" and raw.get("metadata"):
            c.inventory.forget_pod(raw)  # its run fails the attempt now, not after the pod's appearance grace
        else:
            observe(c.inventory.pods, event)
        run = ((raw.get("metadata") or {}).get("labels") or {}).get(ann.LABEL_RUN)
        if run:
            c.wake_run((raw["metadata"]["namespace"], run))

    if config.agl_enabled:
        from burrito_py.agl.operator import register_agl

        register_agl(registry, config, kubeconfig)
    return registry


def _policy_changed(ctx: Context, event: Mapping[str, Any]) -> None:
    body = event.get("object") or {}
    if not body.get("metadata"):
        return
    store = ctx.policies.store_of(body)
    previous = store.get(key_of(body))
    if event.get("type") == "DELETED":
        store.forget(body)
    elif not store.observe(body) or (previous is not None and _generation(previous) == _generation(body)):
        return  # a status write, or an old event: nothing the verdicts depend on
    else:
        ctx.wake_plan_policy(key_of(body))  # its status: does this generation compile?
    namespace = body["metadata"].get("namespace")
    for layer in ctx.inventory.layers:
        if namespace is None or layer["metadata"]["namespace"] == namespace:
            ctx.wake_layer(key_of(layer))


def _wake_deleting_layers(ctx: Context) -> None:
    for layer in ctx.inventory.layers:
        meta = layer["metadata"]
        if meta.get("deletionTimestamp") and DESTROY_FINALIZER in (meta.get("finalizers") or ()):
            ctx.wake_layer(key_of(layer))


def wire_inventory(context: Context) -> None:
    """Who the inventory's changes wake, whatever path a change reaches it by (a watch event, or our own write's
    response, after which the watch event looks like no change): a layer's dependents and upstreams
    (dependencies.py); a repository's layers when what they read of it changed."""
    context.inventory.layers.on_change = functools.partial(wake_related, context)
    context.inventory.repositories.on_change = functools.partial(wake_layers, context)


def _generation(body: Mapping[str, Any]) -> Any:
    return body["metadata"].get("generation")


# Where a pod's projected token for the datastore's audience is mounted (runner pods; the chart's too).
async def _prime(ctx: Context) -> None:
    """List everything once before deciding anything, so no layer acts on a partial view of its runs.

    What is listed is what kopf watches and this process owns (`Scope.listing`): the cluster at once when no
    namespace is given; plain names directly; for patterns, the Namespaces (names) first, then each owned one.
    Per-namespace listings rather than one cluster-wide listing filtered here: a shard's memory then never
    holds other shards' objects, not even at start-up. Namespaces created later arrive through kopf's watch."""
    for crd in await ctx.kube.list(CRDS):
        ctx.crds.observe(crd)
    for policy in await _list_served(ctx, crd_path("clusterterraformplanpolicies")):
        ctx.policies.cluster.observe(policy)
    scope = ctx.settings.scope()
    existing = None if scope.literal else [n["metadata"]["name"] for n in await ctx.kube.list(path("v1", "namespaces"))]
    for namespace in scope.listing(existing):
        for store, resource_path, selector in (
            (ctx.inventory.repositories, crd_path("terraformrepositories", namespace), None),
            (ctx.inventory.layers, crd_path("terraformlayers", namespace), None),
            (ctx.inventory.runs, crd_path("terraformruns", namespace), None),
            (ctx.inventory.pods, path("v1", "pods", namespace), RUNNER_SELECTOR),
            (ctx.policies.namespaced, crd_path("terraformplanpolicies", namespace), None),
            (ctx.notifications.notifiers, crd_path("terraformnotifiers", namespace), None),
            (ctx.inventory.pull_requests, crd_path("terraformpullrequests", namespace), None),
        ):
            for item in await _list_served(ctx, resource_path, selector):
                store.observe(item)
    ctx.primed = True
    _wake_everything(ctx)


async def _list_served(ctx: Context, resource_path: str, selector: str | None = None) -> list[dict[str, Any]]:
    """A listing; empty when its CRD is gone. An uninstall deletes every CRD at once, and kopf, losing a watch
    to one of them, is started again: the layers still terminating must then be released, not waited on."""
    try:
        return await ctx.kube.list(resource_path, label_selector=selector)
    except KubeError as exc:
        if exc.status != 404:
            raise
        log.warning("cannot list %s (%s): holding none", resource_path, exc)
        return []


def _wake_everything(ctx: Context) -> None:
    for repository in ctx.inventory.repositories:
        ctx.wake_repository(key_of(repository))
        ctx.wake_pull_request_poll(key_of(repository))
    for layer in ctx.inventory.layers:
        ctx.wake_layer(key_of(layer))
    for run in ctx.inventory.runs:
        if _needs_attention(run):
            ctx.wake_run(key_of(run))
    for pull_request in ctx.inventory.pull_requests:
        ctx.wake_pull_request(key_of(pull_request))
    for store in (ctx.policies.namespaced, ctx.policies.cluster):
        for policy in store:
            ctx.wake_plan_policy(key_of(policy))


async def _report_startup(ctx: Context, started: float) -> None:
    """Say when every layer primed at start-up has been evaluated once (the figure a failover waits for)."""
    assert ctx.layers is not None
    while ctx.layers.busy():  # noqa: ASYNC110 - a look every 0.5 s, once, at start-up
        await asyncio.sleep(0.5)
    elapsed = time.monotonic() - started
    metrics.STARTUP_EVALUATION_SECONDS.set(elapsed)
    log.info("start-up evaluation done: %d layers evaluated in %.1f s", len(ctx.inventory.layers), elapsed)


async def _resync_forever(ctx: Context) -> None:
    while True:
        await asyncio.sleep(ctx.settings.resync_interval.total_seconds())
        try:
            await forget_vanished(ctx)  # what a watch's re-list did not say was deleted
        except Exception as exc:  # an unreachable API must not end the resync: asked again next time
            log.warning("resync: cannot ask the API which runs and runner pods still exist: %s", exc)
        _wake_everything(ctx)


class ControllerThread:
    """Runs the controllers in their own thread and event loop (how `burrito-py dev` and tests run them)."""

    def __init__(self, settings: ControllerSettings, kubeconfig: Path | None = None) -> None:
        self._settings = settings
        self._kubeconfig = kubeconfig
        self._stop = threading.Event()
        self._ready = threading.Event()
        self._thread = threading.Thread(target=self._main, name="burrito-py-controllers", daemon=True)
        self.error: BaseException | None = None

    def _main(self) -> None:
        # After it was ready once, an operator that fails is started again, as the kubelet restarts a crashed
        # controllers container (e.g. kopf gives up when a watched CRD is deleted under a live watch).
        delay = 1.0
        while True:
            try:
                asyncio.run(
                    run_controllers(self._settings, self._kubeconfig, stop_flag=self._stop, ready_flag=self._ready)
                )
            except BaseException as exc:
                if not self._ready.is_set() or self._stop.is_set():
                    self.error = exc  # surfaced to whoever started us
                    self._ready.set()
                    return
                log.warning("controllers failed (%s); restarting in %.0f s", exc, delay)
            if self._stop.wait(delay):
                return
            delay = min(delay * 2, 10.0)

    def start(self, timeout: float = 30.0) -> None:
        self._thread.start()
        if not self._ready.wait(timeout):
            raise TimeoutError("controllers did not become ready")
        if self.error is not None:
            raise RuntimeError("controllers failed to start") from self.error

    def stop(self, timeout: float = 30.0) -> None:
        self._stop.set()
        self._thread.join(timeout)

    def __enter__(self) -> ControllerThread:
        self.start()
        return self

    def __exit__(self, *_: object) -> None:
        self.stop()


def liveness_endpoint(settings: ControllerSettings) -> str | None:
    """kopf's liveness endpoint (200 while the operator's handlers are alive), or None when disabled."""
    if not settings.health_port:
        return None
    host = f"[{settings.host}]" if ":" in settings.host else settings.host
    return f"http://{host}:{settings.health_port}/healthz"


@functools.cache
def _serve_metrics(port: int, host: str, kubeconfig: str | None = None, auth: bool = True) -> None:
    """Once per process: an operator started again after a failure keeps the same metrics server. With `auth`,
    only a token whose user may `get /metrics` reads them (kube/metrics_auth.py)."""
    from burrito_py.kube.metrics_auth import MetricsGate, serve_metrics

    serve_metrics(port, host, (lambda: MetricsGate.for_kubeconfig(kubeconfig)) if auth else None)


def kopf_settings() -> kopf.OperatorSettings:
    """The kopf settings the controllers rely on, set before kopf starts (and checked at start-up, so a kopf
    upgrade that changes how they are applied fails loudly rather than, say, re-enabling peering)."""
    settings = kopf.OperatorSettings()
    # No kopf peering: one active operator is ensured by our Lease (leader_election.py); peering would make
    # kopf read and write KopfPeering objects and freeze equal peers.
    settings.peering.standalone = True
    settings.peering.mandatory = False
    settings.posting.enabled = False  # we post our own, readable events
    # Watches end every 5 minutes on the server's side and are resumed by kopf (no client-side cut).
    settings.watching.server_timeout = 300
    return settings


def check_kopf_settings(settings: kopf.OperatorSettings) -> None:
    """Refuse to run with kopf settings other than `kopf_settings()`'s (see there)."""
    wanted = kopf_settings()
    problems = [
        f"{name} is {got!r}, not {want!r}"
        for name, got, want in (
            ("peering.standalone", settings.peering.standalone, wanted.peering.standalone),
            ("peering.mandatory", settings.peering.mandatory, wanted.peering.mandatory),
            ("posting.enabled", settings.posting.enabled, wanted.posting.enabled),
            ("watching.server_timeout", settings.watching.server_timeout, wanted.watching.server_timeout),
        )
        if got != want
    ]
    if problems:
        raise RuntimeError("kopf settings changed under the controllers: " + "; ".join(problems))


SignalHandler = Callable[[], None]


async def run_operator(
    settings: ControllerSettings,
    kubeconfig: Path | None = None,
    stop_flag: threading.Event | asyncio.Event | None = None,
    ready_flag: threading.Event | asyncio.Event | None = None,
    *,
    operator_settings: kopf.OperatorSettings | None = None,
    on_signal: SignalHandler | None = None,
    liveness: bool = True,
) -> None:
    """One kopf operator running the controllers until `stop_flag`. `on_signal`: SIGINT/SIGTERM go to it
    instead of stopping kopf (leader election stops kopf itself, then releases the Lease); `liveness`: serve
    kopf's /healthz (off when leader election serves its own)."""
    if settings.metrics_port:
        _serve_metrics(settings.metrics_port, settings.host, str(kubeconfig) if kubeconfig else None,
                       settings.metrics_auth)
    registry = build_registry(settings, kubeconfig)
    # kopf.operator() is spawn_tasks + run_tasks; split, so that kopf's own signal handlers can be replaced.
    existing = {task for task in asyncio.all_tasks() if not task.done()}
    tasks = await kopf.spawn_tasks(
        registry=registry,
        settings=operator_settings if operator_settings is not None else kopf_settings(),
        standalone=True,
        liveness_endpoint=liveness_endpoint(settings) if liveness else None,
        clusterwide=not settings.namespaces,
        namespaces=settings.namespaces,
        stop_flag=stop_flag,
        ready_flag=ready_flag,
    )
    if on_signal is not None and threading.current_thread() is threading.main_thread():
        loop = asyncio.get_running_loop()
        for signum in (signal.SIGINT, signal.SIGTERM):
            loop.add_signal_handler(signum, on_signal)
    await kopf.run_tasks(tasks, ignored=existing)


async def run_controllers(
    settings: ControllerSettings,
    kubeconfig: Path | None = None,
    stop_flag: threading.Event | asyncio.Event | None = None,
    ready_flag: threading.Event | None = None,
) -> None:
    """The controllers: the operator itself, or, with `leader_election`, the operator while this process holds
    the leader Lease (leader_election.py)."""
    if not settings.leader_election:
        if not isinstance(stop_flag, threading.Event):
            await run_operator(settings, kubeconfig, stop_flag=stop_flag, ready_flag=ready_flag)
            return
        # kopf waits for a thread's Event in an executor thread, which outlives an operator that failed (kopf
        # gives up when a watched CRD is deleted under a live watch) and then holds asyncio.run's shutdown, so
        # the operator is never started again: hand kopf an asyncio.Event that follows the thread's instead.
        stopping = asyncio.Event()
        follower = asyncio.create_task(follow_flag(stop_flag, stopping))
        try:
            await run_operator(settings, kubeconfig, stop_flag=stopping, ready_flag=ready_flag)
        finally:
            follower.cancel()
        return
    if settings.metrics_port:
        _serve_metrics(settings.metrics_port, settings.host, str(kubeconfig) if kubeconfig else None,
                       settings.metrics_auth)
    leader = LeaderConfig(
        namespace=settings.leader_election_namespace or own_namespace(), name=settings.leader_election_name,
        identity=settings.leader_election_identity, host=settings.host, health_port=settings.health_port,
        timing=Timing(lease_duration=settings.lease_duration.total_seconds(),
                      renew_deadline=settings.renew_deadline.total_seconds(),
                      retry_period=settings.retry_period.total_seconds()))

    def operate(stop: asyncio.Event, on_signal: Callable[[], None]) -> Coroutine[Any, Any, None]:
        return run_operator(settings, kubeconfig, stop_flag=stop, on_signal=on_signal, liveness=False)

    await run_with_leader_election(leader, operate, kubeconfig, stop_flag=stop_flag, ready_flag=ready_flag)
