"""`burrito-py runner start`: one attempt of a TerraformRun, inside its runner pod (DESIGN §8).

It reads its run and layer from the API, downloads the source archive of the run's revision from the
datastore, resolves the tool, runs terraform, uploads the artifacts and patches the layer's
annotations. kopf is never imported here (it costs 0.6 s); `kubernetes` only to read the kubeconfig.

Exit codes: 0 success; 1 a terraform step failed; 2 bad input (missing path, tool, plan, source);
3 the API or the datastore failed.
"""

from __future__ import annotations

import hashlib
import json
import os
import sys
import tarfile
import tempfile
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx

from burrito_py.api import annotations as ann
from burrito_py.local.paths import pod_path
from burrito_py.runner.summary import plan_summary
from burrito_py.runner.terraform import StepFailed, run_step, step_args
from burrito_py.runner.tools import ToolError, resolve_tool
from burrito_py.timeutil import format_time, utcnow

TOKEN_PATH = "/var/run/secrets/burrito-py/token"  # noqa: S105 - a path
TERMINATION_LOG = "/dev/termination-log"
MERGE_PATCH = {"Content-Type": "application/merge-patch+json"}


class RunnerError(Exception):
    exit_code = 2


class ApiFailure(RunnerError):
    exit_code = 3


@dataclass(frozen=True)
class RunnerEnv:
    run: str
    layer: str
    namespace: str
    action: str
    attempt: int
    datastore_url: str

    @classmethod
    def from_environ(cls, environ: Mapping[str, str]) -> RunnerEnv:
        missing = [
            k
            for k in (
                "BURRITO_RUNNER_RUN",
                "BURRITO_RUNNER_LAYER_NAME",
                "BURRITO_RUNNER_LAYER_NAMESPACE",
                "BURRITO_RUNNER_ACTION",
                "BURRITO_DATASTORE_URL",
            )
            if not environ.get(k)
        ]
        if missing:
            raise RunnerError(f"missing environment: {', '.join(missing)}")
        return cls(
            environ["BURRITO_RUNNER_RUN"],
            environ["BURRITO_RUNNER_LAYER_NAME"],
            environ["BURRITO_RUNNER_LAYER_NAMESPACE"],
            environ["BURRITO_RUNNER_ACTION"],
            int(environ.get("BURRITO_RUNNER_ATTEMPT") or 1),
            environ["BURRITO_DATASTORE_URL"],
        )


def kube_client() -> httpx.Client:
    """An HTTP client for the API from the kubeconfig ($KUBECONFIG) or the in-cluster service account."""
    from kubernetes import client, config

    cfg = client.Configuration()
    try:
        config.load_kube_config(client_configuration=cfg)  # type: ignore[no-untyped-call]
    except config.ConfigException:
        config.load_incluster_config(client_configuration=cfg)  # type: ignore[no-untyped-call]
    headers = {}
    token = (cfg.api_key or {}).get("BearerToken") or (cfg.api_key or {}).get("authorization")
    if token:
        headers["Authorization"] = token if token.startswith("Bearer ") else f"Bearer {token}"
    verify: Any = cfg.ssl_ca_cert or cfg.verify_ssl
    return httpx.Client(base_url=cfg.host, headers=headers, verify=verify, timeout=30.0)


def _crd(plural: str, namespace: str, name: str) -> str:
    return f"/apis/{ann.API_VERSION}/namespaces/{namespace}/{plural}/{name}"


def _get(kube: httpx.Client, path: str, what: str) -> dict[str, Any]:
    try:
        response = kube.get(path)
    except httpx.HTTPError as exc:
        raise ApiFailure(f"cannot read {what}: {exc}") from None
    if response.status_code == 404:
        raise RunnerError(f"{what} not found")
    if response.status_code >= 400:
        raise ApiFailure(f"cannot read {what}: HTTP {response.status_code}")
    body: dict[str, Any] = response.json()
    return body


def safe_extract(archive: Path, dest: Path) -> None:
    """Extract a source archive, refusing members that would land outside `dest`."""
    with tarfile.open(archive, "r:gz") as tar:
        tar.extractall(dest, filter="data")


def _inherited(layer: Mapping[str, Any], repository: Mapping[str, Any] | None, *path: str) -> Any:
    for obj in (layer, repository or {}):
        node: Any = obj.get("spec") or {}
        for part in path:
            node = node.get(part) if isinstance(node, Mapping) else None
        if node is not None:
            return node
    return None


