"""`burrito-py dev --example quickstart` as a newcomer runs it: a real process tree, kubectl against it, the
layers reaching their states, the server answering, and a clean stop on Ctrl-C (SIGINT)."""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import threading
from pathlib import Path

import httpx
import pytest
import yaml

from tests.support.emulator import wait_for


class Output:
    """The dev process's log, read in the background so the pipe never fills."""

    def __init__(self, process: subprocess.Popen[str]) -> None:
        self.lines: list[str] = []
        assert process.stdout is not None
        self._thread = threading.Thread(target=self._read, args=(process.stdout,), daemon=True)
        self._thread.start()

    def _read(self, stream: object) -> None:
        for line in stream:  # type: ignore[attr-defined]
            self.lines.append(line)

    @property
    def text(self) -> str:
        return "".join(self.lines)

    def find(self, pattern: str) -> str | None:
        match = re.search(pattern, self.text)
        return match.group(1) if match else None


def kubectl(kubeconfig: Path, *args: str) -> str:
    env = {**os.environ, "KUBECONFIG": str(kubeconfig)}
    return subprocess.run(["kubectl", *args], env=env, capture_output=True, text=True, check=True, timeout=30).stdout


def layer_states(kubeconfig: Path) -> dict[str, str | None]:
    items = json.loads(kubectl(kubeconfig, "get", "tfl", "-o", "json"))["items"]
    return {i["metadata"]["name"]: (i.get("status") or {}).get("state") for i in items}


def start_dev(data_dir: Path, kubeconfig: Path, cluster: str, mode: str) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [sys.executable, "-m", "burrito_py.cli", "dev", "--example", "quickstart", "--data-dir", str(data_dir),
         "--kubeconfig", str(kubeconfig), "--mode", mode, "--cluster", cluster],
        stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
    )


def processes_under(data_dir: Path) -> list[str]:
    """Command lines of the live processes that name `data_dir` (the namespace, the control plane, pods)."""
    found = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit() and int(entry.name) != os.getpid():
            try:
                args = (entry / "cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
                state = (entry / "stat").read_text().rpartition(")")[2].split()[0]
            except OSError:
                continue
            if str(data_dir) in args and state != "Z":
                found.append(args)
    return found


# real: the control plane built from the Kubernetes modules, the default (docs §22.7); emulator: both modes.
@pytest.mark.parametrize(("cluster", "mode"), [("real", "chart"), ("emulator", "chart"), ("emulator", "in-process")])
def test_dev_runs_the_quickstart_until_ctrl_c(tmp_path: Path, cluster: str, mode: str) -> None:
    data_dir, kubeconfig = tmp_path / "data", tmp_path / "data" / "kubeconfig"
    process = start_dev(data_dir, kubeconfig, cluster, mode)
    output = Output(process)
    try:
        wait_for(lambda: "ready." in output.text, 180 if cluster == "real" else 60, interval=0.2,
                 what=f"dev to be ready:\n{output.text}")
        states = wait_for(lambda: (s := layer_states(kubeconfig)) == {"hello": "Idle", "greetings": "ApplyNeeded"}
                          and s, 120, interval=0.5, what="hello Idle and greetings ApplyNeeded")
        assert states
        table = kubectl(kubeconfig, "get", "tfl,tfrun")
        assert "hello" in table and "Idle" in table and "ApplyNeeded" in table

        # The log shows the states a newcomer is promised, in order, for the autoApply layer.
        hello = [line.split()[3] for line in output.lines if re.search(r"layer default/hello\s", line)]
        assert hello[-1] == "Idle" and "Running" in hello and "ApplyNeeded" in hello, hello

        # The server is up, its port printed; its REST API answers with the kubeconfig user's token.
        server = output.find(r"server at (http://\S+)")
        assert server is not None, output.text
        token = yaml.safe_load(kubeconfig.read_text())["users"][0]["user"]["token"]
        layers = httpx.get(f"{server}/api/layers", headers={"Authorization": f"Bearer {token}"}, timeout=10)
        assert layers.status_code == 200, layers.text
        assert {layer["name"]: layer["state"] for layer in layers.json()} == states
        assert httpx.get(f"{server}/api/layers", timeout=10).status_code == 401

        # The web UI's URL is printed; with the kubeconfig user's token it lists the layers.
        ui = output.find(r"web UI at (http://\S+)")
        assert ui == f"{server}/ui/", output.text
        with httpx.Client(base_url=server, timeout=10) as browser:
            login = browser.get("/ui/login")
            assert login.status_code == 200, login.text
            csrf = re.search(r'name="csrf" value="([^"]+)"', login.text)
            assert csrf is not None, login.text
            browser.post("/ui/login", data={"token": token, "csrf": csrf.group(1)})
            page = browser.get("/ui/layers")
            assert page.status_code == 200 and "greetings" in page.text and "hello" in page.text, page.text[:500]

        # The plan, with nothing but KUBECONFIG (no URL from the log): through the API server's service proxy.
        env = {k: v for k, v in os.environ.items() if not k.startswith(("BURRITO_DATASTORE", "BURRITO_PY_"))}
        short = subprocess.run(["burrito-py", "plan", "download", "default/greetings", "--format", "short"],
                               env={**env, "KUBECONFIG": str(kubeconfig)}, capture_output=True, text=True,
                               timeout=60)
        assert short.returncode == 0, short.stderr
        assert short.stdout.strip() == "Plan: 2 to add, 0 to change, 0 to destroy"
    finally:
        process.send_signal(signal.SIGINT)
        try:
            code = process.wait(30)
        finally:
            if process.poll() is None:
                process.kill()
    assert code == 0, output.text
    assert output.text.rstrip().endswith("stopped"), output.text[-2000:]
    assert processes_under(data_dir.resolve()) == []


def test_a_killed_dev_leaves_no_cluster_running(tmp_path: Path) -> None:
    """SIGKILL gives dev no chance to stop anything: the namespace dies with it (setpriv --pdeathsig, unshare
    --kill-child, the PID namespace), so no control plane, kubelet or pod outlives it; a new start then
    makes a fresh cluster in the same data directory."""
    data_dir, kubeconfig = tmp_path / "data", tmp_path / "data" / "kubeconfig"
    process = start_dev(data_dir, kubeconfig, "real", "chart")
    output = Output(process)
    try:
        wait_for(lambda: "ready." in output.text, 180, interval=0.2, what=f"dev to be ready:\n{output.text}")
        assert processes_under(data_dir.resolve())
    finally:
        process.kill()
        process.wait(30)
    wait_for(lambda: not processes_under(data_dir.resolve()), 30, interval=0.2,
             what=f"the cluster's processes to end: {processes_under(data_dir.resolve())}")
