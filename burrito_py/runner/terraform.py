"""The terraform/tofu steps of a run, with their output streamed to stdout line by line as it comes.

Every step runs with `TF_IN_AUTOMATION=1` (no "next, run terraform apply" hints) and `TF_INPUT=0` plus
`-input=false` (never wait on a prompt in a pod), and `CHECKPOINT_DISABLE=1` unless set otherwise. Each step
runs in its own process group and hears termination signals from the runner only (see `signals`). Every step
also gets `-no-color`: the output ends up in `kubectl logs`, in the datastore and in the UI as plain text, where
ANSI escapes are noise.

Arguments (the plan file is an absolute path outside the source tree, so terragrunt, which may run
terraform from its cache directory, finds it too):
    init  -input=false -no-color [extraInitArgs]
    plan  -input=false -no-color [-destroy] -out=<plan> [extraPlanArgs]      (-destroy: a run with spec.destroy)
    show  -json <plan>                                  (stdout to a file, not echoed)
    apply -input=false -no-color [extraApplyArgs] <plan>
    output -json -no-color                              (stdout to a file, not echoed: it holds sensitive values)

Day-2 operations (docs/architecture.md §5.12), their addresses and IDs checked by api/operations.py and passed as
argv (never through a shell), after every option, so none can be read as one:
    plan  … -replace=ADDR… -target=ADDR… [extraPlanArgs]
    import -input=false -no-color ADDR ID
    state rm -no-color ADDR
    state mv -no-color SRC DST
    force-unlock -no-color -force LOCK_ID

The human-readable plan is what `plan` printed, kept as it streams by (`Steps.plan(..., copy_to=…)`), not a
second `terraform show <plan>`: the same rendering (plus refresh lines and warnings, which reviewers want
too), without another process that reads and renders the whole plan (~0.4 s of CPU on 1,000 resources).
`Steps.show` remains for callers that only have a plan file.

OpenTofu takes the same arguments (the binary is `tofu`); with terragrunt the command is
`terragrunt <the same arguments>` with `TG_TF_PATH` (and the pre-0.73 `TERRAGRUNT_TFPATH`) set to the
resolved terraform/tofu binary, non-interactive mode on, and `TG_TF_FORWARD_STDOUT` (terraform's output as is).

Extra arguments may hold secrets (`-backend-config=password=…`), so the echoed command lines show only what
precedes the first `=` of each extra argument.
"""

from __future__ import annotations

import codecs
import os
import subprocess
import sys
from collections import deque
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import IO, TYPE_CHECKING, Literal

from burrito_py.runner.masking import masker
from burrito_py.runner.signals import stopping
from burrito_py.runner.tools import Tool

if TYPE_CHECKING:  # the models (pydantic) are imported when a run needs them: the runner starts without them
    from burrito_py.api.operation_rules import OperationFields

__all__ = [
    "CHANGING_STEPS",
    "Interrupted",
    "StepFailed",
    "Steps",
    "apply_args",
    "command",
    "init_args",
    "is_stale_plan",
    "mask",
    "operation_args",
    "output_json_args",
    "plan_args",
    "show_args",
    "show_json_args",
    "state_pull_args",
    "state_push_args",
    "step_env",
]

Step = Literal["init", "plan", "show -json", "show", "apply", "output -json", "import", "state rm", "state mv",
               "force-unlock", "state pull", "state push"]
# Steps that change something (state, lock, .terraform): none starts once the runner was told to stop. The
# read-only ones still run, to record what a step that did finish did (see `signals`).
CHANGING_STEPS = ("init", "plan", "apply", "import", "state rm", "state mv", "force-unlock", "state push")
TAIL_LINES = 40


class StepFailed(Exception):
    """A step exited non-zero. `output` holds the last lines it printed (already streamed)."""

    def __init__(self, step: str, exit_code: int, output: Sequence[str] = ()) -> None:
        self.step, self.exit_code, self.output = step, exit_code, list(output)
        errors = [line.strip() for line in self.output if line.startswith(("Error:", "error:", "│ Error:"))]
        detail = "; ".join(errors[:3]) or (self.output[-1].strip() if self.output else "")
        super().__init__(self.describe(detail))

    def describe(self, detail: str) -> str:
        return f"{self.step} failed (exit code {self.exit_code})" + (f": {detail}" if detail else "")


class Interrupted(StepFailed):
    """The runner got SIGTERM/SIGINT (see `signals`): the step was asked to stop, or was not started."""

    def __init__(self, step: str, exit_code: int | None, signal_name: str, killed: bool = False) -> None:
        self.signal_name, self.killed = signal_name, killed
        super().__init__(step, -1 if exit_code is None else exit_code)

    def describe(self, detail: str) -> str:
        action = self.step.split(" ", 1)[-1]
        if self.exit_code == -1:
            return f"interrupted by {self.signal_name} before {action}"
        how = "was killed at the stop deadline" if self.killed else f"stopped (exit code {self.exit_code})"
        return f"interrupted by {self.signal_name} during {action}: {self.step.split(' ', 1)[0]} {how}"


