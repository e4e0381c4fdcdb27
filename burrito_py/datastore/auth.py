"""Who may do what in the datastore (docs/architecture.md §10.2), as data and one pure decision.

A bearer token becomes a `Principal` (see `kube_auth.py`: a Kubernetes TokenReview, then the runner pod the
token is bound to). Admins (the configured controller and server identities) may read and write everything.
A runner may read its own layer's plans and logs and its layer's repository's sources, and may write only
the artifacts of its own run's attempt its pod is recorded for (`RunnerScope.attempt`), each object once (the
datastore refuses other bytes under a key already written: `app.py`): a runner never needs to write anything
else, and tenant code in a runner then can neither overwrite a plan the controllers recorded nor write as
another attempt (a "latest attempt" a reader would pick, or unbounded storage).

A token has runner rights only when it is bound to the very pod the run controller created for the run's
current attempt (`runner_pod_binding`): a token of the runner ServiceAccount, a pod running as that account,
a pod whose name (and uid, when the run records it) the run's status records as its latest attempt.
"""

from __future__ import annotations

import base64
import json
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Literal, Protocol

from burrito_py.api.operation_rules import STATE_ACTIONS as STATE_CHANGING_OPERATIONS
from burrito_py.api.run import pod_name
from burrito_py.kube.subject import Extra

# "review": the controllers' verdict on a plan (policy and drift), stored beside it. Only the controllers (admin
# users) write it: a runner executes tenant code and must not be able to forge the verdict on its own plan.
# "inputs": the upstream outputs a plan run is given (dependencies); only the controllers write them too.
# "delete": throwing away everything one run stored (a closed pull request's plan runs); only the controllers,
# never a runner, not even the run's own: a compromised runner must not erase the record of what it did.
# "read-inputs": reading a run's inputs record (variables, Secret values among them): only that run's runner.
# "state-read", "state-write", "state-lock": the layer's Terraform state (docs/architecture.md §10.6): only the layer's
# own current runner pod (never a pull request's; a write only for STATE_WRITERS; nothing once its run ended) and
# admins.
Action = Literal["read", "write", "review", "inputs", "read-inputs", "delete", "state-read", "state-write",
                 "state-lock"]
STATE_ACTIONS = ("state-read", "state-write", "state-lock")
# The runs whose runner writes its layer's state: apply and the day-2 operations that change it (§5.12). A plan only
# reads it and takes its lock (`terraform plan` locks unless -lock=false); a force-unlock run only releases a lock.
STATE_WRITERS = ("apply", *STATE_CHANGING_OPERATIONS)


class Unauthenticated(Exception):
    """401: no token, or a token the Kubernetes API does not accept. Messages never contain the token."""


class AuthUnavailable(Exception):
    """503: the token could not be checked (Kubernetes API unreachable or refusing the review)."""


@dataclass(frozen=True, slots=True)
class RunnerScope:
    """What a runner pod may touch, read from its TerraformRun and TerraformLayer."""

    namespace: str
    layer: str
    run: str
    repository_namespace: str
    repository: str
    # The attempt the run's status records for the token's pod: the only attempt it may write.
    attempt: int
    # Runs of the layer whose artifacts it may read besides its own: an apply's plan run (`spec.artifact.run`),
    # when that is a plan run of the layer and not a pull request's. Nothing else: a pull request's plan reads
    # none of the layer's plans, and a layer's run none of a pull request's (issue 24, P2).
    reads: tuple[str, ...] = ()
    pull_request: str | None = None  # the run's spec.pullRequest
    # The pod the token is bound to (from the TokenReview, checked against the run's status): what a state lock
    # records as its holder, never what the runner says.
    pod: str = ""
    pod_uid: str = ""
    # A force-unlock run's lock ID (its `spec.operation.lockId`, docs/architecture.md §5.12): the one lock its
    # runner may release without holding it, as Terraform's `force-unlock` asks (an UNLOCK without a body).
    force_unlock: str = ""
    # Why it may read no sources at all (its layer names another namespace's repository, which the operator did not
    # allow: kube_auth.py), else "".
    sources_refused: str = ""
    # The run's `spec.action` (what it may do with its layer's state: STATE_WRITERS) and whether it has ended
    # (`status.state` Succeeded or Failed: its pod's token then has no right to the state at all).
    action: str = ""
    ended: bool = False


