from __future__ import annotations

import re

import pytest
from hypothesis import given
from hypothesis import strategies as st

from burrito_py.git.paths import ROOT, Change, is_relevant, normalize_repo_path, path_matches

# Path components: no `/`, never `.` or `..` (those are syntax, tested separately).
component = st.text(alphabet=st.characters(blacklist_characters="/\x00", codec="utf-8"), min_size=1, max_size=8).filter(
    lambda c: c not in (".", "..")
)
rel_path = st.lists(component, min_size=1, max_size=5).map("/".join)


@pytest.mark.parametrize(
    ("raw", "expected"),
    [
        ("modules/vpc", "modules/vpc"),
        ("./modules/vpc/", "modules/vpc"),
        ("modules//vpc///", "modules/vpc"),
        ("./a/./b/.", "a/b"),
        (".", ROOT),
        ("./", ROOT),
        ("", ROOT),
        ("terraform/layer.tf", "terraform/layer.tf"),
    ],
)
def test_normalize(raw: str, expected: str) -> None:
    assert normalize_repo_path(raw) == expected


@pytest.mark.parametrize(
    ("raw", "reason"),
    [("/etc/passwd", "absolute"), ("../outside", "'..'"), ("a/../../b", "'..'"), ("a/..", "'..'"), ("a\x00b", "NUL")],
)
def test_normalize_rejects_with_reason(raw: str, reason: str) -> None:
    with pytest.raises(ValueError, match=re.escape(reason)):
        normalize_repo_path(raw)


@pytest.mark.parametrize(
    ("changed", "watched", "expected"),
    [
        ("modules/vpc/main.tf", "modules/vpc", True),
        ("modules/vpc", "modules/vpc", True),
        ("modules/vpc/sub/x.tf", "./modules/vpc/", True),
        ("modules/vpc2/main.tf", "modules/vpc", False),
        ("modules/vp", "modules/vpc", False),
        ("modules", "modules/vpc", False),  # a parent is not inside the watched directory
        ("anything/at/all", ".", True),
        ("README.md", "", True),
    ],
)
def test_path_matches_examples(changed: str, watched: str, expected: bool) -> None:
    assert path_matches(changed, watched) is expected


@given(rel_path)
def test_normalize_is_idempotent(path: str) -> None:
    once = normalize_repo_path(path)
    assert normalize_repo_path(once) == once
    assert normalize_repo_path("./" + path + "/") == once


@given(rel_path, st.lists(component, max_size=3))
def test_path_matches_itself_and_descendants(watched: str, tail: list[str]) -> None:
    assert path_matches(watched, watched)
    assert path_matches("/".join([watched, *tail]), watched)
    assert path_matches("/".join([watched, *tail]), ROOT)


@given(rel_path, component, st.text(alphabet="abc-_.9", min_size=1, max_size=4), st.lists(component, max_size=2))
def test_never_matches_sibling_sharing_a_string_prefix(parent: str, name: str, suffix: str, tail: list[str]) -> None:
    watched = f"{parent}/{name}"
    sibling = "/".join([f"{parent}/{name}{suffix}", *tail])
    assert not path_matches(sibling, watched)


@given(rel_path, component)
def test_never_matches_ancestor(watched: str, child: str) -> None:
    assert not path_matches(watched, f"{watched}/{child}")


def test_is_relevant_layer_path_and_triggers() -> None:
    layer = "layers/prod"
    assert is_relevant([Change("M", "layers/prod/main.tf")], layer, [])
    assert not is_relevant([Change("M", "layers/production/main.tf")], layer, [])
    assert not is_relevant([Change("M", "modules/vpc/main.tf")], layer, [])
    assert is_relevant([Change("M", "modules/vpc/main.tf")], layer, ["modules/vpc", "shared.tfvars"])
    assert is_relevant([Change("A", "shared.tfvars")], layer, ["./shared.tfvars"])
    assert not is_relevant([], layer, ["modules"])


def test_is_relevant_counts_deletions_and_both_sides_of_renames() -> None:
    layer = "layers/prod"
    assert is_relevant([Change("D", "layers/prod/old.tf")], layer)
    moved_out = Change("R", "archive/old.tf", old_path="layers/prod/old.tf")
    moved_in = Change("R", "layers/prod/new.tf", old_path="drafts/new.tf")
    copied_in = Change("C", "layers/prod/copy.tf", old_path="drafts/a.tf")
    assert is_relevant([moved_out], layer)
    assert is_relevant([moved_in], layer)
    assert is_relevant([copied_in], layer)
    assert not is_relevant([Change("R", "drafts/b.tf", old_path="drafts/a.tf")], layer)


def test_root_layer_watches_every_change_but_not_an_empty_diff() -> None:
    assert is_relevant([Change("M", "anything.tf")], ".")
    assert not is_relevant([], ".")


def test_is_relevant_rejects_bad_watched_paths() -> None:
    with pytest.raises(ValueError, match="absolute"):
        is_relevant([Change("M", "a.tf")], "/abs")
    with pytest.raises(ValueError, match=r"'\.\.'"):
        is_relevant([Change("M", "a.tf")], "layer", ["../up"])


@given(st.lists(st.tuples(st.sampled_from("AMDT"), rel_path), max_size=6), rel_path)
def test_relevant_iff_some_change_under_the_layer(raw: list[tuple[str, str]], layer: str) -> None:
    changes = [Change(status, path) for status, path in raw]
    expected = any(p == layer or p.startswith(layer + "/") for _, p in raw)
    assert is_relevant(changes, layer) is expected


def test_change_paths() -> None:
    assert Change("M", "a").paths() == ("a",)
    assert Change("R", "b", "a").paths() == ("a", "b")
