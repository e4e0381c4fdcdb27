"""The provider mirror's h1 (`providercache/hashes.py`) refuses archives outside a provider's bounds before it reads
a member: a central directory too large to hold in memory, too many members, a member listed twice, too much to
unpack. A genuine archive's h1 is unchanged."""

from __future__ import annotations

import io
import zipfile
from pathlib import Path

import pytest

from burrito_py.datastore.providercache import hashes
from burrito_py.datastore.providercache.hashes import ArchiveRefused, directory_size, zip_h1


def write_zip(path: Path, members: dict[str, bytes], comment: bytes = b"") -> Path:
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w", zipfile.ZIP_DEFLATED) as archive:
        for name, data in members.items():
            archive.writestr(name, data)
        archive.comment = comment
    path.write_bytes(buffer.getvalue())
    return path


def test_a_genuine_provider_archive_is_hashed_as_before(tmp_path: Path) -> None:
    archive = write_zip(tmp_path / "p.zip", {"terraform-provider-x_v1.0.0": b"\x7fELF" * 1000, "LICENSE": b"MIT"},
                        comment=b"a comment")
    assert zip_h1(archive).startswith("h1:")
    with zipfile.ZipFile(archive) as opened:
        assert directory_size(archive) == sum(46 + len(i.filename) for i in opened.infolist())


def test_a_central_directory_above_the_bound_is_refused_before_the_reader_holds_it(tmp_path: Path,
                                                                                   monkeypatch: pytest.MonkeyPatch
                                                                                   ) -> None:
    members = {f"{'d' * 200}/{n}": b"" for n in range(10)}
    archive = write_zip(tmp_path / "p.zip", members)
    monkeypatch.setattr(hashes, "MAX_DIRECTORY_BYTES", 1024)
    with pytest.raises(ArchiveRefused, match="central directory of"):
        zip_h1(archive)


def test_too_many_members_a_repeated_name_or_too_much_to_unpack_are_refused(tmp_path: Path,
                                                                             monkeypatch: pytest.MonkeyPatch) -> None:
    many = write_zip(tmp_path / "many.zip", {f"f{n}": b"" for n in range(hashes.MAX_MEMBERS + 1)})
    with pytest.raises(ArchiveRefused, match="members, more than"):
        zip_h1(many)
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w") as twice, pytest.warns(UserWarning, match="Duplicate name"):
        twice.writestr("x", b"1")
        twice.writestr("x", b"2")
    (tmp_path / "twice.zip").write_bytes(buffer.getvalue())
    with pytest.raises(ArchiveRefused, match="more than once"):
        zip_h1(tmp_path / "twice.zip")
    big = write_zip(tmp_path / "big.zip", {"a": bytes(4096), "b": bytes(4096)})
    monkeypatch.setattr(hashes, "MAX_UNPACKED_BYTES", 8191)
    with pytest.raises(ArchiveRefused, match="8192 bytes unpacked"):
        zip_h1(big)
