"""A pull request's affected layers from our own mirror (issue 15 item 2): head against its merge base with the
base branch, whatever the number of files, with the push relevance rules, and the layers downstream of them."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from burrito_py.git import GitMirror
from burrito_py.git.mirror import GitError
from burrito_py.gitproviders.registry import provider_named
from burrito_py.pullrequests.affected import affected_layers
from tests.support.git_repos import make_repo, run_git

REPO = ("team-a", "infra")


def layer(name: str, path: str, *, branch: str = "main", triggers: tuple[str, ...] = (),
          depends: tuple[str, ...] = (), repository: str = "infra") -> dict[str, Any]:
    return {"metadata": {"name": name, "namespace": "team-a"},
            "spec": {"repository": {"name": repository}, "branch": branch, "path": path,
                     "additionalTriggerPaths": list(triggers), "dependsOn": [{"name": d} for d in depends]}}


def test_five_thousand_files_and_every_rule(tmp_path: Path) -> None:
    repo = make_repo(tmp_path / "work")
    repo.commit({**{f"layers/{n}/main.tf": f"# {n}\n" for n in ("bulk", "net", "db", "moved", "late", "quiet")},
                 "modules/vpc/main.tf": "# vpc\n"}, "the layers")
    repo.branch("feature")
    repo.checkout("feature")
    bulk = {f"layers/bulk/files/f{i:04d}.tf": f"# {i}\n" for i in range(5000)}
    repo.commit({**bulk, "modules/vpc/main.tf": "# vpc v2\n"}, "5,000 files and a module")
    run_git(repo.path, "mv", "layers/moved/main.tf", "elsewhere.tf")
    run_git(repo.path, "commit", "-q", "-m", "a file moved out of a layer")
    head = repo.head
    repo.checkout("main")
    repo.commit({"layers/late/main.tf": "# landed on main after the branch began\n"}, "unrelated")

    mirror = GitMirror(tmp_path / "cache", repo.url)
    mirror.fetch()
    changes = mirror.pull_request_changes("main", head)
    assert len(changes) == 5002  # the 5,000, the module, the rename (the commit on main is not counted)

    layers = [
        layer("bulk", "layers/bulk"),
        layer("net", "layers/net", triggers=("modules/vpc",)),  # through a trigger path
        layer("moved", "layers/moved"),  # a file renamed out of it
        layer("late", "layers/late"),  # changed on main only: not the pull request's
        layer("quiet", "layers/quiet"),
        layer("db", "layers/db", depends=("net",)),  # downstream of net
        layer("app", "layers/quiet", depends=("db",)),  # downstream of db, transitively
        layer("bulk-prod", "layers/bulk", branch="production"),  # another base branch
        layer("other-repo", "layers/bulk", repository="platform"),
    ]
    affected = affected_layers(changes, layers, REPO, "main")
    assert affected.layers == (("team-a", "bulk"), ("team-a", "moved"), ("team-a", "net"))
    assert affected.downstream == (("team-a", "app"), ("team-a", "db"))


def test_unrelated_histories_count_every_file(tmp_path: Path) -> None:
    repo = make_repo(tmp_path / "work")
    repo.commit({"layers/a/main.tf": "# a\n"}, "main")
    run_git(repo.path, "checkout", "-q", "--orphan", "other")
    run_git(repo.path, "rm", "-rq", "--cached", ".")
    repo.commit({"layers/b/main.tf": "# b\n"}, "unrelated root")
    mirror = GitMirror(tmp_path / "cache", repo.url)
    mirror.fetch()
    assert mirror.merge_base("main", repo.head) is None
    assert [c.path for c in mirror.pull_request_changes("main", repo.head)] == ["layers/b/main.tf"]  # all of it


def test_a_pull_request_head_is_fetched_from_the_providers_ref_even_from_a_fork(tmp_path: Path) -> None:
    """A fork's head is on no branch of the repository: only the provider's pull ref has it. The ref survives the
    branch fetch's prune; without such a ref (a bare server), the branches are fetched instead."""
    repo = make_repo(tmp_path / "work")
    repo.commit({"layers/a/main.tf": "# a\n"}, "main")
    base = repo.head
    repo.branch("fork-work")
    repo.checkout("fork-work")
    repo.commit({"layers/a/main.tf": "# a, from a fork\n"}, "fork")
    fork_head = repo.head
    repo.checkout("main")
    run_git(repo.path, "update-ref", "refs/pull/7/head", fork_head)
    run_git(repo.path, "update-ref", "refs/merge-requests/8/head", fork_head)
    run_git(repo.path, "branch", "-D", "fork-work")

    mirror = GitMirror(tmp_path / "cache", repo.url)
    github, gitlab_, gitea = (provider_named(name) for name in ("github", "gitlab", "gitea"))
    assert mirror.fetch_pull_request(github.head_ref(7, "topic"), 7, fork_head) == fork_head  # creates the mirror first
    mirror.fetch()  # the branch fetch prunes branches, never the pull ref
    assert mirror.has_commit(fork_head)
    assert [c.path for c in mirror.pull_request_changes("main", fork_head)] == ["layers/a/main.tf"]
    gitlab = GitMirror(tmp_path / "cache-gitlab", repo.url)
    assert gitlab.fetch_pull_request(gitlab_.head_ref(8, "topic"), 8, fork_head[:12]) == fork_head

    repo.branch("same-repo")
    repo.checkout("same-repo")
    repo.commit({"layers/a/main.tf": "# a, from a branch\n"}, "branch")
    # No refs/pull/9/head: the branches are fetched.
    assert mirror.fetch_pull_request(gitea.head_ref(9, "topic"), 9, repo.head) == repo.head
    assert base != repo.head
    with pytest.raises(GitError, match="pull request #10"):
        mirror.fetch_pull_request(github.head_ref(10, "topic"), 10, "0" * 40)


