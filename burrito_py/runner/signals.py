"""How a runner stops when its pod is deleted (node drain, eviction, a cancelled run): tofu-controller #531,
where SIGTERM never reached terraform and drained nodes left state locks held and states half written.

Kubernetes sends SIGTERM to the container's first process, the runner, and SIGKILL once the pod's
`terminationGracePeriodSeconds` are over. Terraform and OpenTofu stop gracefully on one interrupt: they let the
operations in flight finish, write the state and release the state lock. A second interrupt makes them exit at
once, lock held. Hence:

- Every tool process (terraform/tofu steps, `tenv install`) runs in its own process group, so a signal sent to
  the runner's group (a terminal's Ctrl-C, a local kubelet's `killpg`) never reaches it directly: only the
  runner speaks to it, and only once.
- The first SIGTERM or SIGINT the runner receives is forwarded as one SIGINT to the tool process running then,
  or to the next one that starts. Later signals are noted on the log and not forwarded.
- The runner waits for the tool up to `stop_wait(grace)` seconds after the signal, where `grace` is the pod's
  grace period (`BURRITO_RUNNER_GRACE_SECONDS`, default 110; the pod builder sets it to the pod's
  `terminationGracePeriodSeconds`), keeping the rest (10 s, or a quarter of a short grace period) to upload the
  log it has. Past that, the tool's whole process group is killed.
- No step that changes anything (init, plan, apply) starts after the signal. The read-only steps
  (`show -json`, `output -json`) still run: they take a second and record what an apply that did finish did.
- The attempt then ends with exit code 128 + the signal's number (143 for SIGTERM), whose termination message
  says what was interrupted ("interrupted by SIGTERM during apply"); the run's retry backoff applies as for any
  failed attempt.

The handler itself only records the signal and forwards it: printing from a signal handler can land in the
middle of the main thread's own write to the same stream, so a helper thread says what happens and enforces the
deadline.
"""

from __future__ import annotations

import contextlib
import math
import os
import signal
import subprocess
import threading
import time
from collections.abc import Callable, Iterator, Mapping
from types import FrameType
from typing import Any

__all__ = [
    "DEFAULT_GRACE_SECONDS",
    "GRACE_ENV",
    "LOG_RESERVE_SECONDS",
    "Stopping",
    "grace_seconds",
    "reset",
    "stop_wait",
    "stopping",
]

GRACE_ENV = "BURRITO_RUNNER_GRACE_SECONDS"
DEFAULT_GRACE_SECONDS = 110.0
LOG_RESERVE_SECONDS = 10.0
HANDLED = (signal.SIGTERM, signal.SIGINT)


def grace_seconds(environ: Mapping[str, str]) -> float:
    """The pod's grace period from `BURRITO_RUNNER_GRACE_SECONDS`; ValueError naming the variable when bad."""
    text = environ.get(GRACE_ENV, "").strip()
    if not text:
        return DEFAULT_GRACE_SECONDS
    try:
        value = float(text)
    except ValueError:
        raise ValueError(f"{GRACE_ENV}: {text!r} is not a number of seconds") from None
    if not math.isfinite(value) or value <= 0:
        raise ValueError(f"{GRACE_ENV}: {text!r} must be a positive number of seconds")
    return value


def stop_wait(grace: float) -> float:
    """How long the tool may take to stop after the signal: the grace period less what uploading the log needs
    (10 s, or a quarter of a grace period shorter than 40 s)."""
    return grace - min(LOG_RESERVE_SECONDS, grace / 4)


def _say(text: str) -> None:
    print(f"burrito-py: {text}", flush=True)


