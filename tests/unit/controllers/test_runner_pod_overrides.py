"""The pod builder leaves out what an overrideRunnerSpec may not replace (api/runner_contract.py, §6.3), and the run
says which entries it left out, naming the object they came from (pure)."""

from __future__ import annotations

from typing import Any

from hypothesis import given
from hypothesis import strategies as st

from burrito_py.controllers.run.runner_pod import (
    RunnerDefaults,
    build_runner_pod,
    ignored_condition,
    ignored_overrides,
    without_secret_sources,
)

DEFAULTS = RunnerDefaults("img", "burrito-py-runner", "http://datastore:8080",
                          provider_mirror_url="https://ds:8443/providers/v1/", provider_mirror_fail_closed=True)
RUN = {"metadata": {"name": "app-plan-1", "namespace": "team", "uid": "u"}, "spec": {"action": "plan"}}
LAYER: dict[str, Any] = {"metadata": {"name": "app", "namespace": "team"}, "spec": {}}
REPOSITORY: dict[str, Any] = {"metadata": {"name": "infra", "namespace": "team"}, "spec": {}}
HOSTILE: dict[str, Any] = {
    "env": [{"name": "BURRITO_PROVIDER_MIRROR_FAIL_CLOSED", "value": "false"},
            {"name": "BURRITO_DATASTORE_URL", "value": "https://collector.attacker.example"},
            {"name": "BURRITO_RUNNER_ATTEMPT", "value": "9"}, {"name": "TENV_ROOT", "value": "/cache"}],
    "volumes": [{"name": "burrito-py-token", "configMap": {"name": "forged"}},
                {"name": "tools", "persistentVolumeClaim": {"claimName": "cache"}}],
    "volumeMounts": [{"name": "home", "mountPath": "/usr/local/bin"},
                     {"name": "tools", "mountPath": "/elsewhere"}],
}


def env(pod: dict[str, Any]) -> dict[str, str]:
    return {e["name"]: e.get("value", "") for e in pod["spec"]["containers"][0]["env"]}


def test_attack_the_platforms_values_win_over_a_hostile_override() -> None:
    for override in (HOSTILE, without_secret_sources(HOSTILE)):  # a layer's run, a pull request's plan
        pod = build_runner_pod(RUN, LAYER, 1, DEFAULTS, override)
        values = env(pod)
        assert values["BURRITO_PROVIDER_MIRROR_FAIL_CLOSED"] == "true"
        assert values["BURRITO_DATASTORE_URL"] == "http://datastore:8080"
        assert values["BURRITO_RUNNER_ATTEMPT"] == "1" and values["TENV_ROOT"] == "/cache"
        volumes = {v["name"]: v for v in pod["spec"]["volumes"]}
        assert "projected" in volumes["burrito-py-token"] and "configMap" not in str(volumes["burrito-py-token"])
        mounts = {m["name"]: m["mountPath"] for m in pod["spec"]["containers"][0]["volumeMounts"]}
        assert mounts == {"burrito-py-token": "/var/run/secrets/burrito-py", "tmp": "/tmp", "home": "/home/burrito",
                          "work": "/runner/work", "tools": "/runner/tools"}
    assert {v["name"]: v for v in build_runner_pod(RUN, LAYER, 1, DEFAULTS, HOSTILE)["spec"]["volumes"]}["tools"] == {
        "name": "tools", "persistentVolumeClaim": {"claimName": "cache"}}, "a layer may keep its tools on a claim"


def test_what_was_left_out_names_the_object_whose_list_was_in_effect() -> None:
    layer = {**LAYER, "spec": {"overrideRunnerSpec": {"env": HOSTILE["env"]}}}
    repository = {**REPOSITORY, "spec": {"overrideRunnerSpec": {"volumes": HOSTILE["volumes"],
                                                                "env": [{"name": "BURRITO_MIRROR_CA_PEM"}]}}}
    effective = {"env": HOSTILE["env"], "volumes": HOSTILE["volumes"]}  # the layer's env replaced the repository's
    ignored = ignored_overrides(effective, layer, repository)
    assert [i.split(":")[0] for i in ignored] == [
        "TerraformLayer team/app spec.overrideRunnerSpec.env", "TerraformLayer team/app spec.overrideRunnerSpec.env",
        "TerraformLayer team/app spec.overrideRunnerSpec.env",
        "TerraformRepository team/infra spec.overrideRunnerSpec.volumes"]
    assert "BURRITO_PROVIDER_MIRROR_FAIL_CLOSED is set by burrito-py" in ignored[0]
    assert ignored_overrides({"env": [{"name": "TENV_ROOT", "value": "/x"}]}, layer, None) == []


def test_the_condition_follows_the_latest_attempt() -> None:
    assert ignored_condition([]) is None
    assert ignored_condition([{"number": 1, "ignoredOverrides": ["x: y"]}, {"number": 2}]) is None
    cond = ignored_condition([{"number": 1, "ignoredOverrides": ["a: b", "c: d"]}])
    assert cond is not None and cond.type == "RunnerOverridesIgnored" and cond.status
    assert cond.reason == "ReservedByBurritoPy" and cond.message.endswith("instead of: a: b; c: d")


