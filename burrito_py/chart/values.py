"""The values of the Helm chart `charts/burrito-py`, as pydantic models: the one source of the chart's
`values.schema.json` and `values.yaml` (`burrito-py chart generate`).

Every object forbids unknown keys, so a misspelt value fails `helm install` naming the key. Where a value
is a setting of a component (the `config` blocks, the datastore's storage, the runner's grace period), the
field is taken from that component's settings model (default, bounds, description), and the chart passes it
on as the `BURRITO_PY_*` variable of the same name; nothing is restated here.

Kubernetes-typed values (resources, tolerations, affinity, annotations...) are free-form: the API server
validates them.
"""

from __future__ import annotations

import copy
from datetime import timedelta
from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field, WithJsonSchema, field_validator, model_validator
from pydantic.alias_generators import to_camel
from pydantic.fields import FieldInfo

from burrito_py.api.application import APPS_GROUP
from burrito_py.api.common import SyncWindow
from burrito_py.controllers.settings import ControllerSettings
from burrito_py.datastore.app import DatastoreSettings
from burrito_py.datastore.backends import StorageSettings
from burrito_py.kube.shards import SHARD_NAME, Shard, pattern_problem
from burrito_py.outbound import HostEntry, NetworkEntry, OutboundPolicy
from burrito_py.server.settings import ServerSettings

__all__ = [
    "CHART_VERSION",
    "DATASTORE_IMAGE_REPOSITORY",
    "IMAGE_REPOSITORY",
    "RUNNER_IMAGE_REPOSITORY",
    "ChartValues",
]

CHART_VERSION = "0.1.0"
IMAGE_REPOSITORY = "ghcr.io/burrito-py/burrito-py"
RUNNER_IMAGE_REPOSITORY = "ghcr.io/burrito-py/burrito-py-runner"
DATASTORE_IMAGE_REPOSITORY = "ghcr.io/burrito-py/burrito-py-datastore"
K8S_NAME = r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$"

Object = dict[str, Any]


def setting(model: type[BaseModel], name: str) -> Any:
    """The settings field `name` of `model` (default, constraints, description), for a chart value."""
    info: FieldInfo = copy.copy(model.model_fields[name])
    if not info.description:
        raise ValueError(f"{model.__name__}.{name} has no description: add one there, it is shown in the chart")
    info.alias = info.validation_alias = info.serialization_alias = None
    return info


class Values(BaseModel):
    """Base of every values block: camelCase keys, unknown keys rejected."""

    model_config = ConfigDict(
        extra="forbid", alias_generator=to_camel, populate_by_name=True, validate_default=True
    )


# -- shared blocks ----------------------------------------------------------------------------------------
class Image(Values):
    """A container image."""

    repository: str = Field(IMAGE_REPOSITORY, description="Image repository.")
    tag: str = Field("", description="Image tag; empty: the chart's appVersion.")
    pull_policy: Literal["Always", "IfNotPresent", "Never"] = Field(
        "IfNotPresent", description="Image pull policy."
    )


class ServiceAccount(Values):
    """The component's ServiceAccount (created by the chart, named `<release>-<component>`)."""

    annotations: dict[str, str] = Field(
        default_factory=dict, description="Annotations, e.g. eks.amazonaws.com/role-arn for IRSA."
    )


class Workload(Values):
    """Scheduling and sizing of a component's Deployment."""

    replicas: int = Field(1, ge=0, description="Pods; a PodDisruptionBudget (minAvailable 1) is made above 1.")
    resources: Object = Field(
        default_factory=lambda: {"requests": {"cpu": "50m", "memory": "128Mi"}, "limits": {"memory": "512Mi"}},
        description="Container resources (ResourceRequirements).",
    )
    pod_annotations: dict[str, str] = Field(default_factory=dict, description="Extra pod annotations.")
    pod_labels: dict[str, str] = Field(default_factory=dict, description="Extra pod labels.")
    node_selector: dict[str, str] = Field(default_factory=dict, description="Node selector.")
    tolerations: list[Object] = Field(default_factory=list, description="Tolerations.")
    affinity: Object = Field(default_factory=dict, description="Affinity.")
    topology_spread_constraints: list[Object] = Field(
        default_factory=list,
        description="topologySpreadConstraints; the chart fills in labelSelector when it is left out.",
    )
    priority_class_name: str = Field("", description="priorityClassName; empty: none.")
    service_account: ServiceAccount = Field(default_factory=ServiceAccount, description="The ServiceAccount.")


# -- controllers ----------------------------------------------------------------------------------------
class DefaultSyncWindow(SyncWindow):
    """A sync window applied to every layer (the fields of a repository's spec.syncWindows[])."""

    model_config = ConfigDict(**{**SyncWindow.model_config, "extra": "forbid"})


