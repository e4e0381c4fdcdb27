"""Bounded evaluation of plan policies (docs/architecture.md §5.9): the CEL and Rego rules run in a few worker
processes (worker.py), started on first use and reused, each under a memory and a CPU limit, and every rule
under a wall-clock limit after which its worker is killed and replaced. Built-in rules (linear in the plan, no
tenant code) are evaluated in a thread of the controllers, as before.

A rule that exceeds a limit is an `error` outcome (which denies at its policy's level, as any evaluation error
does) whose `error` names the limit in the controllers' own words, e.g. `rule loop of policy team-a/slow
exceeded the 2 s evaluation limit`: shown in the layer's status, condition and events.

Fairness. The pool has `workers` processes; the plans of one namespace use at most `per_namespace` of them at a
time (its other plans wait for their namespace's turn, holding no worker), and a plan's rules together get at
most `plan_seconds` (rules left when it is spent are not evaluated: they deny, naming the budget). With the
defaults (2 workers, 1 per namespace) a tenant whose every plan meets a worst-case policy holds one worker, and
every other namespace still finds one free; the one tenant's plans queue behind each other, which slows only
that tenant. A killed worker is replaced at the cost of the namespace whose rule it ran: its next rule starts a
fresh worker, and its turn ends only once the pool is whole again, so it never takes the idle worker another
namespace is about to use. Cluster policies count against the namespace of the layer they judge.
"""

from __future__ import annotations

import asyncio
import collections
import contextlib
import json
import logging
import os
import pickle
import signal
import sys
from collections.abc import AsyncIterator, Sequence
from dataclasses import dataclass
from typing import Any, Literal

from burrito_py.api.policy import ClusterTerraformPlanPolicy, PlanPolicyRule, TerraformPlanPolicy
from burrito_py.plans.model import PlanModel
from burrito_py.policy.evaluate import evaluate_rule, plan_addresses, policy_name
from burrito_py.policy.verdict import ADDRESS_CHARS, RuleResult, Verdict, rule_result
from burrito_py.policy.worker import HEADER

__all__ = ["Limits", "PolicySandbox", "SandboxUnavailable", "limit_message", "limit_text"]

log = logging.getLogger(__name__)
Policy = TerraformPlanPolicy | ClusterTerraformPlanPolicy
Limit = Literal["time", "budget", "skipped", "cpu", "memory", "crash", "unavailable"]

# An answer is a handful of rule results (20 addresses, 5 messages of 200 characters at most): anything much
# larger is a worker gone wrong, never read into the controllers' memory.
MAX_ANSWER = 1 << 20
# Variables a worker gets: no more (Rego's opa.runtime() shows a rule the environment of its process).
WORKER_ENV = ("PATH", "PYTHONPATH", "LANG", "LC_ALL")
MEMORY_MARKERS = ("memory allocation of", "bad_alloc", "MemoryError", "Failed to initialise snmalloc",
                  "out of memory")


@dataclass(frozen=True, slots=True)
class Limits:
    """The sandbox's limits (ControllerSettings.policy_*)."""

    rule_seconds: float = 2.0  # wall clock, one rule over one plan
    cpu_seconds: int = 2  # CPU, one rule
    memory_mib: int = 256  # what a worker may allocate beyond its start-up footprint
    plan_seconds: float = 10.0  # wall clock, every sandboxed rule of one plan together
    workers: int = 2
    per_namespace: int = 1
    start_seconds: float = 30.0  # a worker's start-up (importing the engines), not a rule's time


def _seconds(value: float) -> str:
    return f"{value:g} s"


def limit_text(limit: Limit, limits: Limits, detail: str = "") -> str:
    if limit == "time":
        return f"exceeded the {_seconds(limits.rule_seconds)} evaluation limit"
    if limit == "budget":
        return f"exceeded the {_seconds(limits.plan_seconds)} evaluation budget of a plan"
    if limit == "skipped":
        return f"was not evaluated: the plan's {_seconds(limits.plan_seconds)} evaluation budget was spent"
    if limit == "cpu":
        return f"exceeded the {limits.cpu_seconds} s CPU limit"
    if limit == "memory":
        return f"exceeded the {limits.memory_mib} MiB memory limit"
    if limit == "crash":
        return f"stopped the policy evaluator ({detail})"
    return f"was not evaluated: the policy evaluator is unavailable ({detail})"


