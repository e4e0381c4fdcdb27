"""Safe extraction of source archives and the layer path inside them."""

from __future__ import annotations

import io
import os
import tarfile
from pathlib import Path

import pytest

from burrito_py.runner.sources import SourceError, extract_archive, layer_directory


def archive(path: Path, members: list[tarfile.TarInfo | tuple[str, bytes]]) -> Path:
    with tarfile.open(path, "w:gz") as tar:
        for member in members:
            if isinstance(member, tarfile.TarInfo):
                tar.addfile(member)
            else:
                name, data = member
                info = tarfile.TarInfo(name)
                info.size = len(data)
                tar.addfile(info, io.BytesIO(data))
    return path


def link(name: str, target: str, kind: bytes = tarfile.SYMTYPE) -> tarfile.TarInfo:
    info = tarfile.TarInfo(name)
    info.type, info.linkname = kind, target
    return info


def test_extracts_a_tree(tmp_path: Path) -> None:
    src = archive(tmp_path / "a.tar.gz", [("layers/app/main.tf", b"# app\n"), ("README.md", b"hi\n"),
                                          link("layers/app/shared", "../shared")])
    extract_archive(src, tmp_path / "out")
    assert (tmp_path / "out/layers/app/main.tf").read_text() == "# app\n"
    assert os.readlink(tmp_path / "out/layers/app/shared") == "../shared"


@pytest.mark.parametrize(
    ("member", "reason"),
    [
        (("../evil.tf", b"x"), "outside the destination"),
        (link("escape", "../../etc"), "outside the destination"),
        (link("escape", "/etc/passwd"), "absolute"),
        (link("hard", "../../etc/passwd", tarfile.LNKTYPE), "outside the destination"),
    ],
)
def test_refuses_members_that_escape(tmp_path: Path, member: tarfile.TarInfo | tuple[str, bytes], reason: str) -> None:
    src = archive(tmp_path / "a.tar.gz", [("ok.tf", b"ok"), member])
    with pytest.raises(SourceError, match=f"refusing the source archive: .*{reason}"):
        extract_archive(src, tmp_path / "out" / "tree")
    assert not (tmp_path / "out" / "evil.tf").exists() and not (tmp_path / "evil.tf").exists()


def test_absolute_member_names_stay_inside(tmp_path: Path) -> None:
    # The data filter strips the leading slash, so such a member lands inside the destination.
    extract_archive(archive(tmp_path / "a.tar.gz", [("/abs/evil.tf", b"x")]), tmp_path / "out")
    assert (tmp_path / "out/abs/evil.tf").read_bytes() == b"x"


def test_refuses_device_files(tmp_path: Path) -> None:
    device = tarfile.TarInfo("dev")
    device.type = tarfile.CHRTYPE
    with pytest.raises(SourceError, match="refusing the source archive"):
        extract_archive(archive(tmp_path / "a.tar.gz", [device]), tmp_path / "out")


def test_not_an_archive(tmp_path: Path) -> None:
    (tmp_path / "a.tar.gz").write_bytes(b"<html>not found</html>")
    with pytest.raises(SourceError, match="cannot be unpacked"):
        extract_archive(tmp_path / "a.tar.gz", tmp_path / "out")


def test_layer_directory(tmp_path: Path) -> None:
    tree = tmp_path / "tree"
    (tree / "layers/app").mkdir(parents=True)
    (tree / "layers/file.tf").write_text("")
    (tree / "layers/outside").symlink_to(tmp_path)
    assert layer_directory(tree, "layers/app", "abc") == (tree / "layers/app").resolve()
    assert layer_directory(tree, ".", "abc") == tree.resolve()
    with pytest.raises(SourceError, match=r"spec.path 'layers/gone' does not exist in revision abc"):
        layer_directory(tree, "layers/gone", "abc")
    with pytest.raises(SourceError, match=r"spec.path 'layers/file.tf' is not a directory"):
        layer_directory(tree, "layers/file.tf", "abc")
    with pytest.raises(SourceError, match=r"spec.path 'layers/outside' points outside the repository"):
        layer_directory(tree, "layers/outside", "abc")
