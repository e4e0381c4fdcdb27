"""`burrito-py runner start`: one attempt of a TerraformRun, inside its runner pod (docs/architecture.md §9).

Environment (set by the run controller, docs/architecture.md §6.3): `BURRITO_RUNNER_RUN`, `BURRITO_RUNNER_LAYER_NAME`,
`BURRITO_RUNNER_LAYER_NAMESPACE` (also the run's namespace), `BURRITO_RUNNER_ACTION` (plan | apply | a day-2 operation),
`BURRITO_RUNNER_ATTEMPT` (the attempt number, from 1), `BURRITO_DATASTORE_URL`. The datastore token is read
from `/var/run/secrets/burrito-py/token` when that file exists (`pod_path`, for the local kubelet).

Variables (plan, and apply without a plan artifact): `spec.vars`, then the run's inputs record, which the
controllers stored under the run in the datastore before they created it (`controllers/layer/run_inputs.py`): the values
of each `spec.varsFrom` Secret or ConfigMap in order, then the upstream outputs of `spec.dependsOn` (the run's
`burrito-py.io/inputs-digest` annotation names them). The runner reads no Secret or ConfigMap itself (its Role
has no such grant). They are merged into `burrito-py.auto.tfvars.json` (mode 0600) in the layer's directory before
`init` (see `variables.py`); only variable names are printed, never values, and the values from Secrets and the
sensitive inputs are masked (an apply of a saved plan reads the record for that alone).

Plan: download the source archive of the run's revision, resolve the tool, `init`, `plan` (its output kept
as the human-readable plan), `show -json`; upload `bin`, `json`, `pretty` and `short` for (layer namespace,
layer, run, attempt). A run with `spec.destroy` (a layer being deleted with destroyResourcesOnDeletion) plans
with `-destroy`; its apply always applies that destroy plan, even with `applyWithoutPlanArtifact`.

The runner writes nothing to the Kubernetes API (issue 24): when the attempt ends, the run controller records
its result on the layer (`plan-*`, `apply-*` annotations) from what the datastore holds for this attempt, whose
objects the runner may write once each and only under its own attempt number (docs/architecture.md §6.4, §10).

A pull request's plan (`spec.pullRequest` on the run, docs/architecture.md §11.3) is the same plan at the pull
request's head with `-lock=false`, uploaded the same way under its own run; its result never reaches the
layer. Such a run may not apply.

Apply: download the plan named by the run's `spec.artifact {run, attempt, sum}` and apply exactly it: its
sha256 must be the `sum` the controllers recorded from the datastore (else nothing is applied, exit 2); when the
layer has planned again since, the run's artifact is still what the run was created to apply, and terraform
itself refuses it if the state moved on. With `applyWithoutPlanArtifact` (effective remediation) the artifact
is ignored: plan at the run's revision, upload that plan under this run and attempt and apply it (the run
controller then records it as the layer's plan and as applied, so the layer settles). Then `terraform output
-json` (to a file, never to the log: it holds sensitive values), uploaded as this attempt's outputs. Right after
a successful apply the attempt stores an applied record (the plan's sum) in the datastore for (layer, run,
attempt): when the outputs cannot be read or uploaded the attempt fails, but the apply happened, and the run
controller records it on the layer from that record. A retry of the run that finds its plan's sum as the layer's
`apply-sum` or in an earlier attempt's applied record does not apply again (Terraform would call the plan
stale): it only reads the outputs. Every API call is retried with a bounded backoff on 5xx, 429 and connection
errors (`kube`), datastore calls likewise (`runner/store.py`), so one lost response does not fail an applied
attempt. When terraform refuses the saved plan as stale ("Saved plan is stale") and no earlier attempt applied
it, the attempt ends with exit code 5 and a termination message starting "stale plan: ": the run controller does
not retry it, the layer plans again.

Exit codes: 0 success; 1 a terraform/tofu step failed; 2 bad input or configuration (environment, invalid
object, missing object, layer path, source archive, tool resolution, missing or mismatched plan); 3 the
Kubernetes API or the datastore is unavailable or refused a call; 4 an unexpected error (a bug: the traceback
is printed); 5 terraform refused the saved plan as stale (not retried: the layer must plan again); 128 + n
(143 for SIGTERM, 130 for SIGINT) stopped by signal n: the running terraform/tofu step got
one SIGINT and the time to stop cleanly, see `signals`; the log printed so far is then uploaded to the
datastore by the runner itself. Expected errors print one
`error: …` line on stderr (no traceback) and the same text to the container's termination message.

Files (a runner pod's root filesystem is read-only): the attempt's work directory (source tree, plan, outputs)
is a temporary directory under `BURRITO_RUNNER_WORK_DIR` (`/runner/work` in the runner pod; mapped through
`pod_path`), or under `TMPDIR` without it; terraform writes its `.terraform` there, its temporary files to
`TMPDIR` and its CLI configuration (`.terraform.d`, `.terraformrc`) lives in `HOME`; tenv installs under
`TENV_ROOT`. The pod's grace period comes as `BURRITO_RUNNER_GRACE_SECONDS` (see `signals`).

Mirrors (issue 16): with `BURRITO_PROVIDER_MIRROR_URL`, terraform installs providers through the datastore's
network mirror (a CLI configuration and a CA bundle in `HOME`, see `mirror`; a mirror that is down fails the
attempt under `BURRITO_PROVIDER_MIRROR_FAIL_CLOSED=true`, exit code 2, else terraform installs directly after
one `burrito-py: provider mirror unavailable:` line), and a layer's locked providers are prefetched from the
datastore into a filesystem mirror in `HOME` while the tool is resolved (see `mirror`, docs §10.5); with
`BURRITO_TOOL_MIRROR_URL`, a terraform/tofu version
not already at hand is installed from the datastore (see `tools`). The datastore token is masked in the log.

Managed state (docs/architecture.md §10.6): a layer with `spec.state.managed` gets the datastore as its `http`
backend (see `state`): an override file, `-backend-config` addresses for `init`, and the runner's datastore token as
`TF_HTTP_PASSWORD` in the environment only. Its code must declare no backend (else exit 2 naming the field).

Decisions: the run lives in its layer's namespace (its owner reference requires it); the run must name the
layer and action of the environment; the plan file sits outside the source tree, so the layer's own files are
never overwritten; the runner cleans its work directory and ends without interpreter teardown (`exit_now`).
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import sys
import tempfile
import threading
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any, NamedTuple, NoReturn, TypeVar

from burrito_py.api import annotations as ann
from burrito_py.kube.pod_paths import pod_path
from burrito_py.runner import masking, signals
from burrito_py.runner.early import Bodies, EarlyReads, Outcome, read_run_and_layer
from burrito_py.runner.kube import Kube, KubeError
from burrito_py.runner.masking import MIN_LENGTH, masker
from burrito_py.runner.mirror import (
    LOCK_FILE,
    MirrorConfig,
    MirrorError,
    MirrorSetup,
    PendingPrefetch,
    finish_prefetch,
    prefetch_candidates,
    prepare,
    start_prefetch,
)
from burrito_py.runner.sources import SourceError, extract_archive, layer_directory
from burrito_py.runner.terraform import Interrupted, StepFailed, Steps, is_stale_plan
from burrito_py.runner.tools import ToolError, ToolMirror, prefetch_version, resolve_tool
from burrito_py.runner.transcript import Transcript

if TYPE_CHECKING:
    from burrito_py.runner.objects import ExtraArgs, Layer, Operation, Repository, Run
    from burrito_py.runner.state import ManagedBackend
    from burrito_py.runner.store import RunnerStore
    from burrito_py.runner.tools import Tool
    from burrito_py.runner.variables import Inputs

__all__ = [
    "EXIT_BAD_INPUT",
    "EXIT_INTERNAL",
    "EXIT_OK",
    "EXIT_STALE_PLAN",
    "EXIT_STEP_FAILED",
    "EXIT_UNAVAILABLE",
    "RunnerEnv",
    "exit_now",
    "main",
]

EXIT_OK = 0
EXIT_STEP_FAILED = 1
EXIT_BAD_INPUT = 2
EXIT_UNAVAILABLE = 3
EXIT_INTERNAL = 4
EXIT_STALE_PLAN = 5

R = TypeVar("R")
TOKEN_PATH = "/var/run/secrets/burrito-py/token"  # noqa: S105 - a path
TERMINATION_LOG = "/dev/termination-log"
# plan and apply, and the day-2 operations (api/operations.py OPERATION_ACTIONS, kept in step by a test).
ACTIONS = ("plan", "apply", "import", "state-rm", "state-mv", "force-unlock", "migrate-state")
WORK_DIR_ENV = "BURRITO_RUNNER_WORK_DIR"


class RunnerError(Exception):
    """An expected failure; `exit_code` says which kind."""

    exit_code = EXIT_BAD_INPUT


class MigrationFailed(RunnerError):
    """A migrate-state step failed, or the destination did not hold every resource of the source (§5.12)."""

    exit_code = EXIT_STEP_FAILED


class Unavailable(RunnerError):
    exit_code = EXIT_UNAVAILABLE


class StalePlan(RunnerError):
    """Terraform refused the saved plan as stale and it was not applied by an earlier attempt: the same plan
    would fail again, so the run controller does not retry it; the layer plans again."""

    exit_code = EXIT_STALE_PLAN


class RunnerEnv(NamedTuple):
    run: str
    layer: str
    namespace: str
    action: str
    attempt: int
    datastore_url: str
    grace_seconds: float = signals.DEFAULT_GRACE_SECONDS
    work_dir: Path | None = None  # None: under TMPDIR
    mirror: MirrorConfig = MirrorConfig()  # the datastore's mirrors (default: none)

    @classmethod
    def from_environ(cls, environ: Mapping[str, str]) -> RunnerEnv:
        names = (
            "BURRITO_RUNNER_RUN",
            "BURRITO_RUNNER_LAYER_NAME",
            "BURRITO_RUNNER_LAYER_NAMESPACE",
            "BURRITO_RUNNER_ACTION",
            "BURRITO_RUNNER_ATTEMPT",
            "BURRITO_DATASTORE_URL",
        )
        missing = [name for name in names if not environ.get(name, "").strip()]
        if missing:
            raise RunnerError(f"missing environment variable(s): {', '.join(missing)}")
        action = environ["BURRITO_RUNNER_ACTION"].strip()
        if action not in ACTIONS:
            raise RunnerError(f"BURRITO_RUNNER_ACTION: {action!r} is not one of {', '.join(ACTIONS)}")
        attempt_text = environ["BURRITO_RUNNER_ATTEMPT"].strip()
        if not attempt_text.isdigit() or int(attempt_text) < 1:
            raise RunnerError(f"BURRITO_RUNNER_ATTEMPT: {attempt_text!r} is not an attempt number (1, 2, …)")
        datastore_url = environ["BURRITO_DATASTORE_URL"].strip()
        if not datastore_url.startswith(("http://", "https://")):
            raise RunnerError(f"BURRITO_DATASTORE_URL: {datastore_url!r} is not an http:// or https:// URL")
        try:
            grace = signals.grace_seconds(environ)
        except ValueError as exc:
            raise RunnerError(str(exc)) from None
        work_dir = environ.get(WORK_DIR_ENV, "").strip()
        if work_dir and not work_dir.startswith("/"):
            raise RunnerError(f"{WORK_DIR_ENV}: {work_dir!r} is not an absolute path")
        try:
            mirror = MirrorConfig.from_environ(environ)
        except MirrorError as exc:
            raise RunnerError(str(exc)) from None
        return cls(
            run=environ["BURRITO_RUNNER_RUN"].strip(),
            layer=environ["BURRITO_RUNNER_LAYER_NAME"].strip(),
            namespace=environ["BURRITO_RUNNER_LAYER_NAMESPACE"].strip(),
            action=action,
            attempt=int(attempt_text),
            datastore_url=datastore_url,
            grace_seconds=grace,
            work_dir=pod_path(work_dir) if work_dir else None,
            mirror=mirror,
        )


def file_sum(path: Path) -> str:
    import hashlib  # after `init` (imported while it runs, `_import_plan_modules`), or an apply's plan check

    digest = hashlib.sha256()
    with path.open("rb") as handle:
        while chunk := handle.read(1024 * 1024):
            digest.update(chunk)
    return "sha256:" + digest.hexdigest()


def read_token() -> str | None:
    path = pod_path(TOKEN_PATH)
    try:
        return path.read_text().strip() or None
    except FileNotFoundError:
        return None
    except OSError as exc:
        raise RunnerError(f"cannot read the datastore token {path}: {exc}") from None


def _say(text: str) -> None:
    print(text, flush=True)


class _Started:
    """`call` running in a thread of its own from now on (its own connection: `Http` is one connection and not
    shared), so that its waits overlap the caller's work; `result()` waits for it, then returns what it returned
    or raises what it raised, in the caller's thread."""

    def __init__(self, call: Callable[[], Any], name: str) -> None:
        self._call = call
        self._value: Any = None
        self._error: BaseException | None = None
        self._thread = threading.Thread(target=self._target, name=f"burrito-py-runner-{name}", daemon=True)
        self._thread.start()

    def _target(self) -> None:
        try:
            self._value = self._call()
        except BaseException as exc:  # handed to the caller's thread by result()
            self._error = exc

    def join(self) -> None:
        self._thread.join()

    def result(self) -> Any:
        self._thread.join()
        if self._error is not None:
            raise self._error
        return self._value