def is_stale_plan(output: Sequence[str]) -> bool:
    """Whether a failed `apply <plan>` printed terraform's refusal of a plan made against an
    older state: "Error: Saved plan is stale" (terraform 1.11.4, checked by hand and by the runner's tests)."""
    return any("Saved plan is stale" in line for line in output)


# -- arguments (pure) ---------------------------------------------------------------------------
def init_args(extra: Sequence[str] = ()) -> list[str]:
    return ["init", "-input=false", "-no-color", *extra]


def state_pull_args() -> list[str]:
    return ["state", "pull"]


def state_push_args(state_file: Path | str) -> list[str]:
    """`state push` without `-force`: terraform refuses a state of another lineage, or a lower serial, than the
    destination's (an unrelated state there is never overwritten), and keeps the pushed lineage and serial."""
    return ["state", "push", "-no-color", str(state_file)]


def plan_args(plan_file: Path | str, extra: Sequence[str] = (), destroy: bool = False, lock: bool = True,
              replace: Sequence[str] = (), target: Sequence[str] = ()) -> list[str]:
    """`lock=False` for a pull request's plan: a preview that never writes state must not hold the state lock
    an apply of the branch waits for (nor fail because that apply holds it). `replace`, `target`: a day-2
    operation's addresses (checked, api/operations.py), each one argument `-replace=ADDR`."""
    return ["plan", "-input=false", "-no-color", *(["-destroy"] if destroy else []), *([] if lock else ["-lock=false"]),
            f"-out={plan_file}", *(f"-replace={a}" for a in replace), *(f"-target={a}" for a in target), *extra]


def operation_args(action: str, operation: OperationFields) -> tuple[Step, list[str]]:
    """The step and argv of a day-2 operation run (§5.12). The values were checked when the run was made
    (api/operations.py: addresses, an ID that is one printable line, nothing starting with `-`); they are checked
    again here, as the run is read from the API, and always come after the options."""
    from burrito_py.api.operation_rules import check_address, check_import_id, check_lock_id

    if action == "import":
        address, id_ = check_address(operation.address or "", "address"), check_import_id(operation.id or "")
        return "import", ["import", "-input=false", "-no-color", address, id_]
    if action == "state-rm":
        return "state rm", ["state", "rm", "-no-color", check_address(operation.address or "", "address")]
    if action == "state-mv":
        source = check_address(operation.source or "", "source")
        return "state mv", ["state", "mv", "-no-color", source,
                            check_address(operation.destination or "", "destination")]
    if action == "force-unlock":
        return "force-unlock", ["force-unlock", "-no-color", "-force", check_lock_id(operation.lock_id or "")]
    raise ValueError(f"{action!r} is not a day-2 operation")


def show_json_args(plan_file: Path | str) -> list[str]:
    return ["show", "-json", str(plan_file)]


def show_args(plan_file: Path | str) -> list[str]:
    return ["show", "-no-color", str(plan_file)]


def apply_args(plan_file: Path | str, extra: Sequence[str] = ()) -> list[str]:
    # The plan file is the one positional argument and must come last.
    return ["apply", "-input=false", "-no-color", *extra, str(plan_file)]


def output_json_args() -> list[str]:
    # `-json` prints every output with its value, sensitive ones included (the human form hides them).
    return ["output", "-json", "-no-color"]


def command(tool: Tool, args: Sequence[str]) -> list[str]:
    return [tool.terragrunt or tool.binary, *args]


def step_env(tool: Tool, base: Mapping[str, str]) -> dict[str, str]:
    # CHECKPOINT_DISABLE: no version check against checkpoint-api.hashicorp.com (nor its signature file in
    # HOME) from every step of every run, unless the pod's environment asks for it.
    env = {"CHECKPOINT_DISABLE": "1", **base, "TF_IN_AUTOMATION": "1", "TF_INPUT": "0"}
    if tool.terragrunt:
        env.update(
            TG_TF_PATH=tool.binary,
            TERRAGRUNT_TFPATH=tool.binary,
            TG_NON_INTERACTIVE="true",
            TERRAGRUNT_NON_INTERACTIVE="true",
            # Terraform's own output as it prints it (the human-readable plan, `show -json`, `output -json`),
            # not folded into Terragrunt's log lines with a timestamp and a `STDOUT terraform:` prefix each;
            # Terragrunt's own log goes to stderr, without colours.
            TG_TF_FORWARD_STDOUT="true",
            TG_NO_COLOR="true",
        )
    return env


def mask(extra: Sequence[str]) -> list[str]:
    """Extra arguments as echoed: what follows the first `=` may be a secret."""
    return [arg.split("=", 1)[0] + "=…" if "=" in arg else arg for arg in extra]


