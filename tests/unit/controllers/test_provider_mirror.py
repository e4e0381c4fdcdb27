"""The controllers' side of the datastore's provider and tool mirrors (issue 16): the settings, the runner
pod's environment, and the fallbacks counted from the attempts' logs."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any, cast

import pytest
from prometheus_client import REGISTRY
from pydantic import ValidationError

from burrito_py.controllers.context import Context
from burrito_py.controllers.run.reconcile import _upload_logs
from burrito_py.controllers.run.runner_pod import RunnerDefaults, build_runner_pod
from burrito_py.controllers.settings import ControllerSettings, settings_problem
from burrito_py.kube.client import Kube, KubeError
from burrito_py.runner.mirror import FALLBACK_PREFIX

PEM = "-----BEGIN CERTIFICATE-----\nMIIB\n-----END CERTIFICATE-----"
MIRROR_ENV = ("BURRITO_PROVIDER_MIRROR_URL", "BURRITO_PROVIDER_MIRROR_FAIL_CLOSED", "BURRITO_TOOL_MIRROR_URL",
              "BURRITO_MIRROR_CA_PEM")


def obj(name: str, **rest: Any) -> dict[str, Any]:
    return {"metadata": {"name": name, "namespace": "team-a", "uid": f"uid-{name}"}, **rest}


def env_of(defaults: RunnerDefaults) -> dict[str, str]:
    pod = build_runner_pod(obj("app-plan-1", spec={"action": "plan"}), obj("app"), 1, defaults)
    return {e["name"]: e["value"] for e in pod["spec"]["containers"][0]["env"]}


# -- settings -------------------------------------------------------------------------------------
def test_settings_from_the_environment(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    ca = tmp_path / "ca.crt"
    ca.write_text(PEM + "\n")
    monkeypatch.setenv("BURRITO_PY_PROVIDER_MIRROR_URL", "https://ds.burrito-py.svc:8443/providers/v1")
    monkeypatch.setenv("BURRITO_PY_PROVIDER_MIRROR_FAIL_CLOSED", "true")
    monkeypatch.setenv("BURRITO_PY_TOOL_MIRROR_URL", "https://ds.burrito-py.svc:8443/tools/v1/")
    monkeypatch.setenv("BURRITO_PY_MIRROR_CA_FILE", str(ca))
    settings = ControllerSettings()
    assert settings.provider_mirror_url == "https://ds.burrito-py.svc:8443/providers/v1/"
    assert settings.provider_mirror_fail_closed is True
    assert settings.tool_mirror_url == "https://ds.burrito-py.svc:8443/tools/v1/"
    assert settings.mirror_ca_pem() == PEM
    ca.write_text("rotated")  # read once, at load: not for every pod
    assert settings.mirror_ca_pem() == PEM


def test_defaults_configure_no_mirror() -> None:
    settings = ControllerSettings()
    assert (settings.provider_mirror_url, settings.provider_mirror_fail_closed, settings.tool_mirror_url,
            settings.mirror_ca_file, settings.mirror_ca_pem()) == ("", False, "", None, "")


def test_the_ca_file_is_a_path_inside_the_pod(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    (tmp_path / "etc/burrito-py/mirror-ca").mkdir(parents=True)
    (tmp_path / "etc/burrito-py/mirror-ca/ca.crt").write_text(PEM)
    monkeypatch.setenv("BURRITO_LOCAL_ROOT", str(tmp_path))
    settings = ControllerSettings(mirror_ca_file=Path("/etc/burrito-py/mirror-ca/ca.crt"))
    assert settings.mirror_ca_file == tmp_path / "etc/burrito-py/mirror-ca/ca.crt"
    assert settings.mirror_ca_pem() == PEM


@pytest.mark.parametrize(("fields", "problem"), [
    ({"provider_mirror_url": "http://ds:8080/providers/v1/"},
     "BURRITO_PY_PROVIDER_MIRROR_URL: 'http://ds:8080/providers/v1/' is not an https:// URL"),
    ({"tool_mirror_url": "ds:8443/tools/v1/"}, "BURRITO_PY_TOOL_MIRROR_URL: 'ds:8443/tools/v1/' is not an https://"),
    ({"mirror_ca_file": Path("/nonexistent/ca.crt")}, "BURRITO_PY_MIRROR_CA_FILE: cannot read /nonexistent/ca.crt"),
])
def test_bad_settings_name_the_variable(fields: dict[str, Any], problem: str) -> None:
    with pytest.raises(ValidationError) as caught:
        ControllerSettings(**fields)
    assert settings_problem(caught.value).startswith(problem)


def test_a_ca_file_without_a_certificate_is_refused(tmp_path: Path) -> None:
    (tmp_path / "ca.crt").write_text("")
    with pytest.raises(ValidationError) as caught:
        ControllerSettings(mirror_ca_file=tmp_path / "ca.crt")
    problem = f"BURRITO_PY_MIRROR_CA_FILE: {tmp_path / 'ca.crt'} holds no PEM certificate"
    assert settings_problem(caught.value) == problem


# -- the runner pod -------------------------------------------------------------------------------
def test_runner_pod_gets_the_mirrors_and_their_ca() -> None:
    env = env_of(RunnerDefaults("img", "sa", "http://ds:8080", provider_mirror_url="https://ds:8443/providers/v1/",
                                tool_mirror_url="https://ds:8443/tools/v1/", mirror_ca_pem=PEM))
    assert {name: env[name] for name in MIRROR_ENV} == {
        "BURRITO_PROVIDER_MIRROR_URL": "https://ds:8443/providers/v1/",
        "BURRITO_PROVIDER_MIRROR_FAIL_CLOSED": "false",
        "BURRITO_TOOL_MIRROR_URL": "https://ds:8443/tools/v1/",
        "BURRITO_MIRROR_CA_PEM": PEM,
    }
    env = env_of(RunnerDefaults("img", "sa", "http://ds:8080", provider_mirror_url="https://ds:8443/providers/v1/",
                                provider_mirror_fail_closed=True))
    assert env["BURRITO_PROVIDER_MIRROR_FAIL_CLOSED"] == "true"
    assert "BURRITO_TOOL_MIRROR_URL" not in env and "BURRITO_MIRROR_CA_PEM" not in env


def test_runner_pod_without_mirrors_has_none_of_their_variables() -> None:
    env = env_of(RunnerDefaults("img", "sa", "http://ds:8080", mirror_ca_pem=PEM))  # a CA alone is passed on to nobody
    assert not set(MIRROR_ENV) & set(env)
    tools_only = env_of(RunnerDefaults("img", "sa", "http://ds:8080", tool_mirror_url="https://ds:8443/tools/v1/",
                                       mirror_ca_pem=PEM))
    assert {n for n in MIRROR_ENV if n in tools_only} == {"BURRITO_TOOL_MIRROR_URL", "BURRITO_MIRROR_CA_PEM"}


# -- fallbacks from the attempts' logs ------------------------------------------------------------
class FakeKube:
    def __init__(self, log: str) -> None:
        self.log, self.events = log, []  # type: list[dict[str, Any]]

    async def read_text(self, path: str, query: dict[str, str] | None = None) -> str:
        if not self.log:
            raise KubeError(404, "NotFound", "gone")
        return self.log

    async def create(self, path: str, body: dict[str, Any]) -> dict[str, Any]:
        self.events.append(body)
        return body


class FakeDatastore:
    def __init__(self) -> None:
        self.logs: list[bytes] = []

    def put_logs(self, namespace: str, layer: str, run: str, attempt: int, data: bytes) -> None:
        self.logs.append(data)


def fallbacks(namespace: str) -> float:
    return REGISTRY.get_sample_value("burrito_py_provider_mirror_fallbacks_total", {"namespace": namespace}) or 0.0


def upload(log: str, namespace: str) -> FakeKube:
    kube = FakeKube(log)
    ctx = Context(ControllerSettings(), cast(Kube, kube))
    ctx.datastore = cast(Any, FakeDatastore())
    run = {"apiVersion": "terraform.burrito-py.io/v1alpha1", "kind": "TerraformRun",
           "metadata": {"name": "app-plan-1", "namespace": namespace, "uid": "u1"}}
    layer = {"metadata": {"name": "app", "namespace": namespace}}
    assert asyncio.run(_upload_logs(ctx, run, layer, 2))
    return kube


def test_a_fallback_in_the_log_is_counted_and_told_once() -> None:
    before = fallbacks("mirror-a")
    line = (f"{FALLBACK_PREFIX} https://ds:8443/providers/v1/: ConnectError: refused; terraform installs providers "
            "directly")
    kube = upload(f"burrito-py: plan of layer mirror-a/app\n{line}\nPlan: 1 to add, 0 to change, 0 to destroy.\n",
                  "mirror-a")
    assert fallbacks("mirror-a") == before + 1
    assert [(e["type"], e["reason"], e["message"]) for e in kube.events] == [
        ("Warning", "ProviderMirrorUnavailable", "attempt 2: " + line.removeprefix("burrito-py: "))
    ]


def test_a_log_without_fallback_counts_nothing() -> None:
    before = fallbacks("mirror-b")
    assert upload("burrito-py: providers from the mirror https://ds:8443/providers/v1/\n", "mirror-b").events == []
    assert upload("", "mirror-b").events == []  # the pod was gone: its placeholder log
    assert fallbacks("mirror-b") == before
