"""Layer outputs (pure parts): when the datastore must be read, and what goes into the Secret."""

from __future__ import annotations

import base64
import json
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from burrito_py.api import annotations as ann
from burrito_py.api.runner_secrets import RUNNER_SECRET
from burrito_py.controllers.layer.outputs import (
    OUTPUTS_RUN,
    OutputsReading,
    OutputsSync,
    OutputsUnreadable,
    missing_outputs,
    output_text,
    outputs_sync,
    outputs_to_sync,
    parse_outputs,
    secret_body,
    secret_data,
)

SECRET = "p4ss-w0rd-value"


def layer(apply_run: str | None = "app-apply-x/2", secret: dict[str, Any] | None = None,
          synced: dict[str, Any] | None = None) -> dict[str, Any]:
    annotations = {ann.APPLY_RUN: apply_run} if apply_run else {}
    spec: dict[str, Any] = {"path": "."}
    if secret is not None:
        spec["writeOutputsToSecret"] = secret
    status = {"outputsSync": synced} if synced is not None else {}
    return {"apiVersion": ann.API_VERSION, "metadata": {"name": "app", "namespace": "ns", "uid": "u-1",
                                                         "annotations": annotations}, "spec": spec, "status": status}


def test_nothing_to_do_before_any_apply_recorded_its_outputs() -> None:
    assert outputs_to_sync(layer(apply_run=None)) is None
    assert outputs_to_sync(layer(apply_run="malformed")) is None


def test_a_new_apply_is_read_once_then_the_layer_is_at_rest() -> None:
    assert outputs_to_sync(layer()) == {"run": "app-apply-x/2"}
    assert outputs_to_sync(layer(synced={"run": "app-apply-x/2"})) is None
    assert outputs_to_sync(layer(apply_run="app-apply-y/1", synced={"run": "app-apply-x/2"})) == {
        "run": "app-apply-y/1"}


def test_a_new_or_changed_secret_is_written_without_waiting_for_an_apply() -> None:
    synced = {"run": "app-apply-x/2"}
    assert outputs_to_sync(layer(secret={"name": "out"}, synced=synced)) == {
        "run": "app-apply-x/2", "secret": {"name": "out"}}
    synced = {"run": "app-apply-x/2", "secret": {"name": "out"}}
    assert outputs_to_sync(layer(secret={"name": "out"}, synced=synced)) is None
    assert outputs_to_sync(layer(secret={"name": "out", "outputs": ["a:b"]}, synced=synced)) == {
        "run": "app-apply-x/2", "secret": {"name": "out", "outputs": ["a:b"]}}
    assert outputs_to_sync(layer(secret={"name": "other"}, synced=synced)) is not None
    assert outputs_to_sync(layer(synced=synced)) == {"run": "app-apply-x/2"}  # no Secret any more


runs = st.sampled_from(["a/1", "a/2", "b/1"])
secrets = st.one_of(st.none(), st.builds(
    lambda name, outputs: {"name": name, **({"outputs": outputs} if outputs is not None else {})},
    st.sampled_from(["s1", "s2"]), st.one_of(st.none(), st.lists(st.sampled_from(["x", "y:z"]), max_size=2))))


@given(runs, secrets, st.one_of(st.none(), st.fixed_dictionaries({"run": runs, "secret": secrets})))
def test_once_recorded_the_layer_needs_no_datastore_read(run: str, secret: dict[str, Any] | None,
                                                         synced: dict[str, Any] | None) -> None:
    wanted = outputs_to_sync(layer(apply_run=run, secret=secret, synced=synced))
    if wanted is None:
        return
    assert wanted["run"] == run and wanted.get("secret") == secret
    assert outputs_to_sync(layer(apply_run=run, secret=secret, synced=wanted)) is None


OUTPUTS = {"name": "app", "password": SECRET, "count": 3, "tags": {"b": "2", "a": "1"}, "none": None}


def decode(data: dict[str, str]) -> dict[str, str]:
    return {k: base64.b64decode(v).decode() for k, v in data.items()}


def test_every_output_by_default_strings_as_is_and_the_rest_as_json() -> None:
    assert decode(secret_data(OUTPUTS, None)) == {
        "name": "app", "password": SECRET, "count": "3", "tags": '{"a": "1", "b": "2"}', "none": "null"}
    assert output_text("007") == "007" and output_text(True) == "true" and output_text([1, "x"]) == '[1, "x"]'


