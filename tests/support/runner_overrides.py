"""A tenant's attempt to replace what the platform gives every runner pod (docs/architecture.md §6.3, §24), shared by
the emulator's and the real control plane's attack tests: the objects as a tenant writes them, and the run
controller's real path (reconcile_run → _start_attempt → build_runner_pod) run against an API server."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

from burrito_py.api import annotations as ann
from burrito_py.controllers.context import Context
from burrito_py.controllers.run.reconcile import reconcile_run
from burrito_py.controllers.settings import ControllerSettings
from burrito_py.kube.client import Kube

MIRROR = "https://burrito-py-datastore.burrito-py-system.svc:8443/providers/v1/"
TOOLS = "https://burrito-py-datastore.burrito-py-system.svc:8443/tools/v1/"
DATASTORE = "http://burrito-py-datastore.burrito-py-system.svc:8080"
EVIL = "https://mirror.attacker.example/providers/v1/"
RUN = "app-plan-1234567890"

# The repository's override sends the token elsewhere; the layer's turns the fail-closed mirror off and points it at
# the tenant's host. Beside them, the documented overrides that must keep working.
REPOSITORY_OVERRIDE: dict[str, Any] = {
    "env": [{"name": "BURRITO_DATASTORE_URL", "value": "https://collector.attacker.example"}],
}
LAYER_OVERRIDE: dict[str, Any] = {
    "env": [{"name": "TENV_ROOT", "value": "/cache/tenv"},
            {"name": "BURRITO_PROVIDER_MIRROR_FAIL_CLOSED", "value": "false"},
            {"name": "BURRITO_PROVIDER_MIRROR_URL", "value": EVIL},
            {"name": "BURRITO_RUNNER_TOOLS_PATH", "value": "/opt/tools"},
            {"name": "BURRITO_DATASTORE_URL", "value": "https://collector.attacker.example"}],
    "volumes": [{"name": "tools", "persistentVolumeClaim": {"claimName": "tool-cache"}},
                {"name": "burrito-py-token", "configMap": {"name": "forged-token"}}],
    "volumeMounts": [{"name": "tmp", "mountPath": "/usr/local/bin"}],
}


def settings(**more: Any) -> ControllerSettings:
    """The platform's: a fail-closed provider mirror and a tool mirror (chart `providerCache`, `toolCache`), and
    `more` settings."""
    return ControllerSettings(metrics_port=0, failure_grace_period=timedelta(seconds=15), datastore_url=DATASTORE,
                              provider_mirror_url=MIRROR, provider_mirror_fail_closed=True, tool_mirror_url=TOOLS,
                              **more)


def runner_account(namespace: str) -> dict[str, Any]:
    """The runner ServiceAccount the chart's tenants get: the API refuses a pod naming a missing one."""
    return {"apiVersion": "v1", "kind": "ServiceAccount",
            "metadata": {"name": settings().runner_service_account, "namespace": namespace}}


def objects(namespace: str, layer_override: dict[str, Any] | None = None,
            repository_override: dict[str, Any] | None = None) -> tuple[dict[str, Any], ...]:
    """The repository, the layer and a plan run, as a tenant (and the layer controller) would write them."""
    repository = {"apiVersion": ann.API_VERSION, "kind": "TerraformRepository",
                  "metadata": {"name": "repo", "namespace": namespace},
                  "spec": {"repository": {"url": "https://git.example.com/infra.git"},
                           "overrideRunnerSpec": REPOSITORY_OVERRIDE if repository_override is None
                           else repository_override}}
    # The layer sets env itself: lists are not concatenated, so the repository's env is not in effect for it.
    layer = {"apiVersion": ann.API_VERSION, "kind": "TerraformLayer",
             "metadata": {"name": "app", "namespace": namespace},
             "spec": {"repository": {"name": "repo"}, "branch": "main", "path": "app",
                      "overrideRunnerSpec": LAYER_OVERRIDE if layer_override is None else layer_override}}
    run = {"apiVersion": ann.API_VERSION, "kind": "TerraformRun",
           "metadata": {"name": RUN, "namespace": namespace, "labels": {ann.LABEL_LAYER: "app"}},
           "spec": {"action": "plan", "layer": {"name": "app", "namespace": namespace, "revision": "c" * 40}}}
    return repository, layer, run


