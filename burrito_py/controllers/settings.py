"""Controller configuration: flags of `burrito-py controllers start`, or `BURRITO_PY_*` variables."""

from __future__ import annotations

from datetime import timedelta
from pathlib import Path

from pydantic import Field, field_validator
from pydantic_settings import BaseSettings, SettingsConfigDict

from burrito_py.local.paths import pod_path_setting


class ControllerSettings(BaseSettings):
    model_config = SettingsConfigDict(env_prefix="BURRITO_PY_", extra="ignore")

    @field_validator("git_cache_dir", "datastore_token_path", mode="after")
    @classmethod
    def _inside_the_pod(cls, value: Path | None) -> Path | None:
        # Under the local kubelet a pod's absolute paths live below its private root (identity elsewhere).
        return pod_path_setting(value)

    namespaces: list[str] = Field(default_factory=list, description="Watched namespaces; empty = all.")
    datastore_url: str = "http://burrito-py-datastore:8080"
    git_cache_dir: Path = Path("/var/cache/burrito-py/git")
    drift_detection_period: timedelta = timedelta(minutes=20)
    repository_poll_interval: timedelta = timedelta(minutes=5)
    # Full re-evaluation of every object, a safety net for missed wake-ups; costs no API calls.
    resync_interval: timedelta = timedelta(minutes=10)
    failure_grace_period: timedelta = timedelta(seconds=15)
    failure_grace_period_cap: timedelta = timedelta(hours=1)
    max_retries: int = Field(3, ge=0)
    runs_to_keep: int = Field(5, ge=1)
    runner_image: str = "ghcr.io/burrito-py/burrito-py:0.1.0"
    runner_service_account: str = "burrito-py-runner"
    runner_command: list[str] = Field(default_factory=lambda: ["burrito-py", "runner", "start"])
    metrics_port: int = Field(9464, ge=0, description="Prometheus metrics port; 0 disables the endpoint.")
    datastore_token_path: Path | None = None
    # The Application Generation Layer: ApplicationDefinitions → user kinds → TerraformLayers.
    agl_enabled: bool = True
