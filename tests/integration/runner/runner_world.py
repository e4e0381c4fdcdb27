"""The world a runner program runs in, as a pod would see it: the real API emulator (CRDs from crds/*.yaml), a
real datastore, a git repository whose revisions are uploaded as `git archive` source archives, and the runner
itself (`burrito-py runner start` / `python -m burrito_py.runner`) in a subprocess."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from burrito_local.apiserver import ApiServer
from burrito_local.apply import Applier, load_files
from burrito_local.identity import (
    RUNNER_ACCOUNT,
    admin_client,
    grant_runner_access,
    request_token,
    set_kubeconfig_token,
)
from burrito_local.kube_tokens import API_AUDIENCES
from kubernetes import client, config

from burrito_py.api import annotations as ann
from burrito_py.controllers.layer.inputs_record import Upstream, build_record, resolve_sources
from burrito_py.datastore.client import DatastoreClient
from burrito_py.datastore.in_process import running_datastore

REPO_ROOT = Path(__file__).resolve().parents[3]
NS = "default"
CODE = """
terraform {
  backend "local" {}
}

variable "message" {
  type    = string
  default = "%s"
}

resource "terraform_data" "this" {
  input = var.message
}
"""


def git(cwd: Path, *args: str) -> str:
    env = {**os.environ, "GIT_AUTHOR_NAME": "t", "GIT_AUTHOR_EMAIL": "t@example.com", "GIT_COMMITTER_NAME": "t",
           "GIT_COMMITTER_EMAIL": "t@example.com"}
    return subprocess.run(["git", *args], cwd=cwd, env=env, check=True, capture_output=True, text=True).stdout.strip()


@dataclass
class Result:
    code: int
    stdout: str
    stderr: str


@dataclass
class World:
    tmp: Path
    api: ApiServer
    kubeconfig: Path  # the admin's (the test's own calls)
    runner_kubeconfig: Path  # the runner's: its service account with the runner Role only
    datastore_url: str
    custom: client.CustomObjectsApi
    repo_dir: Path

    # -- objects ---------------------------------------------------------------------------------
    def create(self, plural: str, body: dict[str, Any]) -> dict[str, Any]:
        body = {"apiVersion": ann.API_VERSION, **body}
        created: dict[str, Any] = self.custom.create_namespaced_custom_object(ann.GROUP, ann.VERSION, NS, plural, body)
        return created

    def layer(self, name: str = "app", path: str = "layers/app", **spec: Any) -> dict[str, Any]:
        return self.create("terraformlayers", {
            "kind": "TerraformLayer",
            "metadata": {"name": name},
            "spec": {
                "repository": {"name": "infra"}, "branch": "main", "path": path,
                "overrideRunnerSpec": {"extraInitArgs": [f"-backend-config=path={self.state(name)}"]},
                **spec,
            },
        })

    def run(self, name: str, action: str, revision: str, layer: str = "app", artifact: dict[str, Any] | None = None,
            ) -> dict[str, Any]:
        """An artifact without a `sum` gets the one the datastore recorded for that plan, as the controllers
        set it (none when the plan is not stored)."""
        spec: dict[str, Any] = {"action": action, "layer": {"name": layer, "revision": revision}}
        if artifact:
            if "sum" not in artifact:
                with DatastoreClient(self.datastore_url) as store:
                    stored = store.stat_plan(NS, layer, artifact["run"], artifact["attempt"], "bin")
                artifact = {**artifact, **({"sum": stored.sha256} if stored is not None else {})}
            spec["artifact"] = artifact
        created = self.create("terraformruns", {"kind": "TerraformRun", "metadata": {"name": name}, "spec": spec})
        self.give_inputs(name, layer)
        return created

    def give_inputs(self, run: str, layer: str = "app") -> dict[str, Any] | None:
        """Store the run's inputs record as the controllers do before they create a run (run_inputs.py): the
        values of the layer's varsFrom, read here as an admin (the runner may not read them)."""
        body = self.custom.get_namespaced_custom_object(ann.GROUP, ann.VERSION, NS, "terraformlayers", layer)
        vars_from = (body.get("spec") or {}).get("varsFrom") or []
        if not vars_from:
            return None
        core = client.CoreV1Api(self.custom.api_client)
        objects: list[dict[str, Any] | None] = []
        for entry in vars_from:
            read = core.read_namespaced_secret if entry["kind"] == "Secret" else core.read_namespaced_config_map
            try:
                objects.append(self.custom.api_client.sanitize_for_serialization(read(entry["name"], NS)))
            except client.ApiException as exc:
                if exc.status != 404:
                    raise
                objects.append(None)
        record = build_record(resolve_sources(vars_from, NS, objects), Upstream())
        with DatastoreClient(self.datastore_url) as store:
            store.put_inputs(NS, layer, run, json.dumps(record).encode())
        return record

    def stored_sum(self, run: str, attempt: int, fmt: str = "bin") -> str | None:
        """The sum the datastore recorded for a run's plan (what the run controller reads), None when absent."""
        with DatastoreClient(self.datastore_url) as store:
            stored = store.stat_plan(NS, "app", run, attempt, fmt)  # type: ignore[arg-type]
        return stored.sha256 if stored is not None else None

    def applied(self, run: str, attempt: int) -> str | None:
        with DatastoreClient(self.datastore_url) as store:
            return store.get_applied(NS, "app", run, attempt)

    def annotations(self, layer: str = "app") -> dict[str, str]:
        body = self.custom.get_namespaced_custom_object(ann.GROUP, ann.VERSION, NS, "terraformlayers", layer)
        return dict(body["metadata"].get("annotations") or {})

    def annotate(self, annotations: dict[str, str], layer: str = "app") -> None:
        self.custom.patch_namespaced_custom_object(ann.GROUP, ann.VERSION, NS, "terraformlayers", layer,
                                                   {"metadata": {"annotations": annotations}})

    def state(self, layer: str = "app") -> Path:
        return self.tmp / "state" / f"{layer}.tfstate"

    def state_inputs(self, layer: str = "app") -> list[str]:
        if not self.state(layer).exists():
            return []
        resources = json.loads(self.state(layer).read_text())["resources"]
        return [i["attributes"]["input"]["value"] for r in resources for i in r["instances"]]

    # -- sources ---------------------------------------------------------------------------------
    def commit(self, files: dict[str, str]) -> str:
        """Commit `files` and upload the revision's `git archive` to the datastore; returns the revision."""
        for name, text in files.items():
            (self.repo_dir / name).parent.mkdir(parents=True, exist_ok=True)
            (self.repo_dir / name).write_text(text)
        git(self.repo_dir, "add", "-A")
        git(self.repo_dir, "commit", "-q", "-m", "change")
        revision, tree = git(self.repo_dir, "rev-parse", "HEAD"), git(self.repo_dir, "rev-parse", "HEAD^{tree}")
        archive = self.tmp / f"{revision}.tar.gz"
        git(self.repo_dir, "archive", "--format=tar.gz", "-o", str(archive), revision)
        with DatastoreClient(self.datastore_url) as store:
            store.put_source(NS, "infra", revision, tree, archive)
        return revision

    # -- the program -----------------------------------------------------------------------------
    def pod_root(self, run: str, attempt: int = 1) -> Path:
        return self.tmp / "pods" / f"{run}-{attempt}"

    def runner_command(self, run: str, action: str, attempt: int = 1, layer: str = "app", cli: bool = False,
                       **env: str) -> tuple[list[str], dict[str, str]]:
        """The runner's argv and environment, as the local kubelet would start it for this attempt's pod."""
        pod_root = self.pod_root(run, attempt)
        (pod_root / "dev").mkdir(parents=True, exist_ok=True)
        token = pod_root / "var/run/secrets/burrito-py/token"
        token.parent.mkdir(parents=True, exist_ok=True)
        token.write_text("a-projected-token")
        process_env = {
            "PATH": os.environ["PATH"],
            "PYTHONPATH": str(REPO_ROOT),  # this checkout, whatever an editable install points at
            "HOME": str(self.tmp / "home"),
            "KUBECONFIG": str(self.runner_kubeconfig),
            "BURRITO_LOCAL_ROOT": str(pod_root),
            "BURRITO_RUNNER_RUN": run,
            "BURRITO_RUNNER_LAYER_NAME": layer,
            "BURRITO_RUNNER_LAYER_NAMESPACE": NS,
            "BURRITO_RUNNER_ACTION": action,
            "BURRITO_RUNNER_ATTEMPT": str(attempt),
            "BURRITO_DATASTORE_URL": self.datastore_url,
            **env,
        }
        argv = [sys.executable, "-m", "burrito_py.runner"]
        if cli:  # the console script's code path (`burrito-py runner start`), from this checkout
            argv = [sys.executable, "-c", "from burrito_py.entry import main; main()", "runner", "start"]
        return argv, process_env

    def runner(self, run: str, action: str, attempt: int = 1, layer: str = "app", cli: bool = False,
               **env: str) -> Result:
        argv, process_env = self.runner_command(run, action, attempt, layer, cli, **env)
        done = subprocess.run(argv, env=process_env, capture_output=True, text=True, timeout=120, check=False)
        return Result(done.returncode, done.stdout, done.stderr)

    def termination_message(self, run: str, attempt: int = 1) -> str:
        return (self.tmp / "pods" / f"{run}-{attempt}" / "dev/termination-log").read_text()

    def plan(self, run: str, attempt: int, fmt: str) -> bytes:
        with DatastoreClient(self.datastore_url) as store:
            return store.get_plan(NS, "app", run, attempt, fmt)  # type: ignore[arg-type]


