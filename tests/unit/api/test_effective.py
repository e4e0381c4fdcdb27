"""What a layer runs with: its own settings, else its repository's, else the defaults."""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from burrito_py.api.common import OverrideRunnerSpec, RunnerMetadata
from burrito_py.api.effective import (
    EffectiveRemediation,
    EffectiveTool,
    ToolVersion,
    effective_override_runner_spec,
    effective_remediation,
    effective_runs_to_keep,
    effective_tool,
)
from burrito_py.api.layer import TerraformLayer
from burrito_py.api.repository import TerraformRepository


def layer(**spec: Any) -> TerraformLayer:
    return TerraformLayer.from_object({
        "metadata": {"name": "net", "namespace": "ns"},
        "spec": {"repository": {"name": "infra"}, "branch": "main", "path": "net", **spec},
    })


def repository(**spec: Any) -> TerraformRepository:
    return TerraformRepository.from_object({
        "metadata": {"name": "infra", "namespace": "ns"},
        "spec": {"repository": {"url": "https://git.example.com/infra.git"}, **spec},
    })


# ------------------------------------------------------------------------------------------- remediation


def test_remediation_defaults_when_nothing_is_set() -> None:
    assert effective_remediation(layer(), repository()) == EffectiveRemediation(False, False, 3)
    assert effective_remediation(layer(), None) == EffectiveRemediation(False, False, 3)
    assert effective_remediation(layer(), None, default_max_retries=7).max_retries == 7


def test_remediation_field_by_field() -> None:
    repo = repository(remediationStrategy={"autoApply": True, "applyWithoutPlanArtifact": True,
                                            "onError": {"maxRetries": 5}})
    assert effective_remediation(layer(), repo) == EffectiveRemediation(True, True, 5)
    mine = layer(remediationStrategy={"autoApply": False})
    assert effective_remediation(mine, repo) == EffectiveRemediation(False, True, 5)
    mine = layer(remediationStrategy={"onError": {}})
    assert effective_remediation(mine, repo) == EffectiveRemediation(True, True, 5)


def test_zero_retries_on_the_layer_is_not_unset() -> None:
    repo = repository(remediationStrategy={"onError": {"maxRetries": 5}})
    assert effective_remediation(layer(remediationStrategy={"onError": {"maxRetries": 0}}), repo).max_retries == 0


@given(
    st.none() | st.booleans(), st.none() | st.booleans(),
    st.none() | st.integers(0, 9), st.none() | st.integers(0, 9), st.integers(0, 9),
)
def test_remediation_is_the_nearest_set_value(
    layer_auto: bool | None, repo_auto: bool | None, layer_retries: int | None, repo_retries: int | None,
    default: int,
) -> None:
    mine = layer(remediationStrategy={"autoApply": layer_auto, "onError": {"maxRetries": layer_retries}})
    theirs = repository(remediationStrategy={"autoApply": repo_auto, "onError": {"maxRetries": repo_retries}})
    got = effective_remediation(mine, theirs, default_max_retries=default)
    assert got.auto_apply is (layer_auto if layer_auto is not None else bool(repo_auto))
    expected_retries = next(v for v in (layer_retries, repo_retries, default) if v is not None)
    assert got.max_retries == expected_retries


# -------------------------------------------------------------------------------------------- run history


@pytest.mark.parametrize(
    ("mine", "theirs", "expected"),
    [(None, None, 5), (None, 8, 8), (2, 8, 2), (3, None, 3)],
)
def test_runs_to_keep(mine: int | None, theirs: int | None, expected: int) -> None:
    lay = layer(runHistoryPolicy={"runs": mine}) if mine is not None else layer(runHistoryPolicy={})
    repo = repository(runHistoryPolicy={"runs": theirs}) if theirs is not None else repository()
    assert effective_runs_to_keep(lay, repo) == expected
    assert effective_runs_to_keep(lay, None) == (mine or 5)


# ------------------------------------------------------------------------------------------------- tools