class ControllersConfig(Values):
    """Controller settings, passed as BURRITO_PY_<NAME> (durations: ISO 8601, e.g. PT20M)."""

    drift_detection_period: timedelta = setting(ControllerSettings, "drift_detection_period")
    repository_poll_interval: timedelta = setting(ControllerSettings, "repository_poll_interval")
    resync_interval: timedelta = setting(ControllerSettings, "resync_interval")
    failure_grace_period: timedelta = setting(ControllerSettings, "failure_grace_period")
    failure_grace_period_cap: timedelta = setting(ControllerSettings, "failure_grace_period_cap")
    max_retries: int = setting(ControllerSettings, "max_retries")
    runs_to_keep: int = setting(ControllerSettings, "runs_to_keep")
    max_concurrent_runner_pods: int = setting(ControllerSettings, "max_concurrent_runner_pods")
    runner_start_timeout: timedelta = setting(ControllerSettings, "runner_start_timeout")
    runner_plan_timeout: timedelta = setting(ControllerSettings, "runner_plan_timeout")
    runner_apply_timeout: timedelta = setting(ControllerSettings, "runner_apply_timeout")
    default_sync_windows: list[DefaultSyncWindow] = setting(ControllerSettings, "default_sync_windows")
    agl_enabled: bool = setting(ControllerSettings, "agl_enabled")
    public_url: str = setting(ControllerSettings, "public_url")
    allow_file_repositories: bool = setting(ControllerSettings, "allow_file_repositories")
    allow_cross_namespace_repositories: bool = setting(ControllerSettings, "allow_cross_namespace_repositories")
    allow_cross_namespace_dependencies: bool = setting(ControllerSettings, "allow_cross_namespace_dependencies")
    webhook_keys_per_namespace: int = setting(ControllerSettings, "webhook_keys_per_namespace")
    policy_rule_timeout: timedelta = setting(ControllerSettings, "policy_rule_timeout")
    policy_rule_cpu_seconds: int = setting(ControllerSettings, "policy_rule_cpu_seconds")
    policy_rule_memory_mib: int = setting(ControllerSettings, "policy_rule_memory_mib")
    policy_plan_budget: timedelta = setting(ControllerSettings, "policy_plan_budget")
    policy_workers: int = setting(ControllerSettings, "policy_workers")
    policy_workers_per_namespace: int = setting(ControllerSettings, "policy_workers_per_namespace")
    outbound_allowed_networks: list[NetworkEntry] = setting(ControllerSettings, "outbound_allowed_networks")
    outbound_allowed_hosts: list[HostEntry] = setting(ControllerSettings, "outbound_allowed_hosts")

    @model_validator(mode="after")
    def _outbound_entries(self) -> ControllersConfig:
        OutboundPolicy.of(self.outbound_allowed_networks, self.outbound_allowed_hosts)  # ValueError naming the entry
        return self
    # On in the chart (its replicas need it), off in the settings (in-process runs need no Lease).
    leader_election: bool = Field(
        True, description=str(ControllerSettings.model_fields["leader_election"].description)
        + " Needed above 1 replica."
    )
    lease_duration: timedelta = setting(ControllerSettings, "lease_duration")
    renew_deadline: timedelta = setting(ControllerSettings, "renew_deadline")
    retry_period: timedelta = setting(ControllerSettings, "retry_period")


class AglKind(Values):
    """A kind an ApplicationDefinition serves, which the controllers may then watch and write status of."""

    group: str = Field(APPS_GROUP, description="API group of the kind.")
    plural: str = Field(..., pattern=K8S_NAME, description="Plural resource name of the kind.")


# An API group that may hold AGL kinds: a DNS subdomain with at least one dot (never the core group nor the
# dot-less built-in ones such as `apps` or `batch`); the chart refuses Kubernetes' and burrito-py's own groups.
AGL_GROUP_PATTERN = r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)+$"


class Agl(Values):
    """The Application Generation Layer's user kinds."""

    kinds: list[AglKind] = Field(
        default_factory=list,
        description="Kinds your ApplicationDefinitions serve. The controllers get read and status rights on "
        "exactly these, and update/delete on their CRDs (replacing a kind's CRD when its definition changes, "
        "withdrawing it when the definition goes).",
    )
    groups: list[Annotated[str, Field(pattern=AGL_GROUP_PATTERN, max_length=253)]] = Field(
        default_factory=lambda: [APPS_GROUP],
        description="API groups whose kinds the controllers may serve without being listed in kinds: list, watch "
        "and status patch on every resource of each group, so an ApplicationDefinition added later in one of them "
        "is served and its instances compiled without a redeploy. Give AGL kinds groups of their own: Kubernetes' "
        "groups (*.k8s.io, *.kubernetes.io) and burrito-py's (terraform.burrito-py.io, agl.burrito-py.io) are "
        "refused. A kind in none of these groups and not in kinds is served, but its definition reports "
        "Ready=False naming the missing permission. Replacing or withdrawing the CRD of a kind not in kinds is "
        "refused the same way (its definition says so).",
    )


