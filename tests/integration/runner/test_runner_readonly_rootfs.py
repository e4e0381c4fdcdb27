"""The runner's read-only-root-filesystem contract, as a process: plan and apply through the real runner program
(emulator, datastore, real terraform) as the unprivileged UID/GID 65532 of the runner image, whose only writable
directories are the runner pod's four emptyDirs: `/tmp` (TMPDIR), `/home/burrito` (HOME), `/runner/work`
(BURRITO_RUNNER_WORK_DIR) and `/runner/tools` (TENV_ROOT), placed below the pod's root as the local kubelet
does (`BURRITO_LOCAL_ROOT`). Everything else it could touch (its working directory, the pod root, this checkout,
the virtual environment, the test's files) belongs to root and is not writable by 65532, exactly as a
`readOnlyRootFilesystem: true` container's filesystem: a runner that wrote anywhere else would fail here.

The state file lives in a 65532-owned directory outside the pod: it stands for the remote backend.

Switching UID needs root. When the interpreter is out of reach of other users (a pyenv Python under /root, mode
0700, as on the development machines), the runner gets the one capability CAP_DAC_READ_SEARCH, which lets it find
and read files and nothing else: no write is allowed that its UID does not allow, which is what this test is
about. Where the interpreter is world-readable (CI images, the runner image) it runs with no capability at all.
"""

from __future__ import annotations

import os
import shutil
import stat
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.integration.runner.runner_world import CODE, REPO_ROOT, World, running_world

UID = GID = 65532
WRITABLE = ("tmp", "home/burrito", "runner/work", "runner/tools")  # below the pod root

# Only a developer's non-root shell may skip: CI runs as root, where a missing setpriv must fail, not hide.
pytestmark = pytest.mark.skipif(
    os.geteuid() != 0 and not os.environ.get("CI"),
    reason="running the runner as UID 65532 needs root (and setpriv from util-linux); CI runs as root",
)


def reachable_by_others(path: Path) -> bool:
    """Whether a user without any relation to `path`'s owners can reach and read it."""
    path = path.resolve()
    for directory in path.parents:
        if not os.stat(directory).st_mode & stat.S_IXOTH:
            return False
    return bool(os.stat(path).st_mode & stat.S_IROTH)


def as_runner_user() -> list[str]:
    interpreter_ok = all(reachable_by_others(Path(p)) for p in (sys.executable, sys.base_prefix, sys.prefix))
    read_search = [] if interpreter_ok else ["--inh-caps=+dac_read_search", "--ambient-caps=+dac_read_search"]
    return ["setpriv", f"--reuid={UID}", f"--regid={GID}", "--clear-groups", "--no-new-privs", *read_search, "--"]


@pytest.fixture
def world() -> Iterator[World]:
    # Not pytest's tmp_path: its parent is 0700. Everything here is root's, 0755, unless given to 65532 below.
    base = Path(tempfile.mkdtemp(prefix="burrito-py-rofs-"))
    try:
        base.chmod(0o755)
        with running_world(base) as w:
            w.runner_kubeconfig.chmod(0o644)  # what the pod reads (its service account's credentials)
            w.state().parent.mkdir()
            os.chown(w.state().parent, UID, GID)
            yield w
    finally:
        shutil.rmtree(base)


def pod_root(world: World, run: str) -> Path:
    """The pod's root as the local kubelet lays it out: root's, with the emptyDirs and the termination-log file
    (a writable mount in a real pod) given to the pod's user."""
    root = world.pod_root(run)
    for name in WRITABLE:
        (root / name).mkdir(parents=True)
    (root / "dev").mkdir()
    (root / "dev/termination-log").touch()
    for path in [*(root / name for name in WRITABLE), root / "dev/termination-log"]:
        os.chown(path, UID, GID)
    return root


