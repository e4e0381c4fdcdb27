"""burrito's lock test cases (internal/lock/lock_test.go, testdata/layer.yaml) and lock facts (lock.go),
translated to our Lease decisions (`lock_key`, `lease_name`, `lease_verdict`)."""

from __future__ import annotations

from burrito_py.controllers.run.lease_decisions import LeaseVerdict, lease_name, lease_verdict, lock_key
from burrito_py.controllers.run.leases import layer_lease_name


def layer(name: str, branch: str, path: str, repository: str = "burrito", **spec: str) -> dict[str, object]:
    return {"metadata": {"name": name, "namespace": "default"},
            "spec": {"repository": {"name": repository, "namespace": "default"}, "branch": branch, "path": path,
                     **spec}}


def test_add_check_remove_flow():
    """Lock / Add check remove flow: not locked → create the Lease → locked → delete it → not locked.

    Our verdicts: no Lease → CREATE; held by this run → HELD (idempotent); deleted again → CREATE."""
    assert lease_verdict(None, "run-1", None, False) is LeaseVerdict.CREATE
    held = {"spec": {"holderIdentity": "run-1"}}
    assert lease_verdict(held, "run-1", "Running", True) is LeaseVerdict.HELD
    assert lease_verdict(held, "run-2", "Running", True) is LeaseVerdict.WAIT, "locked for anyone else"
    assert lease_verdict(None, "run-2", None, False) is LeaseVerdict.CREATE


def test_the_lock_is_per_repository_and_path_so_layers_of_two_branches_share_it():
    """lock.go: the Lease name hashes repository name + namespace + layer path, so layers sharing a repository
    and path share the lock, a PR's temporary layer on another branch included. We do the same by default
    (the state is the same). Upstream PR #1050 later added the branch; we differ on purpose and let a layer
    that has a state per branch say so with spec.lockKey instead."""
    assert layer_lease_name(layer("base", "main", "layers/app")) == layer_lease_name(layer("pr", "pr-1", "layers/app"))
    assert layer_lease_name(layer("a", "main", "layers/app")) != layer_lease_name(layer("b", "main", "layers/other"))
    assert layer_lease_name(layer("a", "main", "layers/app")) != layer_lease_name(
        layer("b", "main", "layers/app", repository="other"))
    per_branch = layer_lease_name(layer("pr", "pr-1", "layers/app", lockKey="app/pr-1"))
    assert per_branch != layer_lease_name(layer("base", "main", "layers/app"))


def test_an_orphan_lock_is_taken_over():
    """burrito issue #238 (PR #1090, open): a Lease whose run is gone blocks the layer forever. Ours is taken
    over when its holder run no longer exists or has finished."""
    orphan = {"spec": {"holderIdentity": "deleted-run"}}
    assert lease_verdict(orphan, "run-2", None, False) is LeaseVerdict.TAKE_OVER
    assert lease_verdict(orphan, "run-2", "Failed", True) is LeaseVerdict.TAKE_OVER


def test_lease_names_are_valid_whatever_the_key():
    """burrito names its Lease `burrito-layer-lock-<fnv32a>`; ours is `burrito-py-layer-<24 hex of sha256>`,
    valid for any key (long paths, a free-form lockKey)."""
    for key in (lock_key("default", "burrito", "a" * 500), lock_key("default", "burrito", "p", "Any Key/ü" * 40)):
        name = lease_name(key)
        assert len(name) == len("burrito-py-layer-") + 24 and name == name.lower()