class ControllerShard(Values):
    """One controllers shard: its name and namespace set (the controllers' `shards` setting, one entry)."""

    name: str = Field(..., pattern=SHARD_NAME, max_length=63, description=Shard.model_fields["name"].description)
    namespaces: str | list[str] = Field(..., description=Shard.model_fields["namespaces"].description)

    @field_validator("namespaces", mode="after")
    @classmethod
    def _usable(cls, value: str | list[str]) -> str | list[str]:
        patterns = [value] if isinstance(value, str) else value
        if not patterns:
            raise ValueError("at least one namespace pattern is needed")
        for pattern in patterns:
            problem = pattern_problem(pattern)  # the controllers' own check
            if problem:
                raise ValueError(problem)
        return value


class Controllers(Workload):
    """The layer, run, repository and AGL controllers (`burrito-py controllers start`)."""

    replicas: int = Field(
        2,
        ge=0,
        description="Pods per Deployment (per shard): one leader acts, the others stand by, watching and writing "
        "nothing, and take over within leaseDuration + retryPeriod of the leader's death (within retryPeriod of "
        "a graceful stop). Above 1, a PodDisruptionBudget (minAvailable 1) is made, and config.leaderElection "
        "must stay on.",
    )
    topology_spread_constraints: list[Object] = Field(
        default_factory=lambda: [
            {"maxSkew": 1, "topologyKey": "kubernetes.io/hostname", "whenUnsatisfiable": "ScheduleAnyway"}
        ],
        description="topologySpreadConstraints (default: the replicas on different nodes when possible, so one "
        "node's loss leaves a standby); the chart fills in labelSelector when it is left out.",
    )
    resources: Object = Field(
        default_factory=lambda: {"requests": {"cpu": "50m", "memory": "192Mi"}, "limits": {"memory": "1Gi"}},
        description="Container resources (ResourceRequirements). The limit holds the controllers and their policy "
        "workers: config.policyWorkers x (about 70 MiB + config.policyRuleMemoryMib) at most; when the container "
        "runs short anyway, the kernel kills a worker first (a denial naming the evaluator), not the controllers.",
    )
    config: ControllersConfig = Field(default_factory=ControllersConfig, description="Controller settings.")
    metrics_port: int = Field(9464, ge=1, le=65535, description="Prometheus metrics port.")
    health_port: int = Field(8082, ge=1, le=65535, description="Liveness/readiness port (GET /healthz).")
    git_cache_size_limit: str = Field("2Gi", description="sizeLimit of the git mirror cache emptyDir.")
    agl: Agl = Field(default_factory=Agl, description="AGL user kinds.")
    shards: list[ControllerShard] = Field(
        default_factory=list,
        description="Sharding by namespace sets: one Deployment <release>-controllers-<name> (and leader Lease) "
        "per shard, watching only its namespaces (kopf patterns over namespace names, e.g. 'team-a-*,!*-sandbox'). "
        "A namespace belongs to the first listed shard whose namespaces match; one no shard matches is not "
        "reconciled. Needs clusterMode: true. Empty: one <release>-controllers Deployment watching everything.",
    )

    @field_validator("shards", mode="after")
    @classmethod
    def _unique_names(cls, value: list[ControllerShard]) -> list[ControllerShard]:
        names = [s.name for s in value]
        twice = sorted({n for n in names if names.count(n) > 1})
        if twice:
            raise ValueError(f"shard name(s) {', '.join(map(repr, twice))} listed more than once")
        return value

    @model_validator(mode="after")
    def _one_actor(self) -> Controllers:
        if self.replicas > 1 and not self.config.leader_election:
            raise ValueError("controllers.replicas above 1 needs controllers.config.leaderElection: true "
                             "(without it every replica would act)")
        return self


