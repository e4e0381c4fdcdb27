"""GitMirror against real repositories created by the tests (`file://` URLs, a bare upstream)."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import tarfile
import threading
import time
from datetime import UTC, datetime
from pathlib import Path

import pytest

from burrito_py.git import Change, GitError, GitMirror, decide_layer_commits, diff_base, is_relevant
from burrito_py.git.mirror import SourceRefused
from burrito_py.outbound import LOOPBACK_NETWORKS, OutboundPolicy
from tests.support.git_repos import TestRepo, commit_tree_bomb, make_bare, make_repo, run_git


@pytest.fixture
def repo(tmp_path: Path) -> TestRepo:
    return make_repo(tmp_path / "work")


@pytest.fixture
def cache(tmp_path: Path) -> Path:
    return tmp_path / "cache"


def fetched(cache: Path, url: str) -> GitMirror:
    mirror = GitMirror(cache, url)
    mirror.fetch()
    return mirror


def tree_files(repo: TestRepo, rev: str) -> dict[str, bytes]:
    names = run_git(repo.path, "ls-tree", "-r", "--name-only", rev).splitlines()
    return {
        name: subprocess.run(["git", "show", f"{rev}:{name}"], cwd=repo.path, capture_output=True, check=True).stdout
        for name in names
    }


def test_first_fetch_creates_a_bare_mirror_named_after_the_url(repo: TestRepo, cache: Path) -> None:
    mirror = GitMirror(cache, repo.url)
    assert not mirror.exists()
    mirror.fetch()
    assert mirror.exists()
    assert mirror.path.parent == cache.absolute()
    assert mirror.path.name.endswith(".git") and "work" in mirror.path.name
    assert run_git(mirror.path, "rev-parse", "--is-bare-repository") == "true"
    assert mirror.resolve("main") == repo.head
    assert mirror.branches() == {"main": repo.head}


def test_fetch_picks_up_new_commits_and_branches_and_prunes_deleted_ones(tmp_path: Path, cache: Path) -> None:
    upstream = make_bare(tmp_path / "upstream.git")
    work = make_repo(tmp_path / "work")
    work.push(upstream)
    mirror = fetched(cache, upstream)
    first = mirror.resolve("main")
    assert first == work.head

    second = work.commit({"layers/a/main.tf": "resource {}\n"}, "add layer a")
    feature = work.branch("feature/x")
    work.push(upstream)
    work.checkout("main")
    work.push(upstream)
    assert mirror.resolve("main") == first  # nothing changes until the next fetch
    mirror.fetch()
    assert mirror.resolve("main") == second
    assert mirror.branches() == {"main": second, "feature/x": feature}

    work.git("push", "-q", upstream, ":refs/heads/feature/x")
    mirror.fetch()
    assert mirror.branches() == {"main": second}
    assert mirror.resolve("feature/x") is None


def test_resolve_of_a_missing_branch_is_none_and_require_names_it(repo: TestRepo, cache: Path) -> None:
    mirror = fetched(cache, repo.url)
    assert mirror.resolve("nope") is None
    for odd in ("", "-x", "main^", "main~1", "a..b", "main:README.md", "ma*"):
        assert mirror.resolve(odd) is None
    with pytest.raises(GitError) as info:
        mirror.require("nope")
    assert str(info.value) == f'branch "nope" does not exist in {repo.url}'


def test_commit_date_and_unknown_revisions(repo: TestRepo, cache: Path) -> None:
    when = datetime(2026, 3, 4, 5, 6, 7, tzinfo=UTC)
    sha = repo.commit({"a.tf": "x"}, "dated", date=when)
    mirror = fetched(cache, repo.url)
    assert mirror.commit_date(sha) == when
    assert mirror.commit_date(sha).tzinfo is not None
    assert mirror.has_commit(sha) and not mirror.has_commit("0" * 40)
    with pytest.raises(GitError, match=r"revision '0{40}' does not exist in file://"):
        mirror.tree_id("0" * 40)
    with pytest.raises(GitError, match="does not exist"):
        mirror.commit_date("--output=/tmp/x")


def test_reading_before_the_first_fetch_says_so(repo: TestRepo, cache: Path) -> None:
    with pytest.raises(GitError, match="fetch it first"):
        GitMirror(cache, repo.url).resolve("main")


def test_deletions_and_both_sides_of_renames_count(repo: TestRepo, cache: Path) -> None:
    base = repo.commit(
        {"layers/prod/main.tf": "a\n" * 20, "layers/prod/old.tf": "b\n", "drafts/net.tf": "c\n" * 20}, "base"
    )
    deleted = repo.commit({"layers/prod/old.tf": None}, "delete")
    moved_out = repo.rename("layers/prod/main.tf", "archive/main.tf")
    moved_in = repo.rename("drafts/net.tf", "layers/prod/net.tf")
    mirror = fetched(cache, repo.url)

    assert mirror.changes(base, deleted) == [Change("D", "layers/prod/old.tf")]
    assert is_relevant(mirror.changes(base, deleted), "layers/prod")

    out = mirror.changes(deleted, moved_out)
    assert out == [Change("R", "archive/main.tf", "layers/prod/main.tf")]
    assert is_relevant(out, "layers/prod")  # the old side is in the layer
    assert is_relevant(out, "archive")  # and so is the new side for a layer there

    into = mirror.changes(moved_out, moved_in)
    assert into == [Change("R", "layers/prod/net.tf", "drafts/net.tf")]
    assert is_relevant(into, "layers/prod")
    assert is_relevant(into, "drafts")


def test_unrelated_commit_is_not_relevant_but_a_trigger_path_is(repo: TestRepo, cache: Path) -> None:
    base = repo.commit({"layers/prod/main.tf": "x", "modules/vpc/main.tf": "y"}, "base")
    docs = repo.commit({"docs/readme.md": "hello", "layers/prod2/main.tf": "z"}, "elsewhere")
    module = repo.commit({"modules/vpc/main.tf": "y2"}, "module change")
    mirror = fetched(cache, repo.url)

    assert not is_relevant(mirror.changes(base, docs), "layers/prod")
    assert not is_relevant(mirror.changes(docs, module), "layers/prod")
    assert is_relevant(mirror.changes(docs, module), "layers/prod", ["modules/vpc"])
    assert not is_relevant(mirror.changes(docs, module), "layers/prod", ["modules/vp"])


def test_layer_annotations_follow_the_branch(repo: TestRepo, cache: Path) -> None:
    """The controller's loop over three pushes: first sight, a commit elsewhere, then one in the layer."""
    repo.commit({"layers/prod/main.tf": "x"}, "layer")
    mirror = fetched(cache, repo.url)
    annotations: dict[str, str] = {}

    def sync() -> dict[str, str]:
        mirror.fetch()
        head = mirror.require("main")
        base = diff_base(annotations)
        changes = mirror.changes(base, head) if base else None
        patch = decide_layer_commits(annotations, head, mirror.commit_date(head), changes, "layers/prod")
        annotations.update(patch)
        return patch

    first = repo.head
    assert set(sync()) == {
        "webhook.burrito-py.io/branch-commit",
        "webhook.burrito-py.io/branch-commit-date",
        "webhook.burrito-py.io/relevant-commit",
        "webhook.burrito-py.io/relevant-commit-date",
    }
    elsewhere = repo.commit({"other/x.tf": "1"}, "elsewhere")
    assert sync()["webhook.burrito-py.io/branch-commit"] == elsewhere
    assert annotations["webhook.burrito-py.io/relevant-commit"] == first
    assert sync() == {}  # nothing new
    inside = repo.commit({"layers/prod/vars.tf": "2"}, "in the layer")
    assert sync()["webhook.burrito-py.io/relevant-commit"] == inside


