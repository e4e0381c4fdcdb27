"""Duration settings take the same forms as flags and environment variables (issue 11, item 21)."""

from __future__ import annotations

import os
import subprocess
import sys
from datetime import timedelta
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st
from pydantic import ValidationError

from burrito_py.controllers.settings import ControllerSettings
from burrito_py.durations import format_duration, parse_duration

DURATIONS = ["drift_detection_period", "repository_poll_interval", "resync_interval", "failure_grace_period",
             "failure_grace_period_cap", "runner_start_timeout", "runner_plan_timeout", "runner_apply_timeout"]


@pytest.mark.parametrize("text", ["20", "20.0", "20s", "PT20S", "pt20s", "20000ms", " 20s "])
@pytest.mark.parametrize("field", DURATIONS)
def test_every_duration_variable_takes_seconds_units_and_iso(
    monkeypatch: pytest.MonkeyPatch, field: str, text: str
) -> None:
    monkeypatch.setenv(f"BURRITO_PY_{field.upper()}", text)
    assert getattr(ControllerSettings(), field) == timedelta(seconds=20)


@pytest.mark.parametrize(("text", "seconds"), [
    ("1h30m", 5400), ("5m", 300), ("1d", 86400), ("500ms", 0.5), ("P1DT2H", 93600), ("1.5", 1.5), ("0", 0),
])
def test_forms(text: str, seconds: float) -> None:
    assert parse_duration(text) == timedelta(seconds=seconds)


@given(st.one_of(st.integers(0, 999).map(lambda ms: timedelta(milliseconds=ms)),
                 st.integers(1, 10 * 86400).map(lambda s: timedelta(seconds=s))))
def test_a_formatted_duration_reads_back_as_itself(value: timedelta) -> None:
    """Messages write durations as a setting takes them (`10m`, `1h30m`, `8s`, `500ms`)."""
    assert parse_duration(format_duration(value)) == value


@pytest.mark.parametrize(("value", "text"), [
    (timedelta(minutes=10), "10m"), (timedelta(seconds=5400), "1h30m"), (timedelta(seconds=8), "8s"),
    (timedelta(milliseconds=500), "500ms"), (timedelta(0), "0ms"), (timedelta(days=1, seconds=5), "24h5s"),
])
def test_format_duration(value: timedelta, text: str) -> None:
    assert format_duration(value) == text


@pytest.mark.parametrize("text", ["20x", "", "-5", "1h30", "P", "inf", "s"])
def test_bad_forms_say_what_is_accepted(text: str) -> None:
    with pytest.raises(ValueError, match="duration"):
        parse_duration(text)


def _start(tmp_path: Path, **env: str) -> subprocess.CompletedProcess[str]:
    environ = {**os.environ, "KUBECONFIG": str(tmp_path / "absent"), **env}
    return subprocess.run(
        [sys.executable, "-c", "from burrito_py.entry import main; main()", "controllers", "start"],
        env=environ, capture_output=True, text=True, timeout=60, check=False,
    )


def test_controllers_start_names_the_variable_of_a_bad_duration_without_a_traceback(tmp_path: Path) -> None:
    done = _start(tmp_path, BURRITO_PY_FAILURE_GRACE_PERIOD_CAP="20 parsecs")
    assert done.returncode == 2, done.stderr
    assert "Traceback" not in done.stderr
    assert done.stderr.strip() == (
        "invalid controller settings: BURRITO_PY_FAILURE_GRACE_PERIOD_CAP: '20 parsecs' is not a duration: "
        "seconds (20), units (20s, 5m, 1h30m, 500ms) or ISO 8601 (PT20S)"
    )


def test_controllers_start_accepts_plain_seconds_in_the_environment(tmp_path: Path) -> None:
    """`=20` (seconds, as the flag) once stopped the controllers with a pydantic traceback at once; now the
    settings pass and the controllers run (here: waiting for a cluster that is absent)."""
    environ = {**os.environ, "KUBECONFIG": str(tmp_path / "absent"), "BURRITO_PY_FAILURE_GRACE_PERIOD_CAP": "20",
               "BURRITO_PY_DRIFT_DETECTION_PERIOD": "20m", "BURRITO_PY_METRICS_PORT": "0"}
    process = subprocess.Popen(
        [sys.executable, "-c", "from burrito_py.entry import main; main()", "controllers", "start"],
        env=environ, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
    )
    try:
        code = process.wait(timeout=8)
    except subprocess.TimeoutExpired:
        code = None  # still running: past the settings
    finally:
        process.kill()
        _, stderr = process.communicate()
    assert code != 2, stderr
    assert "invalid controller settings" not in stderr
    assert "failure_grace_period_cap" not in stderr


def test_policy_limits_are_settings_and_one_namespace_cannot_be_given_every_worker() -> None:
    from burrito_py.policy.sandbox import Limits

    settings = ControllerSettings(policy_rule_timeout="500ms", policy_plan_budget="PT5S", policy_rule_memory_mib=64,
                                  policy_workers=4, policy_workers_per_namespace=2, policy_rule_cpu_seconds=1)
    assert settings.policy_limits() == Limits(rule_seconds=0.5, cpu_seconds=1, memory_mib=64, plan_seconds=5.0,
                                              workers=4, per_namespace=2)
    assert ControllerSettings().policy_limits() == Limits()  # the documented defaults, in one place
    with pytest.raises(ValidationError, match="BURRITO_PY_POLICY_WORKERS_PER_NAMESPACE"):
        ControllerSettings(policy_workers=1, policy_workers_per_namespace=2)
    with pytest.raises(ValidationError, match="BURRITO_PY_POLICY_RULE_TIMEOUT"):
        ControllerSettings(policy_rule_timeout="0s")
