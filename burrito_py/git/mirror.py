"""Bare git mirrors in a shared cache directory, and the read operations the repository controller needs.

One mirror per repository URL (`<cache>/<slug>-<sha256(normalized url)[:16]>.git`), holding every branch
of the remote as `refs/heads/*`. Fetches are serialized per mirror by a thread lock and an `flock` on a
sibling lock file, so threads and processes sharing the cache never fetch into one mirror at once.
Reads take no lock: git updates refs atomically and readers tolerate concurrent fetches and repacks.

Credentials: the URL given is used on the command line of `git fetch` only; nothing is stored in the
mirror's config but the redacted URL, and every message this module raises is redacted
(`https://***@host`). Credentials proper are given to each `fetch` (`burrito_py.git.credentials`): they
reach git through its environment for that one command, and the secret values are scrubbed from whatever
git prints before it becomes a message. A fetch failure is classified (authentication refused, host key
unknown or changed, unusable private key, not found, unreachable, timed out) so the message says what to fix;
"could not connect" is one message whatever the network said (refused, filtered, reset), so a status never
answers a port scan.

Where a fetch connects: every fetch first asks the outbound address guard (`outbound`, git/pinning.py) and is
pinned to the addresses it checked; a refused destination raises `OutboundRefused` and nothing is sent. Redirects
are not followed.
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import re
import select
import shutil
import subprocess
import tempfile
import threading
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from datetime import UTC, datetime
from pathlib import Path
from typing import Literal

import git

from burrito_py.git.credentials import GitCredentials, git_environment, scrub
from burrito_py.git.paths import ROOT, Change, normalize_repo_path
from burrito_py.git.pinning import pin_for
from burrito_py.git.terragrunt import TerragruntTree
from burrito_py.git.urls import mirror_dir_name, redact, validate_url
from burrito_py.outbound import OutboundPolicy, Resolver, Unresolvable, system_resolver

DEFAULT_FETCH_TIMEOUT = 600.0
_HEADS = "refs/heads/"
# A source archive's bounds. `git archive` first loads the whole tree into an in-memory index, printing nothing
# meanwhile: a tree bomb (a few KB of objects naming billions of paths) held it for hours and gigabytes. So the
# tree's files are counted first (streamed, stopped past the cap; ~1 s per million entries), and git is stopped at
# a deadline or once its output is larger than the datastore would store. A million files cost git archive
# ~160 MB and ~40 s (measured); a Terraform repository holds far fewer.
DEFAULT_ARCHIVE_TIMEOUT = 300.0
MAX_SOURCE_FILES = 1_000_000
# The most a list of a source's files or changes may take (paths: a million of 128 bytes); the tree bomb's paths can
# be long as well as many.
MAX_LISTING_BYTES = 128 * 1024 * 1024
# PATH_MAX: no longer symlink target is followed by the kernel (ENAMETOOLONG), and git stores any blob as one.
MAX_SYMLINK_TARGET = 4096

# Never wait for a human: with no credentials available git must fail, not prompt on a terminal.
_NON_INTERACTIVE = {"GIT_TERMINAL_PROMPT": "0", "GCM_INTERACTIVE": "never"}


class GitError(Exception):
    """A git operation failed. The message is readable and never contains credentials."""

    def __init__(self, message: str) -> None:
        super().__init__(redact(message))

    @property
    def message(self) -> str:
        return str(self.args[0])


class SourceRefused(GitError):
    """A revision's source archive was not made: its tree holds too many files, the archive is larger than the
    datastore stores, or git took too long. The revision's content is to blame; trying again gives the same."""


# One lock per mirror directory, shared by every GitMirror instance of this process.
_registry_lock = threading.Lock()
_thread_locks: dict[Path, threading.Lock] = {}


def _thread_lock(path: Path) -> threading.Lock:
    with _registry_lock:
        return _thread_locks.setdefault(path, threading.Lock())