# -- running ------------------------------------------------------------------------------------
class Steps:
    """Runs the steps of one layer directory with one tool; output goes to `out` (default: sys.stdout)."""

    def __init__(self, tool: Tool, cwd: Path, env: Mapping[str, str] | None = None, out: IO[str] | None = None,
                 started: Callable[[Step], None] | None = None):
        """`started` is called with each step's name once its process runs (the runner's own idle time begins)."""
        self.tool, self.cwd = tool, cwd
        self.env = step_env(tool, os.environ if env is None else env)
        self._out = out
        self._started = started

    @property
    def out(self) -> IO[str]:
        return self._out or sys.stdout

    def init(self, extra: Sequence[str] = ()) -> None:
        self._run("init", init_args(extra), init_args(mask(extra)))

    def state_pull(self, dest: Path) -> None:
        """The current state as JSON into `dest`, never to the log: it holds the resources' secrets."""
        args = state_pull_args()
        self._run("state pull", args, args, stdout_to=dest)

    def state_push(self, state_file: Path) -> None:
        args = state_push_args(state_file)
        self._run("state push", args, args)

    def plan(
        self, plan_file: Path, extra: Sequence[str] = (), copy_to: Path | None = None, destroy: bool = False,
        lock: bool = True, replace: Sequence[str] = (), target: Sequence[str] = (),
    ) -> None:
        """`copy_to` receives the plan's output as well (the human-readable plan)."""
        args = plan_args(plan_file, extra, destroy, lock, replace, target)
        shown = plan_args(plan_file, mask(extra), destroy, lock, replace, target)
        self._run("plan", args, shown, copy_to=copy_to)

    def operation(self, action: str, operation: OperationFields) -> None:
        """A day-2 operation (import, state rm, state mv, force-unlock), its output streamed as any step's."""
        step, args = operation_args(action, operation)
        self._run(step, args, args)

    def show_json(self, plan_file: Path, dest: Path) -> None:
        args = show_json_args(plan_file)
        self._run("show -json", args, args, stdout_to=dest)

    def show(self, plan_file: Path, dest: Path) -> None:
        args = show_args(plan_file)
        self._run("show", args, args, stdout_to=dest)

    def apply(self, plan_file: Path, extra: Sequence[str] = ()) -> None:
        self._run("apply", apply_args(plan_file, extra), apply_args(plan_file, mask(extra)))

    def output_json(self, dest: Path) -> None:
        """The root module's outputs as JSON into `dest`, never to the log: sensitive values are in it."""
        args = output_json_args()
        self._run("output -json", args, args, stdout_to=dest)

    def _print(self, text: str, copy: IO[str] | None = None) -> None:
        text = masker().mask(text)  # the human-readable plan (`copy`) is uploaded: it is masked too
        self.out.write(text)
        self.out.flush()
        if copy is not None:
            copy.write(text)

    def _relay(self, stream: IO[bytes], tail: deque[str], copy: IO[str] | None = None) -> None:
        """Forward every complete line as soon as it arrives. Lines are read in whatever blocks the pipe
        holds rather than one by one: on a 1,000-resource plan that is ~0.1 s less CPU next to terraform."""
        decoder = codecs.getincrementaldecoder("utf-8")(errors="replace")
        pending = ""
        read = getattr(stream, "read1", stream.read)
        while chunk := read(65536):
            *lines, pending = (pending + decoder.decode(chunk)).split("\n")
            if lines:
                self._print("\n".join(lines) + "\n", copy)
                tail.extend(lines)
        pending += decoder.decode(b"", final=True)
        if pending:
            self._print(pending + "\n", copy)
            tail.append(pending)

    def _run(
        self, step: Step, args: list[str], shown: list[str], stdout_to: Path | None = None, copy_to: Path | None = None
    ) -> None:
        argv = command(self.tool, args)
        name = Path(argv[0]).name
        stop = stopping()
        if step in CHANGING_STEPS and stop.requested:
            raise Interrupted(f"{name} {step}", None, stop.signal_name or "a signal")
        self._print(f"$ {name} {' '.join(shown)}\n")
        tail: deque[str] = deque(maxlen=TAIL_LINES)
        sink = stdout_to.open("wb") if stdout_to is not None else None
        copy = copy_to.open("w", encoding="utf-8") if copy_to is not None else None
        try:
            try:
                process = stop.start(f"{name} {step}", lambda: subprocess.Popen(
                    argv,
                    cwd=self.cwd,
                    env=self.env,
                    stdin=subprocess.DEVNULL,
                    stdout=sink if sink is not None else subprocess.PIPE,
                    stderr=subprocess.PIPE if sink is not None else subprocess.STDOUT,
                    process_group=0,  # signals reach it from the runner only, and once (see `signals`)
                ))
            except OSError as exc:
                raise StepFailed(f"{name} {step}", 127, [f"error: cannot run {argv[0]}: {exc}"]) from None
            if self._started is not None:
                self._started(step)
            stream = process.stderr if sink is not None else process.stdout
            assert stream is not None
            try:
                with stream:
                    self._relay(stream, tail, copy)
                    code = process.wait()
            finally:
                stop.finished(process)
        finally:
            for handle in (sink, copy):
                if handle is not None:
                    handle.close()
        if code != 0 and stop.requested:
            raise Interrupted(f"{name} {step}", code, stop.signal_name or "a signal", killed=stop.killed)
        if code != 0:
            raise StepFailed(f"{name} {step}", code, tail)
