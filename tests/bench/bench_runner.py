"""What the runner adds over the bare engine, for one plan, per engine (terraform 1.11.4 and tofu 1.12.6).

    python3 tests/bench/bench_runner.py [--pairs N] [--engines terraform-1.11.4,tofu-1.12.6] [--profile DIR]
                                        [--baseline CHECKOUT]

Runner: `burrito-py runner start` as a pod runs it (read run, layer and repository from the API emulator, download
and unpack the source archive from the datastore, resolve the tool, init, plan, show -json, four uploads), the
engine taken from the engines root `scripts/build-engines.sh` built (BURRITO_RUNNER_TOOLS_PATH, as the runner
image's baked tools) and named by the layer's spec. Bare: the same binary's `init && plan -out && show -json` on the
same code in a fresh directory, with the runner's steps' own arguments and environment (their builders in
runner/terraform.py, over the runner's PATH and HOME: nothing of the calling shell's TF_* settings, which the runner
does not get either). Pairs alternate, and the figures are medians over the pairs of the difference (small layer,
target ≤ +0.15 s, issue 31) and of the ratio (1,000 terraform_data resources, target ≤ 1.10), with the quartiles of
the ratio beside it. Wall time is the target; CPU time (user + system of the process tree) is printed too, as it
says more than wall time on a busy machine. `--profile DIR` first runs the runner once per layer with each step's
start stamped, once under `-X importtime` (summed per top-level package) and once under pyinstrument (a report per
layer in DIR). `--baseline CHECKOUT` runs another checkout's runner (say, a `git worktree` of main: its `burrito_py`
on PYTHONPATH, this interpreter and packages) in the same rounds, the three in alternating order, for a before/after
measured side by side. The runner's interpreter starts as the image's does (`image_python`: a virtual environment
without this checkout's editable-install hooks). Prints figures; asserts nothing.
"""

from __future__ import annotations

import argparse
import os
import resource
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parents[2]
NS = "default"
# `burrito-py runner start` exactly as the console script runs it, from this checkout (PYTHONPATH), without
# the ~0.1 s a version manager's shim (pyenv) in front of the console script would add to every run. The
# interpreter is `image_python`'s: CLI[0] is set in main().
CLI = [sys.executable, "-c", "from burrito_py.entry import main; main()",
       "runner", "start"]


