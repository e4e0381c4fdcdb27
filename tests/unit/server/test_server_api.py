"""The CLI's pure pieces for the server's REST API (`burrito_py/server_api.py`): the layer reference, the versions
table and the diff text (never a value: the diff holds none)."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from burrito_py.server_api import diff_text, layer_path, layer_ref, versions_table


@pytest.mark.parametrize("ref", ["app", "team-a/", "/app", "a/b/c", ""])
def test_a_layer_reference_is_namespace_slash_name(ref: str) -> None:
    with pytest.raises(ValueError, match="layer: expected NAMESPACE/LAYER"):
        layer_ref(ref)


def test_paths_quote_every_part() -> None:
    assert layer_ref("team-a/app") == ("team-a", "app")
    assert layer_path("team-a/app", "state", "versions", 3) == "/api/layers/team-a/app/state/versions/3"
    assert layer_path("a?b/c#d", "x") == "/api/layers/a%3Fb/c%23d/x"


def test_the_versions_table_is_newest_first_and_names_rollbacks() -> None:
    table = versions_table([
        {"serial": 1, "created": "t1", "writer": "runner", "run": "app-plan", "attempt": 2, "resources": 1,
         "size": 377},
        {"serial": 2, "created": "t2", "writer": "server", "resources": 1, "size": 377, "rollbackOf": 1,
         "requestedBy": "alice"},
    ]).splitlines()
    assert table[0].split() == ["SERIAL", "CREATED", "WRITER", "RUN/ATTEMPT", "RESOURCES", "SIZE", "NOTE"]
    assert table[1].split() == ["2", "t2", "server", "-", "1", "377", "rollback", "of", "1", "by", "alice"]
    assert table[2].split() == ["1", "t1", "runner", "app-plan/2", "1", "377"]
    assert "no state versions" in versions_table([])


def test_the_diff_text() -> None:
    assert diff_text({"from": 2, "to": 3, "added": ["a.b"], "removed": ["c.d"],
                      "changed": [{"address": "e.f", "attributes": ["x", "y"]}],
                      "outputs": {"added": ["o"], "removed": [], "changed": ["p"]}}) == (
        "state version 2 -> 3\n+ a.b\n- c.d\n~ e.f: x, y\n+ output.o\n~ output.p\n")
    assert diff_text({"from": 1, "to": 2}) == "state version 1 -> 2\nno resource or output changed\n"


@given(st.lists(st.fixed_dictionaries({"serial": st.integers(0, 10**6), "size": st.integers(0, 10**9)}), max_size=30))
def test_the_table_has_a_line_per_version(versions: list[dict[str, int]]) -> None:
    lines = versions_table(versions).splitlines()
    assert len(lines) == (len(versions) + 1 if versions else 1)
    assert [line.split()[0] for line in lines[1:]] == [str(v["serial"]) for v in reversed(versions)]
