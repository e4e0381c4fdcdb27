"""The retention decision (pure): nothing referenced is ever deleted, everything else goes after its grace."""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from burrito_py.api import annotations as ann
from burrito_py.datastore.retention import collect_references, plan_sweep

NOW = datetime(2025, 6, 1, 12, 0, tzinfo=UTC)
NAMESPACES = ("a", "b")
LAYERS = ("l1", "l2", "l3")
RUNS = tuple(f"r{i}" for i in range(8))
REVISIONS = tuple(f"c{i}" for i in range(8))
TREES = tuple(f"t{i}" for i in range(5))
REPOS = ("repo", "other")
FILES = ("plan.bin", "plan.json", "run.log", "outputs.json")

names = st.sampled_from
maybe_runs = st.lists(names(RUNS), max_size=3)


@dataclass
class World:
    """Cluster objects plus, built alongside them, what they reference (the oracle)."""

    layers: list[dict[str, Any]] = field(default_factory=list)
    runs: list[dict[str, Any]] = field(default_factory=list)
    repositories: list[dict[str, Any]] = field(default_factory=list)
    runs_kept: set[tuple[str, str, str]] = field(default_factory=set)
    revisions_kept: set[tuple[str, str, str]] = field(default_factory=set)
    keys: set[str] = field(default_factory=set)
    index: dict[str, str] = field(default_factory=dict)


@st.composite
def worlds(draw: st.DrawFn) -> World:
    world = World()
    layer_repo: dict[tuple[str, str], tuple[str, str]] = {}
    for ns in NAMESPACES:
        for name in draw(st.lists(names(LAYERS), unique=True, max_size=3)):
            repo_ns = draw(st.one_of(st.none(), names(NAMESPACES)))
            repo = (repo_ns or ns, draw(names(REPOS)))
            layer_repo[(ns, name)] = repo
            latest = [{"name": r, "action": "plan", "revision": draw(st.one_of(st.none(), names(REVISIONS)))}
                      for r in draw(maybe_runs)]
            status: dict[str, Any] = {"latestRuns": latest}
            for entry in latest:
                world.runs_kept.add((ns, name, entry["name"]))
                if entry["revision"]:
                    world.revisions_kept.add((*repo, entry["revision"]))
            annotations: dict[str, str] = {}
            if draw(st.booleans()):
                run = draw(names(RUNS))
                annotations[ann.PLAN_RUN] = f"{run}/{draw(st.integers(1, 3))}"
                world.runs_kept.add((ns, name, run))
            if draw(st.booleans()):
                run = draw(names(RUNS))
                annotations[ann.APPLY_RUN] = f"{run}/{draw(st.integers(1, 3))}"
                world.runs_kept.add((ns, name, run))
            for field_name in ("lastPlan", "pendingPlan", "lastRun", "outputsSync"):
                if draw(st.booleans()):
                    run = draw(names(RUNS))
                    key = "name" if field_name == "lastRun" else "run"
                    status[field_name] = {key: run if key == "name" else f"{run}/1", "action": "plan"}
                    world.runs_kept.add((ns, name, run))
            for annotation in (ann.BRANCH_COMMIT, ann.RELEVANT_COMMIT, ann.PLAN_COMMIT, ann.APPLY_COMMIT):
                if draw(st.booleans()):
                    annotations[annotation] = draw(names(REVISIONS))
                    world.revisions_kept.add((*repo, annotations[annotation]))
            world.layers.append({
                "metadata": {"namespace": ns, "name": name, "annotations": annotations},
                "spec": {"repository": {"name": repo[1], **({"namespace": repo_ns} if repo_ns else {})}},
                "status": status,
            })
    for _ in range(draw(st.integers(0, 4))):
        ns, layer, run = draw(names(NAMESPACES)), draw(names(LAYERS)), draw(names(RUNS))
        spec: dict[str, Any] = {"action": "plan", "layer": {"name": layer}}
        world.runs_kept.add((ns, layer, run))
        if draw(st.booleans()):
            applied = draw(names(RUNS))
            spec = {"action": "apply", "layer": {"name": layer}, "artifact": {"run": applied, "attempt": 1}}
            world.runs_kept.add((ns, layer, applied))
        if draw(st.booleans()):
            spec["layer"]["revision"] = revision = draw(names(REVISIONS))
            if (ns, layer) in layer_repo:
                world.revisions_kept.add((*layer_repo[(ns, layer)], revision))
        world.runs.append({"metadata": {"namespace": ns, "name": run}, "spec": spec})
    for ns in NAMESPACES:
        for repo in draw(st.lists(names(REPOS), unique=True, max_size=2)):
            branches = [{"name": "main", "latestRev": r} for r in draw(st.lists(names(REVISIONS), max_size=2))]
            world.revisions_kept.update((ns, repo, b["latestRev"]) for b in branches)
            world.repositories.append({"metadata": {"namespace": ns, "name": repo}, "status": {"branches": branches}})

    # Storage: a mix of referenced and unreferenced artifacts, index entries, trees and foreign keys.
    for _ in range(draw(st.integers(0, 30))):
        ns, layer, run = draw(names(NAMESPACES)), draw(names(LAYERS)), draw(names(RUNS))
        world.keys.add(f"layers/{ns}/{layer}/{run}/{draw(st.integers(1, 3))}/{draw(names(FILES))}")
    for _ in range(draw(st.integers(0, 15))):
        ns, repo, revision = draw(names(NAMESPACES)), draw(names(REPOS)), draw(names(REVISIONS))
        key = f"sources/{ns}/{repo}/revisions/{revision}"
        world.keys.add(key)
        if draw(st.integers(0, 9)):  # now and then an entry cannot be read
            world.index[key] = draw(names(TREES))
    for _ in range(draw(st.integers(0, 8))):
        world.keys.add(f"sources/{draw(names(NAMESPACES))}/{draw(names(REPOS))}/{draw(names(TREES))}.tar.gz")
    world.keys.update(draw(st.lists(names(["other/thing", "layers/a/l1/readme", "sources/a/x.txt"]), max_size=2)))
    return world


