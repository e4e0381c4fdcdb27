"""A policy evaluation worker (`python -m burrito_py.policy.worker MEMORY_MIB`): one process of the controllers'
sandbox (sandbox.py) that compiles and evaluates the CEL and Rego rules it is sent, under resource limits.

Why a process: cel-rust holds the GIL for the whole of an evaluation and neither engine takes a cost limit, so
a rule evaluated in the controllers' process stops every thread of it (the event loop, the leader's Lease
renewal) for as long as the rule runs. Here a rule can only use this process, which the controllers kill.

Limits, set here once the engines are loaded (so their own start-up is not counted):
- memory: RLIMIT_DATA at the start-up footprint plus MEMORY_MIB (not RLIMIT_AS: regopy's allocator reserves
  256 GiB of address space at load; its reservation is counted once, what it commits later is counted again);
- CPU: before each rule, RLIMIT_CPU (soft) at the seconds used so far plus the rule's CPU seconds; the kernel
  then stops the process with SIGXCPU (no handler: a Python handler would not run while Rust code holds the GIL);
- wall clock: the controllers' side (sandbox.py) kills the process when a rule's time is up;
- oom_score_adj 1000: when the container runs short, the kernel kills a worker, not the controllers.

Protocol, over stdin/stdout: frames of a 4-byte big-endian length then the payload; requests are pickles from
the controllers (trusted), answers JSON (the controllers never unpickle what a worker, which runs tenants'
rules, sends). Nothing else may reach stdout: it is moved to stderr before anything is imported.
"""

from __future__ import annotations

import json
import math
import os
import pickle
import resource
import struct
import sys
from typing import Any, BinaryIO

__all__ = ["data_bytes", "main", "read_frame", "write_frame"]

HEADER = struct.Struct(">I")
# An error outcome with the data segment this close to its limit was the memory limit (regopy reports a failed
# allocation as an ordinary error).
MEMORY_MARGIN = 16 << 20


def read_frame(stream: BinaryIO) -> bytes | None:
    """The next frame's payload; None at the end of the stream."""
    header = stream.read(HEADER.size)
    if len(header) < HEADER.size:
        return None
    (size,) = HEADER.unpack(header)
    payload = stream.read(size)
    return payload if len(payload) == size else None


def write_frame(stream: BinaryIO, payload: bytes) -> None:
    stream.write(HEADER.pack(len(payload)) + payload)
    stream.flush()


def data_bytes() -> int:
    """This process's data segment (VmData: what RLIMIT_DATA counts)."""
    with open("/proc/self/status") as status:
        for line in status:
            if line.startswith("VmData:"):
                return int(line.split()[1]) * 1024
    return 0


def _cpu_seconds() -> float:
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime + usage.ru_stime


def _limit_cpu(seconds: int) -> None:
    _, hard = resource.getrlimit(resource.RLIMIT_CPU)
    soft = math.ceil(_cpu_seconds()) + seconds
    if hard != resource.RLIM_INFINITY:
        soft = min(soft, hard)
    resource.setrlimit(resource.RLIMIT_CPU, (soft, hard))


def _warm_up() -> None:
    """Load both engines (and regopy's allocator) before the memory limit is set."""
    import cel
    from regopy import Interpreter

    cel.compile("1 == 1").execute({})
    interpreter = Interpreter()
    interpreter.add_module("warm.rego", "package warm\nx := 1\n")
    str(interpreter.query("data.warm"))