def run_as_65532(world: World, run: str, action: str) -> subprocess.CompletedProcess[str]:
    root = pod_root(world, run)
    argv, env = world.runner_command(
        run, action,
        HOME=str(root / "home/burrito"),
        TMPDIR=str(root / "tmp"),
        TENV_ROOT=str(root / "runner/tools"),
        BURRITO_RUNNER_WORK_DIR="/runner/work",  # a pod path: the runner maps it below BURRITO_LOCAL_ROOT
    )
    return subprocess.run([*as_runner_user(), *argv], env=env, cwd=root, capture_output=True, text=True,
                          timeout=180, check=False)


PROBE = """
import os, sys
print("uid", os.getuid(), "gid", os.getgid(), "groups", os.getgroups())
for target in sys.argv[1:]:
    try:
        with open(os.path.join(target, "probe"), "w") as handle:
            handle.write("x")
        os.unlink(os.path.join(target, "probe"))
        print("writable", target)
    except PermissionError:
        print("read-only", target)
"""


def created_by_65532(directory: Path, since: float) -> list[Path]:
    """What uid 65532 made in `directory` since `since`. Other tests' processes create and remove files there
    meanwhile (/tmp is shared): one gone between the listing and its stat is not one left behind."""
    found = []
    for entry in directory.iterdir():
        try:
            info = entry.lstat()
        except FileNotFoundError:
            continue
        if info.st_uid == UID and info.st_mtime >= since:
            found.append(entry)
    return found


@pytest.mark.slow
def test_plan_and_apply_as_65532_writing_only_to_the_declared_directories(world: World) -> None:
    started = time.time() - 1
    revision = world.commit({"layers/app/main.tf": CODE % "v1"})
    world.layer()
    world.run("app-plan-1", "plan", revision)
    planned = run_as_65532(world, "app-plan-1", "plan")
    assert planned.returncode == 0, planned.stdout + planned.stderr
    assert "Plan: 1 to add, 0 to change, 0 to destroy." in planned.stdout

    world.run("app-apply-1", "apply", revision, artifact={"run": "app-plan-1", "attempt": 1})
    applied = run_as_65532(world, "app-apply-1", "apply")
    assert applied.returncode == 0, applied.stdout + applied.stderr
    assert "Apply complete! Resources: 1 added, 0 changed, 0 destroyed." in applied.stdout
    assert world.state_inputs() == ["v1"]
    assert world.applied("app-apply-1", 1) == world.stored_sum("app-plan-1", 1) is not None
    assert world.state().parent.stat().st_uid == UID

    # The contract holds for this identity: the declared directories are writable, nothing else is.
    root = world.pod_root("app-apply-1")
    declared = [root / name for name in WRITABLE]
    elsewhere = [root, root / "runner", root / "var/run/secrets/burrito-py", world.tmp, REPO_ROOT,
                 REPO_ROOT / "burrito_py", Path(sys.prefix), Path(sys.executable).parent]
    probe = subprocess.run([*as_runner_user(), sys.executable, "-c", PROBE, *map(str, declared + elsewhere)],
                           cwd=root, capture_output=True, text=True, timeout=60, check=True)
    assert probe.stdout.splitlines() == [f"uid {UID} gid {GID} groups []"] + [
        f"writable {p}" for p in declared] + [f"read-only {p}" for p in elsewhere]

    # Nothing the runner made outside the declared directories: not in the pod root, not in the host's shared
    # temporary directories (a runner that ignored TMPDIR would have written there).
    for run in ("app-plan-1", "app-apply-1"):
        pod = world.pod_root(run)
        owned = {p.relative_to(pod).as_posix() for p in pod.rglob("*") if p.lstat().st_uid == UID}
        assert {p for p in owned if not p.startswith(WRITABLE)} == {"dev/termination-log"}
        assert (pod / "dev/termination-log").read_text() == ""
        work = pod / "runner/work"
        assert list(work.iterdir()) == [] and work.stat().st_mtime >= started  # used, then emptied
    for shared in (Path("/tmp"), Path("/var/tmp"), Path("/dev/shm")):
        assert created_by_65532(shared, started) == [], shared
