"""`python -m burrito_py.runner`: the same as `burrito-py runner start`, without the CLI's imports."""

from __future__ import annotations

if __name__ == "__main__":
    import os

    from burrito_py.runner.early import EarlyReads

    early = EarlyReads.start(os.environ)  # as entry.py: the run and the layer come while the attempt's modules import
    from burrito_py.runner.main import exit_now, main

    exit_now(main(early=early))