def limit_message(policy: Policy, rule: str, limit: Limit, limits: Limits, detail: str = "") -> str:
    """The controllers' words for a rule stopped by the sandbox: what status, conditions and events show."""
    return f"rule {rule} of policy {policy_name(policy)} {limit_text(limit, limits, detail)}"


class SandboxUnavailable(Exception):
    """No worker could be started."""


class WorkerStopped(Exception):
    """A worker ended (or was killed) before it answered; `limit` says why."""

    def __init__(self, limit: Limit, detail: str = "") -> None:
        super().__init__(f"{limit}: {detail}" if detail else limit)
        self.limit, self.detail = limit, detail


class _Worker:
    def __init__(self, process: asyncio.subprocess.Process, baseline: int) -> None:
        self.process = process
        self.baseline = baseline  # its data segment once started
        self.data = baseline  # … after its last answer
        self.busy = False  # a request is out: if it is abandoned, the worker's state is unknown
        self.stderr: collections.deque[str] = collections.deque(maxlen=20)
        self._drain = asyncio.create_task(self._drain_stderr())

    @classmethod
    async def start(cls, limits: Limits) -> _Worker:
        env = {k: os.environ[k] for k in WORKER_ENV if k in os.environ}
        try:
            process = await asyncio.create_subprocess_exec(
                sys.executable, "-m", "burrito_py.policy.worker", str(limits.memory_mib), str(limits.cpu_seconds),
                stdin=asyncio.subprocess.PIPE, stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE,
                env=env, cwd="/")
        except OSError as exc:
            raise SandboxUnavailable(f"cannot start a policy worker: {exc}") from exc
        worker = cls(process, 0)
        try:
            ready = await worker._answer(limits.start_seconds)
        except WorkerStopped as exc:
            raise SandboxUnavailable(f"a policy worker did not start ({exc}): {' | '.join(worker.stderr)}") from exc
        except BaseException:  # cancelled (the controllers stop): no orphan
            await asyncio.shield(worker.kill())
            raise
        worker.baseline = worker.data = int(ready.get("data") or 0)
        return worker

    async def _drain_stderr(self) -> None:
        assert self.process.stderr is not None
        while line := await self.process.stderr.readline():
            self.stderr.append(line.decode(errors="replace").rstrip()[:300])

    async def call(self, request: bytes, seconds: float) -> dict[str, Any]:
        assert self.process.stdin is not None
        self.busy = True
        try:
            self.process.stdin.write(HEADER.pack(len(request)) + request)
            await self.process.stdin.drain()
        except (ConnectionError, RuntimeError) as exc:
            raise await self._ended(f"its input closed: {exc}") from None
        answer = await self._answer(seconds)
        self.busy = False
        self.data = int(answer.get("data") or self.data)
        return answer

    async def _answer(self, seconds: float) -> dict[str, Any]:
        assert self.process.stdout is not None
        try:
            async with asyncio.timeout(seconds):
                header = await self.process.stdout.readexactly(HEADER.size)
                (size,) = HEADER.unpack(header)
                if size > MAX_ANSWER:
                    await self.kill()
                    raise WorkerStopped("crash", f"an answer of {size} bytes")
                payload = await self.process.stdout.readexactly(size)
        except TimeoutError:
            await self.kill()
            raise WorkerStopped("time") from None
        except asyncio.IncompleteReadError:
            raise await self._ended("") from None
        try:
            answer = json.loads(payload)
        except ValueError:
            await self.kill()
            raise WorkerStopped("crash", "an unreadable answer") from None
        if not isinstance(answer, dict):
            await self.kill()
            raise WorkerStopped("crash", "an unreadable answer")
        return answer

    async def _ended(self, detail: str) -> WorkerStopped:
        """Why the worker ended by itself: the CPU limit (SIGXCPU), the memory limit (its allocator says so on
        stderr), else a crash."""
        code = await self.process.wait()
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(self._drain, 1.0)  # its last words
        said = " | ".join(self.stderr)
        log.warning("a policy worker ended (exit %s): %s", code, said[-500:] or detail)
        if code == -signal.SIGXCPU:
            return WorkerStopped("cpu")
        if any(marker in said for marker in MEMORY_MARKERS):
            return WorkerStopped("memory")
        how = f"signal {signal.Signals(-code).name}" if code < 0 else f"exit code {code}"
        return WorkerStopped("crash", how)

    async def kill(self) -> None:
        if self.process.returncode is None:
            with contextlib.suppress(ProcessLookupError):
                self.process.kill()
        await self.process.wait()
        self._drain.cancel()