def _once_after(step: str, call: Callable[[], None]) -> Callable[[str], None]:
    """A `Steps` hook that starts `call` in a thread once `step`'s process runs (at most once)."""
    pending = [call]

    def started(name: str) -> None:
        if name == step and pending:
            threading.Thread(target=pending.pop(), name="burrito-py-runner-imports", daemon=True).start()

    return started


def _import_plan_modules() -> None:
    """What a plan needs only after `init` (the uploads' thread pool with `logging`, the summary's plan model,
    hashlib for the sums: ~15 ms CPU), imported while `init` runs and the runner only relays its output, so not
    in the attempt's critical path when a core is free. A failure here is the later import's to report."""
    try:
        import concurrent.futures  # noqa: F401
        import hashlib  # noqa: F401

        import burrito_py.plans.model  # noqa: F401
    except ImportError:
        pass


class Runner:
    """One attempt: everything between reading the environment and exiting."""

    def __init__(self, env: RunnerEnv, kube: Kube, store: RunnerStore, workdir: Path,
                 token: str | None = None, bodies: Bodies | None = None) -> None:
        """`bodies`: the run and the layer as read while the runner imported (`early`); None: read them here."""
        self.env, self.kube, self.store, self.workdir = env, kube, store, workdir
        self.token = token  # the datastore token: the mirrors take it too
        self.plan_file = workdir / "plan.bin"
        self._bodies = bodies

    # -- API ------------------------------------------------------------------------------------
    def _read(self, read: Callable[[Mapping[str, Any]], R], kind: str, plural: str, namespace: str, name: str) -> R:
        """The object, checked field by field as its model checks it (runner/objects.py: no pydantic)."""
        return self._check(read, kind, namespace, name, self._get(kind, plural, namespace, name))

    def _get(self, kind: str, plural: str, namespace: str, name: str) -> dict[str, Any]:
        try:
            return self.kube.get(plural, namespace, name, kind)
        except KubeError as exc:
            return self._body(kind, namespace, name, exc)

    @staticmethod
    def _body(kind: str, namespace: str, name: str, outcome: Outcome) -> dict[str, Any]:
        """The body read, or the refusal raised: a missing object is bad input, anything else the API's."""
        if not isinstance(outcome, KubeError):
            return outcome
        if outcome.status == 404:
            raise RunnerError(f"{kind} {namespace}/{name} not found") from None
        raise Unavailable(str(outcome)) from None

    @staticmethod
    def _check(read: Callable[[Mapping[str, Any]], R], kind: str, namespace: str, name: str,
               body: Mapping[str, Any]) -> R:
        from burrito_py.api.errors import InvalidSpec

        if kind in ("TerraformLayer", "TerraformRepository"):
            from burrito_py.api.runner_contract import stored_without_reserved

            body = stored_without_reserved(body)  # as its pod was made (docs/architecture.md §6.3)
        try:
            return read(body)
        except InvalidSpec as exc:
            raise RunnerError(f"{kind} {namespace}/{name} is invalid: {exc}") from None

    def _datastore(self, call: Any, *args: Any) -> Any:
        from burrito_py.datastore.wire import DatastoreError

        try:
            return call(*args)
        except DatastoreError as exc:
            if exc.status_code is not None and 400 <= exc.status_code < 500 and exc.status_code not in (401, 403):
                raise RunnerError(str(exc)) from None
            raise Unavailable(str(exc)) from None

    # -- the attempt ----------------------------------------------------------------------------
    def run(self) -> None:
        env = self.env
        # The run and the layer are read while the modules that check them are imported (~7 ms CPU), unless
        # they were while the runner itself imported (`early`). The run's refusal comes first, then the layer's
        # once the run is checked: the order of the reads.
        bodies = self._bodies
        reading = _Started(lambda: read_run_and_layer(self.kube, env.namespace, env.run, env.layer), "read") \
            if bodies is None else None
        try:
            from burrito_py.api.effective import effective_extra_args, effective_remediation, effective_tool
            from burrito_py.api.operation_rules import OPERATION_ACTIONS, BadOperation, describe
            from burrito_py.runner.objects import ExtraArgs, read_layer, read_repository, read_run
        finally:
            if reading is not None:
                reading.join()  # the connection is this thread's again
        if reading is not None:
            bodies = reading.result()
        assert bodies is not None
        run = self._check(read_run, "TerraformRun", env.namespace, env.run,
                          self._body("TerraformRun", env.namespace, env.run, bodies.run))
        assert bodies.layer is not None  # read whenever the run was
        layer = self._check(read_layer, "TerraformLayer", env.namespace, env.layer,
                            self._body("TerraformLayer", env.namespace, env.layer, bodies.layer))
        if run.spec.layer.name != env.layer:
            raise RunnerError(f"run {env.run} is for layer {run.spec.layer.name}, not {env.layer}")
        if run.spec.action != env.action:
            raise RunnerError(f"run {env.run} is a {run.spec.action} run, but BURRITO_RUNNER_ACTION is {env.action}")
        self.mask_secret_environment()
        pull_request = run.spec.pull_request
        if pull_request is not None and env.action not in ("plan", "apply"):
            raise RunnerError(f"run {env.run} belongs to pull request {pull_request}: it may only plan, or apply "
                              "its reviewed plan")
        # Apply before merge (§11.3): exactly the pull request's reviewed plan (spec.artifact and its sum, checked
        # in fetch_plan), never a new plan; as the layer's runner, so from here on it is the layer's apply.
        pr_apply = pull_request is not None and env.action == "apply"
        if pr_apply:
            _say(f"burrito-py: applying pull request {pull_request}'s reviewed plan before merge")
            pull_request = None
        revision = run.spec.layer.revision
        if not revision:
            raise RunnerError(f"run {env.run} has no spec.layer.revision")
        # The source archive comes down while the repository is read; the repository's refusal comes first, as
        # when they were one after the other, and the download never outlives this frame (the work directory).
        source = _Started(lambda: self.fetch_source(layer.repository_namespace, layer.spec.repository.name,
                                                    revision, layer.spec.path), "source")
        try:
            repository = self._read(read_repository, "TerraformRepository", "terraformrepositories",
                                    layer.repository_namespace, layer.spec.repository.name)
        finally:
            source.join()
        override = ExtraArgs(*(tuple(args) for args in effective_extra_args(layer, repository)))
        # A destroy apply applies exactly its destroy plan: planning again here would plan a normal apply. A
        # manually approved apply applies exactly the approved plan: planning again could apply something else.
        remediation = effective_remediation(layer, repository)
        manual = layer.spec.approve_plan == "manual" or (layer.spec.approve_plan is None and not remediation.auto_apply)
        without_artifact = (remediation.apply_without_plan_artifact and not run.spec.destroy and not manual
                            and not pr_apply)

        layer_dir: Path = source.result()
        applied_sum: str | None = None
        if env.action == "apply" and not without_artifact:
            applied_sum = self.fetch_plan(run)  # before init: no point initialising for a missing plan
            self.read_inputs(run, layer)  # for masking only: a saved plan carries its variables
        else:  # only a new plan needs the variables
            self.write_variables(layer, layer_dir, self.read_inputs(run, layer))
        mirrors = self.prepare_mirrors()
        tool_mirror = ToolMirror(env.mirror.tool_url, self.token, mirrors.ca_bundle) if env.mirror.tool_url else None
        for owner, spec in (("spec", layer.spec), ("repository spec", repository.spec)):
            switches = [tool.enabled if tool is not None else None for tool in (spec.terraform, spec.opentofu)]
            if switches == [True, True]:
                # The controllers refuse such a layer (Ready=False); a run made by hand must not guess either.
                raise RunnerError(f"{owner}.terraform.enabled and {owner}.opentofu.enabled are both true: the engine "
                                  "is unknown; enable one of them")
            if any(switch is not None for switch in switches):
                break  # the nearest level that switches an engine decides
        effective = effective_tool(layer, repository)
        # The locked providers are fetched while the tool is resolved (perhaps downloaded), joined before `init`.
        prefetch = self.start_prefetch(mirrors, layer_dir, effective.terragrunt is not None, override.extra_init_args)
        try:
            tool = resolve_tool(effective, layer_dir, tool_mirror, source_root=self.workdir / "source")
        except ToolError as exc:
            raise RunnerError(str(exc)) from None
        _say(f"burrito-py: {env.action} of layer {env.namespace}/{env.layer} at {revision} with {tool.describe()}")
        mirrors = finish_prefetch(prefetch, self.env.mirror, mirrors, self.token, Path.home(), say=_say)
        if env.action == "migrate-state":
            assert run.spec.operation is not None  # the model refuses such a run without one
            self.migrate(run.spec.operation, layer, repository, layer_dir, tool, mirrors, override.extra_init_args)
            return
        backend = self.managed_backend(layer, repository, layer_dir, tool.kind, pull_request)
        # A plan's later modules import once `init` runs, not while its process starts: a thread importing then
        # would hold the interpreter lock the start of `init` needs.
        later = _import_plan_modules if env.action == "plan" or without_artifact else None
        steps = Steps(tool, layer_dir, env={**os.environ, **mirrors.env, **(backend.env if backend else {})},
                      started=_once_after("init", later) if later is not None else None)
        try:
            steps.init([*(backend.init_args if backend else ()),
                        *(backend.extra_init_args(override.extra_init_args) if backend else override.extra_init_args)])
        except Interrupted:
            raise
        except StepFailed as exc:
            raise self.explained(exc, mirrors) from None

        operation = run.spec.operation
        if env.action in OPERATION_ACTIONS:
            # A day-2 operation (§5.12): its one command, under the layer's Lease, the state lock its own.
            assert operation is not None  # the model refuses such a run without one
            _say(f"burrito-py: {describe(env.action, operation)}, asked by {operation.requested_by}")
            try:
                steps.operation(env.action, operation)
            except BadOperation as exc:
                raise RunnerError(f"spec.operation.{exc}") from None
            _say(f"burrito-py: {env.action} of layer {env.namespace}/{env.layer} succeeded")
            return
        if env.action == "plan" or without_artifact:
            # A plan run needs its source tree no more once `show -json` has read the plan (the providers' schemas
            # are in its .terraform): it is removed beside the last uploads rather than after them.
            applied_sum = self.plan(steps, override, destroy=run.spec.destroy, lock=pull_request is None,
                                    operation=operation,
                                    discard=self.workdir / "source" if env.action == "plan" else None)
        if env.action == "apply":
            assert applied_sum is not None
            already = None if without_artifact else self.already_applied(layer, applied_sum)
            if already is not None:
                _say(f"burrito-py: plan {applied_sum} is already applied (an earlier attempt); reading its outputs "
                     f"(known from {already})")
            else:
                self.apply(steps, override, applied_sum)
            # When this fails, the apply happened all the same: the applied record stored right after it tells
            # the run controller, which records the apply on the layer (so it is never applied again).
            self.record_outputs(steps)
        if pull_request is not None:  # the plan is the pull request's, kept under the run; the layer's is not touched
            _say(f"burrito-py: plan for pull request {pull_request} succeeded")
            return
        # The runner writes nothing to the Kubernetes API: the run controller records the result on the layer from
        # what the datastore holds (docs/architecture.md §6.4).
        _say(f"burrito-py: {env.action} of layer {env.namespace}/{env.layer} succeeded")

    def managed_backend(self, layer: Layer, repository: Repository, layer_dir: Path, kind: str,
                        pull_request: str | None) -> ManagedBackend | None:
        """The datastore as the layer's backend when its state is managed (docs/architecture.md §10.6), else None."""
        from burrito_py.api.effective import effective_state_location

        # Where the last migration put the state wins over the spec (§10.6): a run never uses the copy a migration
        # left behind.
        if effective_state_location(layer, repository) != "managed":
            return None
        from burrito_py.runner.state import STATE_FIELD, ManagedStateError, managed_backend  # managed state only

        migrated = (layer.metadata.get("annotations") or {}).get(ann.STATE_LOCATION) == "managed"
        if pull_request is not None:
            # The state holds the layer's secrets and a pull request's code is not the branch's: the datastore
            # gives its runner no access (§10.2), so say why here rather than fail in init with a 403.
            raise RunnerError(f"{STATE_FIELD}: pull request {pull_request} cannot be planned: a layer's managed state "
                              "is readable by the layer's own runs only")
        env = self.env
        try:
            backend = managed_backend(layer_dir, kind, env.datastore_url, env.namespace, env.layer, self.token,
                                      migrated=migrated)
        except ManagedStateError as exc:
            raise RunnerError(str(exc)) from None
        except OSError as exc:
            raise RunnerError(f"{STATE_FIELD}: cannot write the backend override in {layer_dir}: {exc}") from None
        _say(f"burrito-py: state managed by the datastore ({STATE_FIELD})")
        return backend

    def migrate(self, operation: Operation, layer: Layer, repository: Repository,
                layer_dir: Path, tool: Tool, mirrors: MirrorSetup, extra_init_args: Sequence[str]) -> None:
        """A migrate-state run (docs/architecture.md §5.12). Into the datastore: `init` with the code's backend,
        `state pull`, the pulled state stored as it is (its lineage and serial) under the datastore's state lock, then
        `init -reconfigure` with the http backend and `state pull` through it. Out: `init` with the http backend,
        `state pull`, `init -reconfigure` with the code's backend, `state push` (without `-force`), `state pull`.
        Every resource instance is compared. The source is only read, so a failure at any step leaves it the layer's
        state (the run controller records the new place only when this returns).

        Not `init -migrate-state -force-copy`: terraform 1.11.4 writes into an empty http backend with a new lineage
        and serial 1 (its remote state resets the lineage when the remote holds none; seen end to end), so the
        datastore would not hold the source's lineage and a layer migrated out and in again would meet its
        one-lineage rule; and `-force-copy` overwrites whatever the destination holds, where `state push` refuses a
        destination holding another lineage or a newer serial."""
        from burrito_py.api.effective import effective_state_location
        from burrito_py.runner.state import (
            OVERRIDE,
            OVERRIDE_FILE,
            USERNAME,
            ManagedStateError,
            backend_config_args,
            declared_backends,
            migration_problem,
            state_summary,
        )

        env, to = self.env, operation.to
        source = effective_state_location(layer, repository)
        names = {"managed": "the burrito-py datastore", "code": "the backend the layer's code declares"}
        if to is None or to == source:
            raise RunnerError(f"spec.operation.to: the layer's state is in {names[source]} already: nothing to "
                              "migrate")
        untouched = f"the source state in {names[source]} is untouched and stays the layer's state"
        try:
            declared = declared_backends(layer_dir, tool.kind)
        except ManagedStateError as exc:
            raise RunnerError(f"migrate-state: {exc}") from None
        if any(d.endswith(": cloud") for d in declared):
            raise RunnerError(f"migrate-state: the layer's code declares a cloud block ({'; '.join(declared)}): "
                              f"HCP Terraform's state is not migrated by burrito-py; {untouched}")
        if not declared:
            if to == "managed":
                raise RunnerError("migrate-state to managed: the layer's code declares no backend, so its state was "
                                  "a file in the runner's work directory, gone after each run: there is nothing to "
                                  "migrate; set spec.state.managed: true instead")
            raise RunnerError("migrate-state to code: the layer's code declares no backend to move the state to "
                              "(without one it would be a file in the runner's work directory, lost after the "
                              f"run): declare one (e.g. backend \"s3\" {{...}}) and ask again; {untouched}")
        _say(f"burrito-py: migrate-state from {names[source]} ({'; '.join(declared) if source == 'code' else 'http'})"
             f" to {names[to]}, asked by {operation.requested_by}")
        # The http backend's addresses and credentials (the runner's own token, masked) for the datastore side; the
        # code's -backend-config arguments for its side only (the http backend knows none of them). Options that
        # would fight the switch are dropped.
        extras = [a for a in extra_init_args if a not in ("-reconfigure", "-migrate-state", "-force-copy")]
        http_init = [*backend_config_args(env.datastore_url, env.namespace, env.layer),
                     *(a for a in extras if not a.startswith("-backend-config"))]
        creds = {"TF_HTTP_USERNAME": USERNAME, "TF_HTTP_PASSWORD": self.token} if self.token else {}
        steps = Steps(tool, layer_dir, env={**os.environ, **mirrors.env, **creds})
        override = layer_dir / OVERRIDE_FILE
        # Outside the source tree; they hold the state's secrets and are removed when the attempt ends.
        pulled, after_file = self.workdir / "migrate-source.tfstate", self.workdir / "migrate-destination.tfstate"
        try:
            if to == "managed":
                override.unlink(missing_ok=True)
                steps.init(extras)
                steps.state_pull(pulled)
                before = state_summary(pulled.read_bytes())
                if before.lineage:  # no state yet: nothing to copy, only the place changes
                    self.copy_state_in(pulled.read_bytes(), operation.requested_by)
                override.write_text(OVERRIDE, encoding="utf-8")
                steps.init(["-reconfigure", *http_init])
            else:
                override.write_text(OVERRIDE, encoding="utf-8")
                steps.init(http_init)
                steps.state_pull(pulled)
                before = state_summary(pulled.read_bytes())
                override.unlink()
                steps.init(["-reconfigure", *extras])
                if before.lineage:
                    steps.state_push(pulled)
            steps.state_pull(after_file)
            after = state_summary(after_file.read_bytes())
        except Interrupted:
            raise
        except StepFailed as exc:
            raise MigrationFailed(f"migrate-state to {to}: {self.explained(exc, mirrors)}; {untouched}") from None
        except (OSError, ValueError) as exc:  # a state that is not one; the datastore's refusal (copy_state_in)
            raise MigrationFailed(f"migrate-state to {to}: {exc}; {untouched}") from None
        finally:
            for leftover in (pulled, after_file):
                leftover.unlink(missing_ok=True)
        # The datastore holds the very bytes pulled: the same lineage. Terraform's own remote backends (s3, gcs, …)
        # give a state pushed into an empty one a new lineage, so out of the datastore the lineage is not compared.
        problem = migration_problem(before, after, same_lineage=to == "managed")
        if problem is not None:
            raise MigrationFailed(f"migrate-state to {to}: {problem}; {untouched}")
        _say(f"burrito-py: migrate-state to {to} succeeded: {len(after.instances)} resource instance(s) kept, lineage "
             f"{after.lineage or '(no state yet)'}, serial {before.serial} -> {after.serial}; the controllers now "
             f"record that the state lives in {names[to]}")

    def copy_state_in(self, body: bytes, requested_by: str) -> None:
        """The pulled state, stored in the datastore as it is (§5.12); a refusal (another lineage there, a newer
        serial, the state locked) fails the migration naming the datastore's reason."""
        import uuid

        from burrito_py.datastore.wire import DatastoreError

        env = self.env
        lock = {"ID": str(uuid.uuid4()), "Operation": "migrate-state", "Who": f"burrito-py runner {env.run}",
                "Info": f"migrate-state asked by {requested_by}"}
        try:
            self.store.copy_state_in(env.namespace, env.layer, body, lock)
        except DatastoreError as exc:
            raise ValueError(str(exc)) from None

    def prepare_mirrors(self) -> MirrorSetup:
        """The CA bundle and CLI configuration the mirrors need, in HOME (writable in a runner pod, §18)."""
        try:
            return prepare(self.env.mirror, self.token, Path.home(), os.environ, say=_say)
        except MirrorError as exc:
            raise RunnerError(str(exc)) from None
        except OSError as exc:
            raise RunnerError(f"cannot write the mirror configuration in HOME {Path.home()}: {exc}") from None

    def start_prefetch(self, mirrors: MirrorSetup, layer_dir: Path, terragrunt: bool, extra_init_args: Sequence[str]
                       ) -> PendingPrefetch | None:
        """The lock file's providers being fetched into a filesystem mirror in HOME (§10.5); None
        without a provider mirror in use or a lock file, or with terragrunt (its units have lock files of their
        own)."""
        if not mirrors.provider_mirror or terragrunt:
            return None
        from burrito_py.runner.tools import mirror_arch

        try:
            lock_text = (layer_dir / LOCK_FILE).read_text(encoding="utf-8")
            platform = f"linux_{mirror_arch()}"  # runner pods are Linux
        except (OSError, UnicodeDecodeError, ToolError):
            return None
        providers = prefetch_candidates(lock_text, extra_init_args, self.env.mirror.registries)
        return start_prefetch(self.env.mirror, mirrors, self.token, self.env.datastore_url, providers, platform,
                              Path.home())

    def explained(self, failure: StepFailed, mirrors: MirrorSetup) -> StepFailed:
        """An init that could not install a provider through the mirror: the mirror's reason, which terraform
        does not print (`bad response code: 502`), as the failure's first lines (a checksum that did not match)."""
        if not mirrors.provider_mirror or not self.env.mirror.provider_url:
            return failure
        from burrito_py.runner.mirror import failed_installs, mirror_refusal
        from burrito_py.runner.tools import ToolError, mirror_arch

        try:
            platform = f"linux_{mirror_arch()}"
        except ToolError:
            return failure
        lines = []
        mismatch = "doesn't match any of the checksums previously recorded in the dependency lock file"
        for address, version in failed_installs(failure.output)[:3]:
            if address in mirrors.prefetched:  # from the pod's filesystem mirror: the network mirror has no say
                if mismatch in " ".join(" ".join(failure.output).split()):
                    lines.append(f"error: {address} v{version} as prefetched from the datastore does not match the "
                                 "lock file's checksums: not installed (the datastore's copy is not what the lock "
                                 "file recorded)")
                continue
            reason = mirror_refusal(self.env.mirror.provider_url, self.token, mirrors.ca_bundle, address, version,
                                    platform)
            if reason:
                lines.append(f"error: the provider mirror refused {address} v{version} ({platform}): {reason}")
        for line in lines:
            _say(line)
        return StepFailed(failure.step, failure.exit_code, [*lines, *failure.output]) if lines else failure

    def already_applied(self, layer: Layer, plan_sum: str) -> str | None:
        """How an earlier attempt is known to have applied this plan, else None: the layer's `apply-sum`, or
        the run's applied record in the datastore (written right after the apply, so it survives an attempt that
        died before it ended)."""
        recorded = layer.metadata.get("annotations") or {}
        if recorded.get(ann.APPLY_SUM) == plan_sum:
            return "the layer's apply-sum"
        if self.env.attempt == 1:  # no earlier attempt of this run could have recorded anything
            return None
        env = self.env
        if self._datastore(self.store.get_applied, env.namespace, env.layer, env.run) == plan_sum:
            return "the run's applied record in the datastore"
        return None

    def apply(self, steps: Steps, override: ExtraArgs, plan_sum: str) -> None:
        """Apply the saved plan, then record durably that it is applied (before anything else can fail)."""
        env = self.env
        try:
            steps.apply(self.plan_file, override.extra_apply_args)
        except Interrupted:
            raise
        except StepFailed as exc:
            if is_stale_plan(exc.output):
                raise StalePlan(
                    f"stale plan: {exc.step} refused the saved plan {plan_sum}: the state changed after it was "
                    "planned (an earlier attempt or another apply); the layer must plan again"
                ) from None
            raise
        try:
            self._datastore(self.store.put_applied, env.namespace, env.layer, env.run, env.attempt, plan_sum)
        except RunnerError as exc:  # a successful attempt is recorded all the same (its exit code and outputs)
            _say(f"burrito-py: warning: the applied record could not be stored ({exc})")

    def read_inputs(self, run: Run, layer: Layer) -> Inputs | None:
        """The run's inputs record the controllers stored (its layer's varsFrom values, the upstream outputs of
        spec.dependsOn): the runner reads no Secret itself. None for a run given none. The values of Secrets and
        the sensitive upstream outputs are masked in the log from now on."""
        digest = (run.metadata.get("annotations") or {}).get(ann.RUN_INPUTS_DIGEST) or None
        if not layer.spec.vars_from and digest is None:
            return None
        from burrito_py.runner.variables import VariablesError, parse_inputs  # only for a run given inputs

        env = self.env
        raw = self._datastore(self.store.get_inputs, env.namespace, env.layer, env.run)
        try:
            inputs = parse_inputs(raw, digest)
        except VariablesError as exc:
            raise RunnerError(str(exc)) from None
        self.mask(inputs.masked(), "Secret or sensitive input(s)")
        if digest is not None:
            _say(f"burrito-py: inputs {', '.join(sorted(inputs.variables)) or '(none)'} ({digest})")
        return inputs

    def write_variables(self, layer: Layer, layer_dir: Path, inputs: Inputs | None) -> None:
        """`burrito-py.auto.tfvars.json` from spec.vars and the run's inputs (varsFrom values, then the upstream
        outputs: they win); names are printed, values never."""
        if inputs is not None and inputs.error is not None:
            raise RunnerError(inputs.error)  # a varsFrom the controllers could not satisfy (names only)
        given = inputs.variables if inputs is not None else {}
        if not layer.spec.vars and not given:
            return
        from burrito_py.runner.variables import merge_variables, write_tfvars  # only for a layer with variables

        variables = merge_variables(layer.spec.vars, [given])
        target = write_tfvars(layer_dir, variables)
        _say(f"burrito-py: variables {', '.join(sorted(variables)) or '(none)'} written to {target.name}")

    def mask_secret_environment(self) -> None:
        """The variables the pod got from a Secret through its environment (the controllers name them in
        BURRITO_RUNNER_SECRET_VARIABLES): their TF_VAR_ values are masked in the log from now on."""
        names = [n for n in os.environ.get("BURRITO_RUNNER_SECRET_VARIABLES", "").split(",") if n]
        values = {n: value for n in names if (value := os.environ.get(f"TF_VAR_{n}"))}
        if values:
            self.mask(values, "Secret environment variable(s)")

    @staticmethod
    def mask(values: Mapping[str, str], what: str) -> None:
        """Mask every value in the log from now on; say which are too short to be masked (names only)."""
        short = [name for name, value in values.items() if value and not masker().add(value)]
        if short:
            _say(f"burrito-py: warning: {what} {', '.join(sorted(short))} are shorter than {MIN_LENGTH} "
                 "characters and are not masked in the log")

    def record_outputs(self, steps: Steps) -> None:
        """`output -json` of the applied state, uploaded as this attempt's outputs (never printed)."""
        env = self.env
        outputs = self.workdir / "outputs.json"
        steps.output_json(outputs)
        try:
            with outputs.open("rb") as handle:
                parsed = json.load(handle)
        except ValueError:
            parsed = None
        if not isinstance(parsed, dict):  # say nothing of the content: it may be a secret
            raise RunnerError("output -json printed no JSON object; the outputs were not recorded")
        self._datastore(self.store.put_outputs, env.namespace, env.layer, env.run, env.attempt, outputs)
        _say(f"burrito-py: {len(parsed)} output(s) recorded")

    def fetch_source(self, namespace: str, repository: str, revision: str, path: str) -> Path:
        archive = self.workdir / "source.tar.gz"
        self._datastore(self.store.download_source, namespace, repository, revision, archive)
        tree = self.workdir / "source"
        try:
            extract_archive(archive, tree)
            archive.unlink()
            return layer_directory(tree, path, revision)
        except SourceError as exc:
            raise RunnerError(f"source of {namespace}/{repository} at {revision}: {exc}") from None

    def fetch_plan(self, run: Run) -> str:
        """Download the run's artifact and check it is the plan the controllers recorded: its sha256 must be the
        sum the run carries (`spec.artifact.sum`, set by the controllers from the datastore's own sum)."""
        artifact = run.spec.artifact
        if artifact is None:
            raise RunnerError(
                f"apply run {self.env.run} names no plan to apply (spec.artifact) and applyWithoutPlanArtifact is off"
            )
        expected = artifact.sum or (run.metadata.get("annotations") or {}).get(ann.RUN_PLAN_SUM)
        if not expected:
            raise RunnerError(f"apply run {self.env.run} carries no plan sum (spec.artifact.sum); refusing to apply")
        env = self.env
        self._datastore(
            self.store.download_plan, env.namespace, env.layer, artifact.run, artifact.attempt, "bin", self.plan_file
        )
        digest = file_sum(self.plan_file)
        if digest != expected:
            raise RunnerError(
                f"the stored plan of run {artifact.run} attempt {artifact.attempt} is {digest}, but the controllers "
                f"recorded {expected} for it; refusing to apply"
            )
        _say(f"burrito-py: applying the plan of run {artifact.run} attempt {artifact.attempt} ({digest})")
        return digest

    def plan(self, steps: Steps, override: ExtraArgs, destroy: bool = False, lock: bool = True,
             operation: Operation | None = None, discard: Path | None = None) -> str:
        """Plan and upload the four formats of this attempt; the plan binary's sum. `operation`: a day-2
        operation's `-replace`/`-target` addresses (§5.12). `discard`: a directory no longer needed once
        `show -json` is done, removed while the last formats upload (what is left goes with the work directory)."""
        from concurrent.futures import ThreadPoolExecutor

        from burrito_py.plans.model import PlanFormatError, plan_summary

        env = self.env
        plan_json, pretty = self.workdir / "plan.json", self.workdir / "plan.txt"
        if operation is not None:
            from burrito_py.api.operation_rules import describe

            _say(f"burrito-py: {describe('plan', operation)}, asked by {operation.requested_by}")
        steps.plan(self.plan_file, override.extra_plan_args, copy_to=pretty, destroy=destroy, lock=lock,
                   replace=operation.replace if operation is not None else (),
                   target=operation.target if operation is not None else ())

        def put(fmt: str, data: Path | bytes) -> None:
            self._datastore(self.store.put_plan, env.namespace, env.layer, env.run, env.attempt, fmt, data)

        summary: list[str] = []

        def summarize(document: bytes) -> None:
            try:
                data = json.loads(document)
            except ValueError as exc:
                raise RunnerError(f"show -json printed no valid JSON: {exc}") from None
            try:
                summary.append(plan_summary(data))
            except PlanFormatError as exc:
                raise RunnerError(f"show -json printed JSON that is no plan: {exc}") from None

        # Upload the binary and the human-readable plan while `show -json` renders (a third of a second on
        # 1,000 resources); then the JSON goes up while this thread reads it for the summary (~5 ms on 1,000
        # resources: the upload's thread waits on its socket, not on the interpreter lock), and the summary follows
        # at once on a connection of its own: ~5 ms less than reading the JSON only once it was sent (issue 31).
        # Should it not read as JSON, the attempt fails: the controllers read the plan of a succeeded attempt
        # only, and of a failed apply nothing but its applied record (controllers/run/results.py `facts_needed`).
        with ThreadPoolExecutor(max_workers=4, thread_name_prefix="burrito-py-runner") as pool:
            shown = pool.submit(steps.show_json, self.plan_file, plan_json)
            uploads = [pool.submit(put, "bin", self.plan_file), pool.submit(put, "pretty", pretty)]
            digest = file_sum(self.plan_file)
            shown.result()  # a failure here leaves the pool, which waits for the uploads first
            if discard is not None:
                pool.submit(shutil.rmtree, discard, ignore_errors=True)
            document = plan_json.read_bytes()
            uploads.append(pool.submit(put, "json", document))
            summarize(document)
            put("short", summary[0].encode())
            for future in uploads:
                future.result()
        _say(f"burrito-py: {summary[0]}")
        return digest