# -- datastore ------------------------------------------------------------------------------------------
class DatastoreConfig(Values):
    """Datastore settings, passed as BURRITO_PY_DATASTORE_<NAME>."""

    max_body_bytes: int = setting(DatastoreSettings, "max_body_bytes")
    max_plan_bytes: int = setting(DatastoreSettings, "max_plan_bytes")
    max_plan_json_bytes: int = setting(DatastoreSettings, "max_plan_json_bytes")
    max_plan_text_bytes: int = setting(DatastoreSettings, "max_plan_text_bytes")
    max_log_bytes: int = setting(DatastoreSettings, "max_log_bytes")
    max_outputs_bytes: int = setting(DatastoreSettings, "max_outputs_bytes")
    max_state_bytes: int = setting(DatastoreSettings, "max_state_bytes")
    state_versions_kept: int = setting(DatastoreSettings, "state_versions_kept")
    run_quota_bytes: int = setting(DatastoreSettings, "run_quota_bytes")
    namespace_quota_bytes: int = setting(DatastoreSettings, "namespace_quota_bytes")
    quota_recount_seconds: float = setting(DatastoreSettings, "quota_recount_seconds")
    max_active_requests: int = setting(DatastoreSettings, "max_active_requests")
    max_queued_requests: int = setting(DatastoreSettings, "max_queued_requests")
    queue_timeout_seconds: float = setting(DatastoreSettings, "queue_timeout_seconds")
    header_timeout_seconds: float = setting(DatastoreSettings, "header_timeout_seconds")
    read_timeout_seconds: float = setting(DatastoreSettings, "read_timeout_seconds")
    write_timeout_seconds: float = setting(DatastoreSettings, "write_timeout_seconds")
    auth_cache_ttl_seconds: float = setting(DatastoreSettings, "auth_cache_ttl_seconds")
    auth_negative_cache_ttl_seconds: float = setting(DatastoreSettings, "auth_negative_cache_ttl_seconds")
    read_cache_max_bytes: int = setting(DatastoreSettings, "read_cache_max_bytes")
    read_cache_max_object_bytes: int = setting(DatastoreSettings, "read_cache_max_object_bytes")
    read_cache_ttl_seconds: float = setting(DatastoreSettings, "read_cache_ttl_seconds")
    s3_part_size: int = setting(StorageSettings, "s3_part_size")
    s3_max_connections: int = setting(StorageSettings, "s3_max_connections")
    s3_upload_concurrency: int = setting(StorageSettings, "s3_upload_concurrency")


class FilesystemStorage(Values):
    """Objects on a PersistentVolumeClaim (one datastore replica: the volume is ReadWriteOnce)."""

    size: str = Field("10Gi", description="Requested size of the PersistentVolumeClaim.")
    storage_class: str = Field("", description="storageClassName; empty: the cluster's default class.")
    existing_claim: str = Field("", description="Use this existing PersistentVolumeClaim instead of creating one.")


class SecretKeyRef(Values):
    """Where the S3 credentials are: an existing Secret in the release namespace."""

    name: str = Field("", description="Secret name; empty: no static credentials (IRSA or the node's role).")
    access_key_id_key: str = Field("AWS_ACCESS_KEY_ID", description="Key holding the access key id.")
    secret_access_key_key: str = Field(
        "AWS_SECRET_ACCESS_KEY",
        description="Key holding the secret access key.",
    )


class S3Storage(Values):
    """Objects in an S3 (or S3-compatible) bucket."""

    bucket: str = setting(StorageSettings, "s3_bucket")
    prefix: str = setting(StorageSettings, "s3_prefix")
    endpoint_url: str | None = setting(StorageSettings, "s3_endpoint_url")
    region: str | None = setting(StorageSettings, "s3_region")
    path_style: bool = setting(StorageSettings, "s3_path_style")
    credentials_secret: SecretKeyRef = Field(default_factory=SecretKeyRef, description="Static credentials.")
    role_arn: str = Field(
        "", description="IAM role for IRSA: annotates the datastore ServiceAccount with eks.amazonaws.com/role-arn."
    )


class Storage(Values):
    """Where the datastore keeps plans, logs, outputs and source archives."""

    backend: Literal["filesystem", "s3"] = Field("filesystem", description="filesystem (a PVC) or s3.")
    filesystem: FilesystemStorage = Field(default_factory=FilesystemStorage, description="The filesystem backend.")
    s3: S3Storage = Field(default_factory=S3Storage, description="The s3 backend.")


class Encryption(Values):
    """Encryption at rest with keys from an existing Secret (never created by the chart)."""

    enabled: bool = setting(StorageSettings, "encryption_enabled")
    secret_name: str = setting(StorageSettings, "encryption_secret_name")
    secret_namespace: str | None = setting(StorageSettings, "encryption_secret_namespace")
    active_key_id: str = setting(StorageSettings, "encryption_active_key_id")


class Retention(Values):
    """Deletion of unreferenced artifacts."""

    enabled: bool = setting(StorageSettings, "retention_enabled")
    schedule: str = setting(StorageSettings, "retention_schedule")
    grace_seconds: int = setting(StorageSettings, "retention_grace_seconds")


class DatastoreAuth(Values):
    """Who may call the datastore. The controllers' and server's ServiceAccounts are always admins."""

    audiences: list[str] = setting(DatastoreSettings, "auth_audiences")
    extra_admin_users: list[str] = Field(default_factory=list, description="More admin usernames.")
    admin_groups: list[str] = setting(DatastoreSettings, "auth_admin_groups")


