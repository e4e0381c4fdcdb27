"""Terraform/OpenTofu steps, their output streamed to stdout line by line as it comes."""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Sequence
from pathlib import Path


class StepFailed(Exception):
    def __init__(self, step: str, exit_code: int, tail: str) -> None:
        super().__init__(f"{step} failed (exit code {exit_code}): {tail}")
        self.step, self.exit_code, self.tail = step, exit_code, tail


def step_args(binary: str, step: str, extra: Sequence[str] = (), plan_file: str = "plan.bin") -> list[str]:
    if step == "init":
        return [binary, "init", "-input=false", "-no-color", *extra]
    if step == "plan":
        return [binary, "plan", "-input=false", "-no-color", "-out", plan_file, *extra]
    if step == "apply":
        return [binary, "apply", "-input=false", "-no-color", *extra, plan_file]
    if step == "show-json":
        return [binary, "show", "-json", plan_file]
    if step == "show":
        return [binary, "show", "-no-color", plan_file]
    if step == "output":
        return [binary, "output", "-json"]
    raise ValueError(f"unknown step {step}")


def run_step(args: Sequence[str], cwd: Path, capture: bool = False) -> str:
    """Run one step; stream its output unless `capture` (then return stdout). Raises StepFailed."""
    env = {**os.environ, "TF_IN_AUTOMATION": "1", "TF_INPUT": "0"}
    step = " ".join(args[1:3])
    print(f"$ {' '.join(args)}", flush=True)
    process = subprocess.Popen(
        args,
        cwd=cwd,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT if not capture else subprocess.PIPE,
        text=True,
        bufsize=1,
    )
    assert process.stdout is not None
    if capture:
        out, err = process.communicate()
        if process.returncode != 0:
            sys.stdout.write(err)
            raise StepFailed(step, process.returncode, (err.strip().splitlines() or [""])[-1])
        return out
    tail: list[str] = []
    for line in process.stdout:
        sys.stdout.write(line)
        sys.stdout.flush()
        if line.strip():
            tail = [*tail[-19:], line.rstrip()]
    code = process.wait()
    if code != 0:
        errors = [t for t in tail if t.startswith("Error")] or tail[-1:]
        raise StepFailed(step, code, "; ".join(errors))
    return ""
