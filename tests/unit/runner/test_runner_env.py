"""The runner's environment, pod paths, the token file, and how expected errors end a run."""

from __future__ import annotations

from pathlib import Path

import pytest

from burrito_py.kube.pod_paths import pod_path
from burrito_py.runner import main as runner_main
from burrito_py.runner.main import EXIT_BAD_INPUT, EXIT_INTERNAL, RunnerEnv, RunnerError, file_sum, main, read_token

ACTIONS_TEXT = "plan, apply, import, state-rm, state-mv, force-unlock, migrate-state"

ENV = {
    "BURRITO_RUNNER_RUN": "app-plan-x7k2q",
    "BURRITO_RUNNER_LAYER_NAME": "app",
    "BURRITO_RUNNER_LAYER_NAMESPACE": "team-a",
    "BURRITO_RUNNER_ACTION": "plan",
    "BURRITO_RUNNER_ATTEMPT": "2",
    "BURRITO_DATASTORE_URL": "http://datastore:8080",
}


def test_reads_the_environment() -> None:
    env = RunnerEnv.from_environ(ENV)
    assert env == RunnerEnv("app-plan-x7k2q", "app", "team-a", "plan", 2, "http://datastore:8080")


def test_names_every_missing_variable() -> None:
    partial = {k: v for k, v in ENV.items() if k not in ("BURRITO_RUNNER_RUN", "BURRITO_RUNNER_ATTEMPT")}
    expected = r"missing environment variable\(s\): BURRITO_RUNNER_RUN, BURRITO_RUNNER_ATTEMPT"
    with pytest.raises(RunnerError, match=expected):
        RunnerEnv.from_environ(partial)


@pytest.mark.parametrize(
    ("name", "value", "message"),
    [
        ("BURRITO_RUNNER_ACTION", "destroy", f"BURRITO_RUNNER_ACTION: 'destroy' is not one of {ACTIONS_TEXT}"),
        ("BURRITO_RUNNER_ATTEMPT", "0", "BURRITO_RUNNER_ATTEMPT: '0' is not an attempt number"),
        ("BURRITO_RUNNER_ATTEMPT", "two", "BURRITO_RUNNER_ATTEMPT: 'two' is not an attempt number"),
        ("BURRITO_DATASTORE_URL", "datastore:8080", "BURRITO_DATASTORE_URL: 'datastore:8080' is not an http://"),
    ],
)
def test_invalid_values(name: str, value: str, message: str) -> None:
    with pytest.raises(RunnerError) as error:
        RunnerEnv.from_environ({**ENV, name: value})
    assert message in str(error.value)


def test_pod_path(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.delenv("BURRITO_LOCAL_ROOT", raising=False)
    assert pod_path("/var/run/secrets/burrito-py/token") == Path("/var/run/secrets/burrito-py/token")
    monkeypatch.setenv("BURRITO_LOCAL_ROOT", str(tmp_path))
    assert pod_path("/var/run/secrets/burrito-py/token") == tmp_path / "var/run/secrets/burrito-py/token"


def test_token_is_read_from_the_pod_path(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setenv("BURRITO_LOCAL_ROOT", str(tmp_path))
    assert read_token() is None
    token = tmp_path / "var/run/secrets/burrito-py/token"
    token.parent.mkdir(parents=True)
    token.write_text("eyJ.token.sig\n")
    assert read_token() == "eyJ.token.sig"


def test_file_sum(tmp_path: Path) -> None:
    (tmp_path / "plan.bin").write_bytes(b"abc")
    assert file_sum(tmp_path / "plan.bin") == "sha256:ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad"


def test_bad_environment_exits_2_with_one_line_and_a_termination_message(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setenv("BURRITO_LOCAL_ROOT", str(tmp_path))
    (tmp_path / "dev").mkdir()
    assert main({**ENV, "BURRITO_RUNNER_ACTION": "destroy"}) == EXIT_BAD_INPUT
    err = capsys.readouterr().err
    assert err == f"error: BURRITO_RUNNER_ACTION: 'destroy' is not one of {ACTIONS_TEXT}\n"
    message = (tmp_path / "dev/termination-log").read_text()
    assert message == f"BURRITO_RUNNER_ACTION: 'destroy' is not one of {ACTIONS_TEXT}"


def test_an_unexpected_error_keeps_its_traceback_and_exits_4(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    def broken() -> str:
        raise RuntimeError("boom")

    monkeypatch.setenv("BURRITO_LOCAL_ROOT", str(tmp_path))
    monkeypatch.setattr(runner_main, "read_token", broken)
    assert main(ENV) == EXIT_INTERNAL
    err = capsys.readouterr().err
    assert "Traceback (most recent call last)" in err
    assert err.endswith("error: internal error: RuntimeError: boom\n")


def test_the_runner_starts_without_what_it_needs_only_after_init_or_only_on_some_paths() -> None:
    """Imported later (issue 31): the uploads' thread pool (and `logging` with it) and the summary's plan model
    while `init` runs, `traceback` on an internal error, `zipfile` and `platform` on the mirror paths, the variables
    and the managed state's modules for layers that have them."""
    import subprocess
    import sys

    later = ("concurrent.futures", "logging", "burrito_py.plans.model", "traceback",
             "zipfile", "platform", "burrito_py.runner.variables", "burrito_py.runner.state")
    script = ("import sys\nimport burrito_py.runner.main\n"
              f"print(','.join(name for name in {later!r} if name in sys.modules))")
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, check=True)
    assert done.stdout.strip() == ""


def test_runner_start_freezes_its_start_up_objects_and_collects_as_usual_during_the_attempt() -> None:
    """entry.py: no cycle collection while the runner's modules import (nothing there is garbage), those objects
    frozen afterwards, and the collector on again for the attempt itself."""
    import subprocess
    import sys

    script = (
        "import gc, sys\n"
        "import burrito_py.runner.main as runner\n"
        "runner.main = lambda early: print(gc.isenabled(), gc.get_freeze_count() > 1000, flush=True) or 0\n"
        "sys.argv = ['burrito-py', 'runner', 'start']\n"
        "from burrito_py.entry import main\n"
        "main()\n"
    )
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, check=True)
    assert done.stdout.split() == ["True", "True"]


def test_the_later_imports_start_once_after_init_starts() -> None:
    started: list[str] = []
    hook = runner_main._once_after("init", lambda: started.append("imports"))
    for step in ("init", "plan", "init"):
        hook(step)
    import time

    for _ in range(200):
        if started:
            break
        time.sleep(0.01)
    time.sleep(0.05)
    assert started == ["imports"]