class IssuerRef(Values):
    """The cert-manager issuer of the datastore's HTTPS certificate."""

    name: str = Field(
        "",
        description="Issuer or ClusterIssuer name; empty: the chart bootstraps its own CA (a self-signed Issuer, a CA "
        "Certificate <release>-datastore-ca and a CA Issuer of that name) and issues from it. The issuer must put "
        "ca.crt in the certificate's Secret (CA, Vault and self-signed issuers do; public ACME cannot sign "
        "*.svc.cluster.local names).",
    )
    kind: Literal["Issuer", "ClusterIssuer"] = Field(
        "Issuer", description="Issuer (in the release namespace) or ClusterIssuer."
    )
    group: str = Field("cert-manager.io", description="API group of the issuer.")


class CertManager(Values):
    """The datastore's HTTPS certificate from cert-manager (needs the cert-manager.io CRDs)."""

    enabled: bool = Field(
        False,
        description="Have cert-manager issue and renew the certificate: a Certificate (cert-manager.io/v1) for the "
        "datastore Service's DNS names, whose Secret is <release>-datastore-tls.",
    )
    issuer_ref: IssuerRef = Field(default_factory=IssuerRef, description="The issuer.")


class DatastoreTls(Values):
    """Where the certificate of the datastore's HTTPS listener (port 8443, on when providerCache or toolCache is
    enabled) comes from: existingSecret, else cert-manager, else a CA and certificate the chart generates into
    Secret <release>-datastore-tls (kept across upgrades)."""

    cert_manager: CertManager = Field(default_factory=CertManager, description="cert-manager.")
    existing_secret: str = Field(
        "",
        description="A kubernetes.io/tls Secret in the release namespace with tls.crt, tls.key and ca.crt (the CA "
        "the runners trust), valid for <release>-datastore.<namespace>.svc.cluster.local; wins over certManager.",
    )


class DatastoreImage(Image):
    """The datastore image (datastore/Dockerfile: the wheel and gpgv, no git, no ssh)."""

    repository: str = Field(DATASTORE_IMAGE_REPOSITORY, description="Image repository.")


class Datastore(Workload):
    """The datastore of plans, logs, outputs and source archives (`burrito-py datastore start`)."""

    image: DatastoreImage = Field(default_factory=DatastoreImage, description="Datastore image.")
    config: DatastoreConfig = Field(default_factory=DatastoreConfig, description="Datastore settings.")
    storage: Storage = Field(default_factory=Storage, description="Storage backend.")
    encryption: Encryption = Field(default_factory=Encryption, description="Encryption at rest.")
    retention: Retention = Field(default_factory=Retention, description="Retention of unreferenced artifacts.")
    auth: DatastoreAuth = Field(default_factory=DatastoreAuth, description="Authentication and admins.")
    tls: DatastoreTls = Field(
        default_factory=DatastoreTls, description="Certificate of the HTTPS listener serving the caches."
    )


# -- server ---------------------------------------------------------------------------------------------
class ServerConfig(Values):
    """Server settings, passed as BURRITO_PY_SERVER_<NAME>."""

    max_webhook_bytes: int = setting(ServerSettings, "max_webhook_bytes")
    max_request_bytes: int = setting(ServerSettings, "max_request_bytes")
    header_timeout_seconds: float = setting(ServerSettings, "header_timeout_seconds")
    read_timeout_seconds: float = setting(ServerSettings, "read_timeout_seconds")
    write_timeout_seconds: float = setting(ServerSettings, "write_timeout_seconds")
    delivery_cache_size: int = setting(ServerSettings, "delivery_cache_size")
    webhook_failures_per_minute: float = setting(ServerSettings, "webhook_failures_per_minute")
    webhook_failures_burst: int = setting(ServerSettings, "webhook_failures_burst")
    auth_audiences: list[str] = setting(ServerSettings, "auth_audiences")
    auth_cache_ttl_seconds: float = setting(ServerSettings, "auth_cache_ttl_seconds")
    forwarded_allow_ips: list[str] = setting(ServerSettings, "forwarded_allow_ips")
    ui_enabled: bool = setting(ServerSettings, "ui_enabled")
    ui_session_ttl_seconds: int = setting(ServerSettings, "ui_session_ttl_seconds")
    # On in the chart (unset outside it): behind a TLS-terminating Ingress the server sees http, so "Secure when
    # the request came over https" would send the session cookie in clear.
    ui_secure_cookies: bool = Field(
        True, description="Mark the UI's cookies Secure (sent over https only): keep on behind a TLS-terminating "
        "Ingress, where the server itself sees http; off only to use the UI over plain http.")
    ui_trusted_headers: bool = setting(ServerSettings, "ui_trusted_headers")
    ui_trusted_headers_port: int = setting(ServerSettings, "ui_trusted_headers_port")
    ui_max_streams: int = setting(ServerSettings, "ui_max_streams")
    ui_max_streams_per_user: int = setting(ServerSettings, "ui_max_streams_per_user")
    ui_stream_max_seconds: float = setting(ServerSettings, "ui_stream_max_seconds")
    ui_stream_recheck_seconds: float = setting(ServerSettings, "ui_stream_recheck_seconds")


