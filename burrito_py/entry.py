"""The `burrito-py` console script.

`burrito-py runner start` (a runner pod's whole command) goes straight to the runner (`runner/start.py`): building
the typer CLI imports every command group (~0.15 s) that a runner never uses, on every attempt of every run. Every
other invocation, `runner start --help` included, goes through the CLI.
"""

from __future__ import annotations

import sys


def main() -> None:
    from burrito_py.kube import pod_dns as dns

    dns.install()  # cluster DNS for processes of the local kubelet; a no-op elsewhere (cheap: os and socket)
    if sys.argv[1:] == ["runner", "start"]:
        from burrito_py.runner.start import start

        start()
    from burrito_py.cli import app

    app()