def run(env: RunnerEnv, kube: httpx.Client, workdir: Path) -> None:
    from burrito_py.datastore.client import DatastoreClient, DatastoreError

    run_obj = _get(kube, _crd("terraformruns", env.namespace, env.run), f"TerraformRun {env.namespace}/{env.run}")
    layer = _get(kube, _crd("terraformlayers", env.namespace, env.layer), f"TerraformLayer {env.namespace}/{env.layer}")
    spec = layer.get("spec") or {}
    ref = spec.get("repository") or {}
    repo_ns = ref.get("namespace") or env.namespace
    repository = _get(
        kube,
        _crd("terraformrepositories", repo_ns, ref.get("name", "")),
        f"TerraformRepository {repo_ns}/{ref.get('name')}",
    )
    revision = (run_obj.get("spec") or {}).get("layer", {}).get("revision")
    if not revision:
        raise RunnerError(f"run {env.run} has no spec.layer.revision")
    token_file = pod_path(TOKEN_PATH)
    token = token_file.read_text().strip() if token_file.exists() else None
    override = _inherited(layer, repository, "overrideRunnerSpec") or {}
    opentofu = _inherited(layer, repository, "opentofu") or {}
    kind = "opentofu" if opentofu.get("enabled") else "terraform"
    version = (_inherited(layer, repository, kind) or {}).get("version")

    with DatastoreClient(env.datastore_url, token=token) as store:
        archive = workdir / "source.tar.gz"
        try:
            store.download_source(repo_ns, ref.get("name", ""), revision, archive)
        except DatastoreError as exc:
            raise RunnerError(f"source archive of revision {revision}: {exc}") from None
        source = workdir / "source"
        safe_extract(archive, source)
        layer_dir = (source / spec.get("path", ".")).resolve()
        if not layer_dir.is_dir() or not layer_dir.is_relative_to(source.resolve()):
            raise RunnerError(f"path {spec.get('path')} does not exist in revision {revision}")
        try:
            tool = resolve_tool(kind, version, layer_dir)
        except ToolError as exc:
            raise RunnerError(str(exc)) from None
        print(f"using {tool.kind} {tool.version} ({tool.binary})", flush=True)
        run_step(step_args(tool.binary, "init", override.get("extraInitArgs") or ()), layer_dir)
        patch: dict[str, str]
        if env.action == "plan":
            run_step(step_args(tool.binary, "plan", override.get("extraPlanArgs") or ()), layer_dir)
            plan_json = run_step(step_args(tool.binary, "show-json"), layer_dir, capture=True)
            pretty = run_step(step_args(tool.binary, "show"), layer_dir, capture=True)
            short = plan_summary(json.loads(plan_json))
            plan_bin = layer_dir / "plan.bin"
            digest = "sha256:" + hashlib.sha256(plan_bin.read_bytes()).hexdigest()
            for fmt, data in (
                ("bin", plan_bin),
                ("json", plan_json.encode()),
                ("pretty", pretty.encode()),
                ("short", short.encode()),
            ):
                store.put_plan(env.namespace, env.layer, env.run, env.attempt, fmt, data)  # type: ignore[arg-type]
            print(short, flush=True)
            patch = {
                ann.PLAN_DATE: format_time(utcnow()),
                ann.PLAN_SUM: digest,
                ann.PLAN_RUN: f"{env.run}/{env.attempt}",
                ann.PLAN_COMMIT: revision,
                ann.PLAN_SUMMARY: short,
            }
        elif env.action == "apply":
            artifact = (run_obj.get("spec") or {}).get("artifact") or {}
            remediation = _inherited(layer, repository, "remediationStrategy") or {}
            plan_bin = layer_dir / "plan.bin"
            if artifact.get("run"):
                try:
                    store.download_plan(
                        env.namespace, env.layer, artifact["run"], artifact.get("attempt"), "bin", plan_bin
                    )
                except DatastoreError as exc:
                    raise RunnerError(f"the plan to apply is not available: {exc}") from None
            elif remediation.get("applyWithoutPlanArtifact"):
                run_step(step_args(tool.binary, "plan", override.get("extraPlanArgs") or ()), layer_dir)
            else:
                raise RunnerError("apply run without spec.artifact and applyWithoutPlanArtifact is not set")
            digest = "sha256:" + hashlib.sha256(plan_bin.read_bytes()).hexdigest()
            run_step(step_args(tool.binary, "apply", override.get("extraApplyArgs") or ()), layer_dir)
            patch = {ann.APPLY_DATE: format_time(utcnow()), ann.APPLY_SUM: digest, ann.APPLY_COMMIT: revision}
        else:
            raise RunnerError(f"unknown action {env.action!r}")

    response = kube.patch(
        _crd("terraformlayers", env.namespace, env.layer),
        content=json.dumps({"metadata": {"annotations": patch}}),
        headers=MERGE_PATCH,
    )
    if response.status_code >= 400:
        raise ApiFailure(f"cannot annotate layer {env.namespace}/{env.layer}: HTTP {response.status_code}")


def main() -> int:
    try:
        env = RunnerEnv.from_environ(os.environ)
        with kube_client() as kube, tempfile.TemporaryDirectory(prefix="burrito-py-runner-") as tmp:
            run(env, kube, Path(tmp))
    except StepFailed as exc:
        return _fail(str(exc), 1)
    except RunnerError as exc:
        return _fail(str(exc), exc.exit_code)
    return 0


def _fail(message: str, code: int) -> int:
    print(f"error: {message}", file=sys.stderr, flush=True)
    termination = pod_path(TERMINATION_LOG)
    try:
        termination.parent.mkdir(parents=True, exist_ok=True)
        termination.write_text(message[-4000:])
    except OSError:
        pass  # not every environment has a writable termination log
    return code