class IngressPath(Values):
    """One path of an Ingress host."""

    path: str = Field("/", description="Path.")
    path_type: Literal["Prefix", "Exact", "ImplementationSpecific"] = Field("Prefix", description="pathType.")


class IngressHost(Values):
    """One host of the Ingress."""

    host: str = Field(..., description="Host name.")
    paths: list[IngressPath] = Field(default_factory=lambda: [IngressPath()], description="Paths.")


class IngressTls(Values):
    """A TLS entry of the Ingress."""

    secret_name: str = Field(..., description="Secret with the certificate.")
    hosts: list[str] = Field(default_factory=list, description="Hosts it covers.")


class Ingress(Values):
    """An Ingress for the server (webhooks and the REST API; never the metrics)."""

    enabled: bool = Field(False, description="Create the Ingress.")
    class_name: str = Field("", description="ingressClassName; empty: the cluster's default.")
    annotations: dict[str, str] = Field(default_factory=dict, description="Ingress annotations.")
    hosts: list[IngressHost] = Field(default_factory=list, description="Hosts.")
    tls: list[IngressTls] = Field(default_factory=list, description="TLS.")


class UiSession(Values):
    """The key of the web UI's session cookies and CSRF tokens: one for every server replica, kept across upgrades,
    so neither a restart nor another replica logs users out."""

    existing_secret: str = Field(
        "", description="A Secret in the release namespace with the key `sessionKey` (at least 32 characters); "
        "empty: the chart generates one and keeps it across upgrades.",
    )


class Server(Workload):
    """Webhooks, the REST API and the web UI (`burrito-py server start`). Webhook secrets come from each
    TerraformRepository's Secret (spec.repository.secretName, key webhookSecret): the controllers publish their keys
    into `<release>-webhook-keys`, the one Secret the server may read."""

    config: ServerConfig = Field(default_factory=ServerConfig, description="Server settings.")
    ui_session: UiSession = Field(default_factory=UiSession, description="The web UI's session key.")
    ingress: Ingress = Field(default_factory=Ingress, description="Optional Ingress.")


# -- provider and tool caches ---------------------------------------------------------------------------
HOSTNAME = r"^[A-Za-z0-9]([-A-Za-z0-9]*[A-Za-z0-9])?(\.[A-Za-z0-9]([-A-Za-z0-9]*[A-Za-z0-9])?)*(:[0-9]{1,5})?$"


class ProviderCache(Values):
    """A Terraform provider network mirror served by the datastore (HTTPS, port 8443), which runner pods use
    instead of the registries: each provider package is downloaded once per cluster."""

    enabled: bool = Field(
        False,
        description="Serve the mirror (BURRITO_PY_DATASTORE_PROVIDER_CACHE_ENABLED) and point runner pods at it "
        "(BURRITO_PY_PROVIDER_MIRROR_URL); turns on the datastore's HTTPS listener.",
    )
    fail_closed: bool = setting(ControllerSettings, "provider_mirror_fail_closed")
    registries: list[Annotated[str, Field(pattern=HOSTNAME)]] = setting(DatastoreSettings, "provider_cache_registries")
    index_ttl: timedelta = Field(
        timedelta(minutes=10),
        description="Age after which the mirrors read an index again (a provider's versions; the tool cache's "
        "release lists too), as BURRITO_PY_DATASTORE_PROVIDER_CACHE_INDEX_TTL_SECONDS (ISO 8601, e.g. PT10M).",
    )
    max_size: int = setting(DatastoreSettings, "provider_cache_max_bytes")
    # Keys are host names: no other key is accepted (patternProperties alone would let any through).
    registry_urls: Annotated[
        dict[Annotated[str, Field(pattern=HOSTNAME)], Annotated[str, Field(pattern=r"^https://\S+$")]],
        WithJsonSchema({"type": "object", "additionalProperties": False,
                        "patternProperties": {HOSTNAME: {"type": "string", "pattern": r"^https://\S+$"}}}),
    ] = setting(DatastoreSettings, "provider_cache_registry_urls")

    @field_validator("index_ttl", mode="after")
    @classmethod
    def _not_negative(cls, value: timedelta) -> timedelta:
        if value < timedelta(0):
            raise ValueError("indexTtl must not be negative")
        return value


