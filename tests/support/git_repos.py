"""Real git repositories for tests (gitops, controllers, e2e): `make_repo(tmp_path / "repo")`.

Every git command runs with a fixed identity and without the user's global or system config, so tests
behave the same on any machine (no signing hooks, no `init.defaultBranch` surprises).
"""

from __future__ import annotations

import os
import subprocess
from collections.abc import Mapping
from datetime import UTC, datetime
from pathlib import Path

DEFAULT_BRANCH = "main"
_IDENTITY = {
    "GIT_AUTHOR_NAME": "burrito-py tests",
    "GIT_AUTHOR_EMAIL": "tests@burrito-py.invalid",
    "GIT_COMMITTER_NAME": "burrito-py tests",
    "GIT_COMMITTER_EMAIL": "tests@burrito-py.invalid",
}


def git_env(extra: Mapping[str, str] | None = None) -> dict[str, str]:
    """The environment test git commands run with: isolated from user config, fixed identity."""
    env = dict(os.environ)
    env.update(_IDENTITY)
    env.update({"GIT_CONFIG_GLOBAL": os.devnull, "GIT_CONFIG_NOSYSTEM": "1", "GIT_TERMINAL_PROMPT": "0"})
    env.update(extra or {})
    return env


def run_git(cwd: Path, *args: str, env: Mapping[str, str] | None = None) -> str:
    """Run git in `cwd`; return stdout stripped; raise with git's stderr on failure."""
    result = subprocess.run(
        ["git", *args], cwd=cwd, env=git_env(env), capture_output=True, text=True, check=False, timeout=60
    )
    if result.returncode != 0:
        raise RuntimeError(f"git {' '.join(args)} failed in {cwd}: {result.stderr.strip()}")
    return result.stdout.strip()


# Paths per `git add`: well inside the kernel's argument-length limit even for long paths.
_ADD_BATCH = 500


class TestRepo:
    """A non-bare repository on disk that tests commit to; `url` is its `file://` URL."""

    __test__ = False  # not a pytest test class despite the name

    def __init__(self, path: Path) -> None:
        self.path = path

    @property
    def url(self) -> str:
        return self.path.absolute().as_uri()

    @property
    def head(self) -> str:
        return run_git(self.path, "rev-parse", "HEAD")

    @property
    def current_branch(self) -> str:
        return run_git(self.path, "symbolic-ref", "--short", "HEAD")

    def git(self, *args: str) -> str:
        return run_git(self.path, *args)

    def commit(self, files: Mapping[str, str | None], message: str, *, date: datetime | None = None) -> str:
        """Write (str) or delete (None) the given repository-relative files, commit them all, return the sha.

        `date` sets author and committer date (default: now). An empty `files` makes an empty commit.
        """
        # Written files are added a batch per `git add` (a process per file made a 5,000-file commit take minutes),
        # always before a later deletion, so the files apply in their order as before.
        written: list[str] = []

        def add_written() -> None:
            for start in range(0, len(written), _ADD_BATCH):
                self.git("add", "--", *written[start:start + _ADD_BATCH])
            written.clear()

        for name, content in files.items():
            target = self.path / name
            if content is None:
                add_written()
                self.git("rm", "-q", "-r", "--", name)
            else:
                target.parent.mkdir(parents=True, exist_ok=True)
                target.write_text(content)
                written.append(name)
        add_written()
        return self._commit(message, date)

    def rename(self, old: str, new: str, message: str | None = None) -> str:
        """`git mv old new` (a file or a directory) and commit; return the sha."""
        (self.path / new).parent.mkdir(parents=True, exist_ok=True)
        self.git("mv", "--", old, new)
        return self._commit(message or f"rename {old} to {new}", None)

    def branch(self, name: str, start: str | None = None) -> str:
        """Create (or move) branch `name` at `start` (default: the current commit), switch to it; return its sha."""
        self.git("checkout", "-q", "-B", name, *([start] if start else []))
        return self.head

    def checkout(self, name: str) -> None:
        self.git("checkout", "-q", name)

    def reset_hard(self, rev: str) -> str:
        """Move the current branch to `rev` (history rewrite, as before a force push); return the sha."""
        self.git("reset", "-q", "--hard", rev)
        return self.head

    def push(self, remote_url: str, branch: str | None = None, *, force: bool = False) -> None:
        """Push `branch` (default: the current one) to the same name at `remote_url`."""
        name = branch or self.current_branch
        self.git("push", "-q", *(["--force"] if force else []), remote_url, f"refs/heads/{name}:refs/heads/{name}")

    def _commit(self, message: str, date: datetime | None) -> str:
        env = None
        if date is not None:
            stamp = date.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%S+0000")
            env = {"GIT_AUTHOR_DATE": stamp, "GIT_COMMITTER_DATE": stamp}
        run_git(self.path, "commit", "-q", "--allow-empty", "--no-verify", "-m", message, env=env)
        return self.head


def make_repo(path: Path, *, branch: str = DEFAULT_BRANCH) -> TestRepo:
    """Init a non-bare repository at `path` on `branch` with one commit (a README.md)."""
    path.mkdir(parents=True, exist_ok=True)
    run_git(path, "init", "-q", "-b", branch)
    run_git(path, "config", "commit.gpgsign", "false")
    repo = TestRepo(path)
    repo.commit({"README.md": "# test repository\n"}, "initial commit")
    return repo


def make_bare(path: Path, *, branch: str = DEFAULT_BRANCH) -> str:
    """Init an empty bare repository at `path` (an "upstream" to push to); return its `file://` URL."""
    path.mkdir(parents=True, exist_ok=True)
    run_git(path, "init", "-q", "--bare", "-b", branch)
    return path.absolute().as_uri()


def commit_tree_bomb(repo: TestRepo, branch: str, levels: int, width: int) -> str:
    """Commit on `branch` (created or moved; the work tree is left alone) a tree bomb: a tree naming one blob `width`
    times, a tree naming that tree `width` times, and so on `levels` deep: width**levels files (and paths) from a
    few KB of objects, as a tenant can push. Returns the commit."""

    def hashed(args: list[str], data: str) -> str:
        return subprocess.run(["git", *args], cwd=repo.path, env=git_env(), input=data, capture_output=True,
                              text=True, check=True, timeout=60).stdout.strip()

    entry = f"100644 blob {hashed(['hash-object', '-w', '--stdin'], 'x')}"
    for _ in range(levels):
        tree = hashed(["mktree"], "".join(f"{entry}\tn{i}\n" for i in range(width)))
        entry = f"040000 tree {tree}"
    commit = run_git(repo.path, "commit-tree", "-p", repo.head, "-m", "tree bomb", tree)
    run_git(repo.path, "update-ref", f"refs/heads/{branch}", commit)
    return commit
