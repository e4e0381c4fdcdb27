"""`GitMirror.terragrunt_tree`: the snapshot the Terragrunt analysis reads, from a real mirror (paths, the
`*.hcl` texts, symlinks as stored, never followed on disk), and the analysis on it refusing a symlink that
leads out of the repository."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest

from burrito_py.git import GitMirror
from burrito_py.git.mirror import SourceRefused
from burrito_py.git.terragrunt import OUTSIDE, UnitDependency, analyze_unit, units_of
from tests.support.git_repos import TestRepo, commit_tree_bomb, git_env, make_repo, run_git


def test_the_tree_of_a_commit_with_symlinks(tmp_path: Path) -> None:
    repo = make_repo(tmp_path / "work")
    head = repo.commit({
        "root.hcl": "locals {}\n",
        "live/vpc/terragrunt.hcl": 'include "root" {\n  path = find_in_parent_folders("root.hcl")\n}\n',
        "live/app/terragrunt.hcl": 'dependency "vpc" {\n  config_path = "../net"\n}\n'
                                   'dependency "out" {\n  config_path = "../escape/etc"\n}\n',
        "live/vpc/main.tf": "# not read\n",
        "big.hcl": "#" * 4096 + "\n",
    }, "units")
    os.symlink("vpc", repo.path / "live" / "net")
    os.symlink("../..", repo.path / "live" / "escape")
    run_git(repo.path, "add", "-A")
    run_git(repo.path, "commit", "-q", "-m", "links")
    head = run_git(repo.path, "rev-parse", "HEAD")
    mirror = GitMirror(tmp_path / "cache", repo.url)
    mirror.fetch()
    tree = mirror.terragrunt_tree(head, max_file_bytes=1024)
    assert {"live/vpc/main.tf", "big.hcl", "live/net", "live/escape"} <= tree.paths
    assert tree.symlinks == {"live/net": "vpc", "live/escape": "../.."}
    assert "big.hcl" not in tree.texts and "live/vpc/main.tf" not in tree.texts
    assert tree.texts["root.hcl"] == "locals {}\n"
    assert units_of(tree) == ("live/app", "live/vpc")
    analysis = analyze_unit(tree, "live/app")
    assert analysis.dependencies == (UnitDependency("vpc", "live/vpc", None),)
    [problem] = analysis.problems
    assert problem.reason == OUTSIDE and 'dependency "out"' in problem.message


def test_hcl_files_are_read_within_a_budget_unit_files_first(tmp_path: Path) -> None:
    """A tenant's repository cannot make the controllers hold its bulk: past the budget, files are left unread
    (terragrunt.hcl files first in), and a unit whose file was not read says so."""
    repo = make_repo(tmp_path / "work")
    head = repo.commit({
        "a/terragrunt.hcl": "# " + "x" * 300 + "\n",
        "b/terragrunt.hcl": 'include "big" {\n  path = "../big.hcl"\n}\n',
        "big.hcl": "# " + "y" * 600 + "\n",
        "c/terragrunt.hcl": "# " + "z" * 2000 + "\n",
    }, "bulk")
    mirror = GitMirror(tmp_path / "cache", repo.url)
    mirror.fetch()
    tree = mirror.terragrunt_tree(head, max_file_bytes=1500, max_total_bytes=800)
    assert set(tree.texts) == {"a/terragrunt.hcl", "b/terragrunt.hcl"}
    assert tree.unread == {"big.hcl", "c/terragrunt.hcl"}
    [problem] = analyze_unit(tree, "b").problems
    assert problem.reason == "TerragruntConfigInvalid" and "big.hcl was not read" in problem.message
    [problem] = analyze_unit(tree, "c").problems
    assert problem.reason == "TerragruntConfigInvalid" and "c/terragrunt.hcl was not read" in problem.message


def with_symlinks(repo: TestRepo, directory: str, targets: dict[str, bytes]) -> str:
    """Commit the head's tree plus `directory` holding a symlink per name to its target (each target one blob, named
    by every symlink that has it): what a tenant can push, built with git's plumbing. Returns the commit."""

    def git(args: list[str], data: bytes) -> str:
        return subprocess.run(["git", *args], cwd=repo.path, env=git_env(), input=data, capture_output=True,
                              check=True, timeout=60).stdout.decode().strip()

    blobs = {target: git(["hash-object", "-w", "--stdin"], target) for target in set(targets.values())}
    links = git(["mktree"], "".join(f"120000 blob {blobs[t]}\t{n}\n" for n, t in targets.items()).encode())
    root = run_git(repo.path, "ls-tree", "HEAD") + f"\n040000 tree {links}\t{directory}\n"
    commit = run_git(repo.path, "commit-tree", "-p", "HEAD", "-m", "symlinks", git(["mktree"], root.encode()))
    run_git(repo.path, "update-ref", "refs/heads/main", commit)
    return commit


