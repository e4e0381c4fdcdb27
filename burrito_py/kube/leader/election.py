"""Leader election's executor: reads and writes the Lease as `leader_decisions` says, over the controllers'
async Kube client. Writes are PUTs carrying the `resourceVersion` last seen (a 409 means another candidate
wrote first: read again); every request is bounded so a leader never acts past its renew deadline.

`Elector.run()` campaigns for as long as it runs: acquire, renew, step down on a missed deadline or a
foreign holder, and campaign again. `is_leader` and the `changed` event tell the caller (operator.py) when to
start and stop kopf. `release()` hands the Lease over (holder cleared) after the caller stopped acting.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import signal
import threading
import time
from collections.abc import Callable, Coroutine
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from aiohttp import web
from prometheus_client import Counter, Gauge

from burrito_py.kube.client import Body, Kube, KubeError, path
from burrito_py.kube.leader.decide import (
    Action,
    LeaseRecord,
    Observation,
    Timing,
    accept_write,
    decide,
    lease_body,
    observe,
    release_body,
)

log = logging.getLogger(__name__)

LEADER = Gauge("burrito_py_leader", "1 while this controllers process holds the leader Lease.")
LEADER_TRANSITIONS = Counter(
    "burrito_py_leader_transitions_total",
    "Leadership changes of this process: acquired, lost (a missed renew deadline or another holder), released.",
    ["event"],
)
# Answers slower than this count as failed reads for a candidate (a leader's own bound is its deadline).
READ_TIMEOUT = 10.0


class Elector:
    def __init__(
        self,
        kube: Kube,
        *,
        namespace: str,
        name: str,
        identity: str,
        timing: Timing,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self._kube, self.namespace, self.name, self.identity = kube, namespace, name, identity
        self.timing, self._clock = timing, clock
        self._observation: Observation | None = None
        self._renewed_at: float | None = None
        self.changed = asyncio.Event()  # set on every gain or loss of leadership

    @property
    def is_leader(self) -> bool:
        return self._renewed_at is not None and self._clock() < self._renewed_at + self.timing.renew_deadline

    def leading_until(self) -> float | None:
        return None if self._renewed_at is None else self._renewed_at + self.timing.renew_deadline

    @property
    def _path(self) -> str:
        return path("coordination.k8s.io/v1", "leases", self.namespace, self.name)

    async def run(self) -> None:
        """Campaign until cancelled."""
        while True:
            now = self._clock()
            decision = decide(self.identity, self._observation, self._renewed_at, self.timing, now)
            if decision.action is Action.STEP_DOWN:
                self._step_down("lost")
                continue
            if decision.action is Action.WAIT:
                if self._renewed_at is None:
                    await asyncio.sleep(max(0.0, decision.wake_at - now))
                    await self._read()
                else:
                    # A leader sleeps until its next renewal; the deadline comes later, so it is checked then.
                    await asyncio.sleep(max(0.0, decision.wake_at - now))
                continue
            await self._write(decision.action)

    async def _read(self) -> None:
        try:
            async with asyncio.timeout(READ_TIMEOUT):
                body = await self._kube.get(self._path)
        except Exception as exc:  # API errors, timeouts, the client's transport errors (aiohttp's vary)
            log.warning("leader election: cannot read Lease %s/%s: %s", self.namespace, self.name, exc)
            await self._pause()
            return
        record = None if body is None else LeaseRecord.from_body(body, self.timing.lease_duration)
        self._observation = observe(self._observation, record, self._clock())

    async def _write(self, action: Action) -> None:
        previous = self._observation.record if self._observation is not None else None
        body = lease_body(
            name=self.name, namespace=self.namespace, identity=self.identity, timing=self.timing,
            previous=previous, wall_now=datetime.now(UTC), renew=action is Action.RENEW,
        )
        sent_at = self._clock()
        # A leader must have its answer before its deadline; a candidate within one renew deadline (an answer
        # later than that would not count anyway).
        deadline = self.leading_until() or sent_at + self.timing.renew_deadline
        try:
            async with asyncio.timeout(max(0.0, deadline - sent_at)):
                if action is Action.CREATE:
                    result: Body = await self._kube.create(
                        path("coordination.k8s.io/v1", "leases", self.namespace), body)
                else:
                    result = await self._kube.replace(self._path, body)
        except KubeError as exc:
            if exc.status in (404, 409):  # someone else wrote (or deleted) it first: look again
                await self._read()
            else:
                log.warning("leader election: cannot %s Lease %s/%s: %s", action.value, self.namespace, self.name,
                            exc)
                await self._pause()
            return
        except Exception as exc:  # timeouts, transport errors: retry after a retry period
            log.warning("leader election: cannot %s Lease %s/%s: %s", action.value, self.namespace, self.name,
                        exc or type(exc).__name__)
            await self._pause()
            return
        received_at = self._clock()
        renewed_at = accept_write(self._renewed_at, sent_at, received_at, self.timing)
        record = LeaseRecord.from_body(result, self.timing.lease_duration)
        self._observation = observe(self._observation, record, received_at)
        if renewed_at is None:
            if self._renewed_at is not None:
                self._step_down("lost")
            return
        was_leader = self._renewed_at is not None
        self._renewed_at = renewed_at
        if not was_leader:
            log.info("leader election: %s leads (Lease %s/%s)", self.identity, self.namespace, self.name)
            LEADER.set(1)
            LEADER_TRANSITIONS.labels("acquired").inc()
            self.changed.set()

    async def _pause(self) -> None:
        now = self._clock()
        until = now + self.timing.retry_period
        deadline = self.leading_until()
        if deadline is not None:
            until = min(until, deadline)
        await asyncio.sleep(max(0.0, until - now))

    def _step_down(self, event: str) -> None:
        if self._renewed_at is None:
            return
        self._renewed_at = None
        log.warning("leader election: %s no longer leads (%s)", self.identity, event)
        LEADER.set(0)
        LEADER_TRANSITIONS.labels(event).inc()
        self.changed.set()

    async def release(self) -> None:
        """Give the Lease up (holder cleared), when we hold it. The caller has stopped acting already; the
        campaign (`run`) must be stopped first."""
        if self._renewed_at is None:
            return
        self._step_down("released")
        for _ in range(3):  # a renewal that landed unseen leaves us a stale resourceVersion: read, try again
            with contextlib.suppress(Exception):
                async with asyncio.timeout(self.timing.renew_deadline):
                    body = await self._kube.get(self._path)
                    if body is None:
                        return
                    record = LeaseRecord.from_body(body, self.timing.lease_duration)
                    if record.holder != self.identity:
                        return
                    await self._kube.replace(self._path, release_body(
                        name=self.name, namespace=self.namespace, previous=record, wall_now=datetime.now(UTC)))
                    log.info("leader election: %s released Lease %s/%s", self.identity, self.namespace, self.name)
                    return
        log.warning("leader election: could not release Lease %s/%s; it expires by itself", self.namespace,
                    self.name)


# -- the controllers under leader election ------------------------------------------------------------------
@dataclass(frozen=True, slots=True)
class LeaderConfig:
    """Where the Lease is, who we are, its timing, and where /healthz is served (port 0: not served)."""

    namespace: str
    name: str
    identity: str
    timing: Timing
    host: str = "0.0.0.0"  # noqa: S104 - the probes reach the pod's address
    health_port: int = 0


# What runs while leading: given an Event that asks it to stop and a callback for a stop signal (SIGTERM).
Operate = Callable[[asyncio.Event, Callable[[], None]], Coroutine[Any, Any, None]]


@dataclass
class Health:
    """What /healthz reports: a standby is healthy (it is alive, only waiting); a leader is healthy while its
    operator runs."""

    elector: Elector
    operator: asyncio.Task[None] | None = None

    def report(self) -> tuple[int, dict[str, Any]]:
        leading = self.elector.is_leader
        running = self.operator is not None and not self.operator.done()
        body = {"identity": self.elector.identity, "leader": leading, "operator": "running" if running else "stopped"}
        return (503 if leading and not running else 200), body


async def serve_health(config: LeaderConfig, health: Health) -> web.AppRunner | None:
    """GET /healthz on host:health_port (the chart's liveness and readiness probes)."""
    if not config.health_port:
        return None

    async def healthz(_: web.Request) -> web.Response:
        status, body = health.report()
        return web.json_response(body, status=status)

    app = web.Application()
    app.router.add_get("/healthz", healthz)
    runner = web.AppRunner(app, handle_signals=False, access_log=None)
    await runner.setup()
    await web.TCPSite(runner, config.host, config.health_port).start()
    return runner


async def follow_flag(flag: threading.Event, stopping: asyncio.Event) -> None:
    while not flag.is_set():  # noqa: ASYNC110 - a thread's Event: polled (a waiting executor thread would outlive us)
        await asyncio.sleep(0.1)
    stopping.set()


async def _until_leading(elector: Elector, stopping: asyncio.Event) -> None:
    while not elector.is_leader and not stopping.is_set():
        elector.changed.clear()
        with contextlib.suppress(TimeoutError):
            async with asyncio.timeout(elector.timing.retry_period):
                await elector.changed.wait()


async def _until_not_leading(elector: Elector) -> None:
    """Returns when leadership is lost, at the latest at the renew deadline (even if the campaign is stuck)."""
    while elector.is_leader:
        elector.changed.clear()
        deadline = elector.leading_until()
        remaining = 0.0 if deadline is None else deadline - elector._clock()
        with contextlib.suppress(TimeoutError):
            async with asyncio.timeout(max(0.0, remaining)):
                await elector.changed.wait()


async def _stop_operator(operator: asyncio.Task[None], stop: asyncio.Event, grace: float) -> None:
    """Ask kopf to stop; cancel it when it takes longer than `grace`."""
    stop.set()
    done, _ = await asyncio.wait({operator}, timeout=grace)
    if not done:
        log.warning("leader election: the operator did not stop within %.1f s; cancelling it", grace)
        operator.cancel()
        await asyncio.wait({operator})


async def run_with_leader_election(
    config: LeaderConfig,
    operate: Operate,
    kubeconfig: Path | None = None,
    stop_flag: threading.Event | asyncio.Event | None = None,
    ready_flag: threading.Event | None = None,
) -> None:
    """Campaign for the Lease; run `operate` (afresh each time) only while leading. Losing the Lease stops it and
    returns to candidacy (no process restart, so no CrashLoopBackOff from a flaky API); a stop (SIGTERM, or
    `stop_flag`) stops it, then releases the Lease so a standby takes over within one retry period. An operator
    that fails while leading releases the Lease and raises (the kubelet restarts the container)."""
    timing = config.timing
    stopping = asyncio.Event() if not isinstance(stop_flag, asyncio.Event) else stop_flag
    background: list[asyncio.Task[None]] = []
    if isinstance(stop_flag, threading.Event):
        background.append(asyncio.create_task(follow_flag(stop_flag, stopping)))
    if stop_flag is None and threading.current_thread() is threading.main_thread():
        loop = asyncio.get_running_loop()
        for signum in (signal.SIGINT, signal.SIGTERM):
            loop.add_signal_handler(signum, stopping.set)
    LEADER.set(0)
    kube = await Kube.connect(str(kubeconfig) if kubeconfig else None)
    elector = Elector(kube, namespace=config.namespace, name=config.name, identity=config.identity, timing=timing)
    health = Health(elector)
    health_runner = await serve_health(config, health)
    campaign = asyncio.create_task(elector.run(), name="leader election")
    log.info("leader election: %s campaigns for Lease %s/%s", elector.identity, elector.namespace, elector.name)
    if ready_flag is not None:
        ready_flag.set()
    try:
        while not stopping.is_set():
            await _until_leading(elector, stopping)
            if stopping.is_set():
                break
            # The watchers exist before kopf starts: kopf cancels, when it stops, every task created after it.
            lost = asyncio.create_task(_until_not_leading(elector))
            stop = asyncio.create_task(stopping.wait())
            operator_stop = asyncio.Event()
            operator = asyncio.create_task(operate(operator_stop, stopping.set))
            health.operator = operator
            await asyncio.wait({lost, stop, operator}, return_when=asyncio.FIRST_COMPLETED)
            for watcher in (lost, stop):
                watcher.cancel()
            if operator.done():
                operator_stop.set()
                error = operator.exception() if not operator.cancelled() else None
                raise RuntimeError("the operator stopped while leading") from error
            if stopping.is_set():
                await _stop_operator(operator, operator_stop, grace=timing.renew_deadline)
            else:
                # Lost: stop acting before another candidate may take over (lease_duration after the record it
                # last saw from us, which is later than our renew deadline).
                await _stop_operator(operator, operator_stop,
                                     grace=(timing.lease_duration - timing.renew_deadline) / 2)
                log.info("leader election: %s is a candidate again", elector.identity)
    finally:
        for task in (campaign, *background):
            task.cancel()
        await asyncio.gather(campaign, *background, return_exceptions=True)
        await elector.release()
        await kube.close()
        if health_runner is not None:
            await health_runner.cleanup()
