"""Step arguments for terraform, tofu and terragrunt, and how steps run (streaming, failures), with fake
binaries; the real terraform runs in tests/integration/runner."""

from __future__ import annotations

import io
import stat
from pathlib import Path

import pytest

from burrito_py.runner.terraform import (
    StepFailed,
    Steps,
    apply_args,
    command,
    init_args,
    mask,
    output_json_args,
    plan_args,
    show_args,
    show_json_args,
    step_env,
)
from burrito_py.runner.tools import Tool

TERRAFORM = Tool("terraform", "/opt/tf/terraform", "1.11.4")
TOFU = Tool("opentofu", "/opt/tofu/tofu", "1.8.3")
TERRAGRUNT = Tool("terraform", "/opt/tf/terraform", "1.11.4", "/opt/tg/terragrunt", "0.67.0")


def test_arguments() -> None:
    extra = ["-backend-config=path=/state/x.tfstate", "-upgrade"]
    assert init_args(extra) == [
        "init", "-input=false", "-no-color", "-backend-config=path=/state/x.tfstate", "-upgrade"]
    assert plan_args("/w/plan.bin", ["-var=a=b", "-refresh=false"]) == [
        "plan", "-input=false", "-no-color", "-out=/w/plan.bin", "-var=a=b", "-refresh=false"]
    assert plan_args("/w/plan.bin", ["-var=a=b"], destroy=True) == [
        "plan", "-input=false", "-no-color", "-destroy", "-out=/w/plan.bin", "-var=a=b"]
    assert show_json_args(Path("/w/plan.bin")) == ["show", "-json", "/w/plan.bin"]
    assert show_args("/w/plan.bin") == ["show", "-no-color", "/w/plan.bin"]
    assert output_json_args() == ["output", "-json", "-no-color"]
    # The plan file is apply's only positional argument: it comes last, after the extra flags.
    assert apply_args("/w/plan.bin", ["-parallelism=2"]) == [
        "apply", "-input=false", "-no-color", "-parallelism=2", "/w/plan.bin"]
    assert apply_args("/w/plan.bin") == ["apply", "-input=false", "-no-color", "/w/plan.bin"]
    # A pull request's plan never takes the state lock.
    assert plan_args("/w/plan.bin", lock=False) == [
        "plan", "-input=false", "-no-color", "-lock=false", "-out=/w/plan.bin"]


@pytest.mark.parametrize(
    ("tool", "argv0"),
    [(TERRAFORM, "/opt/tf/terraform"), (TOFU, "/opt/tofu/tofu"), (TERRAGRUNT, "/opt/tg/terragrunt")],
)
def test_command_per_tool(tool: Tool, argv0: str) -> None:
    assert command(tool, plan_args("/w/plan.bin")) == [argv0, "plan", "-input=false", "-no-color", "-out=/w/plan.bin"]
    assert command(tool, apply_args("p")) == [argv0, "apply", "-input=false", "-no-color", "p"]


def test_environment() -> None:
    env = step_env(TOFU, {"PATH": "/bin", "TF_IN_AUTOMATION": ""})
    assert env == {"PATH": "/bin", "TF_IN_AUTOMATION": "1", "TF_INPUT": "0", "CHECKPOINT_DISABLE": "1"}
    assert step_env(TOFU, {"CHECKPOINT_DISABLE": ""})["CHECKPOINT_DISABLE"] == ""  # the pod's choice wins
    grunt = step_env(TERRAGRUNT, {})
    assert grunt["TG_TF_PATH"] == grunt["TERRAGRUNT_TFPATH"] == "/opt/tf/terraform"
    assert grunt["TG_NON_INTERACTIVE"] == "true"


def test_echoed_extra_arguments_hide_values() -> None:
    assert mask(["-backend-config=password=hunter2", "-upgrade", "-var", "token=abc"]) == [
        "-backend-config=…", "-upgrade", "-var", "token=…"]


# -- running ------------------------------------------------------------------------------------
def fake_binary(path: Path, script: str) -> Tool:
    path.write_text("#!/bin/sh\n" + script)
    path.chmod(path.stat().st_mode | stat.S_IXUSR)
    return Tool("terraform", str(path), "1.11.4")