async def reconcile_once(kubeconfig: str, repository: dict[str, Any], layer: dict[str, Any],
                         run: dict[str, Any], platform: ControllerSettings | None = None) -> None:
    """One reconcile of the run by the run controller's own code, as the controllers would run it (with
    `platform`'s settings, else `settings()`)."""
    kube = await Kube.connect(kubeconfig)
    try:
        ctx = Context(settings=platform or settings(), kube=kube)
        ctx.inventory.repositories.observe(repository)
        ctx.inventory.layers.observe(layer)
        ctx.inventory.runs.observe(run)
        ctx.primed = True
        await reconcile_run(ctx, (run["metadata"]["namespace"], run["metadata"]["name"]))
    finally:
        await kube.close()


def assert_platform_values_won(pod: dict[str, Any]) -> None:
    """The pod carries the platform's identity, datastore and mirrors, its token and scratch mounts, and still the
    documented overrides (TENV_ROOT, BURRITO_RUNNER_TOOLS_PATH, the tools dir on a claim)."""
    container = pod["spec"]["containers"][0]
    env = {e["name"]: e.get("value") for e in container["env"]}
    assert env["BURRITO_PROVIDER_MIRROR_FAIL_CLOSED"] == "true", env
    assert env["BURRITO_PROVIDER_MIRROR_URL"] == MIRROR
    assert env["BURRITO_DATASTORE_URL"] == DATASTORE
    assert "attacker" not in str(container["env"])
    assert env["TENV_ROOT"] == "/cache/tenv" and env["BURRITO_RUNNER_TOOLS_PATH"] == "/opt/tools"
    volumes = {v["name"]: v for v in pod["spec"]["volumes"]}
    assert "serviceAccountToken" in str(volumes["burrito-py-token"]["projected"]), volumes["burrito-py-token"]
    assert volumes["tools"]["persistentVolumeClaim"] == {"claimName": "tool-cache"}
    mounts = {m["name"]: m["mountPath"] for m in container["volumeMounts"]}
    assert mounts["tmp"] == "/tmp" and mounts["burrito-py-token"] == "/var/run/secrets/burrito-py"


def assert_the_run_says_so(status: dict[str, Any], events: list[dict[str, Any]], namespace: str) -> None:
    """Which overrides were ignored is on the run (attempt, condition) and in a Warning, naming the object."""
    ignored = status["attempts"][0]["ignoredOverrides"]
    assert len(ignored) == 5, ignored
    assert all(i.startswith(f"TerraformLayer {namespace}/app spec.overrideRunnerSpec.") for i in ignored), ignored
    text = " ".join(ignored)
    for what in ("BURRITO_PROVIDER_MIRROR_FAIL_CLOSED", "BURRITO_PROVIDER_MIRROR_URL", "BURRITO_DATASTORE_URL",
                 "volume burrito-py-token", "volumeMount tmp"):
        assert what in text, what
    cond = next(c for c in status["conditions"] if c["type"] == "RunnerOverridesIgnored")
    assert cond["status"] == "True" and cond["reason"] == "ReservedByBurritoPy"
    assert "BURRITO_PROVIDER_MIRROR_FAIL_CLOSED" in cond["message"]
    warnings = [e for e in events if e["involvedObject"]["name"] == RUN and e["reason"] == "RunnerOverrideIgnored"]
    assert len(warnings) == 1 and warnings[0]["type"] == "Warning", events
    assert "BURRITO_DATASTORE_URL" in warnings[0]["message"]