def test_archive_content_equals_the_tree_and_identical_trees_share_an_id(
    repo: TestRepo, cache: Path, tmp_path: Path
) -> None:
    files = {"layers/prod/main.tf": 'resource "null_resource" "x" {}\n', "modules/vpc/vars.tf": 'variable "a" {}\n'}
    sha = repo.commit(files, "content")
    repo.commit({"scratch.txt": "temporary"}, "add scratch")
    back = repo.commit({"scratch.txt": None}, "remove scratch")
    empty = repo.commit({}, "empty commit")
    mirror = fetched(cache, repo.url)

    assert mirror.tree_id(sha) == mirror.tree_id(back) == mirror.tree_id(empty)
    assert mirror.tree_id(sha) != mirror.tree_id("main~2")
    assert mirror.tree_id(sha) == run_git(repo.path, "rev-parse", f"{sha}^{{tree}}")

    dest = tmp_path / "out" / "source.tar.gz"
    mirror.archive(sha, dest)
    with tarfile.open(dest, "r:gz") as tar:
        extracted = {m.name: tar.extractfile(m).read() for m in tar.getmembers() if m.isfile()}  # type: ignore[union-attr]
    assert extracted == tree_files(repo, sha)
    assert extracted["layers/prod/main.tf"] == files["layers/prod/main.tf"].encode()
    assert sorted(p.name for p in dest.parent.iterdir()) == ["source.tar.gz"]  # no temporary left behind

    mirror.archive(back, dest)  # overwrites in place
    with tarfile.open(dest, "r:gz") as tar:
        assert "scratch.txt" not in tar.getnames()


