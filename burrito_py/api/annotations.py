"""Annotation and label keys shared by the controllers, the runner and the server (docs/architecture.md §4)."""

from __future__ import annotations

GROUP = "terraform.burrito-py.io"
VERSION = "v1alpha1"
API_VERSION = f"{GROUP}/{VERSION}"

# Written by the runner after a successful plan.
RUNNER_PREFIX = "runner.burrito-py.io/"  # what runners write; an admission policy lets them write nothing else
PLAN_DATE = "runner.burrito-py.io/plan-date"
PLAN_SUM = "runner.burrito-py.io/plan-sum"
PLAN_RUN = "runner.burrito-py.io/plan-run"
PLAN_COMMIT = "runner.burrito-py.io/plan-commit"
# The plan's one-line summary (`Plan: 1 to add, 0 to change, 0 to destroy` / `No changes.`), so the layer
# controller can show `lastResult` and skip applying empty plans without a datastore call.
PLAN_SUMMARY = "runner.burrito-py.io/plan-summary"
# Written by the runner on a destroy plan (`terraform plan -destroy`, run spec.destroy): "true".
PLAN_DESTROY = "runner.burrito-py.io/plan-destroy"
# Written by the runner after a successful apply: the plan that was applied.
APPLY_DATE = "runner.burrito-py.io/apply-date"
APPLY_SUM = "runner.burrito-py.io/apply-sum"
APPLY_COMMIT = "runner.burrito-py.io/apply-commit"
# `<run>/<attempt>` of that apply; written only once its outputs are in the datastore, under that attempt.
APPLY_RUN = "runner.burrito-py.io/apply-run"
# Where the layer's state lives after its last migrate-state run (docs/architecture.md §5.12, §10.6): `managed` (the
# datastore) or `code` (the backend its code declares). Written by the run controller when such a run succeeds,
# before it marks the run Succeeded; once present it wins over `spec.state.managed`, so no run ever uses the backend
# a migration left behind.
STATE_LOCATION = "runner.burrito-py.io/state-location"
# On a TerraformLayer, written by the pull request controller only (the `runner.burrito-py.io/` prefix: the admission
# policy lets no one else set it): the TerraformPullRequest that applied its plan before merge and holds the layer
# until it merges or closes (docs/architecture.md §11.3, "Apply before merge"). Taken and released under the
# layer's resourceVersion, so two pull requests never both take it.
PULL_REQUEST_LOCK = "runner.burrito-py.io/pull-request-lock"
# Beside it: the layer's branch commit when the lock was taken. A merged pull request releases the layer once the
# branch has moved past it (the merge is fetched), so no plan of the branch from before the merge is applied.
PULL_REQUEST_LOCK_BRANCH = "runner.burrito-py.io/pull-request-lock-branch"
# Written by the repository controller.
BRANCH_COMMIT = "webhook.burrito-py.io/branch-commit"
BRANCH_COMMIT_DATE = "webhook.burrito-py.io/branch-commit-date"
RELEVANT_COMMIT = "webhook.burrito-py.io/relevant-commit"
RELEVANT_COMMIT_DATE = "webhook.burrito-py.io/relevant-commit-date"
# On a Terragrunt layer, what its unit's terragrunt.hcl says at the branch head (JSON): the layers its `dependency`
# blocks name (`dependencies`: name, unit, block, outputs read or null for all), the files it reads (`reads`) and
# what is wrong with it (`problems`: reason, message). docs/architecture.md §9.1.
TERRAGRUNT = "webhook.burrito-py.io/terragrunt"
# Set by a person or the server; removed by the layer controller when it acts on it.
SYNC_NOW = "api.burrito-py.io/sync-now"
# Set by a person: apply the pending plan whose sum is exactly this value (manual approval).
APPROVE_PLAN = "api.burrito-py.io/approve-plan"
# {"sum", "user", "groups"}: an override of a mandatory policy's denial of that plan, written by the server for
# the principal it authenticated (POST /api/layers/{ns}/{name}/override); an admission policy lets nobody else.
OVERRIDE_POLICY = "api.burrito-py.io/override-policy"
# A day-2 operation asked of the layer (JSON, api/operations.py) and who asked (a username): set by a person (the
# admission policy lets a user name only themselves) or by the server for the caller it authenticated; removed by
# the layer controller when it creates the operation's run (docs/architecture.md §5.12).
OPERATION = "api.burrito-py.io/operation"
OPERATION_BY = "api.burrito-py.io/operation-by"
# On AGL layers: the ClusterTerraformPlanPolicies their ApplicationDefinition names (comma-separated), which judge
# the layer's plans whatever their selectors say.
LAYER_PLAN_POLICIES = "agl.burrito-py.io/plan-policies"
# On a TerraformLayer being deleted: release it without destroying its resources, for the reason given.
# Set by the layer controller when a CRD's deletion is behind the layer's (see controllers/layer/crd_guard.py).
SKIP_DESTROY = "api.burrito-py.io/skip-destroy"
# On a TerraformRepository: `sync-<branch>` = time the server asked for an immediate fetch.
REPOSITORY_SYNC_PREFIX = "webhook.burrito-py.io/sync-"

