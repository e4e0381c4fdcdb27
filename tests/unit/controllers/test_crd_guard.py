"""The destroy guard: a layer deleted because a CRD is deleted is released without a destroy (pure parts)."""

from __future__ import annotations

from typing import Any

from hypothesis import given
from hypothesis import strategies as st

from burrito_py.api import annotations as ann
from burrito_py.controllers.layer.crd_guard import (
    LAYER_CRD,
    CrdView,
    CrdWatch,
    OwnerKind,
    cached_owners,
    crd_deletion,
    owner_kinds,
)
from burrito_py.controllers.layer.decide import NO_CHANGES, LayerDecision
from burrito_py.controllers.layer.destroy import DESTROY_SKIPPED, DestroySnapshot, decide_destroy
from burrito_py.controllers.layer.run_view import RunView

APPLIED = {ann.BRANCH_COMMIT: "c1", ann.PLAN_SUM: "sha256:aa", ann.PLAN_RUN: "app-plan-1/1", ann.PLAN_COMMIT: "c1",
           ann.APPLY_SUM: "sha256:aa", ann.APPLY_COMMIT: "c1"}
REASON = f"CustomResourceDefinition {LAYER_CRD} is being deleted"


def crd(name: str = LAYER_CRD, *, group: str = ann.GROUP, kind: str = "TerraformLayer", uid: str = "u1",
        deleting: bool = False, created: str = "2026-01-01T00:00:00Z") -> dict[str, Any]:
    meta: dict[str, Any] = {"name": name, "uid": uid, "creationTimestamp": created}
    if deleting:
        meta["deletionTimestamp"] = "2026-02-01T00:00:00Z"
    return {"metadata": meta, "spec": {"group": group, "names": {"kind": kind, "plural": name.partition(".")[0]}}}


def layer(*, owner: str | None = None, annotations: dict[str, str] | None = None,
          created: str = "2026-01-10T00:00:00Z") -> dict[str, Any]:
    meta: dict[str, Any] = {"name": "app", "namespace": "default", "creationTimestamp": created,
                            "deletionTimestamp": "2026-02-01T00:00:00Z", "annotations": annotations or {}}
    if owner is not None:
        meta["ownerReferences"] = [{"apiVersion": "apps.burrito-py.io/v1alpha1", "kind": owner, "name": "photos",
                                    "uid": "i1", "controller": True}]
    return {"metadata": meta}


def skipped(d: LayerDecision) -> bool:
    return any(c.type == "HasDestroyFailed" and c.reason == DESTROY_SKIPPED for c in d.conditions)


# -- why a deletion comes from a CRD's -------------------------------------------------------------
def test_a_terminating_layer_crd_is_a_crd_deletion_and_an_active_one_is_not():
    watch = CrdWatch()
    watch.observe(crd())
    assert crd_deletion(layer(), watch.named(LAYER_CRD), []) is None
    assert watch.observe(crd(deleting=True)) is True, "turning terminating is reported once"
    assert watch.observe(crd(deleting=True)) is False
    assert crd_deletion(layer(), watch.named(LAYER_CRD), []) == REASON


def test_terminating_is_for_good_a_late_event_does_not_undo_it_but_a_new_crd_does():
    watch = CrdWatch()
    watch.observe(crd(deleting=True))
    watch.observe(crd())  # an event from before the deletion, arriving late
    assert watch.named(LAYER_CRD).terminating  # type: ignore[union-attr]
    watch.forget(crd(deleting=True))
    assert watch.named(LAYER_CRD) is None
    watch.observe(crd(uid="u2"))
    assert not watch.named(LAYER_CRD).terminating  # type: ignore[union-attr]


def test_the_owner_kinds_crd_terminating_gone_or_made_again_is_a_crd_deletion():
    bucket_crd = crd("buckets.apps.burrito-py.io", group="apps.burrito-py.io", kind="Bucket")
    watch = CrdWatch()
    watch.observe(bucket_crd)
    owned = layer(owner="Bucket")
    assert owner_kinds(owned) == [("apps.burrito-py.io", "v1alpha1", "Bucket")]
    assert crd_deletion(owned, None, cached_owners(owned, watch)) is None, "a person deleted the instance"
    watch.observe(crd("buckets.apps.burrito-py.io", group="apps.burrito-py.io", kind="Bucket", deleting=True))
    reason = crd_deletion(owned, None, cached_owners(owned, watch))
    assert reason is not None and "buckets.apps.burrito-py.io" in reason and "being deleted" in reason
    gone = [OwnerKind("apps.burrito-py.io", "v1alpha1", "Bucket", None, served=False)]
    assert "no longer served" in (crd_deletion(owned, None, gone) or "")
    again = CrdView("buckets.apps.burrito-py.io", "u9", "apps.burrito-py.io", "Bucket", False, "2026-02-01T00:00:01Z")
    made_again = crd_deletion(owned, None, [OwnerKind("apps.burrito-py.io", "v1alpha1", "Bucket", again)])
    assert made_again is not None and "created again" in made_again


