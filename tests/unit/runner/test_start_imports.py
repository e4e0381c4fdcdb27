"""What a runner imports before `init` starts (issue 31: the runner within 10 % of bare Terraform). Every attempt
of every run pays these before its first terraform step, with a core idle: the modules below are each several
milliseconds (dataclasses with inspect, ast and dis; hashlib's OpenSSL set-up; pydantic, httpx, PyYAML much more),
and nothing before `init` needs them. The plan's later modules import while `init` runs (`_import_plan_modules`)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

# What `burrito-py runner start` imports until `Steps.init`: the entry point, runner.main's own imports, and what
# `Runner.run` imports before `init` (the object readers, effective settings, operation rules, the source).
BEFORE_INIT = """
import sys
from burrito_py.runner.start import RUNNER_SKIPPED_IMPORTS
for name in RUNNER_SKIPPED_IMPORTS:
    sys.modules.setdefault(name, None)
import burrito_py.entry, burrito_py.runner.start, burrito_py.runner.main, burrito_py.runner.store
import burrito_py.api.effective, burrito_py.api.operation_rules, burrito_py.runner.objects
import burrito_py.runner.sources, burrito_py.runner.variables
print(" ".join(sorted(name for name, module in sys.modules.items()
                      if module is not None and name.split(".")[0] in {heavy!r})))
"""
HEAVY = {"dataclasses", "hashlib", "inspect", "pydantic", "httpx", "yaml", "kubernetes", "concurrent", "logging"}


def test_nothing_heavy_is_imported_before_init() -> None:
    done = subprocess.run([sys.executable, "-c", BEFORE_INIT.format(heavy=HEAVY)], capture_output=True, text=True,
                          timeout=120, cwd=Path(__file__).resolve().parents[3], check=False)
    assert done.returncode == 0, done.stderr
    assert done.stdout.split() == []


def test_the_plans_later_modules_are_what_init_imports_in_the_background() -> None:
    """What the guard above keeps out is imported once `init` runs: the sum and the uploads still have hashlib."""
    code = ("import sys\nfrom burrito_py.runner.main import _import_plan_modules\n_import_plan_modules()\n"
            "print(all(m in sys.modules for m in ('hashlib', 'concurrent.futures', 'burrito_py.plans.model')))")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120,
                          cwd=Path(__file__).resolve().parents[3], check=False)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "True"