def image_python(tmp: Path) -> str:
    """An interpreter that starts as the runner image's does: a virtual environment whose site-packages names
    this one's (the dependencies) in a plain `.pth` line. This checkout's own environment installs burrito-py
    editable, and its `site` imports setuptools' editable finders at every start (~3 ms of the runner's wall
    time, measured with `python -c` alone: 81.7 ms against 78.7 ms), which an image's installed wheel does not."""
    import sysconfig
    import venv

    target = tmp / "image-venv"
    venv.EnvBuilder(with_pip=False, symlinks=True).create(target)
    python = target / "bin" / "python"
    purelib = subprocess.run([str(python), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
                             capture_output=True, text=True, check=True).stdout.strip()
    (Path(purelib) / "burrito-py-bench.pth").write_text(sysconfig.get_paths()["purelib"] + "\n")
    return str(python)


def small_layer() -> str:
    return (
        'terraform {\n  backend "local" {}\n}\n\n'
        'resource "terraform_data" "this" {\n  input = "hello"\n}\n\n'
        'output "message" {\n  value = terraform_data.this.output\n}\n'
    )


def large_layer(count: int = 1000) -> str:
    resources = "".join(f'resource "terraform_data" "r{i}" {{\n  input = "value-{i}"\n}}\n\n' for i in range(count))
    return 'terraform {\n  backend "local" {}\n}\n\n' + resources


def git(cwd: Path, *args: str) -> str:
    env = {
        **os.environ,
        "GIT_AUTHOR_NAME": "b",
        "GIT_AUTHOR_EMAIL": "b@example.com",
        "GIT_COMMITTER_NAME": "b",
        "GIT_COMMITTER_EMAIL": "b@example.com",
    }
    return subprocess.run(["git", *args], cwd=cwd, env=env, check=True, capture_output=True, text=True).stdout.strip()


def children_cpu() -> float:
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


ENGINES = {"terraform": ("Terraform", "terraform"), "opentofu": ("OpenTofu", "tofu")}


def engines_root() -> Path:
    """The root scripts/build-engines.sh assembled; not built: exit naming the script."""
    done = subprocess.run(["bash", str(REPO_ROOT / "scripts" / "build-engines.sh"), "--cached"],
                          capture_output=True, text=True, check=False)
    if done.returncode != 0 or not done.stdout.strip():
        sys.exit("the engines are not built: run `bash scripts/build-engines.sh`")
    return Path(done.stdout.strip())


def engine_binary(root: Path, kind: str, version: str) -> str:
    folder, name = ENGINES[kind]
    return str(root / "tenv" / folder / version / name)


def bare(code_dir: Path, work: Path, binary: str, home: Path) -> tuple[float, float]:
    """init + plan -out + show -json in a fresh copy of the layer: what the runner's steps run, no more, no less —
    the same arguments (`-no-color`, `-input=false`, the plan file by absolute path), and the environment its
    steps get (`step_env`: `TF_IN_AUTOMATION`, `TF_INPUT=0`, `CHECKPOINT_DISABLE=1`) over the runner's own (PATH and
    its HOME only: not this shell's `TF_CLI_CONFIG_FILE`, `TF_PLUGIN_CACHE_DIR` or other settings, which the
    runner never sees here)."""
    from burrito_py.runner.terraform import init_args, plan_args, show_json_args, step_env
    from burrito_py.runner.tools import Tool

    shutil.rmtree(work, ignore_errors=True)
    shutil.copytree(code_dir, work)
    plan_file = work / "plan.bin"
    env = step_env(Tool("terraform", binary, ""), {"PATH": os.environ["PATH"], "HOME": str(home)})
    started, cpu = time.perf_counter(), children_cpu()
    for args in (init_args([f"-backend-config=path={work}.tfstate"]), plan_args(plan_file)):
        subprocess.run([binary, *args], cwd=work, env=env, check=True, capture_output=True)
    with (work / "plan.json").open("wb") as out:
        subprocess.run([binary, *show_json_args(plan_file)], cwd=work, env=env, check=True, stdout=out,
                       stderr=subprocess.DEVNULL)
    return time.perf_counter() - started, children_cpu() - cpu


def runner_env(tmp: Path, root: Path, kubeconfig: Path, datastore_url: str, layer: str, run: str,
               checkout: Path = REPO_ROOT) -> dict[str, str]:
    return {
        "PATH": os.environ["PATH"],
        "PYTHONPATH": str(checkout),
        "HOME": str(tmp / "home"),
        "KUBECONFIG": str(kubeconfig),
        "BURRITO_RUNNER_RUN": run,
        "BURRITO_RUNNER_LAYER_NAME": layer,
        "BURRITO_RUNNER_LAYER_NAMESPACE": NS,
        "BURRITO_RUNNER_ACTION": "plan",
        "BURRITO_RUNNER_ATTEMPT": "1",
        "BURRITO_DATASTORE_URL": datastore_url,
        "BURRITO_RUNNER_TOOLS_PATH": str(root / "tenv"),
        "TENV_ROOT": str(tmp / "tenv-root"),
    }


def steps_timed(command: list[str], env: dict[str, str]) -> list[tuple[float, str]]:
    """Run the runner, stamping each line of its output as it arrives: `$ <step>` and `burrito-py:` lines mark
    where each step starts, so the gaps between them are the steps' wall-clock times."""
    started = time.perf_counter()
    stamped = []
    with subprocess.Popen(command, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True) as process:
        assert process.stdout is not None
        for line in process.stdout:
            if line.startswith(("$ ", "burrito-py:", "error:")):
                stamped.append((time.perf_counter() - started, line.rstrip()[:100]))
    stamped.append((time.perf_counter() - started, f"(exit {process.returncode})"))
    return stamped


def profile(name: str, env: dict[str, str], out_dir: Path) -> None:
    """One run with each step stamped; one under `python -X importtime` (the imports, summed by top package);
    one under pyinstrument (written to `<out_dir>/<name>.txt`): where the runner's own time goes."""
    print(f"  profile {name}: step start times (wall, s)")
    stamped = steps_timed(CLI, env | {"BURRITO_RUNNER_RUN": env["BURRITO_RUNNER_RUN"] + "-steps"})
    previous = 0.0
    for at, line in stamped:
        print(f"    {at:7.3f}  (+{at - previous:.3f})  {line}")
        previous = at
    done = subprocess.run([CLI[0], "-X", "importtime", *CLI[1:]], capture_output=True, text=True,
                          env=env | {"BURRITO_RUNNER_RUN": env["BURRITO_RUNNER_RUN"] + "-imports"}, check=False)
    by_package: dict[str, int] = {}
    total = 0
    for line in done.stderr.splitlines():
        fields = line.split("|")
        if len(fields) != 3 or not fields[0].startswith("import time:") or "self" in fields[0]:
            continue
        self_us = int(fields[0].removeprefix("import time:").strip())
        top = fields[2].strip().split(".")[0]
        by_package[top] = by_package.get(top, 0) + self_us
        total += self_us
    heaviest = sorted(by_package.items(), key=lambda item: -item[1])[:12]
    print(f"    imports: {total / 1e6:.3f} s in all; by top-level package: "
          + ", ".join(f"{package} {us / 1e3:.0f} ms" for package, us in heaviest))
    report = out_dir / f"{name}.txt"
    script = (
        "import sys\n"
        "from pyinstrument import Profiler\n"
        "profiler = Profiler(interval=0.0005)\n"
        "profiler.start()\n"
        "from burrito_py.runner.start import RUNNER_SKIPPED_IMPORTS\n"
        "for skipped in RUNNER_SKIPPED_IMPORTS:\n"
        "    sys.modules.setdefault(skipped, None)\n"
        "from burrito_py.runner.main import main\n"
        "code = main()\n"
        "profiler.stop()\n"
        f"open({str(report)!r}, 'w').write(profiler.output_text(show_all=False, color=False))\n"
        "sys.exit(code)\n"
    )
    done = subprocess.run([CLI[0], "-c", script], capture_output=True, text=True, check=False,
                          env=env | {"BURRITO_RUNNER_RUN": env["BURRITO_RUNNER_RUN"] + "-profile"})
    print(f"    pyinstrument: {report}" if done.returncode == 0 else f"    pyinstrument failed: {done.stderr[-500:]}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--pairs", type=int, default=7)
    parser.add_argument("--engines", default="terraform-1.11.4,tofu-1.12.6",
                        help="comma-separated <terraform|tofu>-<version>, from the engines root")
    parser.add_argument("--profile", metavar="DIR", type=Path,
                        help="before the pairs, profile one run per layer (step times, imports, pyinstrument "
                        "reports written to DIR; pyinstrument must be installed)")
    parser.add_argument("--baseline", metavar="CHECKOUT", type=Path,
                        help="also run this checkout's runner in the same rounds (before/after side by side)")
    options = parser.parse_args()
    root = engines_root()
    engines = [("opentofu" if e.split("-")[0] == "tofu" else "terraform", e.split("-", 1)[1])
               for e in options.engines.split(",") if e.strip()]

    from burrito_local.apiserver import ApiServer
    from burrito_local.apply import Applier, load_files
    from kubernetes import client, config

    from burrito_py.api import annotations as ann
    from burrito_py.datastore.client import DatastoreClient
    from burrito_py.datastore.in_process import running_datastore

    tmp = Path(tempfile.mkdtemp(prefix="burrito-py-bench-runner-"))
    CLI[0] = image_python(tmp)
    api = ApiServer().start()
    try:
        kubeconfig = api.write_kubeconfig(tmp / "kubeconfig")
        applier = Applier(api.url)
        for crd in load_files([REPO_ROOT / "crds"]):
            applier.apply(crd)
        applier.close()
        custom = client.CustomObjectsApi(config.new_client_from_config(config_file=str(kubeconfig)))

        def create(plural: str, kind: str, name: str, spec: dict[str, object]) -> None:
            body = {"apiVersion": ann.API_VERSION, "kind": kind, "metadata": {"name": name}, "spec": spec}
            custom.create_namespaced_custom_object(ann.GROUP, ann.VERSION, NS, plural, body)

        with running_datastore(tmp / "datastore") as datastore_url:
            create(
                "terraformrepositories",
                "TerraformRepository",
                "infra",
                {"repository": {"url": "https://example.com/infra.git"}},
            )
            repo = tmp / "repo"
            repo.mkdir()
            git(repo, "init", "-q", "-b", "main")
            layers = {"small": small_layer(), "large": large_layer()}
            for name, code in layers.items():
                (repo / "layers" / name).mkdir(parents=True)
                (repo / "layers" / name / "main.tf").write_text(code)
            git(repo, "add", "-A")
            git(repo, "commit", "-q", "-m", "bench")
            revision, tree = git(repo, "rev-parse", "HEAD"), git(repo, "rev-parse", "HEAD^{tree}")
            archive = tmp / "source.tar.gz"
            git(repo, "archive", "--format=tar.gz", "-o", str(archive), revision)
            with DatastoreClient(datastore_url) as store:
                store.put_source(NS, "infra", revision, tree, archive)

            def new_run(layer: str, run: str, checkout: Path = REPO_ROOT) -> dict[str, str]:
                create(
                    "terraformruns",
                    "TerraformRun",
                    run,
                    {"action": "plan", "layer": {"name": layer, "revision": revision}},
                )
                return runner_env(tmp, root, kubeconfig, datastore_url, layer, run, checkout)

            def runner(layer: str, run: str, checkout: Path = REPO_ROOT) -> tuple[float, float]:
                env = new_run(layer, run, checkout)
                started, cpu = time.perf_counter(), children_cpu()
                # cwd too: `python -c` puts the working directory first on sys.path, before PYTHONPATH
                done = subprocess.run(CLI, env=env, cwd=checkout, capture_output=True, text=True, check=False)
                elapsed = time.perf_counter() - started, children_cpu() - cpu
                if done.returncode != 0:
                    sys.exit(f"runner failed ({done.returncode}): {done.stderr}")
                return elapsed

            print(f"`burrito-py runner start` against the bare engine, {options.pairs} pairs per layer, medians")
            for kind, version in engines:
                binary = engine_binary(root, kind, version)
                print(f"{ENGINES[kind][1]} {version} ({binary})")
                for layer in layers:
                    name = f"{layer}-{ENGINES[kind][1]}"
                    other = "terraform" if kind == "opentofu" else "opentofu"
                    create(
                        "terraformlayers",
                        "TerraformLayer",
                        name,
                        {
                            "repository": {"name": "infra"},
                            "branch": "main",
                            "path": f"layers/{layer}",
                            kind: {"enabled": True, "version": version},
                            other: {"enabled": False},
                            "overrideRunnerSpec": {"extraInitArgs": [f"-backend-config=path={tmp / name}.tfstate"]},
                        },
                    )
                    code_dir = tmp / "code" / layer
                    code_dir.mkdir(parents=True, exist_ok=True)
                    (code_dir / "main.tf").write_text(layers[layer])
                    runner(name, f"{name}-warmup")  # page cache, the engine's plugin discovery
                    if options.baseline is not None:
                        runner(name, f"{name}-warmup-base", options.baseline)
                    bare(code_dir, tmp / "bare" / name, binary, tmp / "home")
                    if options.profile is not None:
                        options.profile.mkdir(parents=True, exist_ok=True)
                        for suffix in ("-steps", "-imports", "-profile"):
                            new_run(name, f"{name}-p{suffix}")
                        profile(name, runner_env(tmp, root, kubeconfig, datastore_url, name, f"{name}-p"),
                                options.profile)
                    pairs, based = [], []
                    for i in range(options.pairs):
                        order = ["runner", "bare"] + (["baseline"] if options.baseline is not None else [])
                        order = order[i % len(order):] + order[:i % len(order)]  # each goes first in turn
                        if i % 2:
                            order.reverse()
                        took = {}
                        for key in order:
                            if key == "bare":
                                took[key] = bare(code_dir, tmp / "bare" / name, binary, tmp / "home")
                            elif key == "runner":
                                took[key] = runner(name, f"{name}-plan-{i}")
                            else:
                                took[key] = runner(name, f"{name}-base-{i}", options.baseline or REPO_ROOT)
                        pairs.append((took["runner"], took["bare"]))
                        if "baseline" in took:
                            based.append((took["baseline"], took["bare"]))
                    target = "added ≤ +0.15 s" if layer == "small" else "ratio ≤ 1.10"
                    for label, measured in (("runner", pairs), ("baseline", based)):
                        for what, index in (("wall", 0), ("cpu ", 1)):
                            if not measured:
                                continue
                            runs, bares = [r[index] for r, _ in measured], [b[index] for _, b in measured]
                            added = statistics.median(r[index] - b[index] for r, b in measured)
                            ratios = [r[index] / b[index] for r, b in measured]
                            # The quartiles of the pairs' ratios: how far one run's median can be trusted.
                            low, _, high = statistics.quantiles(ratios, n=4) if len(ratios) > 1 else ratios * 3
                            note = f"  (target: {target})" if index == 0 and label == "runner" else ""
                            print(f"  {layer:5} {what}: {label} {statistics.median(runs):.3f} s, "
                                  f"bare {statistics.median(bares):.3f} s, added {added:+.3f} s, "
                                  f"ratio {statistics.median(ratios):.2f} (quartiles {low:.2f} to {high:.2f}){note}")
            print(f"load average {os.getloadavg()[0]:.2f} on {os.cpu_count()} CPUs")
    finally:
        api.stop()
        shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    main()