class GitMirror:
    """A bare mirror of one repository URL in `cache_dir`. Thread-safe; see the module docstring."""

    def __init__(
        self,
        cache_dir: Path,
        url: str,
        env: Mapping[str, str] | None = None,
        *,
        fetch_timeout: float = DEFAULT_FETCH_TIMEOUT,
        outbound: OutboundPolicy = OutboundPolicy(),  # noqa: B008 - frozen: allows nothing internal
        resolver: Resolver = system_resolver,
    ) -> None:
        try:
            self.url = validate_url(url)
        except ValueError as exc:
            raise GitError(str(exc)) from None
        self.safe_url = redact(self.url)
        self.cache_dir = Path(cache_dir)
        self.path = (self.cache_dir / mirror_dir_name(self.url)).absolute()
        self.env = dict(env or {})
        self.fetch_timeout = fetch_timeout
        self.outbound = outbound
        self._resolver = resolver
        self._lock_path = self.path.with_name(self.path.name + ".lock")

    def __repr__(self) -> str:
        return f"GitMirror({self.safe_url!r} at {str(self.path)!r})"

    # -- fetching ---------------------------------------------------------------------------------------

    def exists(self) -> bool:
        """Whether the mirror has been created (by a first successful `fetch`)."""
        return (self.path / "HEAD").is_file()

    def fetch(self, credentials: GitCredentials | None = None) -> None:
        """Create the mirror on first use, then fetch every branch with prune (deleted branches vanish).

        `credentials` are used for this fetch only (see the module docstring). A first fetch happens in a
        temporary directory renamed into place on success, so a failed first fetch (wrong URL, no access)
        leaves no half-made mirror behind.
        """
        with self._locked():
            if self.exists():
                self._fetch_into(self.path, credentials)
                return
            self.cache_dir.mkdir(parents=True, exist_ok=True)
            staging = Path(tempfile.mkdtemp(prefix=f".{self.path.name}.", dir=self.cache_dir))
            try:
                repo = git.Repo.init(staging, bare=True)
                with repo.config_writer() as config:
                    # For people inspecting the cache; fetches pass the URL explicitly.
                    config.set_value("burrito", "url", self.safe_url)
                    config.set_value("core", "logAllRefUpdates", "false")
                repo.close()
                self._fetch_into(staging, credentials)
                if self.path.exists():
                    # Debris that is not a mirror (no HEAD), e.g. from a crash while someone copied the cache.
                    shutil.rmtree(self.path)
                os.rename(staging, self.path)
            finally:
                shutil.rmtree(staging, ignore_errors=True)

    def _fetch_into(self, git_dir: Path, credentials: GitCredentials | None) -> None:
        args = ["fetch", "--prune", "--no-tags", "--quiet", self.url, "+refs/heads/*:refs/heads/*"]
        status, stderr = self._run_fetch(git_dir, args, credentials)
        if status != 0:
            raise GitError(self._fetch_failure(scrub(stderr, credentials), credentials))

    def _run_fetch(self, git_dir: Path, args: list[str], credentials: GitCredentials | None) -> tuple[int, str]:
        """Run one fetch, pinned where the outbound guard allows it to connect (OutboundRefused: nothing sent)."""
        try:
            pin = pin_for(self.url, self.outbound, self._resolver)
        except Unresolvable as exc:
            unresolved: Unresolvable | None = exc
        else:
            unresolved = None
        if unresolved is not None:  # raised outside the handler: nothing chained
            raise GitError(f"cannot reach {self.safe_url}: {unresolved}")
        with git_environment(credentials, pin) as extra:
            status, _, stderr = self._git(git_dir, args, timeout=self.fetch_timeout, use_env=True, extra_env=extra)
        return status, stderr

    def fetch_pull_request(self, head_ref: str, number: int, head_sha: str,
                           credentials: GitCredentials | None = None) -> str:
        """Make a pull request's head commit present in the mirror and return its full sha.

        `head_ref` is where the provider publishes the head (its module's `head_ref`: `refs/pull/<n>/head` on
        GitHub and Gitea, `refs/merge-requests/<n>/head` on GitLab); it is fetched into `refs/burrito-py/pull/<n>`,
        outside `refs/heads/`, so the branch fetch's prune never drops it. It also holds the head of a pull request
        from a fork, which no branch of the repository has. Without that ref (a server that does not publish it),
        the branches are fetched instead."""
        # The ref goes into a refspec: one plain ref name, nothing git would read as a pattern or a second side.
        if not head_ref.startswith("refs/") or any(c in head_ref for c in ":*?[\\^~ \t\n\0"):
            raise ValueError(f"{head_ref!r} is not a plain git ref")
        if not self.exists():
            self.fetch(credentials)
        if not self.has_commit(head_sha):
            args = ["fetch", "--no-tags", "--quiet", self.url, f"+{head_ref}:refs/burrito-py/pull/{int(number)}"]
            with self._locked():
                status, stderr = self._run_fetch(self.path, args, credentials)
            if status != 0:
                if "couldn't find remote ref" not in stderr.lower():
                    raise GitError(self._fetch_failure(scrub(stderr, credentials), credentials))
                self.fetch(credentials)
        sha = self._peel(head_sha, "commit")
        if sha is None:
            raise GitError(f"the head {head_sha} of pull request #{number} is not in {self.safe_url} (a newer push "
                           "replaced it?)")
        return sha

    def _fetch_failure(self, text: str, credentials: GitCredentials | None) -> str:
        lower = text.lower()
        origin = f" from {credentials.source}" if credentials is not None and credentials.source else ""
        if lower.startswith("timeout:") or "did not complete in" in lower:
            return f"fetching {self.safe_url} timed out after {self.fetch_timeout:g}s"
        host_key = _host_key_failure(text, self.safe_url)
        if host_key is not None:
            return host_key
        if "load key" in lower and ("invalid format" in lower or "error in libcrypto" in lower):
            return f"the ssh private key{origin} is not a valid private key (fetching {self.safe_url})"
        if any(
            marker in lower
            for marker in ("does not appear to be a git repository", "repository not found", "returned error: 404")
        ):
            return f"repository {self.safe_url} not found"
        if any(
            marker in lower
            for marker in (
                "authentication failed",
                "could not read username",
                "could not read password",
                "terminal prompts disabled",
                "permission denied",
                "returned error: 401",
                "returned error: 403",
            )
        ):
            if credentials is None:
                return f"authentication to {self.safe_url} failed: no credentials (set spec.repository.secretName)"
            return f"authentication to {self.safe_url} failed: the server refused the {credentials.kind}{origin}"
        if any(marker in lower for marker in ("could not resolve host", "name or service not known",
                                              "could not resolve hostname")):
            return f"cannot reach {self.safe_url}: its host name does not resolve"
        if any(marker in lower for marker in _CONNECT_FAILURES):
            # One message whatever happened (refused, filtered, reset, not speaking git): never a port scan's answer.
            return f"cannot reach {self.safe_url}: could not connect"
        if "redirect" in lower or re.search(r"returned error: 30[1-8]", lower):
            return (f"fetching {self.safe_url} was redirected, and redirects are not followed: set "
                    "spec.repository.url to where the repository is now")
        return f"fetching {self.safe_url} failed: {_last_error_line(text)}"

    @contextlib.contextmanager
    def _locked(self) -> Iterator[None]:
        with _thread_lock(self.path):
            self.cache_dir.mkdir(parents=True, exist_ok=True)
            with open(self._lock_path, "a+b") as lock_file:
                fcntl.flock(lock_file.fileno(), fcntl.LOCK_EX)
                try:
                    yield
                finally:
                    fcntl.flock(lock_file.fileno(), fcntl.LOCK_UN)

    # -- reading ----------------------------------------------------------------------------------------

    def resolve(self, branch: str) -> str | None:
        """The full sha of `refs/heads/<branch>` in the mirror; None when there is no such branch."""
        if not _valid_branch_name(branch):
            return None
        status, out, _ = self._read(["rev-parse", "--verify", "--quiet", f"{_HEADS}{branch}^{{commit}}"])
        return out.strip() if status == 0 and out.strip() else None

    def require(self, branch: str) -> str:
        """Like `resolve`, but a missing branch is a GitError (`branch "nope" does not exist in <url>`)."""
        sha = self.resolve(branch)
        if sha is None:
            raise GitError(f'branch "{branch}" does not exist in {self.safe_url}')
        return sha

    def branches(self) -> dict[str, str]:
        """Every branch of the mirror: name → full commit sha."""
        status, out, err = self._read(["for-each-ref", "--format=%(objectname) %(refname)", _HEADS])
        if status != 0:
            raise GitError(f"listing branches of {self.safe_url} failed: {_last_error_line(err)}")
        result: dict[str, str] = {}
        for line in out.splitlines():
            sha, _, ref = line.partition(" ")
            if ref.startswith(_HEADS):
                result[ref[len(_HEADS) :]] = sha
        return result

    def has_commit(self, rev: str) -> bool:
        """Whether `rev` names a commit present in the mirror (False after a force push and a prune)."""
        return self._peel(rev, "commit") is not None

    def commit_date(self, rev: str) -> datetime:
        """The committer date of `rev`, in UTC."""
        sha = self._require_commit(rev)
        # Not `git show -s`: it diffs the commit against its parent all the same (13 s for a million-file tree bomb).
        status, out, err = self._read(["log", "-1", "--format=%ct", sha])
        if status != 0:
            raise GitError(f"reading commit {rev} of {self.safe_url} failed: {_last_error_line(err)}")
        return datetime.fromtimestamp(int(out.strip()), UTC)

    def tree_id(self, rev: str) -> str:
        """The id of the root tree of `rev`: equal for two commits with identical content."""
        self._require_commit(rev)
        tree = self._peel(rev, "tree")
        assert tree is not None  # a commit always has a tree
        return tree

    def changes(self, old_rev: str | None, new_rev: str) -> list[Change]:
        """`git diff --name-status -M old_rev new_rev` as Changes.

        When `old_rev` is None or not in the mirror (first sight of a layer, or a force push that made it
        unreachable before this mirror saw it), every file of `new_rev` is reported as added.
        """
        new_sha = self._require_commit(new_rev)
        old_sha = self._peel(old_rev, "commit") if old_rev is not None else None
        if old_sha is None:
            raw = self._listing(["ls-tree", "-r", "-z", "--name-only", "--full-tree", new_sha], 1,
                                f"listing files of {new_rev}")
            return [Change("A", name) for name in _split_z(raw)]
        raw = self._listing(["diff", "--name-status", "-z", "-M", "--no-ext-diff", "--no-textconv", old_sha, new_sha],
                            2, f"diffing {old_rev}..{new_rev}")  # a rename's three fields name two files
        return _parse_name_status(_split_z(raw))

    def _listing(self, args: list[str], fields_per_file: int, what: str) -> bytes:
        """git's NUL-separated list of files, bounded as an archive is: a pushed tree bomb (a few KB of objects
        naming billions of paths) was listed whole into the controllers' memory, with no deadline, before its
        archive was refused. SourceRefused past MAX_SOURCE_FILES files (`fields_per_file` fields each),
        MAX_LISTING_BYTES, or DEFAULT_ARCHIVE_TIMEOUT."""
        chunks: list[bytes] = []
        fields = size = 0

        def keep(chunk: bytes) -> bool:
            nonlocal fields, size
            fields, size = fields + chunk.count(b"\0"), size + len(chunk)
            chunks.append(chunk)
            return fields <= fields_per_file * MAX_SOURCE_FILES and size <= MAX_LISTING_BYTES

        how, status, err = self._stream(args, keep, time.monotonic() + DEFAULT_ARCHIVE_TIMEOUT)
        if how == "stopped":
            raise SourceRefused(f"{what} names more than {MAX_SOURCE_FILES} files or {MAX_LISTING_BYTES} bytes of "
                                "paths, the most a source may hold")
        self._bounded_outcome(how, status, err, what, DEFAULT_ARCHIVE_TIMEOUT)
        return b"".join(chunks)

    def merge_base(self, base: str, head: str) -> str | None:
        """The best common ancestor of two revisions (None when they share none, e.g. unrelated histories)."""
        base_sha, head_sha = self._require_commit(base), self._require_commit(head)
        status, out, err = self._read(["merge-base", base_sha, head_sha])
        if status == 1:
            return None
        if status != 0:
            raise GitError(f"merge-base of {base} and {head} in {self.safe_url} failed: {_last_error_line(err)}")
        return out.strip() or None

    def pull_request_changes(self, base: str, head: str) -> list[Change]:
        """What a pull request changes: `head` against its merge base with `base` (as the providers show it), not
        against `base` itself, so commits landed on the base since the branch began are not counted. Every file
        of `head` when they share no history."""
        return self.changes(self.merge_base(base, head), head)

    def archive(self, rev: str, dest: Path, *, max_bytes: int | None = None, max_files: int = MAX_SOURCE_FILES,
                timeout: float = DEFAULT_ARCHIVE_TIMEOUT) -> None:
        """Write `git archive --format=tar.gz` of the whole tree of `rev` to `dest`, atomically.

        The file appears complete or not at all (written beside `dest`, then renamed over it). SourceRefused when
        the tree holds more than `max_files` files, the archive grows past `max_bytes`, or it takes longer than
        `timeout` seconds: git is stopped and nothing is left behind.
        """
        sha = self._require_commit(rev)
        deadline = time.monotonic() + timeout
        files = 0

        def count(chunk: bytes) -> bool:
            nonlocal files
            files += chunk.count(b"\0")
            return files <= max_files

        how, status, err = self._stream(["ls-tree", "-r", "-z", "--name-only", "--full-tree", sha], count, deadline)
        if how == "stopped":
            raise SourceRefused(f"the tree of {rev} holds more than {max_files} files, the most a source archive "
                                "may hold")
        self._bounded_outcome(how, status, err, f"listing files of {rev}", timeout)
        dest = Path(dest)
        dest.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp_name = tempfile.mkstemp(prefix=f".{dest.name}.", suffix=".tmp", dir=dest.parent)
        tmp = Path(tmp_name)
        try:
            with open(fd, "wb") as out:
                written = 0

                def write(chunk: bytes) -> bool:
                    nonlocal written
                    written += len(chunk)
                    if max_bytes is not None and written > max_bytes:
                        return False
                    out.write(chunk)
                    return True

                how, status, err = self._stream(["archive", "--format=tar.gz", sha], write, deadline)
                if how == "stopped":
                    raise SourceRefused(f"the source archive of {rev} is larger than {max_bytes} bytes, the most the "
                                        "datastore stores")
                self._bounded_outcome(how, status, err, f"archiving {rev}", timeout)
                out.flush()
                os.fsync(out.fileno())
            os.replace(tmp, dest)
        finally:
            tmp.unlink(missing_ok=True)

    def is_ancestor(self, ancestor: str, rev: str) -> bool:
        """Whether `ancestor` is in the history of `rev` (itself included)."""
        a, b = self._require_commit(ancestor), self._require_commit(rev)
        status, _, err = self._read(["merge-base", "--is-ancestor", a, b])
        if status not in (0, 1):
            raise GitError(f"merge-base --is-ancestor {ancestor} {rev} in {self.safe_url} failed: "
                           f"{_last_error_line(err)}")
        return status == 0

    def same_paths(self, a: str, b: str, paths: Sequence[str]) -> bool:
        """Whether every one of `paths` (files or directories, repository-relative) has the same content in `a` and
        in `b` (absent in both counts as the same): the object ids git gives them, one `ls-tree` per revision.
        Raises GitError for a revision not in the mirror and ValueError for an invalid path."""
        wanted = sorted({normalize_repo_path(p) for p in paths})
        if ROOT in wanted:
            return self.tree_id(a) == self.tree_id(b)
        return self._entries(a, wanted) == self._entries(b, wanted)

    def _entries(self, rev: str, paths: list[str]) -> dict[str, str]:
        sha = self._require_commit(rev)
        status, raw, err = self._read_bytes(["ls-tree", "-z", "--full-tree", sha, "--", *paths])
        if status != 0:
            raise GitError(f"listing {len(paths)} path(s) of {rev} in {self.safe_url} failed: {_last_error_line(err)}")
        found: dict[str, str] = {}
        for entry in _split_z(raw):
            meta, _, name = entry.partition("\t")
            found[name] = meta.split()[-1] if meta.split() else ""
        return found

    def has_path(self, rev: str, path: str) -> bool:
        """Whether the file or directory `path` (repository-relative) exists in `rev`.

        Raises GitError for an unknown revision and ValueError for an invalid path.
        """
        sha = self._require_commit(rev)
        normalized = normalize_repo_path(path)
        if normalized == ROOT:
            return True
        status, _, _ = self._read(["cat-file", "-e", f"{sha}:{normalized}"])
        return status == 0

    def terragrunt_tree(self, rev: str, max_file_bytes: int = 1 << 20, max_total_bytes: int = 16 << 20,
                        max_entries: int = MAX_SOURCE_FILES, timeout: float = DEFAULT_ARCHIVE_TIMEOUT
                        ) -> TerragruntTree:
        """What the Terragrunt analysis reads of `rev` (git/terragrunt.py): every blob path, each symlink's target
        (at most `MAX_SYMLINK_TARGET` bytes) and the text of each `*.hcl` file up to `max_file_bytes`, symlinks first,
        then `terragrunt.hcl` files, while they add up to at most `max_total_bytes` (the repository is a tenant's:
        thousands of large files or symlinks must not fill the controllers' memory; each content is read and counted
        once, however many paths name it). The files and symlinks left out are named in `unread`. One `ls-tree`
        (SourceRefused past `max_entries` entries or `timeout` seconds) and one `cat-file --batch`."""
        sha = self._require_commit(rev)
        chunks: list[bytes] = []
        entries = 0

        def keep(chunk: bytes) -> bool:
            nonlocal entries
            entries += chunk.count(b"\0")
            chunks.append(chunk)
            return entries <= max_entries

        how, status, err = self._stream(["ls-tree", "-r", "-z", "-l", "--full-tree", sha], keep,
                                        time.monotonic() + timeout)
        if how == "stopped":
            raise SourceRefused(f"the tree of {rev} holds more than {max_entries} files, the most read for its "
                                "Terragrunt units")
        self._bounded_outcome(how, status, err, f"listing files of {rev}", timeout)
        paths: set[str] = set()
        links: list[tuple[int, str, str, int]] = []  # (0: a symlink, path, blob, size), read first
        configs: list[tuple[int, str, str, int]] = []  # (1: a unit's file, 2: another, path, blob, size)
        for entry in _split_z(b"".join(chunks)):
            meta, _, name = entry.partition("\t")
            fields = meta.split()
            if len(fields) != 4 or fields[1] != "blob":
                continue
            paths.add(name)
            mode, blob, size = fields[0], fields[2], int(fields[3]) if fields[3].isdigit() else -1
            if mode == "120000":
                links.append((0, name, blob, size))
            elif name.endswith(".hcl"):
                configs.append((1 if name.endswith("terragrunt.hcl") else 2, name, blob, size))
        budget, unread, read = max_total_bytes, set(), {}  # read: blob → size, counted once
        chosen: list[tuple[str, str, bool]] = []  # (path, blob, is a symlink)
        for kind, name, blob, length in [*sorted(links), *sorted(configs)]:
            if blob not in read:
                if not 0 <= length <= min(MAX_SYMLINK_TARGET if kind == 0 else max_file_bytes, budget):
                    unread.add(name)
                    continue
                budget -= length
                read[blob] = length
            chosen.append((name, blob, kind == 0))
        wanted = sorted(read)
        contents = {blob: content.decode("utf-8", "replace") for blob, content in zip(wanted, self._blobs(wanted),
                                                                                         strict=True)}
        texts = {name: contents[blob] for name, blob, link in chosen if not link}
        symlinks = {name: contents[blob] for name, blob, link in chosen if link}
        return TerragruntTree(frozenset(paths), texts, symlinks, frozenset(unread))

    def _blobs(self, blobs: list[str]) -> list[bytes]:
        """The contents of `blobs`, in order, through one `git cat-file --batch`."""
        if not blobs:
            return []
        command = [git.Git.GIT_PYTHON_GIT_EXECUTABLE or "git", f"--git-dir={self.path}", "cat-file", "--batch"]
        try:
            done = subprocess.run(command, input="".join(f"{b}\n" for b in blobs).encode(), capture_output=True,
                                  env={**os.environ, **_NON_INTERACTIVE}, check=False, timeout=300)
        except (OSError, subprocess.TimeoutExpired) as exc:
            raise GitError(f"reading files of {self.safe_url} failed: {type(exc).__name__}") from None
        if done.returncode != 0:
            raise GitError(f"reading files of {self.safe_url} failed: "
                           f"{_last_error_line(redact(done.stderr.decode('utf-8', 'replace')))}")
        out, position, found = done.stdout, 0, []
        for _ in blobs:
            header_end = out.index(b"\n", position)
            header = out[position:header_end].split()
            if len(header) != 3:  # "<sha> missing"
                raise GitError(f"reading files of {self.safe_url} failed: {header[-1:]!r}")
            size = int(header[2])
            found.append(out[header_end + 1:header_end + 1 + size])
            position = header_end + 1 + size + 1
        return found

    # -- plumbing ---------------------------------------------------------------------------------------

    def _require_commit(self, rev: str) -> str:
        sha = self._peel(rev, "commit")
        if sha is None:
            raise GitError(f"revision {rev!r} does not exist in {self.safe_url}")
        return sha

    def _peel(self, rev: str, kind: str) -> str | None:
        if not _valid_rev(rev):
            return None
        status, out, _ = self._read(["rev-parse", "--verify", "--quiet", f"{rev}^{{{kind}}}"])
        return out.strip() if status == 0 and out.strip() else None

    def _stream(self, args: list[str], consume: Callable[[bytes], bool], deadline: float
                ) -> tuple[Literal["done", "stopped", "overdue"], int, str]:
        """Run git on the mirror, handing its output to `consume` as it comes: "done" when git ended by itself,
        "stopped" when `consume` answered False, "overdue" at `deadline` (time.monotonic()); git is killed in both.
        Also its exit status and the end of its stderr (redacted)."""
        if not self.exists():
            raise GitError(f"the mirror of {self.safe_url} does not exist yet: fetch it first")
        command = [git.Git.GIT_PYTHON_GIT_EXECUTABLE or "git", f"--git-dir={self.path}", *args]
        how: Literal["done", "stopped", "overdue"] = "done"
        with tempfile.TemporaryFile() as errors:
            try:
                process = subprocess.Popen(command, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=errors,
                                           env={**os.environ, **_NON_INTERACTIVE})
            except OSError as exc:
                raise GitError(f"running git for {self.safe_url} failed: {type(exc).__name__}") from None
            with process:
                assert process.stdout is not None
                output, ended = process.stdout.fileno(), False
                ready = select.poll()  # not select.select: it refuses descriptors past 1023, a busy process has them
                ready.register(output, select.POLLIN | select.POLLHUP | select.POLLERR)
                try:
                    while not ended:
                        left = deadline - time.monotonic()
                        if left <= 0:
                            how = "overdue"
                            break
                        if ready.poll(left * 1000):
                            chunk = os.read(output, 1 << 16)
                            ended = not chunk
                            if chunk and not consume(chunk):
                                how = "stopped"
                                break
                finally:
                    if not ended:  # stopped, overdue, or `consume` raised
                        process.kill()
                    try:
                        process.wait(timeout=max(deadline - time.monotonic(), 0.0) + 5.0)
                    except subprocess.TimeoutExpired:  # its output closed, yet it runs on past the deadline
                        process.kill()
                        process.wait()
                        how = "overdue"
            errors.seek(0)
            stderr = errors.read(64 * 1024).decode("utf-8", "replace")
        return how, process.returncode, redact(stderr)

    def _bounded_outcome(self, how: str, status: int, err: str, what: str, timeout: float) -> None:
        """Raise for a `_stream` that ran past its deadline (SourceRefused) or failed (GitError)."""
        if how == "overdue":
            raise SourceRefused(f"{what} of {self.safe_url} took longer than {timeout:g}s")
        if status != 0:
            raise GitError(f"{what} of {self.safe_url} failed: {_last_error_line(err)}")

    def _read(self, args: list[str]) -> tuple[int, str, str]:
        status, raw, err = self._read_bytes(args)
        return status, raw.decode("utf-8", "surrogateescape"), err

    def _read_bytes(self, args: list[str]) -> tuple[int, bytes, str]:
        if not self.exists():
            raise GitError(f"the mirror of {self.safe_url} does not exist yet: fetch it first")
        return self._git(self.path, args, timeout=None, use_env=False)

    def _git(
        self,
        git_dir: Path,
        args: list[str],
        *,
        timeout: float | None,
        use_env: bool,
        extra_env: Mapping[str, str] | None = None,
    ) -> tuple[int, bytes, str]:
        env = dict(_NON_INTERACTIVE)
        if use_env:
            env.update(self.env)
            env.update(extra_env or {})
        command = [git.Git.GIT_PYTHON_GIT_EXECUTABLE or "git", f"--git-dir={git_dir}", *args]
        try:
            status, out, err = git.Git(str(git_dir)).execute(
                command,
                with_extended_output=True,
                with_exceptions=False,
                stdout_as_string=False,
                strip_newline_in_stdout=False,
                kill_after_timeout=timeout,
                env=env,
            )
        except (git.GitCommandError, OSError) as exc:
            # Never chain: the original exception carries the command line, URL included.
            raise GitError(f"running git for {self.safe_url} failed: {type(exc).__name__}") from None
        assert isinstance(out, bytes)
        return int(status), out, redact(str(err))