class ToolCache(Values):
    """A mirror of terraform/tofu/terragrunt binaries served by the datastore (HTTPS, port 8443), which runner pods
    use."""

    enabled: bool = Field(
        False,
        description="Serve the mirror (BURRITO_PY_DATASTORE_TOOL_CACHE_ENABLED) and point runner pods at it "
        "(BURRITO_PY_TOOL_MIRROR_URL); turns on the datastore's HTTPS listener.",
    )
    terraform_url: Annotated[str, Field(pattern=r"^https://\S+$")] = setting(DatastoreSettings,
                                                                             "tool_cache_terraform_url")
    opentofu_url: Annotated[str, Field(pattern=r"^https://\S+$")] = setting(DatastoreSettings,
                                                                            "tool_cache_opentofu_url")
    opentofu_index_url: Annotated[str, Field(pattern=r"^https://\S+$")] = setting(DatastoreSettings,
                                                                                  "tool_cache_opentofu_index_url")
    terragrunt_url: Annotated[str, Field(pattern=r"^https://\S+$")] = setting(DatastoreSettings,
                                                                              "tool_cache_terragrunt_url")
    terragrunt_index_url: Annotated[str, Field(pattern=r"^https://\S+$")] = setting(
        DatastoreSettings, "tool_cache_terragrunt_index_url")
    max_size: int = setting(DatastoreSettings, "tool_cache_max_bytes")


PEM_CERTIFICATE = r"^\s*(-----BEGIN CERTIFICATE-----[\s\S]+?-----END CERTIFICATE-----\s*)+$"


class CacheUpstream(Values):
    """How the datastore's provider and tool caches reach their upstream registries and release sites."""

    ca_bundle: Annotated[str, Field(pattern=PEM_CERTIFICATE)] | Literal[""] = Field(
        "",
        description="PEM certificates the caches trust besides the system's, for a private registry or release "
        "mirror behind an in-house CA: put in a ConfigMap mounted into the datastore "
        "(BURRITO_PY_DATASTORE_UPSTREAM_CA_FILE). Public certificates only; empty: the system's CAs alone.",
    )


# -- runner, tenants, cluster-wide blocks ---------------------------------------------------------------
class RunnerImage(Image):
    """The runner image (terraform/tofu tooling and the burrito-py runner)."""

    repository: str = Field(RUNNER_IMAGE_REPOSITORY, description="Image repository.")


class Runner(Values):
    """Runner pods, which the controllers create in the tenant namespaces."""

    image: RunnerImage = Field(default_factory=RunnerImage, description="Runner image.")
    service_account_name: str = setting(ControllerSettings, "runner_service_account")
    pull_request_service_account_name: str = setting(ControllerSettings, "runner_pull_request_service_account")
    termination_grace_period_seconds: int = setting(ControllerSettings, "runner_termination_grace_period_seconds")
    node_selector: dict[str, str] = setting(ControllerSettings, "runner_node_selector")
    tolerations: list[Object] = setting(ControllerSettings, "runner_tolerations")
    affinity: Object = setting(ControllerSettings, "runner_affinity")


class RunnerServiceAccount(Values):
    """The tenant's runner ServiceAccount."""

    annotations: dict[str, str] = Field(default_factory=dict, description="Annotations (e.g. a cloud IAM role).")


class Tenant(Values):
    """A namespace whose layers burrito-py runs."""

    namespace: str = Field(..., pattern=K8S_NAME, max_length=63, description="The namespace.")
    create: bool = Field(
        False, description="Create the namespace (labelled pod-security.kubernetes.io/enforce: restricted)."
    )
    runner_service_account: RunnerServiceAccount = Field(
        default_factory=RunnerServiceAccount, description="The runner ServiceAccount of this namespace."
    )
    pull_request_runner_service_account: RunnerServiceAccount = Field(
        default_factory=RunnerServiceAccount, description="The ServiceAccount of this namespace's pull request plans "
        "(e.g. annotated with a read-only cloud role; by default it can reach nothing)."
    )


class Crds(Values):
    """The CustomResourceDefinitions (templates, so upgrades apply them; annotated helm.sh/resource-policy: keep,
    so an uninstall never deletes them and with them every layer)."""

    install: bool = Field(True, description="Install and upgrade the CRDs with the chart.")


class AdmissionPolicy(Values):
    """The ValidatingAdmissionPolicy `<release>-run-namespace`: the API refuses a TerraformRun whose
    spec.layer.namespace is not its own namespace (the controllers refuse such runs too)."""

    enabled: bool = Field(
        True,
        description="Install the policy and its binding (admissionregistration.k8s.io/v1, Kubernetes >= 1.30; "
        "turn off on 1.29, where the controllers' check alone refuses such runs, and no layer's override-policy is "
        "honoured: who wrote it cannot be told).",
    )


