"""Instance spec keys → Terraform variables: camelCase → snake_case, collisions and reserved keys refused."""

from __future__ import annotations

import re
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from burrito_py.agl.errors import Invalid
from burrito_py.agl.variables import RESERVED_VARIABLES, map_variables, to_snake

# Words of two or more characters: `aAA` could be a + AA or a + A + A (acronyms make one-letter words ambiguous).
WORD = st.from_regex(r"[a-z][a-z0-9]{1,7}", fullmatch=True)
KEY = st.from_regex(r"[A-Za-z][A-Za-z0-9_]{0,20}", fullmatch=True)
VALUE: st.SearchStrategy[Any] = st.recursive(
    st.none() | st.booleans() | st.integers() | st.text(max_size=5),
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=5), inner, max_size=3),
    max_leaves=5,
)


@pytest.mark.parametrize(("key", "snake"), [
    ("storagePool", "storage_pool"), ("size", "size"), ("storage_pool", "storage_pool"), ("HTTPPort", "http_port"),
    ("ipv4Cidr", "ipv4_cidr"), ("enableIPv6", "enable_i_pv6"), ("aBC", "a_bc"), ("diskSizeGB", "disk_size_gb"),
])
def test_examples(key: str, snake: str) -> None:
    assert to_snake(key) == snake


@given(st.lists(WORD, min_size=1, max_size=5))
def test_camel_case_words_become_snake_case_words(words: list[str]) -> None:
    camel = words[0] + "".join(w.capitalize() for w in words[1:])
    assert to_snake(camel) == "_".join(words)


@given(KEY)
def test_output_is_a_lower_case_terraform_identifier_and_idempotent(key: str) -> None:
    snake = to_snake(key)
    assert re.fullmatch(r"[a-z][a-z0-9_]*", snake)
    assert to_snake(snake) == snake
    assert snake.replace("_", "") == key.lower().replace("_", "")  # only underscores are inserted


@given(st.dictionaries(KEY, VALUE, max_size=8))
def test_mapping_succeeds_exactly_when_no_two_keys_collide(spec: dict[str, Any]) -> None:
    names = [to_snake(k) for k in spec]
    clash = len(set(names)) != len(names) or any(n in RESERVED_VARIABLES for n in names)
    if clash:
        with pytest.raises(Invalid):
            map_variables(spec)
        return
    variables = map_variables(spec)
    assert variables == {to_snake(k): v for k, v in spec.items()}


@given(st.lists(WORD, min_size=2, max_size=4), VALUE, VALUE)
def test_camel_and_snake_spellings_of_one_variable_collide_naming_both(words: list[str], a: Any, b: Any) -> None:
    camel = words[0] + "".join(w.capitalize() for w in words[1:])
    snake = "_".join(words)
    if snake in RESERVED_VARIABLES:
        return
    with pytest.raises(Invalid) as caught:
        map_variables({camel: a, snake: b})
    first, second = sorted([camel, snake])
    assert caught.value.field == f"spec.{second}"
    assert f"spec.{first}" in caught.value.reason and repr(snake) in caught.value.reason


@given(st.dictionaries(st.from_regex(r"_[A-Za-z0-9_]{0,10}", fullmatch=True), VALUE, min_size=1, max_size=3),
       st.dictionaries(WORD, VALUE, max_size=3))
def test_underscore_keys_are_refused_each_named(private: dict[str, Any], public: dict[str, Any]) -> None:
    public = {k: v for k, v in public.items() if k not in RESERVED_VARIABLES}
    with pytest.raises(Invalid) as caught:
        map_variables({**public, **private})
    named = {where for where, _ in caught.value.problems}
    assert {f"spec.{k}" for k in private} <= named
    assert all("reserved" in why for where, why in caught.value.problems if where[5:] in private)


def test_terraform_reserved_names_and_non_identifiers_are_refused() -> None:
    with pytest.raises(Invalid) as caught:
        map_variables({"forEach": 1})
    assert caught.value.field == "spec.forEach" and "'for_each'" in caught.value.reason
    with pytest.raises(Invalid) as caught:
        map_variables({"my-key": 1})
    assert caught.value.field == "spec.my-key"


def test_the_error_message_lists_every_problem() -> None:
    with pytest.raises(Invalid) as caught:
        map_variables({"_a": 1, "storagePool": "x", "storage_pool": "y"})
    assert str(caught.value) == (
        "spec._a: keys starting with '_' are reserved and are not Terraform variables; "
        "spec.storage_pool: maps to Terraform variable 'storage_pool' like spec.storagePool; rename one"
    )
