"""The controllers resolve `spec.varsFrom` into the run's inputs record (issue 24, design item 6): pure parts."""

from __future__ import annotations

import base64
from typing import Any

from burrito_py.api.runner_secrets import RUNNER_SECRET
from burrito_py.controllers.layer.inputs_record import Sources, Upstream, build_record, resolve_sources

SECRET_VALUE = "s3cr3t-Value-9q"


def secret(**data: str) -> dict[str, Any]:
    """A Secret its writers opened to runners (api/runner_secrets.py)."""
    return {"kind": "Secret", "metadata": {"annotations": {RUNNER_SECRET: "true"}},
            "data": {k: base64.b64encode(v.encode()).decode() for k, v in data.items()}}


def config_map(**data: str) -> dict[str, Any]:
    return {"kind": "ConfigMap", "data": data}


VARS_FROM = [{"kind": "Secret", "name": "creds", "keys": ["password"]}, {"kind": "ConfigMap", "name": "site"},
             {"kind": "Secret", "name": "absent", "optional": True}]


def test_values_in_order_and_the_names_that_came_from_a_secret() -> None:
    sources = resolve_sources(VARS_FROM, "team", [secret(password=SECRET_VALUE, other="x"),
                                                  config_map(region="eu", password="from-config-map"), None])
    record = build_record(sources, Upstream())
    # The later ConfigMap wins over the Secret: `password` no longer holds a Secret's value.
    assert record == {"digest": None, "variables": {"password": "from-config-map", "region": "eu"},
                      "sensitive": [], "secretVariables": [], "upstream": {}}
    only_secret = resolve_sources(VARS_FROM[:1], "team", [secret(password=SECRET_VALUE)])
    assert build_record(only_secret, Upstream())["secretVariables"] == ["password"]


def test_upstream_outputs_win_and_are_kept_apart() -> None:
    sources = resolve_sources(VARS_FROM[:1], "team", [secret(password=SECRET_VALUE)])
    record = build_record(sources, Upstream("sha256:d1", {"password": "upstream", "vpc": "v"}, ("vpc",)))
    assert record["variables"] == {"password": "upstream", "vpc": "v"} and record["secretVariables"] == []
    assert record["upstream"] == {"password": "upstream", "vpc": "v"} and record["sensitive"] == ["vpc"]


def test_a_missing_object_or_key_is_the_records_error_naming_it_never_a_value() -> None:
    missing = resolve_sources(VARS_FROM, "team", [None, config_map(), None])
    assert missing.error == "Secret team/creds (spec.varsFrom[0]) does not exist"
    no_key = resolve_sources(VARS_FROM, "team", [secret(other=SECRET_VALUE), config_map(), None])
    assert no_key.error == "Secret team/creds (spec.varsFrom[0]) has no key 'password'"
    refused = resolve_sources(VARS_FROM, "team", ["cannot read Secret team/creds: 403 Forbidden", None, None])
    assert refused.error == "spec.varsFrom[0]: cannot read Secret team/creds: 403 Forbidden"
    for sources in (missing, no_key, refused):
        record = build_record(sources, Upstream())
        assert SECRET_VALUE not in str(record) and record["error"] == sources.error
    assert build_record(Sources(), Upstream()) == {"digest": None, "variables": {}, "sensitive": [],
                                                   "secretVariables": [], "upstream": {}}