class NetworkPolicy(Values):
    """NetworkPolicies (on by default): the datastore is reachable only from the controllers, the server and runner
    pods of the tenant namespaces; the controllers only on their metrics and health ports; runner pods from
    nowhere. Egress is left open unless runnerEgress restricts runner pods (docs/architecture.md §16)."""

    enabled: bool = Field(True, description="Create the NetworkPolicies.")
    server_ingress_from: list[Object] = Field(
        default_factory=list,
        description="NetworkPolicyPeers allowed to reach the server (e.g. the ingress controller's namespace); "
        "empty: anyone (webhooks come from outside).",
    )
    metrics_from: list[Object] = Field(
        default_factory=list, description="NetworkPolicyPeers allowed to scrape the metrics; empty: anyone."
    )
    runner_egress: list[Object] = Field(
        default_factory=list,
        description="NetworkPolicyEgressRules for runner pods; empty: their egress is not restricted (Terraform "
        "reaches whatever cloud APIs, registries and hosts its providers use). Non-empty: runner pods reach only DNS "
        "(port 53), the datastore and these, so list the Kubernetes API (an ipBlock of its endpoints: runners read "
        "their run), your cloud providers' APIs and the registries.",
    )
    trusted_proxy_from: list[Object] = Field(
        default_factory=list, description="NetworkPolicyPeers allowed to reach the server's trusted-header port "
        "(server.config.uiTrustedHeaders): the authenticating proxy only; empty: nobody.")


class ServiceMonitor(Values):
    """A prometheus-operator ServiceMonitor for the controllers' metrics, scraped with Prometheus's service-account
    token (bind it with metrics.readers)."""

    enabled: bool = Field(False, description="Create the ServiceMonitor (needs the monitoring.coreos.com CRDs).")
    interval: str = Field("30s", description="Scrape interval.")
    labels: dict[str, str] = Field(default_factory=dict, description="Extra labels (your Prometheus' selector).")


class PrometheusRule(Values):
    """A prometheus-operator PrometheusRule with the chart's alerts: BurritoPyProviderMirrorFallbacks (runs fell
    back from the provider mirror to the registries in the last 15 minutes) and BurritoPyRunnerPodsNotStarted (runner
    pods deleted unstarted after the runner start timeout in the last 30 minutes, by namespace)."""

    enabled: bool = Field(False, description="Create the PrometheusRule (needs the monitoring.coreos.com CRDs).")
    labels: dict[str, str] = Field(default_factory=dict, description="Extra labels (your Prometheus' ruleSelector).")


class Metrics(Values):
    """Metrics scraping. The controllers' and the datastore's /metrics answer only a bearer token whose user may get
    the non-resource URL /metrics: the ClusterRole <release>-metrics-reader grants it."""

    service_monitor: ServiceMonitor = Field(default_factory=ServiceMonitor, description="ServiceMonitor.")
    prometheus_rule: PrometheusRule = Field(default_factory=PrometheusRule, description="PrometheusRule.")
    readers: list[Object] = Field(
        default_factory=list, description="RBAC subjects bound to <release>-metrics-reader (get /metrics), e.g. "
        "Prometheus's ServiceAccount: {kind: ServiceAccount, name: prometheus-k8s, namespace: monitoring}.")


class Global(Values):
    """Settings of every object and pod."""

    common_labels: dict[str, str] = Field(default_factory=dict, description="Labels added to every object.")
    image_pull_secrets: list[str] = Field(default_factory=list, description="Names of image pull Secrets.")


class ChartValues(Values):
    """Values of the burrito-py chart."""

    global_: Global = Field(default_factory=Global, alias="global", description="Settings of every object.")
    image: Image = Field(default_factory=Image, description="Image of the controllers and the server.")
    crds: Crds = Field(default_factory=Crds, description="CustomResourceDefinitions.")
    admission_policy: AdmissionPolicy = Field(
        default_factory=AdmissionPolicy, description="The run-namespace ValidatingAdmissionPolicy."
    )
    cluster_mode: bool = Field(
        False,
        description="Watch every namespace, with ClusterRoleBindings. Off (tenant mode): only the tenants' "
        "namespaces (the release namespace when there are none), with RoleBindings there.",
    )
    tenants: list[Tenant] = Field(
        default_factory=list,
        description="Namespaces whose layers burrito-py runs. Empty: the release namespace, whose Secrets the "
        "runners and controllers may then read; in production give layers their own namespaces.",
    )
    controllers: Controllers = Field(default_factory=Controllers, description="The controllers.")
    datastore: Datastore = Field(default_factory=Datastore, description="The datastore.")
    server: Server = Field(default_factory=Server, description="The server.")
    runner: Runner = Field(default_factory=Runner, description="Runner pods.")
    provider_cache: ProviderCache = Field(
        default_factory=ProviderCache, description="Provider network mirror in the datastore."
    )
    tool_cache: ToolCache = Field(default_factory=ToolCache, description="Tool-binary mirror in the datastore.")
    cache_upstream: CacheUpstream = Field(
        default_factory=CacheUpstream, description="The caches' upstream: a CA bundle to trust."
    )
    network_policy: NetworkPolicy = Field(default_factory=NetworkPolicy, description="NetworkPolicies.")
    metrics: Metrics = Field(default_factory=Metrics, description="Metrics scraping.")