def protected(world: World) -> set[str]:
    """Keys that must survive, from the oracle."""
    keep: set[str] = set()
    trees: set[tuple[str, str, str]] = set()
    unreadable: set[tuple[str, str]] = set()
    for key in world.keys:
        parts = key.split("/")
        if len(parts) == 6 and parts[0] == "layers":
            if (parts[1], parts[2], parts[3]) in world.runs_kept:
                keep.add(key)
        elif len(parts) == 5 and parts[3] == "revisions":
            if key not in world.index:
                keep.add(key)
                unreadable.add((parts[1], parts[2]))
            elif (parts[1], parts[2], parts[4]) in world.revisions_kept:
                keep.add(key)
                trees.add((parts[1], parts[2], world.index[key]))
        elif not key.endswith(".tar.gz") or len(parts) != 4:
            keep.add(key)  # a shape retention does not know
    for key in world.keys:
        parts = key.split("/")
        tree = (parts[1], parts[2], parts[3].removesuffix(".tar.gz")) if len(parts) == 4 else None
        if tree and key.endswith(".tar.gz") and (tree in trees or tree[:2] in unreadable):
            keep.add(key)
    return keep


@settings(max_examples=150, deadline=None)
@given(worlds())
def test_nothing_referenced_is_ever_deleted_and_the_rest_is(world: World):
    refs = collect_references(world.layers, world.runs, world.repositories)
    assert refs.runs == world.runs_kept
    assert refs.revisions == world.revisions_kept
    sweep = plan_sweep(world.keys, world.index, refs, {}, NOW, timedelta(0))
    keep = protected(world)
    assert not keep & set(sweep.delete)
    assert set(sweep.delete) == world.keys - keep  # with no grace, everything unreferenced goes
    # A second pass over what is left deletes nothing more.
    again = plan_sweep(world.keys - set(sweep.delete), world.index, refs, {}, NOW, timedelta(0))
    assert again.delete == []


