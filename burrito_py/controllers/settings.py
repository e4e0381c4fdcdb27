"""Controller configuration: flags of `burrito-py controllers start`, or `BURRITO_PY_*` variables.

Durations take the same forms in both: seconds (`20`), units (`20s`, `5m`, `1h30m`) or ISO 8601 (`PT20S`);
see `burrito_py.durations`. `settings_problem` turns a validation error into one line naming each variable."""

from __future__ import annotations

import os
import socket
from datetime import timedelta
from pathlib import Path
from typing import Any, Self

from pydantic import Field, PrivateAttr, ValidationError, field_validator, model_validator
from pydantic_settings import BaseSettings, SettingsConfigDict

from burrito_py.api.common import SyncWindow
from burrito_py.durations import Duration
from burrito_py.kube.pod_paths import pod_path_setting
from burrito_py.kube.shards import Scope, Shard, pattern_problem, scope_of, shard_problem
from burrito_py.outbound import HostEntry, NetworkEntry, OutboundPolicy
from burrito_py.plans.limits import PLAN_JSON_LIMIT
from burrito_py.policy.sandbox import Limits

ENV_PREFIX = "BURRITO_PY_"


def default_identity() -> str:
    """The pod's name (the chart passes POD_NAME from the downward API), else the host name."""
    return os.environ.get("POD_NAME") or socket.gethostname()


