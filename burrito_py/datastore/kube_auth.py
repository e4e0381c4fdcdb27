"""Bearer tokens → Principals through the Kubernetes API: a TokenReview (audiences `burrito-py`), then,
for a token bound to a pod, that pod's TerraformRun and TerraformLayer.

How the datastore learns a runner's layer: a projected service-account token carries the pod it is bound
to (TokenReview `user.extra["authentication.kubernetes.io/pod-name"]` and `pod-uid`). The pod's controller
owner reference names its TerraformRun; the run's `spec.layer` names the layer; the layer's
`spec.repository` names the repository. Labels are not trusted (anyone creating the pod sets them); the
owner reference is checked against the run's uid, the pod against the token's pod uid and service account,
and everything must live in the token's namespace. Then `auth.runner_pod_binding` decides whether that pod
is the run's current runner pod, running as the runner service account (docs/architecture.md §10.2).
"""

from __future__ import annotations

import asyncio
import logging
import os
from collections.abc import Iterable
from dataclasses import replace
from pathlib import Path
from typing import Any

import aiohttp

from burrito_py.api import annotations as ann
from burrito_py.api.sharing import shared_with
from burrito_py.datastore.auth import (
    AuthUnavailable,
    Principal,
    RunnerScope,
    Unauthenticated,
    plan_readable,
    runner_pod_binding,
)
from burrito_py.datastore.kubeapi import imported, warm_up
from burrito_py.kube.subject import frozen_extra

log = logging.getLogger(__name__)
POD_NAME_EXTRA = "authentication.kubernetes.io/pod-name"
POD_UID_EXTRA = "authentication.kubernetes.io/pod-uid"
SERVICE_ACCOUNT_PREFIX = "system:serviceaccount:"
RUNNER_SERVICE_ACCOUNT = "burrito-py-runner"  # the controllers' default runner_service_account
PULL_REQUEST_SERVICE_ACCOUNT = "burrito-py-runner-pr"  # their default runner_pull_request_service_account


class KubeAuthenticator:
    """Needs `create tokenreviews` and `get` on pods, terraformruns and terraformlayers.
    `runner_service_account` is the controllers' setting of that name: only its pod-bound tokens can be runners."""

    def __init__(
        self,
        audiences: Iterable[str],
        admin_users: Iterable[str] = (),
        admin_groups: Iterable[str] = (),
        kubeconfig: Path | None = None,
        runner_service_account: str = RUNNER_SERVICE_ACCOUNT,
        pull_request_service_account: str = PULL_REQUEST_SERVICE_ACCOUNT,
        allow_cross_namespace_repositories: bool = False,
    ) -> None:
        self.runner_service_account = runner_service_account
        self.allow_cross_namespace_repositories = allow_cross_namespace_repositories
        self.pull_request_service_account = pull_request_service_account
        self.audiences = list(audiences)
        self.admin_users = frozenset(admin_users)
        self.admin_groups = frozenset(admin_groups)
        self._kubeconfig = kubeconfig
        self._configuration: Any = None
        self._lock = asyncio.Lock()
        # Not at the first review (half a second of CPU: the event loop would wait for it with every request in
        # flight) nor before the datastore listens: in a thread of its own, from now on (kubeapi.warm_up).
        warm_up()

    async def _client_configuration(self) -> Any:
        await imported()
        from kubernetes_asyncio import client, config

        async with self._lock:
            if self._configuration is None:
                configuration = client.Configuration()
                path = self._kubeconfig or _env_kubeconfig()
                if path is not None:
                    await config.load_kube_config(
                        config_file=str(path), client_configuration=configuration, persist_config=False
                    )
                else:
                    config.load_incluster_config(client_configuration=configuration)  # type: ignore[no-untyped-call]
                self._configuration = configuration
            return self._configuration

    async def authenticate(self, token: str) -> Principal:
        try:
            configuration = await self._client_configuration()
        except Exception as exc:  # a broken kubeconfig or missing in-cluster files: say which, not a 500
            raise AuthUnavailable(f"cannot build a Kubernetes client to review tokens: {exc}") from None
        from kubernetes_asyncio import client
        from kubernetes_asyncio.client.exceptions import ApiException

        try:
            async with client.ApiClient(configuration) as api:
                review = await client.AuthenticationV1Api(api).create_token_review(
                    client.V1TokenReview(spec=client.V1TokenReviewSpec(token=token, audiences=self.audiences))
                )
                status = review.status
                if status is None or not status.authenticated or status.user is None:
                    # The API's reason (expired, wrong audience, …) never contains the token.
                    reason = (status.error if status is not None else None) or "not authenticated"
                    raise Unauthenticated(f"the bearer token was rejected by the Kubernetes API: {reason}")
                user = status.user
                username = str(user.username or "")
                groups = set(user.groups or ())
                extra: dict[str, list[str]] = user.extra or {}
                who = Principal(username, groups=tuple(sorted(groups)), uid=str(user.uid or ""),
                                extra=frozen_extra(extra))
                if username in self.admin_users or groups & self.admin_groups:
                    return replace(who, admin=True)
                pod_name = next(iter(extra.get(POD_NAME_EXTRA) or ()), None)
                pod_uid = next(iter(extra.get(POD_UID_EXTRA) or ()), None)
                if pod_name and username.startswith(SERVICE_ACCOUNT_PREFIX):
                    namespace, _, account = username.removeprefix(SERVICE_ACCOUNT_PREFIX).partition(":")
                    scope = await _runner_scope(
                        api, namespace, account, pod_name, pod_uid, self.runner_service_account,
                        self.pull_request_service_account, self.allow_cross_namespace_repositories,
                    )
                    if isinstance(scope, str):
                        return replace(who, not_runner=scope)
                    return replace(who, runner=scope)
                return who
        except ApiException as exc:
            # Only status and reason: an error body could echo the review, which holds the token.
            raise AuthUnavailable(f"TokenReview failed: HTTP {exc.status} {exc.reason}") from None
        except (TimeoutError, aiohttp.ClientError) as exc:
            raise AuthUnavailable(f"Kubernetes API unreachable for TokenReview: {type(exc).__name__}") from None