def _fail(message: str, code: int) -> int:
    message = masker().mask(message)  # terraform's last lines may quote a secret value
    print(f"error: {message}", file=sys.stderr, flush=True)
    # The pod's termination message: kubectl describe and the run controller show it.
    termination = pod_path(TERMINATION_LOG)
    if termination.exists() or os.environ.get("BURRITO_LOCAL_ROOT"):
        with contextlib.suppress(OSError):  # best effort: the message is on stderr anyway
            termination.write_text(message[-4000:])
    return code


def _work_directory(env: RunnerEnv) -> tempfile.TemporaryDirectory[str]:
    try:
        return tempfile.TemporaryDirectory(prefix="burrito-py-runner-", dir=env.work_dir)
    except OSError as exc:
        where = f"{WORK_DIR_ENV} {env.work_dir}" if env.work_dir else f"TMPDIR {tempfile.gettempdir()}"
        raise RunnerError(f"cannot create the work directory under {where}: {exc.strerror or exc}") from None


def _attempt(env: RunnerEnv, token: str | None, early: EarlyReads | None = None) -> None:
    taken = early.take(env.namespace, env.run, env.layer) if early is not None else None
    client, bodies = taken if taken is not None else (None, None)
    try:
        kube = Kube.from_config() if client is None else client
    except KubeError as exc:
        raise Unavailable(str(exc)) from None
    if isinstance(kube, KubeError):
        raise Unavailable(str(kube))
    from burrito_py.runner.store import RunnerStore

    try:
        with RunnerStore(env.datastore_url, token=token) as store, _work_directory(env) as tmp:
            Runner(env, kube, store, Path(tmp), token, bodies).run()
    finally:
        kube.close()


