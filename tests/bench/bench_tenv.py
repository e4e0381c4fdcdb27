"""tenv's own cost per run (issue 27): what the runner pays for installing an engine through tenv rather than by
itself, and what tenv would cost a run whose engine is already installed.

    python3 -m tests.bench.bench_tenv [--pairs N]     (from the repository's root)

Both installs go through `runner/tools.resolve_tool` into an empty TENV_ROOT, from the datastore's tool mirror over
HTTPS (the archive already held by the datastore, as after a cluster's first run of that version): once with the
tenv that scripts/build-engines.sh built on PATH (tenv lists the mirror's tenv layout, downloads, checks the
SHA256SUMS, unpacks), once without (the runner's own download and unzip). Pairs alternate; the figures are medians
of each and of the pair's difference, per engine. Then, with the engine installed: `resolve_tool` with tenv on PATH
(the runner does not call tenv for an installed version) and `tenv <tool> install <version>` and `tenv <tool>
detect` themselves, which is what calling tenv on every run would add. Prints figures; asserts nothing.
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import subprocess
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

from burrito_py.api.effective import EffectiveTool
from burrito_py.datastore.in_process import free_port, running_datastore
from burrito_py.runner.tools import ToolMirror, resolve_tool
from tests.support.engines import TERRAGRUNT_RELEASES, engines_root, running_release_site
from tests.support.fakes.tls import make_tls

ENGINES = (("opentofu", "1.12.6", "tofu"), ("terraform", "1.5.7", "tf"))


def _timed(call: Callable[[], object]) -> float:
    began = time.perf_counter()
    call()
    return time.perf_counter() - began


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--pairs", type=int, default=7)
    args = parser.parse_args()
    tenv_bin = engines_root() / "bin"
    with_tenv = f"{tenv_bin}{os.pathsep}/usr/bin{os.pathsep}/bin"
    without_tenv = f"/usr/bin{os.pathsep}/bin"
    os.environ.pop("BURRITO_RUNNER_TOOLS_PATH", None)
    with tempfile.TemporaryDirectory(prefix="bench-tenv-") as tmp_name:
        tmp = Path(tmp_name)
        tls = make_tls(tmp / "tls")
        layer = tmp / "layer"
        layer.mkdir()
        with running_release_site(engines_root() / "mirror", tls) as (_, base):
            port = free_port()
            with running_datastore(tmp / "datastore", tls_port=port, tls_cert_file=tls.cert,
                                   tls_key_file=tls.key, tool_cache_enabled=True, tool_cache_terraform_url=base,
                                   tool_cache_opentofu_url=f"{base}/opentofu/opentofu/releases/download",
                                   tool_cache_opentofu_index_url=f"{base}/tofu/api.json",
                                   tool_cache_terragrunt_url=f"{base}/{TERRAGRUNT_RELEASES}",
                                   tool_cache_terragrunt_index_url=f"{base}/terragrunt/releases",
                                   upstream_ca_file=tls.ca):
                mirror = ToolMirror(f"https://127.0.0.1:{port}/tools/v1/", None, tls.ca)
                for kind, version, sub in ENGINES:
                    effective = EffectiveTool(kind=kind, version=version, terragrunt=None)  # type: ignore[arg-type]

                    def resolve(effective: EffectiveTool = effective) -> None:
                        resolve_tool(effective, layer, mirror)

                    def install(path: str, root: Path) -> float:
                        shutil.rmtree(root, ignore_errors=True)
                        os.environ["PATH"], os.environ["TENV_ROOT"] = path, str(root)
                        return _timed(resolve)

                    root = tmp / "root"
                    install(without_tenv, root)  # the datastore reads the archive through once
                    through_tenv: list[float] = []
                    by_runner: list[float] = []
                    for n in range(args.pairs):
                        order = [(with_tenv, through_tenv), (without_tenv, by_runner)]
                        for path, times in order if n % 2 == 0 else order[::-1]:
                            times.append(install(path, root))
                    diffs = [a - b for a, b in zip(through_tenv, by_runner, strict=True)]
                    print(f"{kind} {version}: install through tenv {statistics.median(through_tenv):.3f} s, by the "
                          f"runner {statistics.median(by_runner):.3f} s, tenv adds {statistics.median(diffs):+.3f} s "
                          f"(median of {args.pairs} pairs)")
                    os.environ["PATH"] = with_tenv
                    installed = [_timed(resolve) for _ in range(args.pairs)]
                    env = {**os.environ, "TENV_ROOT": str(root), "TENV_REMOTE_CONF": os.devnull}
                    calls = {}
                    for what in (["install", version], ["detect"]):
                        argv = [str(tenv_bin / "tenv"), sub, *what]

                        def call(argv: list[str] = argv, env: dict[str, str] = env) -> None:
                            subprocess.run(argv, env=env, cwd=layer, capture_output=True, check=True)

                        calls[" ".join(what)] = statistics.median(_timed(call) for _ in range(args.pairs))
                    print(f"{kind} {version} installed: resolve_tool {statistics.median(installed) * 1000:.1f} ms "
                          f"(tenv not called); were tenv called each run: "
                          + ", ".join(f"`tenv {sub} {k}` {v * 1000:.1f} ms" for k, v in calls.items()))


if __name__ == "__main__":
    main()