# What git, curl and ssh print when no git conversation could be had with the host.
_CONNECT_FAILURES = ("connection refused", "failed to connect", "couldn't connect", "timed out", "no route to host",
                     "network is unreachable", "connection reset", "connection closed", "kex_exchange_identification",
                     "banner exchange", "empty reply from server", "recv failure", "send failure",
                     "ssl_connect", "wrong version number", "unexpected eof", "remote end hung up unexpectedly",
                     "http/0.9", "weird server reply", "unsupported protocol", "invalid packet line")


def _valid_rev(rev: str) -> bool:
    """A revision we may pass to git as an argument: never empty, an option, or multi-line."""
    return bool(rev) and not rev.startswith("-") and not any(c.isspace() or ord(c) < 0x20 for c in rev)


def _valid_branch_name(name: str) -> bool:
    """The subset of `git check-ref-format --branch` that matters: nothing git would read as syntax."""
    if not name or name.startswith(("-", "/")) or name.endswith(("/", ".", ".lock")) or name == "@":
        return False
    if ".." in name or "//" in name or "@{" in name:
        return False
    return not any(c.isspace() or ord(c) < 0x20 or ord(c) == 0x7F or c in "~^:?*[\\" for c in name)


def _split_z(raw: bytes) -> list[str]:
    return [field.decode("utf-8", "surrogateescape") for field in raw.split(b"\x00") if field]