@contextmanager
def running_world(base: Path, **datastore: Any) -> Iterator[World]:
    """A World whose files all live under `base`; `datastore` are further options of its datastore (say, its
    provider mirror's)."""
    api = ApiServer().start()
    try:
        kubeconfig = api.write_kubeconfig(base / "kubeconfig")
        applier = Applier(api.url)
        for crd in load_files([REPO_ROOT / "crds"]):
            applier.apply(crd)
        applier.close()
        api_client = config.new_client_from_config(config_file=str(kubeconfig))
        # The runner calls the API as `burrito-py-runner` with exactly the Role the chart gives it, so a
        # call it makes beyond that Role fails here as it would on a cluster.
        with admin_client(api.url) as http:
            grant_runner_access(http, NS)
            token = request_token(http, NS, RUNNER_ACCOUNT, list(API_AUDIENCES))
        runner_kubeconfig = api.write_kubeconfig(base / "runner-kubeconfig")
        set_kubeconfig_token(runner_kubeconfig, token)
        repo_dir = base / "repo"
        repo_dir.mkdir()
        git(repo_dir, "init", "-q", "-b", "main")
        with running_datastore(base / "datastore", **datastore) as url:
            w = World(base, api, kubeconfig, runner_kubeconfig, url, client.CustomObjectsApi(api_client), repo_dir)
            w.create("terraformrepositories", {"kind": "TerraformRepository", "metadata": {"name": "infra"},
                                               "spec": {"repository": {"url": "https://example.com/infra.git"}}})
            yield w
        api_client.close()
    finally:
        api.stop()


@pytest.fixture
def world(tmp_path: Path) -> Iterator[World]:
    with running_world(tmp_path) as w:
        yield w
