"""`python -m burrito_py.runner`: the same as `burrito-py runner start`, without the CLI's imports."""

from __future__ import annotations

import sys

from burrito_py.runner.main import main

if __name__ == "__main__":
    sys.exit(main())
