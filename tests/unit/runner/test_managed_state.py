"""The runner's half of managed state (docs/architecture.md §9, §10.6): the override file, the backend arguments, the
credentials in the environment only, and the refusal of a code that declares its own backend."""

from __future__ import annotations

from pathlib import Path

import pytest

from burrito_py.api.effective import effective_managed_state
from burrito_py.api.layer import TerraformLayer
from burrito_py.api.repository import TerraformRepository
from burrito_py.runner.state import (
    OVERRIDE_FILE,
    ManagedStateError,
    backend_config_args,
    declared_backends,
    managed_backend,
)

RESOURCE = 'resource "terraform_data" "this" {\n  input = "backend cloud"\n}\n'


def test_a_layer_without_a_backend_gets_the_datastore_and_no_secret_on_disk(tmp_path: Path) -> None:
    (tmp_path / "main.tf").write_text(RESOURCE)
    backend = managed_backend(tmp_path, "terraform", "http://datastore:8080/", "team", "app", "the-token")
    override = (tmp_path / OVERRIDE_FILE).read_text()
    assert 'backend "http" {}' in override and "the-token" not in override
    address = "http://datastore:8080/api/v1/layers/team/app/state"
    assert backend.init_args == backend_config_args("http://datastore:8080", "team", "app")
    assert f"-backend-config=address={address}" in backend.init_args
    assert f"-backend-config=lock_address={address}/lock" in backend.init_args
    assert "-backend-config=lock_method=LOCK" in backend.init_args
    assert "-backend-config=unlock_method=UNLOCK" in backend.init_args
    assert not any("the-token" in arg for arg in backend.init_args)
    assert backend.env == {"TF_HTTP_USERNAME": "burrito-py-runner", "TF_HTTP_PASSWORD": "the-token"}
    assert managed_backend(tmp_path, "terraform", "http://d", "team", "app", None).env == {}  # auth off


@pytest.mark.parametrize(("name", "code", "found"), [
    ("backend.tf", 'terraform {\n  backend "s3" {\n    bucket = "b"\n  }\n}\n', 'backend.tf: backend "s3"'),
    ("main.tf", 'terraform {\n  required_version = ">= 1.5"\n  backend "local" {}\n}\n', 'main.tf: backend "local"'),
    ("cloud.tf", 'terraform {\n  cloud {\n    organization = "o"\n  }\n}\n', "cloud.tf: cloud"),
    ("x_override.tf", 'terraform {\n  backend "http" {}\n}\n', 'x_override.tf: backend "http"'),
    ("backend.tf.json", '{"terraform": {"backend": {"gcs": {"bucket": "b"}}}}', 'backend.tf.json: backend "gcs"'),
])
def test_a_declared_backend_is_refused_naming_the_field_and_the_file(
    tmp_path: Path, name: str, code: str, found: str,
) -> None:
    (tmp_path / "main.tf").write_text(RESOURCE)
    (tmp_path / name).write_text(code)
    assert declared_backends(tmp_path) == [found]
    with pytest.raises(ManagedStateError) as caught:
        managed_backend(tmp_path, "terraform", "http://d", "team", "app", "t")
    assert "spec.state.managed is true, but the layer's code declares its own backend" in str(caught.value)
    assert found in str(caught.value)
    assert not (tmp_path / OVERRIDE_FILE).exists()


def test_words_that_only_look_like_a_backend_are_not_one(tmp_path: Path) -> None:
    (tmp_path / "main.tf").write_text(RESOURCE + '# the backend is managed\nvariable "cloud" {}\n')
    (tmp_path / OVERRIDE_FILE).write_text('terraform {\n  backend "http" {}\n}\n')  # ours, from an earlier step
    assert declared_backends(tmp_path) == []


def test_tofu_files_count_for_opentofu_only(tmp_path: Path) -> None:
    (tmp_path / "backend.tofu").write_text('terraform {\n  backend "local" {}\n}\n')
    assert declared_backends(tmp_path, "terraform") == []
    assert declared_backends(tmp_path, "opentofu") == ['backend.tofu: backend "local"']


def test_an_unparsable_file_is_named(tmp_path: Path) -> None:
    (tmp_path / "main.tf").write_text('terraform {\n  backend "s3" {\n')
    with pytest.raises(ManagedStateError, match=r"spec\.state\.managed: cannot parse main\.tf"):
        declared_backends(tmp_path)


def _layer(state: dict[str, object] | None) -> TerraformLayer:
    spec = {"repository": {"name": "r"}, "branch": "main", "path": "."} | ({"state": state} if state else {})
    return TerraformLayer.from_object({"apiVersion": "terraform.burrito-py.io/v1alpha1", "kind": "TerraformLayer",
                                       "metadata": {"name": "app", "namespace": "team"}, "spec": spec})


def _repository(state: dict[str, object] | None) -> TerraformRepository:
    spec = {"repository": {"url": "https://git.example/r.git"}} | ({"state": state} if state else {})
    return TerraformRepository.from_object({"apiVersion": "terraform.burrito-py.io/v1alpha1",
                                            "kind": "TerraformRepository",
                                            "metadata": {"name": "r", "namespace": "team"}, "spec": spec})


def test_managed_state_is_the_layers_else_the_repositorys_else_off() -> None:
    assert not effective_managed_state(_layer(None), None)
    assert not effective_managed_state(_layer(None), _repository(None))
    assert effective_managed_state(_layer(None), _repository({"managed": True}))
    assert not effective_managed_state(_layer({"managed": False}), _repository({"managed": True}))
    assert effective_managed_state(_layer({"managed": True}), _repository(None))
