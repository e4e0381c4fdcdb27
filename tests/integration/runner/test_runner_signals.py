"""SIGTERM to the runner program in the middle of a real `terraform apply` (a `terraform_data` whose `local-exec`
provisioner sleeps 30 s), as a drained node's kubelet sends it: terraform hears one SIGINT, stops gracefully and
releases the state lock; the runner exits 143 well inside the grace period with the reason as its termination
message and its log in the datastore; the next attempt takes the lock without `force-unlock`."""

from __future__ import annotations

import signal
import subprocess
import threading
import time

import pytest

from burrito_py.datastore.client import DatastoreClient
from tests.integration.runner.runner_world import NS, World, world

__all__ = ["world"]  # the fixture, used by name

SLOW = """
terraform {
  backend "local" {}
}

resource "terraform_data" "slow" {
  input = "%s"

  provisioner "local-exec" {
    command = "%s"
  }
}
"""
GRACE_SECONDS = 20  # the runner may wait 15 s for terraform; the sleep alone would take 30


class Output:
    """A process's stdout, read as it comes."""

    def __init__(self, process: subprocess.Popen[str]) -> None:
        self.lines: list[str] = []
        self.changed = threading.Condition()
        assert process.stdout is not None
        self._thread = threading.Thread(target=self._read, args=(process.stdout,), daemon=True)
        self._thread.start()

    def _read(self, stream: object) -> None:
        for line in stream:  # type: ignore[attr-defined]
            with self.changed:
                self.lines.append(line)
                self.changed.notify_all()

    def wait_for(self, text: str, timeout: float = 60.0) -> None:
        with self.changed:
            assert self.changed.wait_for(lambda: text in self.text, timeout), self.text

    @property
    def text(self) -> str:
        return "".join(self.lines)

    def join(self) -> str:
        self._thread.join(10)
        return self.text


@pytest.mark.slow
def test_sigterm_during_apply_stops_terraform_gracefully_and_releases_the_lock(world: World) -> None:
    revision = world.commit({"layers/app/main.tf": SLOW % ("v1", "sleep 30")})
    world.layer(remediationStrategy={"autoApply": True, "applyWithoutPlanArtifact": True})
    world.run("app-apply-1", "apply", revision)
    argv, env = world.runner_command("app-apply-1", "apply", BURRITO_RUNNER_GRACE_SECONDS=str(GRACE_SECONDS))
    lock = world.state().parent / f".{world.state().name}.lock.info"

    process = subprocess.Popen(argv, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        out = Output(process)
        out.wait_for("Provisioning with 'local-exec'")
        assert lock.exists()  # terraform holds the state lock while it provisions

        sent = time.monotonic()
        process.send_signal(signal.SIGTERM)
        out.wait_for("SIGTERM received during terraform apply")
        process.send_signal(signal.SIGTERM)  # impatience: noted, not forwarded (a second SIGINT kills terraform)
        code = process.wait(GRACE_SECONDS)
        elapsed = time.monotonic() - sent
    finally:
        if process.poll() is None:
            process.kill()
    stdout, stderr = out.join(), process.stderr.read() if process.stderr else ""

    print(f"SIGTERM -> runner exit: {elapsed:.2f} s")  # the figure reported for issue 10 (with -s)
    assert code == 128 + signal.SIGTERM, stderr
    assert elapsed < GRACE_SECONDS - 5, elapsed  # terraform stopped by itself, long before the deadline
    assert "Interrupt received." in stdout and "Stopping operation..." in stdout  # terraform heard SIGINT...
    assert "Two interrupts received" not in stdout  # ...once
    assert "SIGTERM received again: still waiting for the step to stop (not forwarded)" in stdout
    message = "interrupted by SIGTERM during apply: terraform stopped (exit code 1)"
    assert stderr.endswith(f"error: {message}\n"), stderr
    assert world.termination_message("app-apply-1") == message
    assert not lock.exists()
    with DatastoreClient(world.datastore_url) as store:  # the log as far as it went, uploaded by the runner
        log = store.get_logs(NS, "app", "app-apply-1", 1).decode()
    assert "Provisioning with 'local-exec'" in log and "Interrupt received." in log and log.endswith(
        f"error: {message}\n")
    assert world.applied("app-apply-1", 1) is None

    # The next attempt (code without the sleep) takes the same state's lock at once: no force-unlock needed.
    fixed = world.commit({"layers/app/main.tf": SLOW % ("v2", "true")})
    world.run("app-apply-2", "apply", fixed)
    retried = world.runner("app-apply-2", "apply")
    assert retried.code == 0, retried.stdout + retried.stderr
    assert "Apply complete!" in retried.stdout
    assert world.state_inputs() == ["v2"]
    assert not lock.exists()