# On a TerraformRun: when the controller created it, to the microsecond. creationTimestamp has whole
# seconds, and a plan and the apply it triggers are often created in the same second.
RUN_CREATED_AT = "burrito-py.io/created-at"
# On a TerraformRun: the layer's metadata.generation when the run was created (a spec edit retries a failed
# destroy).
RUN_LAYER_GENERATION = "burrito-py.io/layer-generation"

# On a TerraformRun, set by the layer controller when it creates the run: the layer's relevant commit then (a
# plan of any commit with that relevant commit plans the same code), and for an apply, the sum of the plan it
# applies (the key of its exhaustion).
RUN_RELEVANT_COMMIT = "burrito-py.io/relevant-commit"
RUN_PLAN_SUM = "burrito-py.io/plan-sum"
# On a pull request's apply run: who asked (`<login> (comment <id>)`), shown by `kubectl describe`.
RUN_REQUESTED_BY = "burrito-py.io/requested-by"

# Labels.
LABEL_LAYER = "burrito-py.io/layer"
LABEL_RUN = "burrito-py.io/run"
LABEL_COMPONENT = "burrito-py.io/component"
# On runner pods: the name of their run's Lease (§7), so a run waits for another run's pod on the same state.
LABEL_LEASE = "burrito-py.io/lease"
# On a pull request's plan-only runs: `layer_label(<TerraformPullRequest name>)` (§11.3). They carry no layer
# label, so the layer controller never counts them among its layer's runs.
LABEL_PULL_REQUEST = "burrito-py.io/pull-request"
COMPONENT_RUNNER = "runner"
# Label values are at most 63 characters; layer names may have up to 253.
LABEL_VALUE_MAX = 63
_LABEL_HASH_CHARS = 12


def layer_label(name: str) -> str:
    """The `burrito-py.io/layer` label value of layer `name`: the name itself when it fits a label value,
    else its first characters, `-` and 12 hex characters of its sha256 (63 in all). The full name stays in
    the objects' spec (a run's spec.layer.name) or in env/annotations; readers confirm it there."""
    if len(name) <= LABEL_VALUE_MAX:
        return name
    import hashlib  # here: a runner imports this module before `init`, and hashlib costs ~2 ms to import

    digest = hashlib.sha256(name.encode()).hexdigest()[:_LABEL_HASH_CHARS]
    return f"{name[: LABEL_VALUE_MAX - _LABEL_HASH_CHARS - 1]}-{digest}"


def repository_sync_annotation(branch: str) -> str:
    """The annotation the server sets on a repository to ask for an immediate fetch of `branch`.

    Annotation names allow `[-._a-zA-Z0-9]` after the prefix; branch slashes become `.`.
    """
    return REPOSITORY_SYNC_PREFIX + branch.replace("/", ".")

# On a TerraformRun, set by the layer controller on a plan of a layer with dependencies: the digest of the
# upstream outputs it was given (stored in the datastore under the run, read by the runner; §5.11).
RUN_INPUTS_DIGEST = "burrito-py.io/inputs-digest"

# On a TerraformRun, set by the layer controller (issue 25): on an apply, the digest of what its plan would change
# (the controllers' review, burrito_py/plans/changes.py), so a later plan making the same changes is not applied
# again after that apply failed for good; on a plan, that `sync-now` asked for it (an explicit request lifts that).
RUN_CHANGES_DIGEST = "burrito-py.io/changes-digest"
RUN_SYNC_NOW = "burrito-py.io/sync-now"
# On a TerraformRun made for an operation request: the request's digest (api/operations.py `operation_digest`), so
# a request is run once however often the layer is reconciled before the annotation is removed.
RUN_OPERATION = "burrito-py.io/operation"


def parse_plan_run(value: str | None) -> tuple[str, int] | None:
    """`<run>/<attempt>` → (run, attempt); None when absent or malformed."""
    if not value or "/" not in value:
        return None
    run, _, attempt = value.rpartition("/")
    if not run or not attempt.isdigit():
        return None
    return run, int(attempt)
