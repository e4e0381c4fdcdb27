from __future__ import annotations

from datetime import UTC, datetime

import pytest
from hypothesis import given
from hypothesis import strategies as st

from burrito_py.api.annotations import BRANCH_COMMIT, BRANCH_COMMIT_DATE, RELEVANT_COMMIT, RELEVANT_COMMIT_DATE
from burrito_py.git.paths import Change
from burrito_py.git.relevance import decide_layer_commits, diff_base

T0 = datetime(2026, 11, 22, 8, 0, tzinfo=UTC)
T1 = datetime(2026, 11, 22, 9, 30, 15, tzinfo=UTC)
A, B, C = "a" * 40, "b" * 40, "c" * 40


def seen(branch: str, relevant: str) -> dict[str, str]:
    return {
        BRANCH_COMMIT: branch,
        BRANCH_COMMIT_DATE: "2026-11-22T08:00:00Z",
        RELEVANT_COMMIT: relevant,
        RELEVANT_COMMIT_DATE: "2026-11-22T08:00:00Z",
    }


def test_a_new_layer_gets_the_head_as_branch_and_relevant_commit() -> None:
    patch = decide_layer_commits({}, A, T1, None, "layers/prod")
    assert patch == {
        BRANCH_COMMIT: A,
        BRANCH_COMMIT_DATE: "2026-11-22T09:30:15Z",
        RELEVANT_COMMIT: A,
        RELEVANT_COMMIT_DATE: "2026-11-22T09:30:15Z",
    }


def test_unrelated_commit_moves_only_the_branch_commit() -> None:
    patch = decide_layer_commits(seen(A, A), B, T1, [Change("M", "modules/x/main.tf")], "layers/prod")
    assert patch == {BRANCH_COMMIT: B, BRANCH_COMMIT_DATE: "2026-11-22T09:30:15Z"}


def test_change_in_the_layer_moves_both() -> None:
    patch = decide_layer_commits(seen(A, A), B, T1, [Change("D", "layers/prod/old.tf")], "layers/prod")
    assert patch[RELEVANT_COMMIT] == B
    assert patch[RELEVANT_COMMIT_DATE] == "2026-11-22T09:30:15Z"
    assert patch[BRANCH_COMMIT] == B


def test_trigger_path_change_is_relevant() -> None:
    changes = [Change("R", "modules/net/main.tf", old_path="modules/vpc/main.tf")]
    assert RELEVANT_COMMIT not in decide_layer_commits(seen(A, A), B, T1, changes, "layers/prod")
    patch = decide_layer_commits(seen(A, A), B, T1, changes, "layers/prod", ["modules/vpc"])
    assert patch[RELEVANT_COMMIT] == B


def test_no_usable_base_is_relevant() -> None:
    # Force push onto a fresh cache, or a layer that lost its branch-commit: we cannot tell, so plan.
    patch = decide_layer_commits(seen(A, A), B, T1, None, "layers/prod")
    assert patch[RELEVANT_COMMIT] == B


def test_head_already_seen_is_a_no_op() -> None:
    annotations = seen(B, A)
    assert decide_layer_commits(annotations, B, T0, None, "layers/prod") == {}
    assert decide_layer_commits(annotations, B, T0, [Change("M", "layers/prod/x.tf")], "layers/prod") == {}


def test_missing_dates_are_filled_in() -> None:
    annotations = {BRANCH_COMMIT: A, RELEVANT_COMMIT: A}
    assert decide_layer_commits(annotations, A, T0, [], "layers/prod") == {
        BRANCH_COMMIT_DATE: "2026-11-22T08:00:00Z",
        RELEVANT_COMMIT_DATE: "2026-11-22T08:00:00Z",
    }


def test_commit_elsewhere_then_in_layer_is_detected_by_diffing_from_branch_commit() -> None:
    # History: A (relevant) → B (elsewhere) → C (in the layer). The controller saw B, then C.
    after_b = {**seen(A, A), **decide_layer_commits(seen(A, A), B, T0, [Change("M", "docs/x.md")], "layers/prod")}
    assert after_b[RELEVANT_COMMIT] == A and after_b[BRANCH_COMMIT] == B
    assert diff_base(after_b) == B  # diff B..C, not A..C
    after_c = decide_layer_commits(after_b, C, T1, [Change("A", "layers/prod/new.tf")], "layers/prod")
    assert after_c[RELEVANT_COMMIT] == C


def test_diff_base_prefers_branch_commit() -> None:
    assert diff_base(seen(B, A)) == B
    assert diff_base({RELEVANT_COMMIT: A}) == A
    assert diff_base({}) is None
    assert diff_base({BRANCH_COMMIT: ""}) is None


def test_invalid_layer_path_is_rejected_even_for_a_new_layer() -> None:
    with pytest.raises(ValueError, match=r"'\.\.'"):
        decide_layer_commits({}, A, T0, None, "../escape")
    with pytest.raises(ValueError, match="absolute"):
        decide_layer_commits(seen(A, A), B, T0, [], "layers/prod", ["/abs"])


sha = st.text(alphabet="0123456789abcdef", min_size=40, max_size=40)
maybe = st.one_of(st.none(), sha)


@given(maybe, maybe, sha, st.one_of(st.none(), st.lists(st.sampled_from(["layers/p/a.tf", "other/b.tf"]))))
def test_patch_is_idempotent_and_always_points_branch_commit_at_head(
    branch: str | None, relevant: str | None, head: str, changed: list[str] | None
) -> None:
    annotations = {k: v for k, v in ((BRANCH_COMMIT, branch), (RELEVANT_COMMIT, relevant)) if v is not None}
    changes = None if changed is None else [Change("M", p) for p in changed]
    patch = decide_layer_commits(annotations, head, T1, changes, "layers/p")
    applied = {**annotations, **patch}
    assert applied[BRANCH_COMMIT] == head
    assert applied[RELEVANT_COMMIT] in (head, relevant)
    assert set(patch) <= {BRANCH_COMMIT, BRANCH_COMMIT_DATE, RELEVANT_COMMIT, RELEVANT_COMMIT_DATE}
    # Applying the patch and deciding again for the same head changes nothing.
    assert decide_layer_commits(applied, head, T1, changes, "layers/p") == {}
    if relevant is not None and branch != head and relevant != head:
        expect_relevant = changes is None or "layers/p/a.tf" in (changed or [])
        assert (applied[RELEVANT_COMMIT] == head) is expect_relevant
