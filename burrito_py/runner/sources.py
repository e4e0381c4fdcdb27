"""The layer's code: a source archive (`git archive` tar.gz of the whole tree, docs/architecture.md §8)
unpacked safely.

Extraction uses tarfile's `data` filter (PEP 706): members with absolute paths or `..`, links pointing
outside the destination, device files and setuid bits are refused, so an archive can never write outside
the work directory. The layer's `spec.path` is then resolved inside the tree, symlinks included.
"""

from __future__ import annotations

import tarfile
from pathlib import Path

__all__ = ["SourceError", "extract_archive", "layer_directory"]


class SourceError(Exception):
    """The archive or the layer path is unusable; the message says which and why."""


def extract_archive(archive: Path, dest: Path) -> None:
    """Unpack a tar (optionally gzip-compressed) archive into `dest`, refusing anything that escapes it."""
    dest.mkdir(parents=True, exist_ok=True)
    try:
        with tarfile.open(archive, "r:*") as tar:
            tar.extractall(dest, filter="data")
    except tarfile.FilterError as exc:
        raise SourceError(f"refusing the source archive: {exc}") from None
    except (tarfile.TarError, EOFError, OSError) as exc:
        raise SourceError(f"the source archive cannot be unpacked: {exc}") from None


def layer_directory(tree: Path, path: str, revision: str) -> Path:
    """`tree/path`, which must be a directory inside `tree` (after following symlinks)."""
    root = tree.resolve()
    target = (root / path).resolve()
    if not target.is_relative_to(root):
        raise SourceError(f"spec.path {path!r} points outside the repository")
    if not target.is_dir():
        what = "is not a directory" if target.exists() else "does not exist"
        raise SourceError(f"spec.path {path!r} {what} in revision {revision}")
    return target