def _env_kubeconfig() -> Path | None:
    """$KUBECONFIG (first entry) or ~/.kube/config when present; None means in-cluster."""
    listed = os.environ.get("KUBECONFIG", "").split(os.pathsep)[0]
    for candidate in (listed, str(Path.home() / ".kube" / "config")):
        if candidate and Path(candidate).exists():
            return Path(candidate)
    return None


async def _runner_scope(
    api: Any, namespace: str, account: str, pod_name: str, pod_uid: str | None, runner_account: str,
    pull_request_account: str = PULL_REQUEST_SERVICE_ACCOUNT, cross_namespace_repositories: bool = False,
) -> RunnerScope | str:
    """The scope of the runner pod the token is bound to, else why that pod has no runner rights.
    Raises AuthUnavailable while the run controller has created the pod but not yet recorded it."""
    from kubernetes_asyncio import client

    where = f"pod {namespace}/{pod_name}"
    # Any account may be a run's (an opened one: runner_pod_binding): the pod says. These reads are once per token
    # (token_cache.py), and a caller's reviews are throttled (review_throttle.py).
    pod = await _get(client.CoreV1Api(api).read_namespaced_pod(pod_name, namespace))
    if pod is None:
        return f"{where} does not exist"
    pod_dict: dict[str, Any] = api.sanitize_for_serialization(pod)
    meta = pod_dict.get("metadata") or {}
    owner = next(
        (
            ref
            for ref in meta.get("ownerReferences") or ()
            if ref.get("controller") and ref.get("kind") == "TerraformRun" and ref.get("apiVersion") == ann.API_VERSION
        ),
        None,
    )
    if owner is None:
        return f"{where} is not controlled by a TerraformRun"
    custom = client.CustomObjectsApi(api)
    run = await _get(
        custom.get_namespaced_custom_object(ann.GROUP, ann.VERSION, namespace, "terraformruns", owner["name"])
    )
    if run is None or run["metadata"].get("uid") != owner.get("uid"):
        return f"the TerraformRun {namespace}/{owner['name']} that {where} names no longer exists"
    binding = runner_pod_binding(account, pod_uid, pod_dict, run, runner_account, pull_request_account)
    if binding.pending:
        raise AuthUnavailable(f"{binding.reason}; retry shortly")
    if not binding.ok:
        log.warning("token bound to %s has no runner rights: %s", where, binding.reason)
        return binding.reason
    layer_ref = (run.get("spec") or {}).get("layer") or {}
    if (layer_ref.get("namespace") or namespace) != namespace or not layer_ref.get("name"):
        return f"run {owner['name']} names a layer outside namespace {namespace}"
    layer = await _get(
        custom.get_namespaced_custom_object(ann.GROUP, ann.VERSION, namespace, "terraformlayers", layer_ref["name"])
    )
    if layer is None:
        return f"the layer {namespace}/{layer_ref['name']} of run {owner['name']} does not exist"
    repository = (layer.get("spec") or {}).get("repository") or {}
    repository_namespace = str(repository.get("namespace") or namespace)
    sources_refused = ""
    if repository_namespace != namespace and not cross_namespace_repositories:
        # The layer is tenant-edited (it may have been repointed while this pod runs): another namespace's sources
        # only where the operator allows layers to use other namespaces' repositories, as the controllers do.
        sources_refused = (f"its layer {namespace}/{layer_ref['name']} names repository {repository_namespace}/"
                           f"{repository.get('name')} of another namespace, and repositories of other namespaces are "
                           "disabled (BURRITO_PY_DATASTORE_AUTH_ALLOW_CROSS_NAMESPACE_REPOSITORIES)")
        log.warning("token bound to %s reads no sources: %s", where, sources_refused)
    elif repository_namespace != namespace:
        # And only a repository its owners share with this namespace (`spec.allowedNamespaces`), read now: the
        # controllers' own check does not cover a layer repointed while this pod runs.
        shared = await _get(custom.get_namespaced_custom_object(
            ann.GROUP, ann.VERSION, repository_namespace, "terraformrepositories", str(repository.get("name") or "")))
        if shared is None or not shared_with(shared, namespace):
            sources_refused = (f"its layer {namespace}/{layer_ref['name']} names repository {repository_namespace}/"
                               f"{repository.get('name')} of another namespace, which is not shared with namespace "
                               f"{namespace} (its spec.allowedNamespaces)")
            log.warning("token bound to %s reads no sources: %s", where, sources_refused)
    run_spec = run.get("spec") or {}
    reads: tuple[str, ...] = ()
    plan_run = ((run_spec.get("artifact") or {}).get("run")) if run_spec.get("action") == "apply" else None
    if plan_run and plan_run != owner["name"]:
        planned = await _get(
            custom.get_namespaced_custom_object(ann.GROUP, ann.VERSION, namespace, "terraformruns", str(plan_run))
        )
        if plan_readable(planned, str(layer_ref["name"]), run_spec.get("pullRequest")):
            reads = (str(plan_run),)
        else:
            log.warning("run %s/%s names plan run %s, which is not a plan of its layer (or is a pull request's): its "
                        "runner may not read it", namespace, owner["name"], plan_run)
    return RunnerScope(
        namespace=namespace,
        layer=str(layer_ref["name"]),
        run=str(owner["name"]),
        repository_namespace=repository_namespace,
        repository=str(repository.get("name") or ""),
        sources_refused=sources_refused,
        attempt=binding.attempt,
        reads=reads,
        # A pull request's apply before merge is the layer's runner (its state included); its plans are not.
        pull_request=str(run_spec["pullRequest"]) if run_spec.get("pullRequest") and run_spec.get("action") != "apply"
        else None,
        pod=pod_name,
        pod_uid=str(meta.get("uid") or ""),
        force_unlock=str((run_spec.get("operation") or {}).get("lockId") or "")
        if run_spec.get("action") == "force-unlock" and not run_spec.get("pullRequest") else "",
        action=str(run_spec.get("action") or ""),
        ended=(run.get("status") or {}).get("state") in ("Succeeded", "Failed"),
    )


async def _get(call: Any) -> Any:
    """The object, or None when it does not exist (other API errors propagate)."""
    from kubernetes_asyncio.client.exceptions import ApiException

    try:
        return await call
    except ApiException as exc:
        if exc.status == 404:
            return None
        raise