def test_a_built_in_or_unknown_owner_kind_says_nothing_and_the_annotation_says_what_it_says():
    owned = layer(owner="Something")
    assert crd_deletion(owned, None, [OwnerKind("apps.burrito-py.io", "v1alpha1", "Something", None)]) is None
    marked = layer(annotations={ann.SKIP_DESTROY: "because"})
    assert crd_deletion(marked, None, []) == "because"
    assert crd_deletion(layer(annotations={ann.SKIP_DESTROY: ""}), None, []) == \
        f"the layer is annotated {ann.SKIP_DESTROY}"


# -- the decision --------------------------------------------------------------------------------
def guarded(annotations: dict[str, str], *runs: RunView, flag: bool = True) -> LayerDecision:
    return decide_destroy(DestroySnapshot(annotations, tuple(runs), 2, flag, REASON))


def test_an_applied_layer_is_released_without_a_destroy_naming_the_crd():
    d = guarded(APPLIED)
    assert d.create_run is None and d.remove_finalizer and skipped(d)
    message = next(c.message for c in d.conditions if c.reason == DESTROY_SKIPPED)
    assert LAYER_CRD in message and "never a destroy request" in message


def test_a_live_run_is_waited_for_and_the_verdict_marked_then_the_layer_is_released():
    apply_running = RunView("app-apply-1", "apply", "Running", "c1")
    d = guarded(APPLIED, apply_running)
    assert d.create_run is None and not d.remove_finalizer and d.state == "Running"
    assert d.skip_destroy == REASON
    assert guarded(APPLIED | {ann.SKIP_DESTROY: REASON}, apply_running).skip_destroy is None, "marked once"
    done = guarded(APPLIED | {ann.SKIP_DESTROY: REASON}, RunView("app-apply-1", "apply", "Succeeded", "c1"))
    assert done.remove_finalizer and skipped(done)


def test_a_finished_destroy_plan_is_never_applied():
    plan = RunView("app-plan-d", "plan", "Succeeded", "c1", destroy=True)
    planned = APPLIED | {ann.PLAN_RUN: "app-plan-d/1", ann.PLAN_SUM: "sha256:dd",
                         ann.PLAN_SUMMARY: "Plan: 0 to add, 0 to change, 1 to destroy"}
    d = guarded(planned, plan)
    assert d.create_run is None and d.remove_finalizer and skipped(d)


def test_a_destroy_apply_that_already_succeeded_is_reported_as_destroyed():
    d = guarded(APPLIED, RunView("app-apply-d", "apply", "Succeeded", "c1", destroy=True))
    assert d.remove_finalizer and any(c.reason == "Destroyed" for c in d.conditions)


run_views = st.builds(
    RunView,
    name=st.sampled_from(["r1", "r2", "r3"]),
    action=st.sampled_from(["plan", "apply"]),
    state=st.sampled_from([None, "Pending", "Running", "Retrying", "Succeeded", "Failed"]),
    revision=st.sampled_from([None, "c1", "c2"]),
    destroy=st.booleans(),
    layer_generation=st.sampled_from([None, 1, 2]),
    artifact=st.sampled_from([None, "r1"]),
)
annotation_sets = st.dictionaries(
    st.sampled_from([ann.BRANCH_COMMIT, ann.APPLY_COMMIT, ann.PLAN_COMMIT, ann.PLAN_RUN, ann.PLAN_SUM,
                     ann.PLAN_SUMMARY, ann.SYNC_NOW, ann.APPROVE_PLAN, ann.SKIP_DESTROY]),
    st.sampled_from(["c1", "c2", "r1/1", "r2/3", "sha256:aa", NO_CHANGES, "Plan: 1 to destroy", ""]),
)


@given(annotation_sets, st.lists(run_views, max_size=4), st.integers(0, 5), st.booleans(),
       st.text(min_size=1, max_size=40))
def test_a_crd_deletion_never_yields_a_run_whatever_else_the_snapshot_holds(
    annotations: dict[str, str], runs: list[RunView], generation: int, flag: bool, reason: str
):
    d = decide_destroy(DestroySnapshot(annotations, tuple(runs), generation, flag, reason))
    assert d.create_run is None
    live = any(not r.terminal for r in runs)
    # Released unless a run is live (waited for); never left waiting without a live run.
    assert d.remove_finalizer == (not live or not flag)