@dataclass(frozen=True, slots=True)
class Principal:
    username: str
    admin: bool = False
    runner: RunnerScope | None = None
    # Why a pod-bound token got no runner rights (shown in its 403s), when it is one.
    not_runner: str | None = None
    groups: tuple[str, ...] = ()  # from the TokenReview (plan policy overrides name users or groups)
    # The rest of the TokenReview's user: the server's SubjectAccessReviews ask about the whole identity.
    uid: str = ""
    extra: Extra = ()

    def describe(self) -> str:
        if self.runner is not None:
            scope = self.runner
            where = f"{scope.namespace}/{scope.layer} run {scope.run} attempt {scope.attempt}"
            return f"{self.username} (runner of {where})"
        return self.username


@dataclass(frozen=True, slots=True)
class LayerArtifacts:
    """Plans and logs of one run of a layer; `attempt` when they are one attempt's."""

    namespace: str
    layer: str
    run: str
    attempt: int | None = None

    def describe(self) -> str:
        where = f"artifacts of {self.namespace}/{self.layer} run {self.run}"
        return where if self.attempt is None else f"{where} attempt {self.attempt}"


@dataclass(frozen=True, slots=True)
class Sources:
    """Source archives of one repository."""

    namespace: str
    repository: str

    def describe(self) -> str:
        return f"sources of repository {self.namespace}/{self.repository}"


@dataclass(frozen=True, slots=True)
class LayerState:
    """The Terraform state of one layer (docs/architecture.md §10.6)."""

    namespace: str
    layer: str

    def describe(self) -> str:
        return f"the state of layer {self.namespace}/{self.layer}"


Target = LayerArtifacts | Sources | LayerState


class Authenticator(Protocol):
    async def authenticate(self, token: str) -> Principal:
        """The caller behind `token`; raises Unauthenticated or AuthUnavailable."""
        ...


AUTH_DISABLED = Principal("anonymous (datastore auth disabled)", admin=True)
MISSING_CREDENTIALS = "missing credentials: send 'Authorization: Bearer <service-account token>'"
# The Kubernetes API server's service proxy does not forward `Authorization` (its authentication filter deletes
# it), so a client going through it (`burrito-py plan download` with only a kubeconfig) sends its token here.
def proxied_token(header: str | None) -> str | None:
    """The bearer token of an `X-Burrito-Py-Authorization: Bearer <token>` header, else None."""
    scheme, _, token = (header or "").partition(" ")
    return token.strip() or None if scheme.lower() == "bearer" else None


class AuthError(Exception):
    """The answer instead of the resource: 401, 403 or 503, with a message safe to show the caller."""

    def __init__(self, status: int, message: str, retry_after: int | None = None) -> None:
        super().__init__(message)
        self.status, self.retry_after = status, retry_after


async def principal_of(authenticator: Authenticator | None, token: str | None) -> Principal:
    """Who sends `token` (AUTH_DISABLED without an authenticator); AuthError 401 or 503 otherwise.
    The datastore and the server's REST API both answer this way."""
    if authenticator is None:
        return AUTH_DISABLED
    if not token:
        raise AuthError(401, MISSING_CREDENTIALS)
    try:
        return await authenticator.authenticate(token)
    except Unauthenticated as exc:
        raise AuthError(401, str(exc)) from None
    except AuthUnavailable as exc:
        raise AuthError(503, f"cannot check the token now: {exc}") from None


