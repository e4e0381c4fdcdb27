"""Repository-relative paths and changed-path matching (docs/architecture.md §8). Pure: no git, no I/O.

Paths are POSIX, relative to the repository root, with the root itself spelled `""` once normalized.
A watched path matches a changed path when it is a prefix of it on whole path *components*, so
`modules/vpc` watches `modules/vpc/main.tf` but not `modules/vpc2/main.tf`.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

ROOT = ""
"""The normalized spelling of the repository root (`.`, `./` and `""` all normalize to it)."""

# Status letters of `git diff --name-status`: Added, Copied, Deleted, Modified, Renamed, Type change,
# Unmerged, unknown (X). Renames and copies carry a similarity score (`R087`) that we drop.
CHANGE_STATUSES = frozenset("ACDMRTUX")


@dataclass(frozen=True, slots=True)
class Change:
    """One line of `git diff --name-status`: `status` is the bare letter, `old_path` is set for R and C."""

    status: str
    path: str
    old_path: str | None = None

    def paths(self) -> tuple[str, ...]:
        """Every path this change touches: both sides of a rename or copy."""
        return (self.path,) if self.old_path is None else (self.old_path, self.path)


def normalize_repo_path(p: str) -> str:
    """Normalize a repository-relative path: `./a//b/` → `a/b`; `.`, `./` and `""` → `""` (the root).

    Raises ValueError (saying why) for absolute paths, `..` components and NUL bytes: a layer path or
    trigger path must stay inside the repository.
    """
    if "\x00" in p:
        raise ValueError(f"path {p!r} contains a NUL byte")
    if p.startswith("/"):
        raise ValueError(f"path {p!r} is absolute; paths are relative to the repository root")
    parts = [part for part in p.split("/") if part not in ("", ".")]
    if ".." in parts:
        raise ValueError(f"path {p!r} contains '..'; paths must stay inside the repository")
    return "/".join(parts)


def path_matches(changed: str, watched: str) -> bool:
    """Whether a change to `changed` concerns `watched`: equal, or `watched` is an ancestor directory.

    Both are normalized first (so ValueError for an absolute or `..` path); the root watches everything.
    """
    changed_n = normalize_repo_path(changed)
    watched_n = normalize_repo_path(watched)
    if watched_n == ROOT:
        return True
    return changed_n == watched_n or changed_n.startswith(watched_n + "/")


def is_relevant(changes: Iterable[Change], layer_path: str, trigger_paths: Iterable[str] = ()) -> bool:
    """Whether any change touches the layer's path or one of its additional trigger paths.

    Deletions count, and both the old and the new side of a rename or copy count (moving a file out of a
    layer changes the layer). Raises ValueError for an invalid layer or trigger path.
    """
    watched = [normalize_repo_path(layer_path), *(normalize_repo_path(t) for t in trigger_paths)]
    if ROOT in watched:
        # Watching the root: any change at all is relevant (but an empty diff is not).
        return any(True for _ in changes)
    return any(path_matches(path, w) for change in changes for path in change.paths() for w in watched)