def test_a_bitbucket_cloud_head_is_its_source_branch_and_a_forks_is_never_found(tmp_path: Path) -> None:
    """Bitbucket Cloud publishes no pull request ref: the head is fetched as the source branch of the base
    repository, by its short hash as the webhook gives it. A fork's head lives in the fork, never fetched: a branch
    of the same name in the base repository does not stand in for it."""
    repo = make_repo(tmp_path / "work")
    repo.commit({"layers/a/main.tf": "# a\n"}, "main")
    repo.branch("feature/x")
    repo.checkout("feature/x")
    repo.commit({"layers/a/main.tf": "# a, from a branch\n"}, "branch")
    head = repo.head
    repo.checkout("main")
    bitbucket = provider_named("bitbucket")
    mirror = GitMirror(tmp_path / "cache", repo.url)
    assert mirror.fetch_pull_request(bitbucket.head_ref(3, "feature/x"), 3, head[:12]) == head
    assert [c.path for c in mirror.pull_request_changes("main", head)] == ["layers/a/main.tf"]
    with pytest.raises(GitError, match="pull request #4"):  # the fork's commit, under a branch name the base has
        mirror.fetch_pull_request(bitbucket.head_ref(4, "feature/x"), 4, "abcdef012345")


def test_a_bitbucket_datacenter_head_is_its_pull_request_ref_even_from_a_fork(tmp_path: Path) -> None:
    """Data Center publishes `refs/pull-requests/<id>/from` in the target repository, a fork's head included."""
    repo = make_repo(tmp_path / "work")
    repo.commit({"layers/a/main.tf": "# a\n"}, "main")
    repo.branch("fork-work")
    repo.checkout("fork-work")
    repo.commit({"layers/a/main.tf": "# a, from a fork\n"}, "fork")
    fork_head = repo.head
    repo.checkout("main")
    run_git(repo.path, "update-ref", "refs/pull-requests/5/from", fork_head)
    run_git(repo.path, "branch", "-D", "fork-work")
    mirror = GitMirror(tmp_path / "cache", repo.url)
    ref = provider_named("bitbucket-datacenter").head_ref(5, "fork-work")
    assert mirror.fetch_pull_request(ref, 5, fork_head) == fork_head
    assert [c.path for c in mirror.pull_request_changes("main", fork_head)] == ["layers/a/main.tf"]


def test_a_layers_inputs_compared_between_a_merge_and_the_reviewed_head(tmp_path: Path) -> None:
    """Issue 30 item 4: after a merge, the layer's path, trigger paths and Terragrunt reads
    (`layer_inputs`) are compared by object id between the commit the layer planned and the merged head."""
    from burrito_py.pullrequests.affected import layer_inputs

    repo = make_repo(tmp_path / "work")
    repo.commit({"layers/app/main.tf": "# v1\n", "modules/vpc/main.tf": "# vpc\n", "layers/db/main.tf": "# db\n"},
                "the layers")
    repo.branch("feature")
    repo.checkout("feature")
    head = repo.commit({"layers/app/main.tf": "# v2\n"}, "change app")
    repo.checkout("main")
    unrelated = repo.commit({"layers/db/main.tf": "# db v2\n"}, "unrelated, on main")
    run_git(repo.path, "merge", "-q", "--no-ff", "-m", "merge", "feature")
    merge = repo.head
    moved = repo.commit({"modules/vpc/main.tf": "# vpc v2\n"}, "the module moves")
    run_git(repo.path, "update-ref", "refs/pull/1/head", head)

    mirror = GitMirror(tmp_path / "cache", repo.url)
    mirror.fetch()
    mirror.fetch_pull_request("refs/pull/1/head", 1, head, None)
    app = layer("app", "layers/app", triggers=("modules/vpc",))
    assert layer_inputs(app) == ("layers/app", "modules/vpc")
    assert mirror.same_paths(merge, head, layer_inputs(app))  # the unrelated commit does not count
    assert not mirror.same_paths(moved, head, layer_inputs(app))  # a trigger path moved under it
    assert not mirror.same_paths(unrelated, head, layer_inputs(app))  # the base before the merge
    assert mirror.same_paths(merge, head, ["layers/app", "nowhere"])  # absent on both sides: the same
    assert not mirror.same_paths(merge, head, ["."])  # the whole tree: the unrelated commit counts
    assert mirror.is_ancestor(head, merge) and not mirror.is_ancestor(head, unrelated)
    with pytest.raises(GitError):
        mirror.same_paths("f" * 40, head, ["layers/app"])