def _parse_name_status(fields: list[str]) -> list[Change]:
    """Parse `--name-status -z`: `M\\0path\\0`, and for renames/copies `R087\\0old\\0new\\0`."""
    changes: list[Change] = []
    i = 0
    while i < len(fields):
        status = fields[i][:1]
        if status in ("R", "C"):
            changes.append(Change(status, fields[i + 2], fields[i + 1]))
            i += 3
        else:
            changes.append(Change(status, fields[i + 1]))
            i += 2
    return changes


def _host_key_failure(text: str, safe_url: str) -> str | None:
    """What OpenSSH said about the server's host key, as one sentence; None when it said nothing about it."""
    for line in text.splitlines():
        # `No ED25519 host key is known for [127.0.0.1]:2222 and you have requested strict checking.`
        match = re.search(r"host key is known for (\S+) and", line)
        if match:
            return f"host key for {_host(match.group(1))} is not in knownHosts (fetching {safe_url})"
        # `Host key for [127.0.0.1]:2222 has changed and you have requested strict checking.`
        match = re.search(r"Host key for (\S+) has changed", line)
        if match:
            return f"host key for {_host(match.group(1))} does not match knownHosts (fetching {safe_url})"
    if "host key verification failed" in text.lower():
        return f"host key verification failed for {safe_url} (check knownHosts)"
    return None


def _host(name: str) -> str:
    """`[127.0.0.1]:2222` → `127.0.0.1:2222`, as people write it."""
    match = re.fullmatch(r"\[(.+)\]:(\d+)", name)
    return f"{match.group(1)}:{match.group(2)}" if match else name


def _last_error_line(stderr: str) -> str:
    lines = [line.strip() for line in redact(stderr).splitlines() if line.strip()]
    for line in reversed(lines):
        if line.lower().startswith(("fatal:", "error:")):
            return line
    return lines[-1] if lines else "no error output"