@dataclass(slots=True)
class _Turn:
    lost: bool = False  # a worker was killed or ended during the turn


class PolicySandbox:
    """The pool of policy workers of one controllers process (created with its event loop; `close()` ends it)."""

    def __init__(self, limits: Limits | None = None) -> None:
        self.limits = limits or Limits()
        self._idle: list[_Worker] = []
        self._live = 0  # worker processes running or starting, idle or busy
        self._slots: asyncio.Semaphore | None = None
        self._gates: dict[str, tuple[asyncio.Semaphore, int]] = {}
        self._closed = False
        self._warming: set[asyncio.Task[None]] = set()
        self._warmed = False
        self.started = 0  # workers started so far (a figure for tests and benches)

    @contextlib.asynccontextmanager
    async def _turn(self, namespace: str) -> AsyncIterator[_Turn]:
        """Wait for the namespace's turn (at most `per_namespace` at once), then for a free worker slot. The
        worker slots' queue holds at most `per_namespace` entries per namespace, so it serves namespaces in turn.
        A turn that lost a worker replaces it before the namespace's turn ends, but after its answer and without
        a worker slot: so the pool is whole again before that namespace can take another namespace's idle worker,
        and the verdict does not wait for the start-up."""
        if self._slots is None:
            self._slots = asyncio.Semaphore(self.limits.workers)
        gate, users = self._gates.get(namespace) or (asyncio.Semaphore(self.limits.per_namespace), 0)
        self._gates[namespace] = (gate, users + 1)
        turn = _Turn()
        try:
            await gate.acquire()
        except BaseException:
            self._leave(namespace)
            raise
        try:
            async with self._slots:
                yield turn
        finally:
            if turn.lost and not self._closed:  # the namespace's turn ends when the pool is whole again
                task = asyncio.create_task(self._refill_then_leave(namespace, gate))
                self._warming.add(task)
                task.add_done_callback(self._warming.discard)
            else:
                gate.release()
                self._leave(namespace)

    def _leave(self, namespace: str) -> None:
        gate, users = self._gates[namespace]
        if users <= 1:
            del self._gates[namespace]
        else:
            self._gates[namespace] = (gate, users - 1)

    async def _refill_then_leave(self, namespace: str, gate: asyncio.Semaphore) -> None:
        try:
            await self._refill()
        finally:
            gate.release()
            self._leave(namespace)

    def _warm(self) -> None:
        """On first use, start the rest of the pool in the background: a namespace that finds a free slot then
        finds a running worker too, not a start-up (about a second) in its decision's way."""
        if self._warmed:
            return
        self._warmed = True
        for _ in range(self.limits.workers - 1):  # the first caller starts its own
            self._live += 1
            task = asyncio.create_task(self._start_idle())
            self._warming.add(task)
            task.add_done_callback(self._warming.discard)

    async def _start(self) -> _Worker:
        """A new worker, counted in `_live` by the caller."""
        try:
            worker = await _Worker.start(self.limits)
        except BaseException:
            self._live -= 1
            raise
        self.started += 1
        return worker

    async def _start_idle(self) -> None:
        try:
            worker = await self._start()
        except SandboxUnavailable as exc:
            log.warning("%s", exc)
            return
        await self._give_back(worker)

    async def _take(self, fresh: bool = False) -> _Worker:
        """An idle worker, else (or when `fresh`) one started for the caller, who waits for its start-up. A plan
        whose rule had its worker killed takes a fresh one: never the idle worker another namespace is about to
        use, so the cost of a killed worker falls on the namespace whose rule it ran."""
        self._warm()
        while self._idle and not fresh:
            worker = self._idle.pop()
            if worker.process.returncode is None:
                return worker
            await self._discard(worker)
        if self._closed:
            raise SandboxUnavailable("the controllers are stopping")
        self._live += 1
        return await self._start()

    async def _discard(self, worker: _Worker) -> None:
        await worker.kill()
        self._live -= 1

    async def _refill(self) -> None:
        """Start workers until the pool is whole (after a turn that lost its worker: `_turn`)."""
        while not self._closed and self._live < self.limits.workers:
            self._live += 1
            try:
                worker = await self._start()
            except SandboxUnavailable as exc:
                log.warning("%s", exc)
                return
            await self._give_back(worker)

    async def _give_back(self, worker: _Worker | None) -> None:
        """Keep a worker for the next plan unless it is mid-request, ended, or has grown by half its memory
        limit (an allocator that keeps what it freed would leave the next rules less than their limit)."""
        if worker is None:
            return
        grown = worker.data - worker.baseline > (self.limits.memory_mib << 20) // 2
        spare = len(self._idle) >= self.limits.workers
        if worker.busy or grown or spare or self._closed or worker.process.returncode is not None:
            await self._discard(worker)
        else:
            self._idle.append(worker)

    async def evaluate(self, policies: Sequence[Policy], plan: PlanModel, *, namespace: str, plan_sum: str,
                       drift_correction: bool) -> Verdict:
        """The verdict of `policies` on `plan` (a layer of `namespace`), every CEL and Rego rule bounded."""
        pairs = [(policy, rule) for policy in policies for rule in policy.spec.rules]
        found: list[list[RuleResult]] = [[] for _ in pairs]
        builtin = [i for i, (_, rule) in enumerate(pairs) if rule.cel is None and rule.rego is None]
        sandboxed = [i for i in range(len(pairs)) if i not in set(builtin)]
        if builtin:
            results = await asyncio.to_thread(
                lambda: [evaluate_rule(pairs[i][0], pairs[i][1], plan, drift_correction) for i in builtin])
            for i, result in zip(builtin, results, strict=True):
                found[i] = result
        if sandboxed:
            request = await asyncio.to_thread(pickle.dumps, ("plan", plan, drift_correction), pickle.HIGHEST_PROTOCOL)
            async with self._turn(namespace) as turn:
                await self._run_rules(turn, [(i, *pairs[i]) for i in sandboxed], request, found)
            # A worker runs tenant code: what it answers names only the plan's addresses, as evaluate_rule keeps them.
            known = frozenset(a[:ADDRESS_CHARS] for a in plan_addresses(plan))
            for i in sandboxed:
                found[i] = [r.naming_only(known) for r in found[i]]
        return Verdict.of(plan_sum, [r for results in found for r in results])

    async def _run_rules(self, turn: _Turn, todo: Sequence[tuple[int, Policy, PlanPolicyRule]],
                         plan_request: bytes, found: list[list[RuleResult]]) -> None:
        loop = asyncio.get_running_loop()
        limits = self.limits
        deadline: float | None = None
        worker: _Worker | None = None
        lost = False  # a worker of this turn was killed or ended: this turn replaces it
        unavailable: str | None = None  # once the plan cannot be handed to a worker, no rule is evaluated
        try:
            for i, policy, rule in todo:
                if worker is None and unavailable is None:
                    began = loop.time()
                    try:
                        worker = await self._take(fresh=lost)
                        loaded = await worker.call(plan_request, limits.start_seconds)
                        if loaded.get("ok") is not True:
                            unavailable = (f"the plan does not fit its {limits.memory_mib} MiB memory limit"
                                           if loaded.get("limit") == "memory" else "it could not read the plan")
                    except WorkerStopped as exc:
                        unavailable = str(exc)[:200]
                    except SandboxUnavailable as exc:
                        unavailable, worker = str(exc)[:200], None
                    if unavailable is not None and worker is not None:
                        await self._discard(worker)
                        worker, lost = None, True
                    if deadline is not None:
                        deadline += loop.time() - began  # a worker's start-up is not the rules' time
                if worker is None or unavailable is not None:
                    found[i] = [self._stopped(policy, rule, "unavailable", unavailable or "")]
                    continue
                if deadline is None:
                    deadline = loop.time() + limits.plan_seconds  # from the first rule: start-up is not theirs
                remaining = deadline - loop.time()
                if remaining <= 0:
                    found[i] = [self._stopped(policy, rule, "skipped")]
                    continue
                timeout = min(limits.rule_seconds, remaining)
                request = pickle.dumps(("rule", policy, rule.name), pickle.HIGHEST_PROTOCOL)
                try:
                    answer = await worker.call(request, timeout)
                except WorkerStopped as stop:
                    await self._discard(worker)  # killed, or ended by itself
                    worker, lost = None, True
                    limit: Limit = "budget" if stop.limit == "time" and timeout < limits.rule_seconds else stop.limit
                    found[i] = [self._stopped(policy, rule, limit, stop.detail)]
                    continue
                if "results" in answer:
                    # `error` is the controllers' sentence, shown in status and events: never a worker's.
                    found[i] = [RuleResult.model_validate(r).model_copy(update={"error": None})
                                for r in answer["results"]]
                    continue
                await self._discard(worker)  # after any limit or failure: a fresh worker for the next rule
                worker, lost = None, True
                if answer.get("limit") == "memory":
                    found[i] = [self._stopped(policy, rule, "memory")]
                else:
                    found[i] = [self._stopped(policy, rule, "crash", str(answer.get("failed") or "no answer"))]
        finally:
            await self._give_back(worker)
            turn.lost = lost

    def _stopped(self, policy: Policy, rule: PlanPolicyRule, limit: Limit, detail: str = "") -> RuleResult:
        message = limit_message(policy, rule.name, limit, self.limits, detail)
        return rule_result(policy_name(policy), policy.KIND, rule.name, policy.spec.enforcement, "error", [],
                           [message], error=message)

    async def compile(self, policy: Policy) -> list[tuple[str, str]]:
        """(rule, error) of each CEL or Rego rule of `policy` that does not compile, in a worker too (a parser
        meets the tenant's text first). A rule whose compilation exceeds a limit is reported so."""
        todo = [rule for rule in policy.spec.rules if rule.cel is not None or rule.rego is not None]
        errors: list[tuple[str, str]] = []
        if not todo:
            return errors
        async with self._turn(policy.namespace or "") as turn:
            worker: _Worker | None = None
            lost = False
            try:
                for rule in todo:
                    if worker is None:
                        worker = await self._take(fresh=lost)
                    request = pickle.dumps(("compile", rule), pickle.HIGHEST_PROTOCOL)
                    try:
                        answer = await worker.call(request, self.limits.rule_seconds)
                    except WorkerStopped as stop:
                        await self._discard(worker)
                        worker, lost = None, True
                        errors.append((rule.name, f"compiling it {limit_text(stop.limit, self.limits, stop.detail)}"))
                        continue
                    if "error" in answer:
                        if answer["error"]:
                            errors.append((rule.name, str(answer["error"])[:300]))
                        continue
                    await self._discard(worker)
                    worker, lost = None, True
                    limit: Limit = "memory" if answer.get("limit") == "memory" else "crash"
                    text = limit_text(limit, self.limits, str(answer.get("failed") or "no answer"))
                    errors.append((rule.name, f"compiling it {text}"))
            finally:
                await self._give_back(worker)
                turn.lost = lost
        return errors

    async def close(self) -> None:
        self._closed = True
        pending = list(self._warming)
        for task in pending:
            task.cancel()
        await asyncio.gather(*pending, return_exceptions=True)
        idle, self._idle = self._idle, []
        for worker in idle:
            await self._discard(worker)
