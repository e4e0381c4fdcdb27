"""`GitMirror.terragrunt_tree`: the snapshot the Terragrunt analysis reads, from a real mirror (paths, the
`*.hcl` texts, symlinks as stored, never followed on disk), and the analysis on it refusing a symlink that
leads out of the repository."""

from __future__ import annotations

import os
from pathlib import Path

from burrito_py.git import GitMirror
from burrito_py.git.terragrunt import OUTSIDE, UnitDependency, analyze_unit, units_of
from tests.support.git_repos import make_repo, run_git


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
