"""`burrito-py dev --example terragrunt`: its manifests are valid once prepared (the data and engines directories
filled in), and its tree is what §9.1 reads: two units under live/, app depending on network's vpc_id, both
including root.hcl, one generated layer each."""

from __future__ import annotations

from pathlib import Path

from burrito_local.dev import EXAMPLES_DIR, prepare_example

from burrito_py.api.repository import TerraformRepository
from burrito_py.controllers.repository.generated import decide_generated_layers
from burrito_py.git.terragrunt import TerragruntTree, UnitDependency, analyze_unit, units_of


def test_the_terragrunt_example(tmp_path: Path) -> None:
    [repository] = prepare_example("terragrunt", tmp_path)
    model = TerraformRepository.model_validate(repository)
    env = {e["name"]: e["value"] for e in (model.spec.override_runner_spec.env if model.spec.override_runner_spec
                                              else [])}
    assert env["BURRITO_EXAMPLE_STATE"] == f"{tmp_path.resolve()}/state/terragrunt"
    assert (Path(env["BURRITO_RUNNER_TOOLS_PATH"]) / "Terragrunt" / "1.1.3" / "terragrunt").is_file()
    assert (tmp_path / "repos" / "terragrunt" / ".git").is_dir()

    source = EXAMPLES_DIR / "terragrunt" / "terraform"
    files = {str(p.relative_to(source)): p.read_text() for p in source.rglob("*") if p.is_file()}
    tree = TerragruntTree(frozenset(files), {k: v for k, v in files.items() if k.endswith(".hcl")})
    assert units_of(tree, "live") == ("live/app", "live/network")
    app = analyze_unit(tree, "live/app")
    assert app.problems == () and app.unresolved == ()
    assert app.dependencies == (UnitDependency("network", "live/network", ("vpc_id",)),)
    assert app.reads == ("modules/app", "root.hcl")
    repository["metadata"]["uid"] = "uid"
    names = [b["metadata"]["name"] for b in decide_generated_layers(repository, units_of(tree, "live"), []).create]
    assert names == ["tg-live-app", "tg-live-network"]