def test_the_account_an_override_names_is_refused_unless_opened_to_runners_naming_its_origin() -> None:
    from burrito_py.api.runner_secrets import RUNNER_SERVICE_ACCOUNT
    from burrito_py.controllers.run.runner_pod import closed_account

    layer = {"metadata": {"name": "app", "namespace": "team"}, "spec": {}}
    repository = {"metadata": {"name": "infra", "namespace": "team"},
                  "spec": {"overrideRunnerSpec": {"serviceAccountName": "deployer"}}}
    override = {"serviceAccountName": "deployer"}
    plain = {"metadata": {"name": "deployer", "annotations": {"eks.amazonaws.com/role-arn": "arn:aws:iam::1:role/x"}}}
    opened = {"metadata": {"name": "deployer", "annotations": {RUNNER_SERVICE_ACCOUNT: "true"}}}
    refused = closed_account(override, layer, repository, "team", "burrito-py-runner", plain)
    assert refused is not None and refused.startswith(
        "ServiceAccount team/deployer (TerraformRepository team/infra spec.overrideRunnerSpec.serviceAccountName) is "
        "not open to runners")
    assert closed_account(override, layer, repository, "team", "burrito-py-runner", opened) is None
    assert "does not exist" in (closed_account(override, layer, repository, "team", "burrito-py-runner", None) or "")
    # The platform's own account, or none named, needs no mark.
    assert closed_account({"serviceAccountName": "burrito-py-runner"}, layer, None, "team", "burrito-py-runner",
                          None) is None
    assert closed_account({}, layer, None, "team", "burrito-py-runner", None) is None


def test_the_variables_an_override_feeds_from_a_secret_through_the_environment() -> None:
    from burrito_py.api.runner_secrets import secret_env_variables

    override = {
        "env": [{"name": "TF_VAR_db_password", "valueFrom": {"secretKeyRef": {"name": "db", "key": "password"}}},
                {"name": "TF_VAR_region", "value": "eu-west-1"},  # a literal: nothing to mask
                {"name": "TF_VAR_", "valueFrom": {"secretKeyRef": {"name": "db", "key": "x"}}},  # no variable
                {"name": "CLOUD_TOKEN", "valueFrom": {"secretKeyRef": {"name": "db", "key": "token"}}}],
        "envFrom": [{"secretRef": {"name": "api"}, "prefix": "TF_VAR_"}, {"secretRef": {"name": "vars"}},
                    {"secretRef": {"name": "missing"}}],
    }
    secrets = {"api": {"data": {"api_key": "eA==", "url": "eA=="}},
               "vars": {"data": {"TF_VAR_token": "eA==", "OTHER": "eA=="}}, "missing": None}
    assert secret_env_variables(override, secrets) == ["api_key", "db_password", "token", "url"]
    assert secret_env_variables({}, {}) == []


def test_the_pod_tells_the_runner_which_variables_to_mask_and_an_override_cannot_unset_it() -> None:
    from burrito_py.controllers.run.runner_pod import SECRET_VARIABLES_ENV

    blank = {"env": [{"name": SECRET_VARIABLES_ENV, "value": ""}]}  # would unmask them in the runner's log
    assert env(build_runner_pod(RUN, LAYER, 1, DEFAULTS, blank, ["db_password", "token"]))[SECRET_VARIABLES_ENV] \
        == "db_password,token"
    assert SECRET_VARIABLES_ENV not in env(build_runner_pod(RUN, LAYER, 1, DEFAULTS, blank))
    assert ignored_overrides(blank, {**LAYER, "spec": {"overrideRunnerSpec": blank}}, REPOSITORY)[0].startswith(
        f"TerraformLayer team/app spec.overrideRunnerSpec.env: {SECRET_VARIABLES_ENV} is set by burrito-py")


labels = st.dictionaries(st.sampled_from(["pool", "zone", "disk", "gpu"]), st.sampled_from(["a", "b", "c"]),
                         max_size=4)


@given(platform=labels, override=labels)
def test_an_override_never_changes_a_label_the_platforms_node_selector_sets(
        platform: dict[str, str], override: dict[str, str]) -> None:
    from burrito_py.controllers.run.runner_pod import RunnerDefaults, placement

    defaults = RunnerDefaults("img", "burrito-py-runner", "http://d", node_selector=platform)
    spec, ignored = placement({"nodeSelector": override}, defaults)
    chosen = spec.get("nodeSelector", {})
    assert {k: chosen[k] for k in platform} == platform  # every platform label, with the platform's value
    assert set(chosen) == set(platform) | set(override)  # the override only adds labels
    assert len(ignored) == sum(1 for k in override if k in platform and override[k] != platform[k])


def test_the_platforms_tolerations_come_first_and_its_affinity_replaces_the_overrides() -> None:
    from burrito_py.controllers.run.runner_pod import RunnerDefaults, placement

    mine = {"key": "pool", "value": "runners", "effect": "NoSchedule"}
    theirs = {"key": "gpu", "operator": "Exists"}
    affinity = {"podAntiAffinity": {}}
    spec, ignored = placement({"tolerations": [theirs], "affinity": {"nodeAffinity": {}}},
                              RunnerDefaults("img", "sa", "http://d", tolerations=(mine,), affinity=affinity))
    assert spec == {"tolerations": [mine, theirs], "affinity": affinity}
    assert ignored == [("affinity", "affinity: the platform's runner.affinity is used")]
    # Without platform placement, the override's as it was.
    assert placement({"affinity": {"nodeAffinity": {}}}, RunnerDefaults("img", "sa", "http://d"))[0] == {
        "affinity": {"nodeAffinity": {}}}
