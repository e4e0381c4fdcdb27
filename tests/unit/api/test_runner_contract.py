"""What no overrideRunnerSpec may replace (api/runner_contract.py, docs/architecture.md §6.3): the models refuse it
naming the entry, the CRDs' CEL rules say the same as the Python checks (evaluated here with cel-rust, as the emulator
evaluates CEL; kube-apiserver's own answer is tests/integration/controlplane/test_runner_overrides_real.py), and a
stored object that predates the rules still reads."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from burrito_py.api.application import ApplicationDefinition
from burrito_py.api.crdgen import crd_filename, generate_crds
from burrito_py.api.errors import InvalidSpec
from burrito_py.api.layer import TerraformLayer
from burrito_py.api.repository import TerraformRepository
from burrito_py.api.runner_contract import (
    RESERVED_ENV,
    RESERVED_MOUNTS,
    VOLUME_SOURCES,
    cel_env_rule,
    cel_mount_rules,
    cel_volume_rules,
    env_problem,
    mount_problem,
    reserved_overrides,
    stored_without_reserved,
    volume_problem,
    without_reserved,
)
from burrito_py.policy.cel_eval import evaluate_cel


def layer(override: dict[str, Any]) -> dict[str, Any]:
    return {"apiVersion": "terraform.burrito-py.io/v1alpha1", "kind": "TerraformLayer",
            "metadata": {"name": "app", "namespace": "team"},
            "spec": {"repository": {"name": "infra"}, "branch": "main", "path": "app", "overrideRunnerSpec": override}}


def repository(override: dict[str, Any]) -> dict[str, Any]:
    return {"apiVersion": "terraform.burrito-py.io/v1alpha1", "kind": "TerraformRepository",
            "metadata": {"name": "infra", "namespace": "team"},
            "spec": {"repository": {"url": "https://git.example.com/infra.git"}, "overrideRunnerSpec": override}}


REFUSED: list[tuple[dict[str, Any], str, str]] = [
    ({"env": [{"name": "TF_LOG", "value": "INFO"}, {"name": "BURRITO_PROVIDER_MIRROR_FAIL_CLOSED", "value": "false"}]},
     "spec.overrideRunnerSpec.env[1]", "BURRITO_PROVIDER_MIRROR_FAIL_CLOSED is set by burrito-py for every runner "
     "(the platform's provider and tool mirrors, a supply-chain control"),
    ({"env": [{"name": "BURRITO_DATASTORE_URL", "value": "https://collector.attacker.example"}]},
     "spec.overrideRunnerSpec.env[0]", "where the runner sends its pod-bound token"),
    ({"env": [{"name": "BURRITO_RUNNER_LAYER_NAME", "value": "someone-elses"}]},
     "spec.overrideRunnerSpec.env[0]", "the runner's identity and contract with the controllers"),
    ({"volumes": [{"name": "burrito-py-token", "secret": {"secretName": "forged"}}]},
     "spec.overrideRunnerSpec.volumes[0]", "volume burrito-py-token is burrito-py's"),
    ({"volumes": [{"name": "work", "persistentVolumeClaim": {"claimName": "kept"}}]},
     "spec.overrideRunnerSpec.volumes[0]", "may replace it only by emptyDir"),
    ({"volumes": [{"name": "tools", "configMap": {"name": "tools"}}]},
     "spec.overrideRunnerSpec.volumes[0]", "only by emptyDir, persistentVolumeClaim or ephemeral"),
    ({"volumes": [{"name": "plugins", "emptyDir": {}}, {"name": "host-proc", "hostPath": {"path": "/proc"}}]},
     "spec.overrideRunnerSpec.volumes[1]", "volume source hostPath is not one runner pods may use: they meet the "
     "restricted Pod Security profile"),
    ({"volumes": [{"name": "src", "gitRepo": {"repository": "https://example.com/x.git"}}]},
     "spec.overrideRunnerSpec.volumes[0]", "volume source gitRepo is not one runner pods may use"),
    ({"volumeMounts": [{"name": "x", "mountPath": "/etc/x"}, {"name": "home", "mountPath": "/elsewhere"}]},
     "spec.overrideRunnerSpec.volumeMounts[1]", "volumeMount home is burrito-py's, at /home/burrito"),
    ({"volumeMounts": [{"name": "x", "mountPath": "/var/run/secrets/burrito-py/token", "subPath": "t"}]},
     "spec.overrideRunnerSpec.volumeMounts[0]", "is or is under /var/run/secrets/burrito-py"),
    ({"volumeMounts": [{"name": "x", "mountPath": "/run//secrets/./burrito-py"}]},
     "spec.overrideRunnerSpec.volumeMounts[0]", "the runner's token directory"),
    ({"volumeMounts": [{"name": "x", "mountPath": "/var/run/x/../secrets/burrito-py"}]},
     "spec.overrideRunnerSpec.volumeMounts[0]", "has a '..' segment"),
]


@pytest.mark.parametrize(("override", "field", "reason"), REFUSED, ids=[f for _, f, _ in REFUSED])
@pytest.mark.parametrize("make", [layer, repository], ids=["layer", "repository"])
def test_a_reserved_override_is_refused_naming_the_entry_and_why(
    make: Callable[[dict[str, Any]], dict[str, Any]], override: dict[str, Any], field: str, reason: str
) -> None:
    kind = TerraformLayer if make is layer else TerraformRepository
    with pytest.raises(InvalidSpec) as caught:
        kind.from_object(make(override))
    assert caught.value.field_path == field
    assert reason in caught.value.reason, caught.value.reason


def test_an_application_definition_may_not_give_its_layers_one_either() -> None:
    definition = {
        "apiVersion": "agl.burrito-py.io/v1alpha1", "kind": "ApplicationDefinition", "metadata": {"name": "buckets"},
        "spec": {"application": {"group": "apps.example.com", "kind": "Bucket", "plural": "buckets",
                                 "singular": "bucket", "openAPISchema": {"type": "object"}},
                 "backend": {"type": "Terraform", "terraform": {
                     "repository": {"name": "infra"}, "branch": "main", "path": "modules/bucket",
                     "overrideRunnerSpec": {"env": [{"name": "BURRITO_TOOL_MIRROR_URL", "value": "https://evil"}]}}}}}
    with pytest.raises(InvalidSpec) as caught:
        ApplicationDefinition.from_object(definition)
    assert caught.value.field_path == "spec.backend.terraform.overrideRunnerSpec.env[0]"


def test_the_documented_overrides_stay_allowed() -> None:
    override = {"env": [{"name": "TENV_ROOT", "value": "/cache/tenv"},
                        {"name": "BURRITO_RUNNER_TOOLS_PATH", "value": "/opt/tools"},
                        {"name": "HOME", "value": "/home/burrito"}, {"name": "TF_LOG", "value": "DEBUG"}],
                "volumes": [{"name": "tools", "persistentVolumeClaim": {"claimName": "tool-cache"}},
                            {"name": "tmp", "emptyDir": {"medium": "Memory"}},
                            {"name": "aws", "configMap": {"name": "a"}}],
                "volumeMounts": [{"name": "aws", "mountPath": "/home/burrito/.aws"},
                                 {"name": "aws", "mountPath": "/var/run/secrets/burrito-py-aws"}]}
    assert reserved_overrides(override) == []
    assert TerraformLayer.from_object(layer(override)).spec.override_runner_spec is not None
    assert without_reserved(override) == override


def test_without_reserved_keeps_the_rest_in_order() -> None:
    override = {"image": "i", "env": [{"name": "A"}, {"name": "BURRITO_RUNNER_RUN", "value": "x"}, {"name": "B"}],
                "volumeMounts": [{"name": "tools", "mountPath": "/x"}]}
    assert without_reserved(override) == {"image": "i", "env": [{"name": "A"}, {"name": "B"}], "volumeMounts": []}
    assert [str(r).split(":")[0] for r in reserved_overrides(override)] == ["env[1]", "volumeMounts[0]"]


def test_a_layer_stored_before_the_rules_still_reads_without_them() -> None:
    """The runner reads its layer and repository through the models: an old object must not fail every attempt
    (its pod never got those entries)."""
    old = layer({"env": [{"name": "BURRITO_DATASTORE_URL", "value": "x"}, {"name": "TF_LOG", "value": "INFO"}],
                 "extraPlanArgs": ["-parallelism=2"]})
    parsed = TerraformLayer.from_object(stored_without_reserved(old))
    spec = parsed.spec.override_runner_spec
    assert spec is not None and spec.env == [{"name": "TF_LOG", "value": "INFO"}]
    assert spec.extra_plan_args == ["-parallelism=2"]
    assert stored_without_reserved({"spec": {}}) == {"spec": {}}


def _item_rules(kind: type[Any], field: str) -> list[dict[str, str]]:
    crd = generate_crds()[crd_filename(kind)]
    node = crd["spec"]["versions"][0]["schema"]["openAPIV3Schema"]["properties"]["spec"]["properties"]
    rules: list[dict[str, str]] = node["overrideRunnerSpec"]["properties"][field]["items"]["x-kubernetes-validations"]
    return rules


@pytest.mark.parametrize("kind", [TerraformLayer, TerraformRepository])
def test_the_crds_carry_the_rules_on_each_item(kind: type[Any]) -> None:
    assert _item_rules(kind, "env") == [cel_env_rule()]
    assert _item_rules(kind, "volumes") == cel_volume_rules()
    assert _item_rules(kind, "volumeMounts") == cel_mount_rules()


# -- the CEL rules and the Python checks agree --------------------------------------------------------------------
NAMES = st.sampled_from([*RESERVED_ENV, *VOLUME_SOURCES, *RESERVED_MOUNTS, "TENV_ROOT", "HOME", "x", "BURRITO_RUNNER"])
SEGMENTS = st.sampled_from(["", ".", "..", "var", "run", "secrets", "burrito-py", "burrito-pyx", "token", "..."])
PATHS = st.lists(SEGMENTS, max_size=7).map("/".join) | st.just("/var/run/secrets/burrito-py")
SOURCES = st.sets(st.sampled_from(["emptyDir", "persistentVolumeClaim", "ephemeral", "configMap", "secret",
                                    "hostPath", "nfs", "gitRepo", "projected", "csi"]))


def _cel_allows(rules: list[dict[str, str]], item: Mapping[str, Any]) -> bool:
    return all(evaluate_cel(rule["rule"], {"self": dict(item)}) is True for rule in rules)


@settings(max_examples=300, deadline=None)
@given(name=NAMES | st.none(), sources=SOURCES, mount_path=PATHS | st.none())
def test_cel_and_python_agree(name: str | None, sources: set[str], mount_path: str | None) -> None:
    base: dict[str, Any] = {} if name is None else {"name": name}
    env = {**base, "value": "v"}
    volume = {**base, **{source: {} for source in sources}}
    mount = {**base, **({} if mount_path is None else {"mountPath": mount_path})}
    assert _cel_allows([cel_env_rule()], env) == (env_problem(env) is None)
    assert _cel_allows(cel_volume_rules(), volume) == (volume_problem(volume) is None)
    assert _cel_allows(cel_mount_rules(), mount) == (mount_problem(mount) is None)


@pytest.mark.parametrize("mount_path", [
    "/var/run/secrets/burrito-py", "/var/run/secrets/burrito-py/", "//var/run/secrets/burrito-py",
    "/var/run/secrets/./burrito-py/token", "/run/secrets/burrito-py", "var/run/secrets/burrito-py"])
def test_every_spelling_of_the_token_directory_is_refused(mount_path: str) -> None:
    assert mount_problem({"name": "x", "mountPath": mount_path}) is not None


@pytest.mark.parametrize("mount_path", [
    "/var/run/secrets", "/var/run/secrets/burrito-py-aws", "/srv/run/secrets/burrito-py", "/home/burrito/.aws",
    "/var/run/secrets/kubernetes.io/serviceaccount"])
def test_other_paths_are_not(mount_path: str) -> None:
    assert mount_problem({"name": "x", "mountPath": mount_path}) is None
