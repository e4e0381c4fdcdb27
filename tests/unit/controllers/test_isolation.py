"""Isolation decisions (issue 11, items 15 and 16), without I/O: which repositories a layer may use and which
runs the controllers refuse outright."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from burrito_py.api.sharing import shared_with
from burrito_py.controllers.layer.validation import cross_namespace_problem, validate_layer
from burrito_py.controllers.repository.reconcile import mirror_for
from burrito_py.controllers.run.isolation import run_refusal
from burrito_py.controllers.settings import ControllerSettings
from burrito_py.git.urls import url_policy_problem
from burrito_py.outbound import OutboundPolicy

STRICT = ControllerSettings()
LOCAL = ControllerSettings(allow_file_repositories=True, allow_cross_namespace_repositories=True)


def layer(namespace: str = "tenant", repository: dict[str, str] | None = None) -> dict[str, Any]:
    return {"metadata": {"name": "app", "namespace": namespace},
            "spec": {"repository": repository or {"name": "repo"}, "branch": "main", "path": "app"}}


def repository(url: str, namespace: str = "tenant", shared: list[str] | None = None) -> dict[str, Any]:
    return {"metadata": {"name": "repo", "namespace": namespace},
            "spec": {"repository": {"url": url}, **({"allowedNamespaces": shared} if shared is not None else {})}}


def run(namespace: str = "tenant", layer_namespace: str | None = None) -> dict[str, Any]:
    ref: dict[str, Any] = {"name": "app"}
    if layer_namespace is not None:
        ref["namespace"] = layer_namespace
    return {"metadata": {"name": "r", "namespace": namespace}, "spec": {"action": "plan", "layer": ref}}


def test_the_defaults_are_strict():
    assert STRICT.allow_file_repositories is False
    assert STRICT.allow_cross_namespace_repositories is False


def test_file_urls_are_refused_unless_enabled_whatever_their_spelling():
    for url in ("file:///var/cache/burrito-py/git/x.git", "FILE:///srv/repo", " file:///srv/repo "):
        problem = url_policy_problem(url, allow_file=False)
        assert problem is not None and problem.startswith("spec.repository.url: ")
        assert "file:// repository URLs are disabled" in problem and "BURRITO_PY_ALLOW_FILE_REPOSITORIES" in problem
        assert url_policy_problem(url, allow_file=True) is None
    assert url_policy_problem("https://github.com/org/repo.git", allow_file=False) is None
    assert url_policy_problem("git@github.com:org/repo.git", allow_file=False) is None
    invalid = url_policy_problem("ext::sh -c evil", allow_file=True)
    assert invalid is not None and invalid.startswith("spec.repository.url: ")


def test_a_layer_with_a_file_repository_is_not_ready_and_says_why():
    ready = validate_layer(layer(), repository("file:///srv/repo"), STRICT).ready
    assert (ready.status, ready.reason) == (False, "RepositoryNotAllowed")
    assert ready.message.startswith("spec.repository: TerraformRepository tenant/repo: spec.repository.url: ")
    assert validate_layer(layer(), repository("file:///srv/repo"), LOCAL).ready.status


def test_a_cross_namespace_repository_reference_is_refused_unless_allowed():
    thief = layer(repository={"name": "repo", "namespace": "default"})
    ready = validate_layer(thief, repository("https://git.example/repo", "default"), STRICT).ready
    assert (ready.status, ready.reason) == (False, "CrossNamespaceRepository")
    assert ready.message.startswith("spec.repository.namespace: 'default' is not the layer's namespace 'tenant'")
    # Whether the other namespace's repository exists is never told.
    assert validate_layer(thief, None, STRICT).ready.reason == "CrossNamespaceRepository"
    assert validate_layer(thief, repository("https://git.example/repo", "default", ["tenant"]), LOCAL).ready.status
    # Naming its own namespace explicitly is fine.
    assert cross_namespace_problem(layer(repository={"name": "repo", "namespace": "tenant"}), STRICT, None) is None


def test_attack_another_teams_repository_is_used_only_where_its_owners_share_it():
    """Attack test: with repositories of other namespaces allowed (the AGL's shared module repository, say), a
    tenant's layer could name any namespace's repository: team-b's private code, fetched with team-b's git
    credentials, planned (and its plan, its log, shown) in the tenant's namespace. Now the repository's own
    `spec.allowedNamespaces` must name the layer's namespace (or `*`)."""
    thief = layer(repository={"name": "repo", "namespace": "team-b"})
    for shared in (None, [], ["team-c"]):
        ready = validate_layer(thief, repository("https://git.example/repo", "team-b", shared), LOCAL).ready
        assert (ready.status, ready.reason) == (False, "CrossNamespaceRepository")
        assert ready.message == ("spec.repository: TerraformRepository team-b/repo is not shared with namespace "
                                 "'tenant': its spec.allowedNamespaces must name it (or '*')")
    for shared in (["tenant"], ["team-c", "*"]):
        assert validate_layer(thief, repository("https://git.example/repo", "team-b", shared), LOCAL).ready.status
    # The repository's own namespace needs no entry; the operator's switch still comes first.
    assert shared_with(repository("https://git.example/repo", "team-b"), "team-b")
    strict = validate_layer(thief, repository("https://git.example/repo", "team-b", ["*"]), STRICT).ready
    assert "disabled on these controllers" in strict.message


def test_attack_whether_another_namespaces_repository_exists_is_never_told():
    """Attack test: with repositories of other namespaces allowed, a tenant's layer naming team-b's repositories
    one name after another read "is not shared" for each that exists and "does not exist" for the others: a list
    of team-b's repository names. Both now read the same, even with an invalid version in the layer."""
    for spec in ({}, {"terraform": {"version": "not a version"}}):
        probe = layer(repository={"name": "repo", "namespace": "team-b"})
        probe["spec"].update(spec)
        unshared = validate_layer(probe, repository("https://git.example/repo", "team-b", ["team-c"]), LOCAL).ready
        missing = validate_layer(probe, None, LOCAL).ready
        assert (missing.status, missing.reason, missing.message) == (unshared.status, unshared.reason,
                                                                     unshared.message)
        assert missing.reason == "CrossNamespaceRepository" and "is not shared with namespace" in missing.message
    # In its own namespace a missing repository is said as such.
    assert validate_layer(layer(), None, LOCAL).ready.message == (
        "spec.repository: TerraformRepository tenant/repo does not exist")


def test_a_run_for_another_namespaces_layer_is_refused():
    refusal = run_refusal(run("tenant", "default"), layer("default"), None, STRICT)
    assert refusal is not None and (refusal.type, refusal.status, refusal.reason) == (
        "HasSucceeded", False, "CrossNamespaceLayer")
    assert refusal.message == ("spec.layer.namespace: 'default' is not the run's namespace 'tenant': a "
                               "TerraformRun may only work for a layer of its own namespace")
    # Even with cross-namespace repositories allowed: a run's layer is always in its own namespace.
    assert run_refusal(run("tenant", "default"), None, None, LOCAL) is not None
    assert run_refusal(run("tenant", "tenant"), layer(), repository("https://git.example/r"), STRICT) is None
    assert run_refusal(run("tenant"), layer(), repository("https://git.example/r"), STRICT) is None


def test_a_run_of_a_layer_whose_repository_is_refused_is_refused():
    refusal = run_refusal(run(), layer(), repository("file:///srv/repo"), STRICT)
    assert refusal is not None and refusal.reason == "RepositoryNotAllowed"
    assert refusal.message.startswith("layer app: spec.repository: TerraformRepository tenant/repo")
    thief = layer(repository={"name": "repo", "namespace": "default"})
    cross = run_refusal(run(), thief, None, STRICT)
    assert cross is not None and cross.reason == "CrossNamespaceRepository"


def test_mirrors_are_per_repository_never_shared_across_namespaces(tmp_path: Path):
    url = "https://git.example/org/repo.git"
    strict = OutboundPolicy()
    mine, theirs = mirror_for(tmp_path, "tenant", "repo", url, strict), mirror_for(tmp_path, "default", "repo", url,
                                                                                  strict)
    assert mine.path != theirs.path
    assert mine.path.parent == (tmp_path / "tenant" / "repo").absolute()
    assert theirs.path.is_relative_to((tmp_path / "default").absolute())
    assert mirror_for(tmp_path, "tenant", "other", url, strict).path != mine.path
    assert mine.outbound == strict


def test_attack_a_pull_request_run_naming_another_namespaces_layer_is_never_the_pull_requests():
    """Attack test: where no admission policy keeps a run's layer in its own namespace (Kubernetes 1.29, or the
    policy disabled), a tenant of namespace `team-b` created a run carrying its own pull request's label and
    `spec.pullRequest`, named as one of team-a's runs (pull request run names follow from public facts), with
    `spec.layer: {namespace: team-a}`. The run controller refused it, but the pull request controller took it for
    one of its own runs, did not want it, and discarded it: deleting team-a's run's plans, logs and applied record
    from the datastore with the controllers' own rights. Now a pull request's runs are those of its own
    namespace's layers only, so nothing the controller reads, keeps or deletes can be another namespace's."""
    from burrito_py.api import annotations as ann
    from burrito_py.kube.inventory import Inventory

    def pr_run(name: str, layer_namespace: str | None) -> dict[str, Any]:
        body = run("team-b", layer_namespace)
        body["metadata"].update(name=name, resourceVersion="1", uid=name,
                                labels={ann.LABEL_PULL_REQUEST: ann.layer_label("pr-7")})
        body["spec"]["pullRequest"] = "pr-7"
        return body

    inventory = Inventory()
    for name, layer_namespace in (("own", None), ("own-explicit", "team-b"), ("team-a-run", "team-a")):
        inventory.runs.observe(pr_run(name, layer_namespace))
    assert sorted(r["metadata"]["name"] for r in inventory.runs_of_pull_request("team-b", "pr-7")) == [
        "own", "own-explicit"]
