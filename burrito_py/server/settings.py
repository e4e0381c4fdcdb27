"""Settings of `burrito-py server start`: flags override `BURRITO_PY_SERVER_*` variables, which override these."""

from __future__ import annotations

from pathlib import Path

from pydantic import Field, SecretStr, field_validator, model_validator
from pydantic_settings import BaseSettings, SettingsConfigDict

from burrito_py.kube.pod_paths import pod_path_setting


class ServerSettings(BaseSettings):
    model_config = SettingsConfigDict(env_prefix="BURRITO_PY_SERVER_", extra="ignore")

    @field_validator("kubeconfig", "datastore_token_path", mode="after")
    @classmethod
    def _inside_the_pod(cls, value: Path | None) -> Path | None:
        # Under the local kubelet a pod's absolute paths live below its private root (identity elsewhere).
        return pod_path_setting(value)

    host: str = "0.0.0.0"  # noqa: S104 - a server in a pod listens on all interfaces
    port: int = 8081
    # Empty: every namespace. Otherwise only TerraformRepositories and layers of these.
    namespaces: list[str] = Field(default_factory=list)
    max_webhook_bytes: int = Field(5 * 1024 * 1024, ge=1, description="Largest webhook body accepted (413 above).")
    max_request_bytes: int = Field(
        1024 * 1024, ge=1, description="Largest body of any other request (REST and UI; 413 above), bounded before "
        "the caller is authenticated.")
    # Slow clients on the public port (docs/architecture.md §11.2): the datastore's timers (§10.7).
    header_timeout_seconds: float = Field(
        10.0, gt=0, description="Time a client has to send complete request headers, from connecting (or from its "
        "next request's first byte); then the connection is closed.")
    read_timeout_seconds: float = Field(
        60.0, gt=0, description="Longest pause in a request body the server waits for; then the connection is closed.")
    write_timeout_seconds: float = Field(
        60.0, gt=0, description="Longest time a client may leave the response unread while the server has more to "
        "send; then the connection is closed.")
    delivery_cache_size: int = Field(
        10_000, ge=1, description="Webhook deliveries remembered (by id and by body digest), so a redelivery or a "
        "replay is acted on once.",
    )
    # Webhook keys the controllers publish (one Secret per controllers Deployment), read by name: the server reads
    # no repository Secret.
    webhook_keys_namespace: str = Field(
        "", description="Namespace of the webhook keys Secrets; empty: the pod's own namespace (else default)."
    )
    webhook_keys_secrets: list[str] = Field(
        default_factory=lambda: ["burrito-py-webhook-keys"], min_length=1,
        description="The Secrets the controllers publish webhook keys into (each controllers Deployment's "
        "webhook_keys_secret).",
    )
    webhook_failures_per_minute: float = Field(
        60.0, ge=0, description="Deliveries not acted on (malformed, unknown repository, wrong signature, duplicate) "
        "allowed per minute and source address before it is answered 429; 0: no limit.",
    )
    webhook_failures_burst: int = Field(
        60, ge=1, description="How many such deliveries a source may send at once before the per-minute rate applies."
    )
    kubeconfig: Path | None = None
    datastore_url: str = "http://burrito-py-datastore:8080"
    datastore_token_path: Path | None = None
    # The REST API's bearer tokens, checked with a TokenReview (the datastore's authenticator).
    auth_enabled: bool = True
    auth_audiences: list[str] = Field(
        default_factory=lambda: ["burrito-py"], min_length=1, description="Token audiences the TokenReview accepts."
    )
    auth_admin_users: list[str] = Field(default_factory=list)
    auth_cache_ttl_seconds: float = Field(30.0, ge=0, description="How long an accepted token is remembered.")
    # The controllers' runner_service_account: its tokens get nothing from the REST API and the UI (403).
    runner_service_account: str = "burrito-py-runner"
    # The controllers' runner_pull_request_service_account: the same for pull requests' runners (issue 24, P2).
    runner_pull_request_service_account: str = "burrito-py-runner-pr"
    forwarded_allow_ips: list[str] = Field(
        default_factory=list, description="Addresses (or CIDRs) of proxies whose X-Forwarded-For names the client, "
        "e.g. the ingress controller's pods: the token-review throttle then counts per client rather than per proxy. "
        "Empty: the connection's peer is the client.")
    # The web UI (server/ui, docs/architecture.md §11.4).
    ui_enabled: bool = Field(True, description="Serve the web UI under /ui/.")
    ui_session_key: SecretStr | None = Field(
        default=None, description="Encrypts the UI's session cookies and signs its CSRF tokens; unset: a random key "
        "per process (sessions end with a restart and are not shared between replicas).")
    ui_session_ttl_seconds: int = Field(8 * 3600, ge=60, description="How long a UI login lasts.")
    ui_trusted_headers: bool = Field(
        default=False, description="Serve a second listener on uiTrustedHeadersPort where the user comes from "
        "X-Forwarded-User and X-Forwarded-Groups: only an authenticating proxy that sets them (and strips them from "
        "clients) may reach that port. The public port never reads them.")
    ui_trusted_headers_port: int = Field(
        8083, ge=1, le=65535, description="Port of the trusted-header listener (with uiTrustedHeaders).")
    ui_secure_cookies: bool | None = Field(
        default=None, description="Mark the UI's cookies Secure (sent over https only): on behind a TLS-terminating "
        "Ingress, where the server itself sees http; unset: when the request came over https.")
    ui_max_streams: int = Field(512, ge=1, description="Live views (server-sent event streams) served at once.")
    ui_max_streams_per_user: int = Field(8, ge=1, description="Live views one user may hold open at once.")
    ui_stream_max_seconds: float = Field(
        600.0, gt=0, description="Lifetime of a live view's stream; the browser then reconnects and is authorized "
        "again.")
    ui_stream_recheck_seconds: float = Field(
        30.0, gt=0, description="How often a live view re-checks the user's token and access (a revoked one ends "
        "it).")

    @model_validator(mode="after")
    def _distinct_ports(self) -> ServerSettings:
        if self.ui_trusted_headers and self.ui_trusted_headers_port == self.port:
            raise ValueError("ui_trusted_headers_port must differ from port: the public port never trusts "
                             "X-Forwarded-User")
        return self
