"""Settings of `burrito-py server start`: flags override `BURRITO_PY_SERVER_*` variables, which override these."""

from __future__ import annotations

import ipaddress
from pathlib import Path

from pydantic import Field, SecretStr, field_validator
from pydantic_settings import BaseSettings, SettingsConfigDict

from burrito_py.local.paths import pod_path_setting


class ServerSettings(BaseSettings):
    model_config = SettingsConfigDict(env_prefix="BURRITO_PY_SERVER_", extra="ignore")

    @field_validator("webhook_trusted_proxies", mode="after")
    @classmethod
    def _networks(cls, value: list[str]) -> list[str]:
        for cidr in value:
            try:
                ipaddress.ip_network(cidr, strict=False)
            except ValueError:
                raise ValueError(f"{cidr!r} is not an IP address or CIDR") from None
        return value

    def trusted_proxies(self) -> list[ipaddress.IPv4Network | ipaddress.IPv6Network]:
        return [ipaddress.ip_network(cidr, strict=False) for cidr in self.webhook_trusted_proxies]

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
    webhook_trusted_proxies: list[str] = Field(
        default_factory=list, description="CIDRs of proxies (an ingress controller) whose X-Forwarded-For names the "
        "source address; empty: the peer's address is the source.",
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
    # The controllers' runner_service_account: its tokens may read but never ask for syncs.
    runner_service_account: str = "burrito-py-runner"
    # The web UI (server/ui, docs/architecture.md §11.4).
    ui_enabled: bool = Field(True, description="Serve the web UI under /ui/.")
    ui_session_key: SecretStr | None = Field(
        default=None, description="Encrypts the UI's session cookies and signs its CSRF tokens; unset: a random key "
        "per process (sessions end with a restart and are not shared between replicas).")
    ui_session_ttl_seconds: int = Field(8 * 3600, ge=60, description="How long a UI login lasts.")
    ui_trusted_headers: bool = Field(
        default=False, description="Take the user from X-Forwarded-User and X-Forwarded-Groups (only behind an "
        "authenticating proxy that sets them and strips them from clients).")
    ui_secure_cookies: bool | None = Field(
        default=None, description="Mark cookies Secure; unset: when the request came over https.")