class Stopping:
    """The runner's state with respect to termination signals, and the tool processes it may have to stop."""

    def __init__(self, wait_seconds: float = stop_wait(DEFAULT_GRACE_SECONDS)) -> None:
        self.wait_seconds = wait_seconds
        self.signal_name: str | None = None
        self.signal_number = 0
        self.during: str | None = None  # the step running when the signal came
        self.killed = False
        # Reentrant: the handler runs on the main thread, which may hold the lock in `start` or `finished`.
        self._lock = threading.RLock()
        self._running: dict[subprocess.Popen[Any], str] = {}
        self._received_at = 0.0
        self._news = threading.Condition(self._lock)
        self._notes: list[str] = []
        self._watcher: threading.Thread | None = None

    @property
    def requested(self) -> bool:
        return self.signal_name is not None

    def exit_code(self) -> int:
        return 128 + self.signal_number

    def remaining(self) -> float:
        """Seconds left of the grace period (the log upload's share included)."""
        if not self.requested:
            return math.inf
        reserve = min(LOG_RESERVE_SECONDS, self.wait_seconds / 3)
        return max(0.0, self._received_at + self.wait_seconds + reserve - time.monotonic())

    # -- signals ---------------------------------------------------------------------------------
    def handle(self, signum: int, _frame: FrameType | None = None) -> None:
        name = signal.Signals(signum).name
        with self._lock:
            if self.signal_name is not None:
                self._notes.append(f"{name} received again: still waiting for the step to stop (not forwarded)")
                self._news.notify_all()
                return
            self.signal_name, self.signal_number, self._received_at = name, signum, time.monotonic()
            running = dict(self._running)
            self.during = next(iter(running.values()), None)
            for process in running:
                _interrupt(process)
            self._notes.append(
                f"{name} received during {self.during}: asked it to stop (SIGINT), waiting up to "
                f"{self.wait_seconds:g} s" if self.during else f"{name} received: no new step will start"
            )
            self._watcher = threading.Thread(target=self._watch, name="burrito-py-stopping", daemon=True)
            self._watcher.start()

    def _watch(self) -> None:
        """Say what happens, and kill what still runs at the deadline."""
        deadline = self._received_at + self.wait_seconds
        while True:
            with self._lock:
                while not self._notes and time.monotonic() < deadline:
                    self._news.wait(max(0.0, deadline - time.monotonic()))
                notes, self._notes = self._notes, []
                late = [] if notes else list(self._running.items())
            for note in notes:
                _say(note)
            if notes:
                continue
            for process, step in late:
                if process.returncode is not None:  # reaped meanwhile: its pid may already be someone else's
                    continue
                _say(f"{step} did not stop within {self.wait_seconds:g} s of the {self.signal_name}; killing it")
                self.killed = True
                with contextlib.suppress(ProcessLookupError, PermissionError):
                    os.killpg(process.pid, signal.SIGKILL)
            return

    @contextlib.contextmanager
    def installed(self) -> Iterator[Stopping]:
        """Handle SIGTERM/SIGINT while the block runs (only from the main thread: elsewhere, nothing)."""
        if threading.current_thread() is not threading.main_thread():
            yield self
            return
        previous = {sig: signal.signal(sig, self.handle) for sig in HANDLED}
        try:
            yield self
        finally:
            for sig, handler in previous.items():
                signal.signal(sig, handler)

    # -- tool processes --------------------------------------------------------------------------
    def start(self, step: str, popen: Callable[[], subprocess.Popen[Any]]) -> subprocess.Popen[Any]:
        """Start a tool process (in its own process group: `popen` must pass `process_group=0`) and track it
        until `finished`; a signal that came while it started is forwarded at once. A step started after the
        signal (only the read-only ones are: `show -json`, `output -json`) is let run."""
        with self._lock:
            before = self.requested
            process = popen()
            self._running[process] = step
            late = self.requested and not before
        if late:
            _interrupt(process)
        return process

    def finished(self, process: subprocess.Popen[Any]) -> None:
        with self._lock:
            self._running.pop(process, None)


def _interrupt(process: subprocess.Popen[Any]) -> None:
    if process.poll() is None:
        with contextlib.suppress(ProcessLookupError):
            process.send_signal(signal.SIGINT)


_current = Stopping()


def stopping() -> Stopping:
    """The process's one Stopping: signals are process-wide, and so is what the tool processes must hear."""
    return _current


def reset(wait_seconds: float) -> Stopping:
    """A fresh Stopping for one attempt (`main`), with its stop deadline."""
    global _current
    _current = Stopping(wait_seconds)
    return _current