def authorize(principal: Principal, action: Action, target: Target) -> str | None:
    """None when allowed, else why not (safe to show the caller)."""
    if principal.admin:
        return None
    if action == "review":
        return f"{principal.describe()} may not write plan reviews: only the controllers judge plans"
    if action == "inputs":
        return f"{principal.describe()} may not write a run's inputs: only the controllers pass upstream outputs"
    if action == "delete":
        return f"{principal.describe()} may not delete a run's artifacts: only the controllers throw runs away"
    scope = principal.runner
    if scope is None:
        if principal.not_runner:
            return f"{principal.describe()} may not use the datastore: {principal.not_runner}"
        return f"{principal.describe()} is neither a configured datastore user nor a runner pod"
    if isinstance(target, LayerState) or action in STATE_ACTIONS:
        return _authorize_state(principal.describe(), scope, action, target)
    if isinstance(target, LayerArtifacts):
        if (target.namespace, target.layer) != (scope.namespace, scope.layer):
            return f"{principal.describe()} may only use its own layer's artifacts, not {target.describe()}"
        if action in ("write", "read-inputs") and target.run != scope.run:
            what = "write its own run's artifacts" if action == "write" else "read its own run's inputs"
            return f"{principal.describe()} may only {what}, not {target.describe()}"
        if action == "read" and target.run != scope.run and target.run not in scope.reads:
            also = f" and its plan run {', '.join(scope.reads)}'s" if scope.reads else ""
            return f"{principal.describe()} may only read its own run's artifacts{also}, not {target.describe()}"
        if action == "write" and target.attempt != scope.attempt:
            return (f"{principal.describe()} may only write the artifacts of attempt {scope.attempt}, the attempt its "
                    f"pod is recorded for, not {target.describe()}")
        return None
    if action == "write":
        return f"{principal.describe()} may not write {target.describe()}"
    if scope.sources_refused:
        return f"{principal.describe()} may not read {target.describe()}: {scope.sources_refused}"
    if (target.namespace, target.repository) != (scope.repository_namespace, scope.repository):
        return (
            f"{principal.describe()} may only read the sources of repository "
            f"{scope.repository_namespace}/{scope.repository}, not {target.describe()}"
        )
    return None


def _authorize_state(who: str, scope: RunnerScope, action: Action, target: Target) -> str | None:
    """A runner's right to a layer's state: its own layer's only, and never a pull request's runner (its code is
    not the branch's, and the state holds the layer's secrets: it reads none of the layer's artifacts either); a
    write only by the runner of a run that writes state (STATE_WRITERS); nothing once its run has ended (its pod's
    token stays valid for its pod's lifetime)."""
    if not isinstance(target, LayerState) or action not in STATE_ACTIONS:
        return f"{who} may not {action} {target.describe()}"
    if (target.namespace, target.layer) != (scope.namespace, scope.layer):
        return f"{who} may only use its own layer's state, not {target.describe()}"
    if scope.pull_request is not None:
        return (f"{who} is the runner of pull request {scope.pull_request}: pull requests' runs may not use "
                f"{target.describe()}")
    if scope.ended:
        return f"{who} is the runner of run {scope.run}, which has ended: it may no longer use {target.describe()}"
    if action == "state-write" and scope.action not in STATE_WRITERS:
        return (f"{who} is the runner of {scope.action or 'an unknown'} run {scope.run}, which never writes a state "
                f"(only {', '.join(STATE_WRITERS)} runs do): it may not write {target.describe()}")
    return None


@dataclass(frozen=True, slots=True)
class Binding:
    """The verdict on a pod-bound token: `ok` (with the attempt the pod is recorded for), else why not;
    `pending` when the run controller has created the pod of the run's next attempt but not yet recorded it
    (retry shortly: 503, never cached)."""

    ok: bool
    reason: str = ""
    pending: bool = False
    attempt: int = 0


def _latest_attempt(status: Mapping[str, Any]) -> tuple[int, str | None, str | None]:
    """(number, pod name, pod uid) of the run's latest attempt; (0, runnerPod, None) without attempts."""
    attempts = [a for a in status.get("attempts") or () if isinstance(a, Mapping)]
    if not attempts:
        return 0, status.get("runnerPod"), None
    last = attempts[-1]
    return int(last.get("number") or len(attempts)), last.get("podName"), last.get("podUid")


