"""`python -m burrito_py.runner`: the same as `burrito-py runner start`, without the CLI's imports."""

from __future__ import annotations

from burrito_py.runner.main import exit_now, main

if __name__ == "__main__":
    exit_now(main())
