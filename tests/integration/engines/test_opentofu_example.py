"""`burrito-py dev --example opentofu` (examples/opentofu/) is valid: its manifests load into the models with
${DATA_DIR} and ${ENGINES_ROOT} replaced, every layer path exists, the version each layer asks for is one the
engines root holds (as the runner resolves it), and each layer passes `tofu validate` and applies with the
built tofu, the encrypted one writing an encrypted state."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
from pathlib import Path

import pytest
from burrito_local.dev import prepare_example

from burrito_py.api.effective import effective_tool
from burrito_py.api.layer import TerraformLayer
from burrito_py.api.repository import TerraformRepository
from burrito_py.runner.tools import resolve_tool
from tests.support.engines import engines_root


@pytest.fixture(scope="module")
def example(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, TerraformRepository, list[TerraformLayer]]:
    data_dir = tmp_path_factory.mktemp("dev-data")
    engines_root()  # a missing build fails here, naming scripts/build-engines.sh
    docs = prepare_example("opentofu", data_dir)
    repository = next(TerraformRepository.model_validate(d) for d in docs if d["kind"] == "TerraformRepository")
    layers = [TerraformLayer.model_validate(d) for d in docs if d["kind"] == "TerraformLayer"]
    return data_dir, repository, layers


def test_the_manifests_load_and_name_the_engines_root(
    example: tuple[Path, TerraformRepository, list[TerraformLayer]]
) -> None:
    data_dir, repository, layers = example
    assert [layer.metadata["name"] for layer in layers] == ["tofu-hello", "tofu-encrypted"]
    assert repository.spec.repository.url == f"file://{data_dir.resolve()}/repos/opentofu"
    env = repository.spec.override_runner_spec.env if repository.spec.override_runner_spec else []
    assert env == [{"name": "BURRITO_RUNNER_TOOLS_PATH", "value": f"{engines_root()}/tenv"}]
    for layer in layers:
        assert effective_tool(layer, repository).kind == "opentofu"
        assert (data_dir / "repos" / "opentofu" / layer.spec.path).is_dir()


def _tofu_env(home: Path) -> dict[str, str]:
    return {"PATH": os.environ["PATH"], "HOME": str(home), "CHECKPOINT_DISABLE": "1", "TF_IN_AUTOMATION": "1"}


def test_each_layer_resolves_to_a_built_tofu_validates_and_applies(
    example: tuple[Path, TerraformRepository, list[TerraformLayer]], tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch
) -> None:
    data_dir, repository, layers = example
    monkeypatch.setenv("BURRITO_RUNNER_TOOLS_PATH", str(engines_root() / "tenv"))
    monkeypatch.setenv("TENV_ROOT", str(tmp_path / "tenv-root"))
    source = data_dir / "repos" / "opentofu"
    for layer in layers:
        work = tmp_path / layer.metadata["name"]
        shutil.copytree(source, work)
        layer_dir = work / layer.spec.path
        tool = resolve_tool(effective_tool(layer, repository), layer_dir, source_root=work)
        assert (tool.kind, tool.version) == ("opentofu", "1.12.6")
        assert tool.binary == str(engines_root() / "tenv" / "OpenTofu" / "1.12.6" / "tofu")
        state = tmp_path / f"{layer.metadata['name']}.tfstate"
        for args in (["init", "-input=false", f"-backend-config=path={state}"], ["validate"],
                     ["apply", "-auto-approve", "-input=false"]):
            result = subprocess.run([tool.binary, *args, "-no-color"], cwd=layer_dir, env=_tofu_env(tmp_path),
                                    capture_output=True, text=True, check=False)
            assert result.returncode == 0, (layer.metadata["name"], args, result.stdout[-1500:], result.stderr)
        written = json.loads(state.read_text())
        if layer.metadata["name"] == "tofu-encrypted":
            assert "encrypted_data" in written and "kept encrypted at rest" not in state.read_text()
        else:
            assert written["terraform_version"] == "1.12.6"
            assert written["outputs"]["message"]["value"] == "Hello, burrito-py, from OpenTofu"
