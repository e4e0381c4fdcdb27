"""`python -m burrito_py.runner`: the same as `burrito-py runner start`, without the CLI's imports."""

from __future__ import annotations

if __name__ == "__main__":
    from burrito_py.runner.start import start

    start()