def test_failed_archive_leaves_nothing_behind(repo: TestRepo, cache: Path, tmp_path: Path) -> None:
    mirror = fetched(cache, repo.url)
    dest = tmp_path / "out" / "x.tar.gz"
    dest.parent.mkdir()
    with pytest.raises(GitError):
        mirror.archive("f" * 40, dest)
    assert list(dest.parent.iterdir()) == []


def test_attack_a_tree_bomb_is_refused_before_git_archive_loads_it(repo: TestRepo, cache: Path,
                                                                    tmp_path: Path) -> None:
    """A few KB of objects naming a million files: `git archive` loads the whole tree into memory before it writes
    a byte (a real bomb names billions: hours and gigabytes). Its files are counted first, and the count stops at
    the cap."""
    bomb = commit_tree_bomb(repo, "bomb", levels=5, width=16)  # 16**5 = 1,048,576 files
    mirror = fetched(cache, repo.url)
    dest = tmp_path / "out" / "source.tar.gz"
    dest.parent.mkdir()
    started = time.monotonic()
    with pytest.raises(SourceRefused) as refused:
        mirror.archive(bomb, dest)
    assert time.monotonic() - started < 15
    assert str(refused.value) == (f"the tree of {bomb} holds more than 1000000 files, the most a source archive may "
                                  "hold")
    assert list(dest.parent.iterdir()) == []


def test_attack_a_tree_bomb_head_is_refused_before_its_changes_are_listed_whole(repo: TestRepo, cache: Path) -> None:
    """A pull request's head (a fork's: an outsider's) or a branch whose tree is a bomb: what it changes was listed
    whole into the controllers' memory, with no deadline (a real bomb names billions of paths), before its archive
    was refused. The list now stops at the archive's cap, whether diffed against a base or listed at first sight."""
    base = repo.head
    bomb = commit_tree_bomb(repo, "bomb", levels=5, width=16)  # 16**5 = 1,048,576 files
    mirror = fetched(cache, repo.url)
    for listed in (lambda: mirror.pull_request_changes("main", bomb), lambda: mirror.changes(None, bomb),
                   lambda: mirror.changes(base, bomb)):
        started = time.monotonic()
        with pytest.raises(SourceRefused) as refused:
            listed()
        assert time.monotonic() - started < 20
        assert str(refused.value).endswith("names more than 1000000 files or 134217728 bytes of paths, the most a "
                                           "source may hold"), refused.value
    small = repo.commit({"app/main.tf": "# changed\n"}, "a change")
    assert [c.path for c in fetched(cache, repo.url).pull_request_changes(base, small)] == ["app/main.tf"]


def test_attack_an_archive_larger_than_the_datastore_stores_is_stopped_while_it_is_written(
        repo: TestRepo, cache: Path, tmp_path: Path) -> None:
    big = repo.commit({"blob.txt": os.urandom(256 * 1024).hex()}, "does not compress below 256 KiB")
    mirror = fetched(cache, repo.url)
    dest = tmp_path / "out" / "source.tar.gz"
    dest.parent.mkdir()
    with pytest.raises(SourceRefused) as refused:
        mirror.archive(big, dest, max_bytes=64 * 1024)
    assert str(refused.value) == (f"the source archive of {big} is larger than 65536 bytes, the most the datastore "
                                  "stores")
    assert list(dest.parent.iterdir()) == []
    mirror.archive(big, dest, max_bytes=1024 * 1024)  # under the cap: written whole
    with tarfile.open(dest, "r:gz") as tar:
        assert "blob.txt" in tar.getnames()


def test_attack_an_archive_that_takes_too_long_is_stopped_at_its_deadline(repo: TestRepo, cache: Path,
                                                                          tmp_path: Path) -> None:
    bomb = commit_tree_bomb(repo, "bomb", levels=4, width=20)  # 160,000 files: counted at once, archived in seconds
    mirror = fetched(cache, repo.url)
    dest = tmp_path / "out" / "source.tar.gz"
    dest.parent.mkdir()
    started = time.monotonic()
    with pytest.raises(SourceRefused) as refused:
        mirror.archive(bomb, dest, timeout=1.0)
    assert time.monotonic() - started < 8
    assert str(refused.value) == f"archiving {bomb} of {repo.url} took longer than 1s"
    assert list(dest.parent.iterdir()) == []


