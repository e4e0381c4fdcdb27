"""Which commit a layer should plan: the `branch-commit` / `relevant-commit` annotations
(docs/architecture.md §4, §8). Pure.

The repository controller, for each layer whose branch head it has just resolved, does:

    base = diff_base(layer_annotations)                   # the last head this layer has seen
    changes = mirror.changes(base, head) if base else None
    patch = decide_layer_commits(layer_annotations, head, mirror.commit_date(head), changes,
                                 layer.spec.path, layer.spec.additionalTriggerPaths)
    if patch: patch the layer's annotations with it

Diff base (docs/architecture.md §8; first designed as "between the last relevant commit and the new head"): the layer's
`branch-commit`, i.e. the head it was last told about, and only when that is absent its `relevant-commit`.
Diffing from the head already seen covers exactly the commits new to the layer: a commit elsewhere
followed by a commit in the layer is caught (the diff spans both), and history the layer has already
judged is never re-examined, so the diff stays small however far behind `relevant-commit` is.
If the base is not in the mirror (force push onto a fresh cache), `GitMirror.changes` lists every file of
the head as added, so a layer whose path exists becomes relevant; `changes=None` means "no usable base"
and is always relevant.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from datetime import datetime

from burrito_py.api.annotations import BRANCH_COMMIT, BRANCH_COMMIT_DATE, RELEVANT_COMMIT, RELEVANT_COMMIT_DATE
from burrito_py.git.paths import Change, is_relevant, normalize_repo_path
from burrito_py.timeutil import format_time


def diff_base(annotations: Mapping[str, str]) -> str | None:
    """The revision to diff the new head against: `branch-commit`, else `relevant-commit`, else None."""
    return annotations.get(BRANCH_COMMIT) or annotations.get(RELEVANT_COMMIT) or None


def decide_layer_commits(
    annotations: Mapping[str, str],
    head: str,
    head_date: datetime,
    changes: Iterable[Change] | None,
    layer_path: str,
    trigger_paths: Iterable[str] = (),
) -> dict[str, str]:
    """The annotations to set on a layer whose branch head is now `head` (committed at `head_date`).

    `annotations` are the layer's current annotations; `changes` is the diff from `diff_base(annotations)`
    to `head`, or None when there is no usable base (always relevant). Returns only the keys whose value
    changes, so an empty dict means "nothing to patch" and a repeated call is a no-op:
    - `branch-commit` / `branch-commit-date` ← head, whenever they differ;
    - `relevant-commit` / `relevant-commit-date` ← head when the layer has none yet, or when the head is
      new to the layer and the changes touch `layer_path` or a trigger path (prefix match on components;
      deletions and both sides of renames count).
    Raises ValueError for an invalid layer or trigger path (absolute, or containing `..`).
    """
    # Validate up front, so a bad path fails the same way whichever branch below is taken.
    layer_path = normalize_repo_path(layer_path)
    trigger_paths = [normalize_repo_path(t) for t in trigger_paths]
    date = format_time(head_date)
    wanted: dict[str, str] = {BRANCH_COMMIT: head, BRANCH_COMMIT_DATE: date}
    relevant = annotations.get(RELEVANT_COMMIT)
    if not relevant:
        wanted.update({RELEVANT_COMMIT: head, RELEVANT_COMMIT_DATE: date})
    elif relevant != head and annotations.get(BRANCH_COMMIT) != head:
        # The head is new to this layer: relevant if no base could be diffed, or the diff touches the layer.
        if changes is None or is_relevant(changes, layer_path, trigger_paths):
            wanted.update({RELEVANT_COMMIT: head, RELEVANT_COMMIT_DATE: date})
    elif relevant == head and not annotations.get(RELEVANT_COMMIT_DATE):
        wanted[RELEVANT_COMMIT_DATE] = date
    return {key: value for key, value in wanted.items() if annotations.get(key) != value}