@pytest.mark.parametrize(
    ("layer_spec", "repo_spec", "expected"),
    [
        ({}, {}, EffectiveTool("terraform", None, None)),
        ({"terraform": {"version": "1.9.5"}}, {}, EffectiveTool("terraform", "1.9.5", None)),
        ({}, {"terraform": {"version": "1.5.7"}}, EffectiveTool("terraform", "1.5.7", None)),
        ({"terraform": {"version": "1.9.5"}}, {"terraform": {"version": "1.5.7"}},
         EffectiveTool("terraform", "1.9.5", None)),
        ({}, {"opentofu": {"enabled": True, "version": "1.8.3"}}, EffectiveTool("opentofu", "1.8.3", None)),
        # The layer's version for the tool the repository chose.
        ({"opentofu": {"version": "1.7.0"}}, {"opentofu": {"enabled": True, "version": "1.8.3"}},
         EffectiveTool("opentofu", "1.7.0", None)),
        # The nearest level that sets `enabled` decides, either way.
        ({"opentofu": {"enabled": False}}, {"opentofu": {"enabled": True}}, EffectiveTool("terraform", None, None)),
        ({"terraform": {"enabled": True}}, {"opentofu": {"enabled": True}}, EffectiveTool("terraform", None, None)),
        ({"opentofu": {"enabled": True}}, {"terraform": {"enabled": True, "version": "1.9.5"}},
         EffectiveTool("opentofu", None, None)),
        # A terraform version on the repository does not leak into an opentofu layer, nor the other way.
        ({"opentofu": {"enabled": True}}, {"terraform": {"version": "1.9.5"}}, EffectiveTool("opentofu", None, None)),
        ({}, {"opentofu": {"version": "1.8.3"}}, EffectiveTool("terraform", None, None)),
        # Terragrunt: merged field by field, reported only when enabled.
        ({"terragrunt": {"enabled": True}}, {"terragrunt": {"version": "0.67.0"}},
         EffectiveTool("terraform", None, ToolVersion("0.67.0"))),
        ({"terragrunt": {"enabled": False}}, {"terragrunt": {"enabled": True, "version": "0.67.0"}},
         EffectiveTool("terraform", None, None)),
        ({"terragrunt": {"version": "0.60.0"}}, {}, EffectiveTool("terraform", None, None)),
    ],
)
def test_effective_tool(layer_spec: dict[str, Any], repo_spec: dict[str, Any], expected: EffectiveTool) -> None:
    assert effective_tool(layer(**layer_spec), repository(**repo_spec)) == expected


def test_effective_tool_without_repository() -> None:
    assert effective_tool(layer(opentofu={"enabled": True, "version": "1.8.3"}), None) == EffectiveTool(
        "opentofu", "1.8.3", None
    )


# ------------------------------------------------------------------------------------- runner overrides


def test_override_runner_spec_layer_wins_field_by_field() -> None:
    repo = repository(overrideRunnerSpec={
        "image": "registry/runner:1", "serviceAccountName": "runner",
        "env": [{"name": "A", "value": "repo"}], "tolerations": [{"key": "spot", "operator": "Exists"}],
        "nodeSelector": {"pool": "terraform"}, "resources": {"limits": {"memory": "1Gi"}},
        "extraPlanArgs": ["-parallelism=5"],
        "metadata": {"labels": {"team": "platform", "tier": "repo"}, "annotations": {"a": "1"}},
    })
    mine = layer(overrideRunnerSpec={
        "image": "registry/runner:2", "env": [{"name": "B", "value": "layer"}], "extraPlanArgs": [],
        "metadata": {"labels": {"tier": "layer"}},
    })
    got = effective_override_runner_spec(mine, repo)
    assert got.image == "registry/runner:2"
    assert got.service_account_name == "runner"
    assert got.env == [{"name": "B", "value": "layer"}], "a non-empty list replaces the repository's"
    assert got.extra_plan_args == ["-parallelism=5"], "an empty list inherits"
    assert got.tolerations == [{"key": "spot", "operator": "Exists"}]
    assert got.node_selector == {"pool": "terraform"}
    assert got.resources == {"limits": {"memory": "1Gi"}}
    assert got.metadata == RunnerMetadata(labels={"team": "platform", "tier": "layer"}, annotations={"a": "1"})


def test_override_runner_spec_with_nothing_set_is_empty() -> None:
    assert effective_override_runner_spec(layer(), repository()) == OverrideRunnerSpec()
    assert effective_override_runner_spec(layer(), None) == OverrideRunnerSpec()


def test_override_runner_spec_from_one_side_only() -> None:
    theirs = {"image": "r:1", "metadata": {"annotations": {"x": "y"}}, "affinity": {"nodeAffinity": {}}}
    assert effective_override_runner_spec(layer(), repository(overrideRunnerSpec=theirs)) == (
        OverrideRunnerSpec.model_validate(theirs)
    )
    assert effective_override_runner_spec(layer(overrideRunnerSpec=theirs), repository()) == (
        OverrideRunnerSpec.model_validate(theirs)
    )