def test_an_archive_is_written_by_a_process_holding_descriptors_past_1023(repo: TestRepo, cache: Path,
                                                                           tmp_path: Path) -> None:
    """The archive's output is waited on with poll: `select.select` refuses descriptors past 1023 (ValueError, which
    no git error handler caught), and a busy controllers process (watches, clients, pools) holds that many."""
    import resource

    sha = repo.commit({"main.tf": "x"}, "small")
    mirror = fetched(cache, repo.url)
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if hard != resource.RLIM_INFINITY and hard < 1200:
        pytest.fail(f"this machine allows only {hard} open files; the test needs 1200")
    resource.setrlimit(resource.RLIMIT_NOFILE, (max(soft, 1200), hard))
    held = [os.open(os.devnull, os.O_RDONLY) for _ in range(1100)]
    try:
        dest = tmp_path / "source.tar.gz"
        mirror.archive(sha, dest)
        with tarfile.open(dest, "r:gz") as tar:
            assert "main.tf" in tar.getnames()
    finally:
        for fd in held:
            os.close(fd)
        resource.setrlimit(resource.RLIMIT_NOFILE, (soft, hard))


def test_has_path(repo: TestRepo, cache: Path) -> None:
    sha = repo.commit({"layers/prod/main.tf": "x"}, "layer")
    mirror = fetched(cache, repo.url)
    assert mirror.has_path(sha, "layers/prod")
    assert mirror.has_path(sha, "./layers/prod/")
    assert mirror.has_path(sha, "layers/prod/main.tf")
    assert mirror.has_path(sha, ".")
    assert not mirror.has_path(sha, "layers/prd")
    assert not mirror.has_path(sha, "layers/pro")
    with pytest.raises(ValueError, match="absolute"):
        mirror.has_path(sha, "/etc")


def test_concurrent_fetches_from_threads_are_safe(tmp_path: Path, cache: Path) -> None:
    upstream = make_bare(tmp_path / "upstream.git")
    work = make_repo(tmp_path / "work")
    for i in range(5):
        work.commit({f"layers/l{i}/main.tf": str(i)}, f"commit {i}")
    work.push(upstream)
    mirrors = [GitMirror(cache, upstream), GitMirror(cache, upstream + "/")]  # two instances, one directory
    assert mirrors[0].path == mirrors[1].path
    barrier = threading.Barrier(8)
    errors: list[BaseException] = []

    def run(mirror: GitMirror) -> None:
        try:
            barrier.wait()
            for _ in range(3):
                mirror.fetch()
                assert mirror.resolve("main") == work.head
        except BaseException as exc:  # collected and asserted below
            errors.append(exc)

    threads = [threading.Thread(target=run, args=(mirrors[i % 2],)) for i in range(8)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=120)
    assert errors == []
    assert [p.name for p in cache.iterdir() if p.suffix == ".git"] == [mirrors[0].path.name]
    assert run_git(mirrors[0].path, "fsck", "--no-progress") == ""


def test_concurrent_first_fetches_from_processes_share_one_mirror(repo: TestRepo, cache: Path) -> None:
    script = (
        "import sys; from pathlib import Path; from burrito_py.git import GitMirror\n"
        "m = GitMirror(Path(sys.argv[1]), sys.argv[2]); m.fetch(); print(m.resolve('main'))\n"
    )
    procs = [
        subprocess.Popen([sys.executable, "-c", script, str(cache), repo.url], stdout=subprocess.PIPE, text=True)
        for _ in range(6)
    ]
    outputs = [proc.communicate(timeout=120)[0].strip() for proc in procs]
    assert [proc.returncode for proc in procs] == [0] * 6
    assert outputs == [repo.head] * 6
    assert len([p for p in cache.iterdir() if p.suffix == ".git"]) == 1
    assert not [p for p in cache.iterdir() if p.name.startswith(".")]  # no staging directories left