def _compile_error(rule: Any) -> str | None:
    """What the compiler says of one CEL or Rego rule; None when it compiles. cel-rust has no type checker:
    a CEL type error shows when the rule is evaluated (an error outcome, which denies)."""
    if rule.cel is not None:
        import cel

        try:
            cel.compile(rule.cel.expression)
        except BaseException as exc:  # cel-rust raises ValueError, or pyo3's PanicException
            if isinstance(exc, KeyboardInterrupt | SystemExit | MemoryError):
                raise
            return f"CEL: {str(exc).splitlines()[0][:300] if str(exc) else type(exc).__name__}"
        return None
    if rule.rego is not None:
        from regopy import Interpreter

        from burrito_py.policy.rego_rules import package_of, rego_error_text

        module = rule.rego.module
        package = package_of(module)
        if package is None:
            return "Rego: the module has no package line"
        interpreter = Interpreter()
        try:
            interpreter.add_module("policy.rego", module)
            bundle = interpreter.build(f"data.{package}")
        except Exception as exc:  # regopy raises its RegoError for parse and compile errors
            return f"Rego: {rego_error_text(exc, module)}"
        if not bundle.ok():
            return "Rego: the module does not compile"
    return None


def _handle(request: tuple[Any, ...], state: dict[str, Any], memory_limit: int, cpu_seconds: int) -> dict[str, Any]:
    from burrito_py.policy.evaluate import evaluate_rule

    op = request[0]
    if op == "plan":
        state["plan"], state["drift_correction"] = request[1], request[2]
        return {"ok": True}
    if op == "rule":
        policy, rule_name = request[1], request[2]
        rule = next(r for r in policy.spec.rules if r.name == rule_name)
        _limit_cpu(cpu_seconds)
        try:
            results = evaluate_rule(policy, rule, state["plan"], state["drift_correction"])
        except BaseException as exc:  # a panic of an engine is the rule's error, never a crash
            if isinstance(exc, KeyboardInterrupt | SystemExit | MemoryError):
                raise
            from burrito_py.policy.evaluate import policy_name
            from burrito_py.policy.verdict import rule_result

            results = [rule_result(policy_name(policy), policy.KIND, rule.name, policy.spec.enforcement, "error",
                                   [], [f"rule {rule.name}: the engine failed: {str(exc)[:200]}"])]
        used = data_bytes()
        if any(r.outcome == "error" for r in results) and used >= memory_limit - MEMORY_MARGIN:
            return {"limit": "memory", "data": used}
        return {"results": [r.model_dump(mode="json") for r in results], "data": used}
    if op == "compile":
        _limit_cpu(cpu_seconds)
        return {"error": _compile_error(request[1]), "data": data_bytes()}
    raise ValueError(f"unknown request {op!r}")


def main(argv: list[str]) -> int:
    memory_mib, cpu_seconds = int(argv[0]), int(argv[1])
    answers: BinaryIO = os.fdopen(os.dup(1), "wb")
    os.dup2(2, 1)  # stray output (an engine's, a warning) must never reach the protocol's stream
    requests: BinaryIO = sys.stdin.buffer
    _warm_up()
    import burrito_py.policy.evaluate  # noqa: F401 - loaded before the limit, as the engines are

    try:
        with open("/proc/self/oom_score_adj", "w") as adj:
            adj.write("1000")
    except OSError:
        pass  # not Linux, or not allowed: the limits below still hold
    memory_limit = data_bytes() + (memory_mib << 20)
    resource.setrlimit(resource.RLIMIT_DATA, (memory_limit, memory_limit))
    write_frame(answers, json.dumps({"ready": True, "data": data_bytes(), "limit": memory_limit}).encode())
    state: dict[str, Any] = {"plan": None, "drift_correction": False}
    while True:
        frame = read_frame(requests)
        if frame is None:
            return 0
        try:
            answer = _handle(pickle.loads(frame), state, memory_limit, cpu_seconds)  # noqa: S301 - from the controllers
        except MemoryError:
            state.clear()  # the controllers replace a worker after any limit: its heap is not to be trusted
            answer = {"limit": "memory", "data": data_bytes()}
        except Exception as exc:  # a request this worker cannot serve: the controllers replace it
            answer = {"failed": f"{type(exc).__name__}: {str(exc)[:200]}"}
        write_frame(answers, json.dumps(answer).encode())


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