class ControllerSettings(BaseSettings):
    model_config = SettingsConfigDict(env_prefix=ENV_PREFIX, extra="ignore")

    @field_validator("git_cache_dir", "datastore_token_path", "mirror_ca_file", mode="after")
    @classmethod
    def _inside_the_pod(cls, value: Path | None) -> Path | None:
        # Under the local kubelet a pod's absolute paths live below its private root (identity elsewhere).
        return pod_path_setting(value)

    namespaces: list[str] = Field(
        default_factory=list,
        description="Watched namespaces: names or kopf patterns ('team-a-*,!*-sandbox'; a namespace matching any "
        "entry is watched); empty = all (with a shard: that shard's namespaces).",
    )
    # Sharding by namespace sets (kube/shards.py): every shard process gets the whole list and its name.
    shards: list[Shard] = Field(
        default_factory=list,
        description="Every shard as {name, namespaces}; a namespace belongs to the first listed shard whose "
        "namespaces match. Empty: not sharded.",
    )
    shard: str = Field("", description="This process's shard, one of `shards` by name; empty: not sharded.")
    datastore_url: str = "http://burrito-py-datastore:8080"
    git_cache_dir: Path = Path("/var/cache/burrito-py/git")
    drift_detection_period: Duration = Field(
        timedelta(minutes=20), description="Age after which a layer's last plan is stale and it is planned again."
    )
    repository_poll_interval: Duration = Field(
        timedelta(minutes=5), description="Time between two fetches of a repository's branches."
    )
    # Full re-evaluation of every object, a safety net for missed wake-ups and for deletions a watch's re-list never
    # told (controllers/vanished.py): a GET of each unfinished run, active runner pod and layer being deleted (with
    # the layers depending on it), nothing else.
    resync_interval: Duration = Field(
        timedelta(minutes=10), description="Time between two full re-evaluations of every object (the only API calls: "
        "whether each unfinished run, active runner pod and layer being deleted, with its dependents, still exists)."
    )
    failure_grace_period: Duration = Field(
        timedelta(seconds=15), description="Base of the exponential backoff between retries of a failed run."
    )
    failure_grace_period_cap: Duration = Field(timedelta(hours=1), description="Longest backoff between retries.")
    max_retries: int = Field(3, ge=0, description="Retries of a failed run when the layer sets none.")
    runs_to_keep: int = Field(5, ge=1, description="Runs kept per layer when the layer sets no history policy.")
    default_sync_windows: list[SyncWindow] = Field(
        default_factory=list,
        description="Sync windows applied to every layer, in addition to its repository's spec.syncWindows "
        "(same fields: kind, schedule, duration, actions, layers).",
    )
    public_url: str = Field(
        "", description="The server's URL as people reach it: notifications link to <publicUrl>/api/layers/<ns>/<name> "
        "(a notifier's linkBase overrides it); empty: no link."
    )
    max_plan_json_bytes: int = Field(
        PLAN_JSON_LIMIT, ge=1, description="Largest plan JSON the controllers read (the review, pull request "
        "comments): a larger one is never parsed, it fails the review closed. The chart sets it from "
        "datastore.config.maxPlanJsonBytes.",
    )
    max_source_bytes: int = Field(
        100 * 1024 * 1024, ge=1, description="Largest source archive the controllers make of a revision: git is "
        "stopped past it (the datastore would refuse it) and the branch reads SourceNotStored. The chart sets it from "
        "datastore.config.maxBodyBytes.",
    )
    runner_image: str = "ghcr.io/burrito-py/burrito-py:0.1.0"
    runner_service_account: str = Field(
        "burrito-py-runner", description="ServiceAccount of runner pods, in each namespace with layers."
    )
    runner_pull_request_service_account: str = Field(
        "burrito-py-runner-pr", description="ServiceAccount of pull requests' plan runner pods, in each namespace "
        "with layers (never the layer's runner account: a pull request's code gets none of its identity)."
    )
    max_concurrent_runner_pods: int = Field(
        0,
        ge=0,
        description="Runner pods not yet finished, across every repository, above which a run waits "
        "(MaxConcurrentRunnerPods); 0: no limit. A repository's spec.maxConcurrentRunnerPods applies too.",
    )
    allow_cross_namespace_dependencies: bool = Field(
        False, description="Let a layer's spec.dependsOn name a layer of another namespace (and read its outputs)."
    )
    admission_policy: bool = Field(
        True, description="The chart's admission policy (admissionPolicy.enabled) lets only the server write a layer's "
        "override-policy annotation. Off, who wrote one cannot be told, so none is honoured: a mandatory denial "
        "stands (OverrideRefused)."
    )
    runner_command: list[str] = Field(default_factory=lambda: ["burrito-py", "runner", "start"])
    runner_node_selector: dict[str, str] = Field(
        default_factory=dict,
        description="nodeSelector of every runner pod: where tenant code may run. A layer's or repository's "
        "overrideRunnerSpec.nodeSelector may add labels, never change these.",
    )
    runner_tolerations: list[dict[str, Any]] = Field(
        default_factory=list,
        description="Tolerations every runner pod gets (e.g. the taint of a dedicated runner node pool), before "
        "those of an overrideRunnerSpec.",
    )
    runner_affinity: dict[str, Any] = Field(
        default_factory=dict,
        description="Affinity of every runner pod; when set, an overrideRunnerSpec.affinity is ignored.",
    )
    runner_termination_grace_period_seconds: int = Field(
        120,
        ge=1,
        description="terminationGracePeriodSeconds of runner pods: how long a stopped runner has to interrupt "
        "terraform and release its state lock before it is killed.",
    )
    runner_start_timeout: Duration = Field(
        timedelta(minutes=10),
        description="How long a runner pod may stay unstarted (an image it cannot pull, a Secret it needs missing, "
        "no node for it) before it is deleted and its attempt fails, to be retried as any failed attempt; the "
        "run's RunnerPodStarted condition says why meanwhile. 0: no limit.",
    )
    runner_plan_timeout: Duration = Field(
        timedelta(hours=2),
        description="How long a plan's runner pod may be active (its activeDeadlineSeconds, from the kubelet's "
        "start of it) before its kubelet stops it: SIGTERM, then the grace period. Its run fails (TimedOut) and is "
        "not retried: what hung once would hold the layer as long again. 0: no limit.",
    )
    runner_apply_timeout: Duration = Field(
        timedelta(hours=24),
        description="The same for every other action's runner pod (apply, import, state rm/mv, force-unlock, "
        "migrate-state): long, as an apply stopped halfway leaves the infrastructure halfway. 0: no limit.",
    )
    host: str = Field(
        "0.0.0.0",  # noqa: S104 - a pod's endpoints listen on its own address
        description="Address the metrics and health endpoints bind to (the chart passes the pod IP).",
    )
    metrics_port: int = Field(9464, ge=0, description="Prometheus metrics port; 0 disables the endpoint.")
    metrics_auth: bool = Field(
        True, description="Serve /metrics only to a bearer token whose user may get the non-resource URL /metrics "
        "(TokenReview and SubjectAccessReview, as kube-apiserver's own /metrics); off: to anyone who reaches the "
        "port.")
    health_port: int = Field(
        0, ge=0, description="Port of the liveness endpoint GET /healthz (kopf's); 0 disables the endpoint."
    )
    datastore_token_path: Path | None = None
    # The datastore's provider and tool cache (issue 16), passed to runner pods (runner_pod.py).
    provider_mirror_url: str = Field(
        "",
        description="Base URL of the datastore's provider network mirror (https://<datastore>:8443/providers/v1/), "
        "given to runner pods; empty: runners install providers directly.",
    )
    provider_mirror_fail_closed: bool = Field(
        False,
        description="Fail a run whose provider mirror is unavailable, instead of letting terraform install its "
        "providers directly.",
    )
    provider_mirror_registries: list[str] = Field(
        default_factory=lambda: ["registry.terraform.io", "registry.opentofu.org"],
        description="Registries the provider mirror reads through (the datastore's providerCache registries): "
        "providers of other registries are installed directly (never with failClosed). Empty: every provider "
        "through the mirror.",
    )
    tool_mirror_url: str = Field(
        "",
        description="Base URL of the datastore's terraform/tofu binaries (https://<datastore>:8443/tools/v1/), given "
        "to runner pods; empty: tenv installs missing versions.",
    )
    mirror_ca_file: Path | None = Field(
        None,
        description="PEM of the CA that signs the datastore's HTTPS certificate, read once and given to runner pods "
        "with a mirror URL; unset: the system's CAs.",
    )
    # Isolation between tenant namespaces (docs/architecture.md §8): both off by default.
    allow_file_repositories: bool = Field(
        False,
        description="Accept file:// repository URLs. They read the controllers' own filesystem: for local "
        "development only (burrito-py dev turns this on).",
    )
    allow_cross_namespace_repositories: bool = Field(
        False,
        description="Let a layer use a TerraformRepository of another namespace (spec.repository.namespace) that "
        "is shared with the layer's (its spec.allowedNamespaces); its runners then read that repository's sources.",
    )
    # Webhook keys published for the server, which reads no tenant Secret (controllers/repository/webhook_keys.py).
    webhook_keys_secret: str = Field(
        "burrito-py-webhook-keys", min_length=1, max_length=253,
        description="Secret the controllers write each repository's webhook key into, for the server (one per "
        "controllers Deployment: the chart names it per shard).",
    )
    webhook_keys_namespace: str = Field(
        "", description="Namespace of that Secret; empty: the pod's own namespace (else default)."
    )
    webhook_keys_per_namespace: int = Field(
        500, ge=1, description="Repositories of one namespace whose webhook keys are published at most (the Secret "
        "holds 1 MiB for every namespace of the Deployment).",
    )
    # Plan policies' CEL and Rego rules run in worker processes under these limits (policy/sandbox.py, §5.9).
    policy_rule_timeout: Duration = Field(
        timedelta(seconds=2),
        description="Wall-clock limit of one CEL or Rego rule over one plan (a resource-scope CEL rule: over all "
        "the plan's resources); a rule that exceeds it denies, naming the limit, and its worker is replaced.",
    )
    policy_rule_cpu_seconds: int = Field(
        2, ge=1, le=3600, description="CPU seconds one CEL or Rego rule may use (RLIMIT_CPU of its worker process)."
    )
    policy_rule_memory_mib: int = Field(
        256,
        ge=32,
        le=65536,
        description="MiB a policy worker process may allocate beyond its start-up footprint (RLIMIT_DATA); a rule "
        "that needs more denies, naming the limit.",
    )
    policy_plan_budget: Duration = Field(
        timedelta(seconds=10),
        description="Wall-clock limit of all the CEL and Rego rules judging one plan together; rules left when it "
        "is spent are not evaluated and deny, naming it.",
    )
    policy_workers: int = Field(
        2, ge=1, le=64, description="Policy worker processes (started on first use, reused, replaced when killed)."
    )
    policy_workers_per_namespace: int = Field(
        1,
        ge=1,
        le=64,
        description="Policy workers the plans of one namespace may use at once (at most policyWorkers); below "
        "policyWorkers, a namespace whose policies hit every limit leaves the others a free worker.",
    )
    # The outbound address guard (burrito_py/outbound.py, docs/architecture.md §8): both empty by default.
    outbound_allowed_networks: list[NetworkEntry] = Field(
        default_factory=list,
        description="CIDRs (or single addresses) that git fetches, pull request APIs and notifier deliveries may "
        "reach although they are loopback, link-local, private or otherwise not public (e.g. an in-cluster git "
        "server's 10.0.0.0/8). Empty: nothing internal.",
    )
    outbound_allowed_hosts: list[HostEntry] = Field(
        default_factory=list,
        description="Host names (or *.suffix patterns) those calls may reach whatever they resolve to, cluster "
        "names included (e.g. gitea.tools.svc.cluster.local). Empty: none.",
    )
    # The Application Generation Layer: ApplicationDefinitions → user kinds → TerraformLayers.
    agl_enabled: bool = Field(True, description="Run the Application Generation Layer controller.")
    # Leader election (docs/architecture.md, "Leader election"): off here so in-process runs need no Lease;
    # the chart turns it on.
    leader_election: bool = Field(
        False,
        description="Run the controllers only while holding a coordination.k8s.io Lease, so several replicas "
        "have one active leader and standbys that watch and write nothing.",
    )
    leader_election_namespace: str = Field(
        "", description="Namespace of the leader Lease; empty: the pod's own namespace (else default)."
    )
    leader_election_name: str = Field("burrito-py-controllers", description="Name of the leader Lease.")
    leader_election_identity: str = Field(
        default_factory=default_identity, description="This candidate's identity; default: POD_NAME, else hostname."
    )
    lease_duration: Duration = Field(
        timedelta(seconds=15),
        description="How long a standby waits, after it last saw the Lease change, before taking it over.",
    )
    renew_deadline: Duration = Field(
        timedelta(seconds=10),
        description="How long a leader keeps trying to renew before it stops acting; below leaseDuration.",
    )
    retry_period: Duration = Field(
        timedelta(seconds=2),
        description="Time between two renewals by the leader and two looks at the Lease by a standby.",
    )

    @model_validator(mode="after")
    def _policy_limits(self) -> Self:
        if self.policy_workers_per_namespace > self.policy_workers:
            raise ValueError(
                f"{ENV_PREFIX}POLICY_WORKERS_PER_NAMESPACE ({self.policy_workers_per_namespace}) is more than "
                f"{ENV_PREFIX}POLICY_WORKERS ({self.policy_workers})"
            )
        for name in ("policy_rule_timeout", "policy_plan_budget"):
            if getattr(self, name).total_seconds() <= 0:
                raise ValueError(f"{ENV_PREFIX}{name.upper()}: must be more than 0 s")
        return self

    def policy_limits(self) -> Limits:
        """The policy sandbox's limits (policy/sandbox.py)."""
        return Limits(
            rule_seconds=self.policy_rule_timeout.total_seconds(), cpu_seconds=self.policy_rule_cpu_seconds,
            memory_mib=self.policy_rule_memory_mib, plan_seconds=self.policy_plan_budget.total_seconds(),
            workers=self.policy_workers, per_namespace=self.policy_workers_per_namespace,
        )

    @model_validator(mode="after")
    def _election_timing(self) -> Self:
        lease, renew, retry = (d.total_seconds() for d in (self.lease_duration, self.renew_deadline,
                                                           self.retry_period))
        if not 0 < retry < renew < lease:
            raise ValueError(
                f"leader election needs 0 < retry_period ({retry:g}s) < renew_deadline ({renew:g}s) < "
                f"lease_duration ({lease:g}s)"
            )
        return self
    _scope: Scope | None = PrivateAttr(None)
    _mirror_ca_pem: str = PrivateAttr("")
    _outbound: OutboundPolicy = PrivateAttr(default_factory=OutboundPolicy)

    @model_validator(mode="after")
    def _outbound_policy(self) -> Self:
        try:
            self._outbound = OutboundPolicy.of(self.outbound_allowed_networks, self.outbound_allowed_hosts)
        except ValueError as exc:
            raise ValueError(f"{ENV_PREFIX}OUTBOUND_ALLOWED_NETWORKS / {ENV_PREFIX}OUTBOUND_ALLOWED_HOSTS: {exc}") \
                from None
        return self

    def outbound_policy(self) -> OutboundPolicy:
        """What tenants' outbound calls may reach besides public addresses (the two outbound settings)."""
        return self._outbound

    @field_validator("provider_mirror_url", "tool_mirror_url", mode="after")
    @classmethod
    def _mirror_url(cls, value: str) -> str:
        url = value.strip()
        if url and not url.startswith(("https://", "http://")):
            raise ValueError(f"{url!r} is not an https:// (or http://) URL")
        # Runners append routes to the base (`<base>healthz`).
        return url if not url or url.endswith("/") else url + "/"

    @model_validator(mode="after")
    def _mirror_settings(self) -> Self:
        if self.provider_mirror_url and not self.provider_mirror_url.startswith("https://"):
            # Terraform speaks the network mirror protocol over https only.
            raise ValueError(f"{ENV_PREFIX}PROVIDER_MIRROR_URL: {self.provider_mirror_url!r} is not an https:// URL")
        if self.mirror_ca_file is not None:
            # Read once here (a public certificate, not a secret), not for every runner pod.
            try:
                pem = self.mirror_ca_file.read_text(encoding="utf-8").strip()
            except (OSError, UnicodeDecodeError) as exc:
                raise ValueError(f"{ENV_PREFIX}MIRROR_CA_FILE: cannot read {self.mirror_ca_file}: {exc}") from None
            if "-----BEGIN CERTIFICATE-----" not in pem:
                raise ValueError(f"{ENV_PREFIX}MIRROR_CA_FILE: {self.mirror_ca_file} holds no PEM certificate")
            self._mirror_ca_pem = pem
        return self

    def mirror_ca_pem(self) -> str:
        """The content of `mirror_ca_file` as read when the settings were loaded; empty without one."""
        return self._mirror_ca_pem

    @field_validator("namespaces", mode="after")
    @classmethod
    def _patterns(cls, value: list[str]) -> list[str]:
        for pattern in value:
            problem = pattern_problem(pattern)
            if problem:
                raise ValueError(problem)
        return value

    @model_validator(mode="after")
    def _shard_fits(self) -> ControllerSettings:
        problem = shard_problem(self.shard, self.shards)
        if problem:
            raise ValueError(problem)
        if self.shard:
            own = next(s for s in self.shards if s.name == self.shard).namespaces
            if not self.namespaces:
                self.namespaces = list(own)  # a shard watches its own namespace set
            elif self.namespaces != own:
                raise ValueError(
                    f"BURRITO_PY_NAMESPACES: {self.namespaces} is not shard {self.shard!r}'s namespaces {own} "
                    "(leave it empty: a shard watches its own namespaces)"
                )
        return self

    def scope(self) -> Scope:
        """What this process watches and owns (one per settings object: it remembers what it warned about)."""
        if self._scope is None:
            self._scope = scope_of(self.namespaces, self.shard, self.shards)
        return self._scope


def settings_problem(exc: ValidationError) -> str:
    """Each problem as `BURRITO_PY_<FIELD>: reason` (the variable; a flag of the same name sets the same field),
    without pydantic's traceback or URLs."""
    problems = []
    for error in exc.errors():
        loc = error["loc"]
        reason = str(error["msg"]).removeprefix("Value error, ")
        if not loc:  # a rule across fields: its message names the variables
            problems.append(reason if reason.startswith(ENV_PREFIX) else f"settings: {reason}")
            continue
        where = f"{ENV_PREFIX}{str(loc[0]).upper()}" + "".join(
            f"[{part}]" if isinstance(part, int) else f".{part}" for part in loc[1:]
        )
        problems.append(f"{where}: {reason}")
    return "; ".join(problems)
