"""The console script: `runner start` skips the CLI, everything else goes through it."""

from __future__ import annotations

import subprocess
import sys

ENTRY = [sys.executable, "-X", "importtime", "-c", "from burrito_py.entry import main; main()"]


def test_runner_start_goes_straight_to_the_runner() -> None:
    done = subprocess.run([*ENTRY, "runner", "start"], capture_output=True, text=True, env={}, check=False)
    assert done.returncode == 2  # the runner's "bad input": no BURRITO_RUNNER_* environment
    assert "error: missing environment variable(s): BURRITO_RUNNER_RUN" in done.stderr
    assert "| typer" not in done.stderr  # -X importtime lists every import: the CLI was never built


def test_the_runner_imports_its_http_client_without_httpx() -> None:
    # A complete runner environment without a cluster: the runner gets as far as its HTTP client, then stops.
    env = {"BURRITO_RUNNER_RUN": "r", "BURRITO_RUNNER_LAYER_NAME": "l", "BURRITO_RUNNER_LAYER_NAMESPACE": "n",
           "BURRITO_RUNNER_ACTION": "plan", "BURRITO_RUNNER_ATTEMPT": "1", "BURRITO_DATASTORE_URL": "http://127.0.0.1:9",
           "KUBECONFIG": "/nonexistent"}
    done = subprocess.run([*ENTRY, "runner", "start"], capture_output=True, text=True, env=env, check=False)
    assert "no Kubernetes API configuration" in done.stderr
    imported = {line.rsplit("|", 1)[-1].strip() for line in done.stderr.splitlines() if line.startswith("import time")}
    assert "burrito_py.httpclient" in imported  # the runner's HTTP client (http.client) is loaded...
    assert not imported & {"httpx", "httpcore", "h11", "rich", "click", "trio"}  # ...not httpx (issue 31)


def test_other_commands_go_through_the_cli() -> None:
    done = subprocess.run([*ENTRY, "runner", "start", "--help"], capture_output=True, text=True, check=False)
    assert done.returncode == 0
    assert "Run one attempt of the TerraformRun" in done.stdout
