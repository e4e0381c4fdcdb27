"""Termination signals (burrito_py.runner.signals): the grace period, and what a step hears, with fake tools
(shell scripts that report the signals they get) driven through the real Steps. The real terraform, the real
runner program and a real SIGTERM: tests/integration/runner/test_runner_signals.py."""

from __future__ import annotations

import io
import signal
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from burrito_py.runner import signals
from burrito_py.runner.signals import grace_seconds, stop_wait
from burrito_py.runner.terraform import Interrupted, StepFailed, Steps
from burrito_py.runner.tools import Tool
from burrito_py.runner.transcript import Transcript

# A tool that says which signals reach it and in which process group it runs, then waits to be stopped.
PATIENT = """#!/bin/sh
trap 'echo "got INT"; sleep 0.2; echo "stopped cleanly"; exit 1' INT
trap 'echo "got TERM"' TERM
echo "ready pid=$$ pgid=$(cut -d' ' -f5 /proc/$$/stat)"
i=0
while [ $i -lt 300 ]; do sleep 0.05; i=$((i+1)); done
echo "never interrupted"
"""
# A tool that ignores SIGINT (a provider stuck in an API call): only the deadline's SIGKILL ends it.
STUCK = """#!/bin/sh
trap '' INT
trap '' TERM
echo "ready"
sleep 30 &
wait $!
"""


@pytest.fixture(autouse=True)
def fresh_stopping() -> Iterator[None]:
    signals.reset(signals.stop_wait(signals.DEFAULT_GRACE_SECONDS))
    yield
    signals.reset(signals.stop_wait(signals.DEFAULT_GRACE_SECONDS))


def tool(path: Path, script: str) -> Tool:
    path.write_text(script if script.startswith("#!") else "#!/bin/sh\n" + script)
    path.chmod(0o755)
    return Tool("terraform", str(path), "1.11.4")


class Lines(io.StringIO):
    """Output that tells when a line containing `text` has arrived."""

    def __init__(self) -> None:
        super().__init__()
        self.arrived = threading.Condition()

    def write(self, text: str) -> int:
        with self.arrived:
            written = super().write(text)
            self.arrived.notify_all()
        return written

    def wait_for(self, text: str, timeout: float = 10.0) -> None:
        with self.arrived:
            assert self.arrived.wait_for(lambda: text in self.getvalue(), timeout), self.getvalue()


def run_in_thread(steps: Steps, step: str) -> tuple[threading.Thread, list[BaseException]]:
    errors: list[BaseException] = []

    def target() -> None:
        try:
            if step == "apply":
                steps.apply(Path("plan.bin"))
            else:
                steps.plan(Path("plan.bin"))
        except BaseException as exc:
            errors.append(exc)

    thread = threading.Thread(target=target)
    thread.start()
    return thread, errors


def test_grace_period_from_the_environment() -> None:
    assert grace_seconds({}) == 110.0
    assert grace_seconds({"BURRITO_RUNNER_GRACE_SECONDS": " 300 "}) == 300.0
    for bad, why in [("soon", "is not a number of seconds"), ("0", "must be a positive number of seconds"),
                     ("-5", "must be a positive"), ("inf", "must be a positive"), ("nan", "must be a positive")]:
        with pytest.raises(ValueError, match=f"^BURRITO_RUNNER_GRACE_SECONDS: '{bad}' {why}"):
            grace_seconds({"BURRITO_RUNNER_GRACE_SECONDS": bad})


def test_the_wait_keeps_time_to_upload_the_log() -> None:
    assert stop_wait(110) == 100  # the default: 10 s for the log
    assert stop_wait(3600) == 3590
    assert stop_wait(20) == 15  # a short grace period keeps a quarter
    assert stop_wait(1) == 0.75


def test_the_first_signal_reaches_the_step_once_as_sigint_and_the_second_is_not_forwarded(tmp_path: Path) -> None:
    stop = signals.reset(10.0)
    out = Lines()
    steps = Steps(tool(tmp_path / "terraform", PATIENT), tmp_path, env={"PATH": "/usr/bin:/bin"}, out=out)
    thread, errors = run_in_thread(steps, "apply")
    out.wait_for("ready")
    ready = next(line for line in out.getvalue().splitlines() if line.startswith("ready"))
    pid, pgid = (field.split("=")[1] for field in ready.split()[1:])
    assert pid == pgid  # its own process group: a signal to the runner's group never reaches it directly

    stop.handle(signal.SIGTERM)
    stop.handle(signal.SIGINT)  # a second signal while it stops: noted, not forwarded
    thread.join(10)
    assert not thread.is_alive()
    [error] = errors
    assert isinstance(error, Interrupted) and isinstance(error, StepFailed)
    assert str(error) == "interrupted by SIGTERM during apply: terraform stopped (exit code 1)"
    log = out.getvalue()
    assert log.count("got INT") == 1 and "got TERM" not in log
    assert "stopped cleanly" in log and "never interrupted" not in log
    assert stop.exit_code() == 143 and stop.during == "terraform apply"


def test_no_step_that_changes_anything_starts_after_the_signal(tmp_path: Path) -> None:
    stop = signals.reset(10.0)
    stop.handle(signal.SIGTERM)
    out = io.StringIO()
    steps = Steps(tool(tmp_path / "terraform", 'echo "ran $1"\n'), tmp_path, env={}, out=out)
    for start in (steps.init, lambda: steps.plan(tmp_path / "plan.bin"), lambda: steps.apply(tmp_path / "p")):
        with pytest.raises(Interrupted, match=r"^interrupted by SIGTERM before (init|plan|apply)$"):
            start()
    assert "ran" not in out.getvalue()
    # Reading what a finished apply did still works: the runner records it before it exits.
    steps.output_json(tmp_path / "outputs.json")
    assert (tmp_path / "outputs.json").read_text() == "ran output\n"


def test_a_step_that_ignores_sigint_is_killed_at_the_deadline(tmp_path: Path) -> None:
    stop = signals.reset(0.5)
    out = Lines()
    steps = Steps(tool(tmp_path / "terraform", STUCK), tmp_path, env={"PATH": "/usr/bin:/bin"}, out=out)
    thread, errors = run_in_thread(steps, "plan")
    out.wait_for("ready")
    started = time.monotonic()
    stop.handle(signal.SIGTERM)
    thread.join(10)
    assert not thread.is_alive()
    assert time.monotonic() - started < 5  # its `sleep 30` child was killed with it: the pipe closed
    [error] = errors
    assert str(error) == "interrupted by SIGTERM during plan: terraform was killed at the stop deadline"
    assert stop.killed


def test_the_transcript_keeps_the_end_of_a_long_log() -> None:
    transcript = Transcript(limit=13)
    for part in ("first\n", "second\n", "third\n"):
        transcript.add(part)
    assert transcript.text() == "(the first 6 characters of this log were dropped)\nsecond\nthird\n"


def test_the_transcript_tees_both_streams(capsys: pytest.CaptureFixture[str]) -> None:
    transcript = Transcript()
    with transcript.capturing():
        print("to stdout")
        print("to stderr", file=sys.stderr)
    assert transcript.text() == "to stdout\nto stderr\n"
    captured = capsys.readouterr()
    assert (captured.out, captured.err) == ("to stdout\n", "to stderr\n")