def _upload_log(env: RunnerEnv, token: str | None, text: str, seconds: float) -> None:
    """The log of an interrupted attempt, as far as it goes, within what is left of the grace period."""
    from burrito_py.datastore.wire import DatastoreError
    from burrito_py.runner.store import RunnerStore

    try:
        with RunnerStore(env.datastore_url, token=token, timeout=max(1.0, seconds)) as store:
            store.put_logs(env.namespace, env.layer, env.run, env.attempt, text.encode())
    except DatastoreError as exc:
        print(f"burrito-py: the log could not be uploaded: {exc}", file=sys.stderr, flush=True)


def main(environ: Mapping[str, str] | None = None, early: EarlyReads | None = None) -> int:
    """Run one attempt; returns the exit code (see the module docstring). `early`: the reads `runner start`
    began while this module imported (`early`), taken when they are for this environment's run."""
    try:
        return _main(os.environ if environ is None else environ, early)
    finally:
        if early is not None:
            early.discard()


def _main(environ: Mapping[str, str], early: EarlyReads | None) -> int:
    stop = signals.reset(signals.stop_wait(signals.DEFAULT_GRACE_SECONDS))
    masking.reset()
    transcript = Transcript()
    env: RunnerEnv | None = None
    token: str | None = None
    with stop.installed(), transcript.capturing():
        try:
            env = RunnerEnv.from_environ(environ)
            stop.wait_seconds = signals.stop_wait(env.grace_seconds)
            prefetch_version("terraform")  # the usual tool; its version check then costs nothing
            token = read_token()
            if token:  # it reaches terraform's CLI configuration: never print it
                masker().add(token)
            _attempt(env, token, early)
        except Interrupted as exc:
            message, code = str(exc), stop.exit_code()
        except StepFailed as exc:
            message, code = str(exc), EXIT_STEP_FAILED
        except RunnerError as exc:
            message, code = str(exc), exc.exit_code
        except Exception as exc:  # a bug: keep the traceback, and an exit code no expected failure uses
            import traceback

            traceback.print_exc()
            message, code = f"internal error: {type(exc).__name__}: {exc}", EXIT_INTERNAL
        else:
            return EXIT_OK  # a signal that came after the last step changes nothing: the attempt is recorded
        if stop.requested and code != stop.exit_code():  # whatever failed, the signal is why the attempt ends
            message, code = f"interrupted by {stop.signal_name}: {message}", stop.exit_code()
        result = _fail(message, code)
        if stop.requested and env is not None:
            _upload_log(env, token, transcript.text(), stop.remaining())
        return result


def exit_now(code: int) -> NoReturn:
    """End the process once `main` has returned: everything is closed and the work directory removed, so
    skip the interpreter's teardown of the `kubernetes` and pydantic modules (tens of milliseconds on every
    run). Only for the runner process itself, never inside another program."""
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(code)