def test_selection_restricts_and_renames_and_missing_outputs_are_named() -> None:
    selection = ["name", "password:db-password", "absent:x"]
    assert decode(secret_data(OUTPUTS, selection)) == {"name": "app", "db-password": SECRET}
    assert missing_outputs(OUTPUTS, selection) == ["absent"]
    assert missing_outputs(OUTPUTS, None) == []


def test_parse_terraform_output_json_and_refuse_anything_else_without_echoing_it() -> None:
    raw = json.dumps({"password": {"sensitive": True, "type": "string", "value": SECRET},
                      "n": {"sensitive": False, "type": "number", "value": 1}}).encode()
    assert parse_outputs(raw) == {"password": SECRET, "n": 1}
    assert parse_outputs(b"{}") == {}
    for bad in (SECRET.encode(), json.dumps({"password": SECRET}).encode(), b"[1]"):
        with pytest.raises(OutputsUnreadable) as error:
            parse_outputs(bad)
        assert SECRET not in str(error.value)


def test_the_secret_is_owned_by_labelled_with_and_annotated_for_the_layer() -> None:
    body = secret_body(layer(), "out", {"k": "dg=="}, "app-apply-x/2")
    assert body["metadata"]["labels"] == {ann.LABEL_LAYER: "app"}
    assert body["metadata"]["annotations"] == {OUTPUTS_RUN: "app-apply-x/2", RUNNER_SECRET: "true"}
    assert body["metadata"]["namespace"] == "ns" and body["type"] == "Opaque" and body["data"] == {"k": "dg=="}
    (owner,) = body["metadata"]["ownerReferences"]
    assert (owner["kind"], owner["name"], owner["uid"], owner["controller"]) == ("TerraformLayer", "app", "u-1", True)


def reading(to_secret: dict[str, Any] | None = None, **kwargs: Any) -> OutputsReading:
    """What gathering found; `to_secret`: the layer writes its outputs to Secret `out`."""
    wanted: dict[str, Any] = {"run": "app-apply-x/2", **({"secret": {"name": "out"}} if to_secret is not None else {})}
    return OutputsReading(wanted, **kwargs)


def test_sync_waits_when_the_outputs_cannot_be_read_now() -> None:
    assert outputs_sync(layer(), reading(outputs=None)) == OutputsSync(retry=True)


def test_sync_records_outputs_lost_for_good_and_leaves_the_secret() -> None:
    sync = outputs_sync(layer(secret={"name": "out"}), reading({}, outputs=None, problem="are not in the datastore"))
    assert [e[1] for e in sync.before] == ["OutputsMissing"] and sync.secret is None and not sync.retry
    assert sync.status == {"status": {"outputs": [], "outputsSync": reading({}, outputs=None).wanted}}


def test_sync_never_overwrites_a_secret_the_layer_does_not_own() -> None:
    foreign = {"metadata": {"name": "out", "ownerReferences": [{"uid": "someone-else"}]}}
    sync = outputs_sync(layer(secret={"name": "out"}), reading({}, outputs={"a": SECRET}, secret=foreign))
    assert sync.retry and sync.secret is None and sync.status is None
    assert [e[1] for e in sync.before] == ["OutputsSecretNotOwned"]
    assert SECRET not in repr(sync.before)


def test_sync_replaces_its_own_secret_at_the_version_read_then_records_the_names() -> None:
    own = {"metadata": {"name": "out", "resourceVersion": "7", "ownerReferences": [{"uid": "u-1"}]}}
    sync = outputs_sync(layer(secret={"name": "out"}), reading({}, outputs={"a": SECRET}, secret=own))
    assert sync.replace_secret and sync.secret is not None
    assert sync.secret["metadata"]["resourceVersion"] == "7"
    assert base64.b64decode(sync.secret["data"]["a"]).decode() == SECRET
    assert [e[1] for e in sync.after_secret] == ["OutputsWritten"]
    assert sync.status is not None and sync.status["status"]["outputs"] == ["a"]
    assert SECRET not in repr((sync.before, sync.after_secret, sync.status))


def test_sync_tells_a_secret_it_cannot_read() -> None:
    sync = outputs_sync(layer(secret={"name": "out"}), reading({}, outputs={"a": 1}, secret_error="403 Forbidden"))
    assert sync.retry and [e[1] for e in sync.before] == ["OutputsSecretFailed"]