def test_force_push(tmp_path: Path, cache: Path) -> None:
    upstream = make_bare(tmp_path / "upstream.git")
    work = make_repo(tmp_path / "work")
    base = work.commit({"layers/prod/main.tf": "v1"}, "v1")
    lost = work.commit({"layers/prod/main.tf": "v2"}, "v2, to be rewritten")
    work.push(upstream)
    mirror = fetched(cache, upstream)
    assert mirror.resolve("main") == lost

    work.reset_hard(base)
    rewritten = work.commit({"other/x.tf": "elsewhere"}, "rewritten history")
    work.push(upstream, force=True)
    mirror.fetch()
    assert mirror.resolve("main") == rewritten
    # The mirror that saw the lost commit still diffs against it: the layer's content went back to v1.
    assert Change("M", "layers/prod/main.tf") in mirror.changes(lost, rewritten)

    # A fresh cache (controller restarted elsewhere) never saw it: every file counts as added.
    fresh = fetched(tmp_path / "other-cache", upstream)
    assert not fresh.has_commit(lost)
    changes = fresh.changes(lost, rewritten)
    assert {c.path for c in changes} == {"README.md", "layers/prod/main.tf", "other/x.tf"}
    assert {c.status for c in changes} == {"A"}
    assert fresh.changes(None, rewritten) == changes
    annotations = {
        "webhook.burrito-py.io/branch-commit": lost,
        "webhook.burrito-py.io/relevant-commit": lost,
    }
    patch = decide_layer_commits(annotations, rewritten, fresh.commit_date(rewritten), changes, "layers/prod")
    assert patch["webhook.burrito-py.io/relevant-commit"] == rewritten


@pytest.mark.parametrize(
    ("url", "expected"),
    [
        ("https://user:secret@nonexistent.invalid/org/repo.git",
         "cannot reach https://***@nonexistent.invalid/org/repo.git: could not connect to nonexistent.invalid: its "
         "name does not resolve"),
        ("https://user:secret@127.0.0.1:9/org/repo.git", "cannot reach https://***@127.0.0.1:9/org/repo.git: could not "
                                                         "connect"),
        ("file:///nonexistent/nowhere/repo", "repository file:///nonexistent/nowhere/repo not found"),
    ],
)
def test_errors_are_readable_and_never_contain_credentials(cache: Path, url: str, expected: str) -> None:
    # Loopback allowed explicitly, so the fetch really tries (and fails to) connect.
    mirror = GitMirror(cache, url, fetch_timeout=60, outbound=OutboundPolicy.of(LOOPBACK_NETWORKS))
    with pytest.raises(GitError) as info:
        mirror.fetch()
    message = str(info.value)
    assert expected in message
    assert "secret" not in message
    # Nothing chained: no GitCommandError (which holds the command line) reaches a traceback.
    assert info.value.__cause__ is None and info.value.__context__ is None
    assert "secret" not in repr(mirror)
    assert not mirror.exists()
    assert [p for p in cache.iterdir() if not p.name.endswith(".lock")] == []  # no half-made mirror


def test_invalid_urls_are_refused_before_git_runs(cache: Path) -> None:
    with pytest.raises(GitError, match="must use one of"):
        GitMirror(cache, "ext::sh -c 'touch /tmp/pwned'".replace(" ", ""))
    with pytest.raises(GitError, match="must not start with '-'"):
        GitMirror(cache, "--upload-pack=touch /tmp/pwned")
    with pytest.raises(GitError) as info:
        GitMirror(cache, "ftp://user:secret@host/repo")
    assert "secret" not in str(info.value)


def test_env_reaches_git(repo: TestRepo, cache: Path, tmp_path: Path) -> None:
    """`env` is how credentials will arrive (GIT_ASKPASS, GIT_SSH_COMMAND): prove git sees it on fetch."""
    trace = tmp_path / "trace.log"
    mirror = GitMirror(cache, repo.url, env={"GIT_TRACE": str(trace)})
    mirror.fetch()
    assert trace.is_file() and "fetch" in trace.read_text()
    assert os.environ.get("GIT_TRACE") is None


def test_a_hanging_fetch_times_out_with_a_clear_message(cache: Path) -> None:
    """A server that accepts the connection and then says nothing: the fetch is killed at its timeout."""
    with socket.socket() as silent:
        silent.bind(("127.0.0.1", 0))
        silent.listen()
        port = silent.getsockname()[1]
        mirror = GitMirror(cache, f"ssh://deploy@127.0.0.1:{port}/org/repo.git", fetch_timeout=1,
                           outbound=OutboundPolicy.of(LOOPBACK_NETWORKS))
        with pytest.raises(GitError) as info:
            mirror.fetch()
    assert str(info.value) == f"fetching ssh://***@127.0.0.1:{port}/org/repo.git timed out after 1s"
    assert not mirror.exists()