def test_attack_symlinks_to_one_huge_target_are_never_read(tmp_path: Path) -> None:
    """200 symlinks naming one 4 MB blob: each was read whole into the snapshot (800 MB, and the controllers keep 8
    snapshots). A symlink's target is at most 4096 bytes (PATH_MAX: the kernel follows no longer one); a longer one
    is listed as unread, and a unit going through it says so."""
    repo = make_repo(tmp_path / "work")
    repo.commit({"live/app/terragrunt.hcl": 'include "root" {\n  path = "../../links/l0/root.hcl"\n}\n'}, "unit")
    huge = os.urandom(2 << 20).hex().encode()  # 4 MiB
    head = with_symlinks(repo, "links", {f"l{i}": huge for i in range(200)})
    mirror = GitMirror(tmp_path / "cache", repo.url)
    mirror.fetch()
    tree = mirror.terragrunt_tree(head)
    held = sum(len(target) for target in tree.symlinks.values())
    assert held <= 16 << 20, f"{held} bytes of symlink targets held"
    assert {f"links/l{i}" for i in range(200)} <= tree.unread
    [problem] = analyze_unit(tree, "live/app").problems
    assert problem.reason == "TerragruntConfigInvalid", problem
    assert "goes through the symlink links/l0, which was not read" in problem.message, problem


def test_attack_symlink_targets_are_read_once_each_within_the_budget(tmp_path: Path) -> None:
    """Symlinks count in the bytes read per commit with the `.hcl` files, each target once however many symlinks
    name it; past the budget they are unread."""
    repo = make_repo(tmp_path / "work")
    repo.commit({"live/app/terragrunt.hcl": "locals {}\n"}, "unit")
    shared = b"../" + b"x" * 2997  # 3,000 bytes
    links = {f"a-same{i:03}": shared for i in range(200)}
    links.update({f"b-other{i}": b"../" + str(i).encode() * (1000 * i) for i in range(1, 4)})  # 1,003, 2,003, 3,003 B
    head = with_symlinks(repo, "links", links)
    mirror = GitMirror(tmp_path / "cache", repo.url)
    mirror.fetch()
    tree = mirror.terragrunt_tree(head, max_total_bytes=3000 + 1003 + 1500)
    same = {name: target for name, target in tree.symlinks.items() if name.startswith("links/a-same")}
    assert set(same) == {f"links/a-same{i:03}" for i in range(200)}
    assert len({id(target) for target in same.values()}) == 1  # one text held, however many symlinks
    assert tree.symlinks["links/b-other1"] == "../" + "1" * 1000
    assert tree.unread == {"links/b-other2", "links/b-other3"}
    assert tree.texts == {"live/app/terragrunt.hcl": "locals {}\n"}  # 10 bytes: within what is left


def test_attack_a_tree_bomb_is_not_listed_whole_for_its_terragrunt_units(tmp_path: Path) -> None:
    repo = make_repo(tmp_path / "work")
    bomb = commit_tree_bomb(repo, "main", levels=5, width=16)  # 16**5 = 1,048,576 files
    mirror = GitMirror(tmp_path / "cache", repo.url)
    mirror.fetch()
    with pytest.raises(SourceRefused) as refused:
        mirror.terragrunt_tree(bomb)
    assert str(refused.value) == (f"the tree of {bomb} holds more than 1000000 files, the most read for its "
                                  "Terragrunt units")