class Watching(io.StringIO):
    """Output that reacts to what is written, as it is written."""

    def __init__(self, trigger: str, go: Path) -> None:
        super().__init__()
        self.trigger, self.go = trigger, go

    def write(self, text: str) -> int:
        if self.trigger in text:
            self.go.touch()
        return super().write(text)


def test_output_streams_while_the_step_runs(tmp_path: Path) -> None:
    # The fake step prints one line, then waits until that line has reached our output: if output were
    # only forwarded at exit, it would time out and fail.
    go = tmp_path / "go"
    tool = fake_binary(tmp_path / "terraform", f"""
echo "first line $TF_IN_AUTOMATION $TF_INPUT $*"
i=0
while [ ! -e {go} ]; do i=$((i+1)); if [ $i -gt 2000 ]; then echo timeout; exit 9; fi; sleep 0.01; done
echo "second line" >&2
""")
    out = Watching("first line", go)
    Steps(tool, tmp_path, env={"PATH": "/usr/bin:/bin"}, out=out).init(["-backend-config=path=/x"])
    assert out.getvalue().splitlines() == [
        "$ terraform init -input=false -no-color -backend-config=…",
        "first line 1 0 init -input=false -no-color -backend-config=path=/x",
        "second line",
    ]


def test_the_started_hook_runs_while_the_steps_process_runs(tmp_path: Path) -> None:
    """`started` (the runner imports a plan's later modules then) is called once the process runs, before it
    ends: the fake step waits for the file the hook writes."""
    go = tmp_path / "go"
    tool = fake_binary(tmp_path / "terraform", f"""
i=0
while [ ! -e {go} ]; do i=$((i+1)); if [ $i -gt 2000 ]; then echo timeout; exit 9; fi; sleep 0.01; done
echo "went on"
""")
    called: list[str] = []

    def started(step: str) -> None:
        called.append(step)
        go.touch()

    out = io.StringIO()
    steps = Steps(tool, tmp_path, env={"PATH": "/usr/bin:/bin"}, out=out, started=started)
    steps.init()
    steps.show_json(tmp_path / "plan.bin", tmp_path / "plan.json")
    assert called == ["init", "show -json"]
    assert "went on" in out.getvalue()


def test_show_writes_stdout_to_a_file_and_streams_stderr(tmp_path: Path) -> None:
    tool = fake_binary(tmp_path / "terraform", 'echo \'{"format_version": "1.2"}\'\necho "a warning" >&2\n')
    out = io.StringIO()
    Steps(tool, tmp_path, env={}, out=out).show_json(tmp_path / "plan.bin", tmp_path / "plan.json")
    assert (tmp_path / "plan.json").read_text() == '{"format_version": "1.2"}\n'
    assert out.getvalue().splitlines() == [f"$ terraform show -json {tmp_path / 'plan.bin'}", "a warning"]


def test_a_failing_step_raises_with_its_errors(tmp_path: Path) -> None:
    tool = fake_binary(tmp_path / "terraform", """
echo "Initializing..."
echo "Error: Unsupported argument" >&2
echo "  on main.tf line 2" >&2
exit 3
""")
    out = io.StringIO()
    with pytest.raises(StepFailed) as error:
        Steps(tool, tmp_path, env={}, out=out).plan(tmp_path / "plan.bin")
    assert (error.value.step, error.value.exit_code) == ("terraform plan", 3)
    assert str(error.value) == "terraform plan failed (exit code 3): Error: Unsupported argument"
    assert "Error: Unsupported argument" in out.getvalue()  # streamed before the failure


def test_a_missing_binary_is_a_failed_step(tmp_path: Path) -> None:
    tool = Tool("opentofu", str(tmp_path / "no-such-tofu"), "1.8.3")
    expected = r"no-such-tofu init failed \(exit code 127\): error: cannot run .*no-such-tofu"
    with pytest.raises(StepFailed, match=expected):
        Steps(tool, tmp_path, env={}, out=io.StringIO()).init()