@settings(max_examples=80, deadline=None)
@given(worlds(), st.integers(1, 7200))
def test_unreferenced_keys_wait_out_the_grace_period(world: World, seconds: int):
    refs = collect_references(world.layers, world.runs, world.repositories)
    grace = timedelta(hours=1)
    first = plan_sweep(world.keys, world.index, refs, {}, NOW, grace)
    assert first.delete == []  # first seen unreferenced: nothing goes yet
    later = NOW + timedelta(seconds=seconds)
    second = plan_sweep(world.keys, world.index, refs, first.unreferenced_since, later, grace)
    if seconds < 3600:
        assert second.delete == []
    assert not protected(world) & set(second.delete)
    # A tree whose last entries just went starts its own grace period then; passes a grace apart collect it.
    left, since, deleted = world.keys - set(second.delete), second.unreferenced_since, set(second.delete)
    for n in (1, 2):
        sweep = plan_sweep(left, world.index, refs, since, later + n * grace, grace)
        left, since, deleted = left - set(sweep.delete), sweep.unreferenced_since, deleted | set(sweep.delete)
    assert deleted == world.keys - protected(world)


def test_a_tree_stays_while_any_surviving_entry_points_at_it():
    layer = {
        "metadata": {"namespace": "a", "name": "l1", "annotations": {ann.BRANCH_COMMIT: "new"}},
        "spec": {"repository": {"name": "repo"}},
    }
    keys = ["sources/a/repo/revisions/old", "sources/a/repo/revisions/new", "sources/a/repo/shared.tar.gz",
            "sources/a/repo/gone.tar.gz", "sources/a/repo/revisions/older"]
    index = {"sources/a/repo/revisions/old": "shared", "sources/a/repo/revisions/new": "shared",
             "sources/a/repo/revisions/older": "gone"}
    refs = collect_references([layer], [], [])
    sweep = plan_sweep(keys, index, refs, {}, NOW, timedelta(0))
    assert sweep.delete == ["sources/a/repo/revisions/old", "sources/a/repo/revisions/older",
                            "sources/a/repo/gone.tar.gz"]
    # In its grace period, an unreferenced entry still protects its tree.
    pending = plan_sweep(keys, index, refs, {}, NOW, timedelta(minutes=5))
    assert pending.delete == [] and "sources/a/repo/gone.tar.gz" not in pending.unreferenced_since


def test_a_key_referenced_again_leaves_the_grace_bookkeeping():
    key = "layers/a/l1/r1/1/plan.bin"
    empty = collect_references([], [], [])
    first = plan_sweep([key], {}, empty, {}, NOW, timedelta(hours=1))
    assert first.unreferenced_since == {key: NOW}
    layer = {"metadata": {"namespace": "a", "name": "l1", "annotations": {ann.PLAN_RUN: "r1/1"}}, "spec": {}}
    referenced = plan_sweep([key], {}, collect_references([layer], [], []), first.unreferenced_since,
                            NOW + timedelta(hours=2), timedelta(hours=1))
    assert referenced.delete == [] and referenced.unreferenced_since == {}


def test_the_outputs_of_the_last_apply_outlive_the_run_history():
    """The layer keeps one run in its history, but the outputs Secret is rebuilt from the apply it names."""
    layer = {
        "metadata": {"namespace": "a", "name": "l1", "annotations": {ann.APPLY_RUN: "apply1/2", ann.PLAN_RUN: "p9/1"}},
        "spec": {"repository": {"name": "repo"}},
        "status": {"latestRuns": [{"name": "p9", "action": "plan"}], "outputsSync": {"run": "apply0/1"}},
    }
    keys = ["layers/a/l1/apply1/2/outputs.json", "layers/a/l1/apply0/1/outputs.json", "layers/a/l1/old/1/outputs.json",
            "layers/a/l1/p9/1/plan.bin"]
    sweep = plan_sweep(keys, {}, collect_references([layer], [], []), {}, NOW, timedelta(0))
    assert sweep.delete == ["layers/a/l1/old/1/outputs.json"]