def runner_pod_binding(
    token_account: str,
    token_pod_uid: str | None,
    pod: Mapping[str, Any],
    run: Mapping[str, Any],
    runner_service_account: str,
    pull_request_service_account: str = "burrito-py-runner-pr",
) -> Binding:
    """Is the pod a token is bound to the run's current runner pod? `run` is the TerraformRun its controller
    owner reference names (uid already checked). Pure: the caller reads the pod and the run. A pull request's plan
    runs as `pull_request_service_account` (issue 24, P2); any other run as `runner_service_account` or as the
    account its layer names, which the run controller ran it as only once that account's writers opened it to
    runners (`api.burrito-py.io/runner-service-account`, api/runner_secrets.py): the pod it recorded for the
    attempt, whose account cannot change, says which."""
    meta, spec = pod.get("metadata") or {}, pod.get("spec") or {}
    where = f"pod {meta.get('namespace')}/{meta.get('name')}"
    run_spec = run.get("spec") or {}
    # A pull request's plan runs as the pull requests' account; its apply before merge as the layer's runner
    # (the run controller admitted it: pullrequests/apply.py).
    pull_request = bool(run_spec.get("pullRequest")) and run_spec.get("action") != "apply"
    if pull_request and token_account != pull_request_service_account:
        return Binding(False, f"the token's service account {token_account!r} is not a pull request's run, whose "
                              f"runner account is {pull_request_service_account!r}")
    if not pull_request and token_account == pull_request_service_account != runner_service_account:
        return Binding(False, f"the token's service account {token_account!r} is the pull requests' runner account: "
                              "it runs no layer's run")
    if (spec.get("serviceAccountName") or "default") != token_account:
        return Binding(False, f"{where} does not run as service account {token_account!r}")
    if not token_pod_uid or meta.get("uid") != token_pod_uid:
        return Binding(False, f"{where} is not the pod (uid) the token is bound to")
    run_meta = run.get("metadata") or {}
    run_name = str(run_meta.get("name"))
    status = run.get("status") or {}
    number, recorded_name, recorded_uid = _latest_attempt(status)
    if recorded_name == meta.get("name") and (not recorded_uid or recorded_uid == meta.get("uid")):
        return Binding(True, attempt=number)
    if meta.get("name") == pod_name(run_name, number + 1) and status.get("state") not in (
        "Succeeded",
        "Failed",
    ):
        return Binding(False, f"run {run_name} does not record {where} yet", pending=True)
    current = f"its current runner pod is {recorded_name}" if recorded_name else "it has no runner pod yet"
    if recorded_name == meta.get("name"):
        current = f"its current runner pod {recorded_name} has uid {recorded_uid}, not {meta.get('uid')}"
    return Binding(False, f"{where} is not the current runner pod of run {run_name} ({current})")


def plan_readable(plan_run: Mapping[str, Any] | None, layer: str, pull_request: str | None = None) -> bool:
    """Whether an apply run's runner may read the plan run its `spec.artifact` names: a plan run of its own layer
    that is not a pull request's (a pull request's plan is never a layer apply's artifact, §11.3); for a pull
    request's apply before merge (`pull_request`: its spec.pullRequest), that same pull request's plan only."""
    spec = (plan_run or {}).get("spec") or {}
    return (plan_run is not None and spec.get("action") == "plan"
            and (spec.get("pullRequest") or None) == (pull_request or None)
            and (spec.get("layer") or {}).get("name") == layer)


def unverified_expiry(token: str) -> float | None:
    """The `exp` claim of a JWT, read WITHOUT checking the signature: used only to cache a reviewed token
    no longer than it lives, never to accept one."""
    parts = token.split(".")
    if len(parts) != 3:
        return None
    try:
        claims = json.loads(base64.urlsafe_b64decode(parts[1] + "=" * (-len(parts[1]) % 4)))
        exp = claims.get("exp") if isinstance(claims, dict) else None
    except (ValueError, UnicodeDecodeError):
        return None
    return float(exp) if isinstance(exp, int | float) and not isinstance(exp, bool) else None
