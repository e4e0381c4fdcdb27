"""Merging spec.vars and spec.varsFrom into the tfvars file: order, keys, optional sources, and errors that name
the object but never a value."""

from __future__ import annotations

import base64
import json
import stat
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from burrito_py.api.layer import VarsSource
from burrito_py.runner.variables import (
    TFVARS_FILE,
    VariablesError,
    merge_variables,
    parse_inputs,
    source_values,
    write_tfvars,
)

SECRET_VALUE = "hunter2-do-not-print"


def secret(**data: str) -> dict[str, Any]:
    return {"kind": "Secret", "data": {k: base64.b64encode(v.encode()).decode() for k, v in data.items()}}


def config_map(**data: str) -> dict[str, Any]:
    return {"kind": "ConfigMap", "data": data}


def test_a_secret_gives_every_key_decoded_and_a_config_map_its_data() -> None:
    source = VarsSource(kind="Secret", name="db")
    assert source_values(source, "ns", 0, secret(password=SECRET_VALUE, user="app")) == {
        "password": SECRET_VALUE, "user": "app"}
    source = VarsSource(kind="ConfigMap", name="settings")
    assert source_values(source, "ns", 1, config_map(region="eu-west-3", count="3")) == {
        "region": "eu-west-3", "count": "3"}


def test_values_stay_strings_even_when_they_read_as_json() -> None:
    values = source_values(VarsSource(kind="ConfigMap", name="c"), "ns", 0,
                           config_map(n="007", flag="true", obj='{"a": 1}'))
    assert values == {"n": "007", "flag": "true", "obj": '{"a": 1}'}


def test_keys_restrict_and_a_missing_key_fails_naming_it() -> None:
    source = VarsSource(kind="Secret", name="db", keys=["password"])
    assert source_values(source, "ns", 0, secret(password=SECRET_VALUE, user="app")) == {"password": SECRET_VALUE}
    missing = VarsSource(kind="Secret", name="db", keys=["password", "token"])
    with pytest.raises(VariablesError) as error:
        source_values(missing, "ns", 2, secret(password=SECRET_VALUE))
    assert str(error.value) == "Secret ns/db (spec.varsFrom[2]) has no key 'token'"


def test_a_missing_object_fails_naming_it_unless_optional() -> None:
    with pytest.raises(VariablesError, match=r"^ConfigMap ns/settings \(spec.varsFrom\[0\]\) does not exist$"):
        source_values(VarsSource(kind="ConfigMap", name="settings"), "ns", 0, None)
    assert source_values(VarsSource(kind="ConfigMap", name="settings", optional=True), "ns", 0, None) == {}
    optional_keys = VarsSource(kind="Secret", name="db", keys=["password", "token"], optional=True)
    assert source_values(optional_keys, "ns", 0, secret(password=SECRET_VALUE)) == {"password": SECRET_VALUE}


def test_binary_secret_values_fail_without_showing_them() -> None:
    body = {"kind": "Secret", "data": {"key": base64.b64encode(b"\xff\xfe" + SECRET_VALUE.encode()).decode()}}
    with pytest.raises(VariablesError) as error:
        source_values(VarsSource(kind="Secret", name="db"), "ns", 0, body)
    assert "'key' is not UTF-8" in str(error.value) and SECRET_VALUE not in str(error.value)


def test_later_sources_win_over_earlier_ones_and_over_vars() -> None:
    merged = merge_variables({"a": 1, "b": [1, 2], "c": {"x": True}}, [{"a": "from-secret", "d": "1"}, {"d": "2"}])
    assert merged == {"a": "from-secret", "b": [1, 2], "c": {"x": True}, "d": "2"}
    assert merge_variables(None, []) == {}


names = st.sampled_from(["a", "b", "c", "d"])


@given(st.dictionaries(names, st.integers()), st.lists(st.dictionaries(names, st.text(max_size=3)), max_size=4))
def test_each_variable_comes_from_the_last_source_that_sets_it(vars_: dict[str, int],
                                                                sources: list[dict[str, str]]) -> None:
    merged = merge_variables(vars_, sources)
    assert set(merged) == set(vars_).union(*sources)
    for name, value in merged.items():
        setters = [s[name] for s in sources if name in s]
        assert value == (setters[-1] if setters else vars_[name])


def test_the_file_is_json_and_private(tmp_path: Path) -> None:
    (tmp_path / TFVARS_FILE).write_text("{}")  # a repository's own file of that name is replaced
    (tmp_path / TFVARS_FILE).chmod(0o644)
    target = write_tfvars(tmp_path, {"password": SECRET_VALUE, "list": [1]})
    assert target == tmp_path / TFVARS_FILE
    assert json.loads(target.read_text()) == {"password": SECRET_VALUE, "list": [1]}
    assert stat.S_IMODE(target.stat().st_mode) == 0o600


def test_upstream_inputs_are_checked_against_the_runs_digest_and_win() -> None:
    record = {"digest": "sha256:d1", "variables": {"vpc_id": "vpc-1", "token": SECRET_VALUE},
              "sensitive": ["token", "not-a-variable"], "secretVariables": ["password-not-given"]}
    inputs = parse_inputs(json.dumps(record).encode(), "sha256:d1")
    assert inputs.variables == {"vpc_id": "vpc-1", "token": SECRET_VALUE} and inputs.sensitive == ["token"]
    assert inputs.secret == [] and inputs.error is None and inputs.masked() == {"token": SECRET_VALUE}
    assert merge_variables({"vpc_id": "default"}, [inputs.variables])["vpc_id"] == "vpc-1"
    with pytest.raises(VariablesError) as other:
        parse_inputs(json.dumps(record).encode(), "sha256:d2")
    assert "sha256:d1" in str(other.value) and SECRET_VALUE not in str(other.value)
    for raw in (b"not json", b"[]", b'{"digest": "sha256:d1"}'):
        with pytest.raises(VariablesError):
            parse_inputs(raw, "sha256:d1")


def test_a_record_without_upstream_inputs_carries_the_varsfrom_values_and_what_to_mask() -> None:
    record = {"digest": None, "variables": {"password": SECRET_VALUE, "region": "eu", "sizes": [1, 2]},
              "sensitive": [], "secretVariables": ["password", "sizes"], "error": None}
    inputs = parse_inputs(json.dumps(record).encode(), None)
    assert inputs.secret == ["password", "sizes"]
    assert inputs.masked() == {"password": SECRET_VALUE, "sizes": "[1, 2]"}
    failed = parse_inputs(json.dumps({**record, "error": "Secret ns/db (spec.varsFrom[1]) does not exist"}).encode(),
                          None)
    assert failed.error == "Secret ns/db (spec.varsFrom[1]) does not exist"
