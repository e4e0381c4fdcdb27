"""Which storage the datastore uses, from `BURRITO_PY_DATASTORE_*` settings: filesystem (default) or S3,
optionally wrapped in encryption at rest, and the retention schedule."""

from __future__ import annotations

import asyncio
import logging
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Literal, Self

from croniter import croniter
from pydantic import Field, field_validator, model_validator
from pydantic_settings import BaseSettings, SettingsConfigDict

from burrito_py.datastore.encryption import EncryptedStorage, Keyring
from burrito_py.datastore.kubeapi import connect, read_secret_data
from burrito_py.datastore.read_cache import innermost
from burrito_py.datastore.s3 import DEFAULT_CONCURRENCY, DEFAULT_PART_SIZE, MIN_PART_SIZE, S3Storage, make_client
from burrito_py.datastore.storage import FilesystemStorage, Storage
from burrito_py.kube.pod_paths import own_namespace, pod_path_setting

ENV_PREFIX = "BURRITO_PY_DATASTORE_"
log = logging.getLogger(__name__)


class StorageSettings(BaseSettings):
    model_config = SettingsConfigDict(env_prefix=ENV_PREFIX, extra="ignore")

    @field_validator("data_dir", mode="after")
    @classmethod
    def _inside_the_pod(cls, value: Path | None) -> Path | None:
        # Under the local kubelet a pod's absolute paths live below its private root (identity elsewhere).
        return pod_path_setting(value)

    backend: Literal["filesystem", "s3"] = "filesystem"
    data_dir: Path = Path("/var/lib/burrito-py/datastore")

    s3_bucket: str = Field("", description="S3 bucket (required with the s3 backend).")
    s3_prefix: str = Field("", description="Key prefix inside the bucket.")
    s3_endpoint_url: str | None = Field(None, description="S3-compatible endpoint URL; unset: AWS.")
    s3_region: str | None = Field(None, description="S3 region; unset: the SDK's default.")
    s3_path_style: bool = Field(False, description="Path-style addressing (MinIO, Ceph, moto).")
    s3_part_size: int = Field(
        DEFAULT_PART_SIZE, ge=MIN_PART_SIZE, le=5 * 1024**3, description="Multipart part size in bytes (>= 5 MiB)."
    )
    s3_max_connections: int = Field(64, ge=1, le=1024, description="Largest S3 connection pool.")
    s3_upload_concurrency: int = Field(
        DEFAULT_CONCURRENCY, ge=1, le=16, description="Parts of one multipart upload sent at once."
    )

    s3_abandoned_upload_seconds: int = Field(
        3600, ge=0, description="Age after which a multipart upload still in progress counts as abandoned (left "
        "by a killed datastore) and is aborted; longer than any upload, so another replica's is never cut.",
    )
    s3_upload_sweep_seconds: int = Field(
        3600, ge=1, description="Seconds between two sweeps of abandoned multipart uploads (one at start-up)."
    )

    encryption_enabled: bool = Field(False, description="Encrypt stored objects at rest (AES-256-GCM).")
    encryption_secret_name: str = Field(
        "burrito-py-datastore-encryption",
        description="Secret holding the encryption keys: data keys are key ids, values 32 random bytes.",
    )
    encryption_secret_namespace: str | None = Field(
        None, description="Namespace of the encryption Secret; unset: the datastore's own."
    )
    encryption_active_key_id: str = Field("", description="Key id new objects are encrypted with.")

    retention_enabled: bool = Field(False, description="Delete artifacts no run, layer or repository references.")
    retention_schedule: str = Field("17 * * * *", description="Cron schedule of retention passes.")
    retention_grace_seconds: int = Field(
        3600, ge=0, description="How long a key stays unreferenced before retention deletes it."
    )

    @field_validator("retention_schedule")
    @classmethod
    def _cron(cls, value: str) -> str:
        if not croniter.is_valid(value):
            raise ValueError(f"{value!r} is not a cron expression (minute hour day month weekday)")
        return value

    @model_validator(mode="after")
    def _complete(self) -> Self:
        if self.backend == "s3" and not self.s3_bucket:
            raise ValueError(f"{ENV_PREFIX}S3_BUCKET is required with the s3 backend")
        if self.encryption_enabled and not self.encryption_active_key_id:
            raise ValueError(
                f"{ENV_PREFIX}ENCRYPTION_ACTIVE_KEY_ID is required when encryption is enabled "
                "(the key id in the Secret that new objects are written with)"
            )
        return self

    @property
    def secret_namespace(self) -> str:
        return self.encryption_secret_namespace or own_namespace()


async def load_keyring(settings: StorageSettings, kubeconfig: str | None = None) -> Keyring:
    """The encryption keys from their Secret (data keys = key ids, values = 32 bytes)."""
    api = await connect(kubeconfig)
    try:
        data = await read_secret_data(api, settings.secret_namespace, settings.encryption_secret_name)
    finally:
        await api.close()
    where = f"Secret {settings.secret_namespace}/{settings.encryption_secret_name}"
    return Keyring.from_secret_data(data, settings.encryption_active_key_id, where)


def build_storage(settings: StorageSettings, keyring: Keyring | None = None) -> Storage:
    """The configured backend; wrapped in encryption when it is enabled (then `keyring` is required)."""
    storage: Storage
    if settings.backend == "s3":
        client = make_client(
            endpoint_url=settings.s3_endpoint_url,
            region=settings.s3_region,
            path_style=settings.s3_path_style,
            max_connections=settings.s3_max_connections,
        )
        storage = S3Storage(
            client, settings.s3_bucket, settings.s3_prefix, settings.s3_part_size, settings.s3_upload_concurrency
        )
    else:
        storage = FilesystemStorage(settings.data_dir)
    if settings.encryption_enabled:
        if keyring is None:
            raise ValueError("encryption is enabled but no keyring was loaded")
        storage = EncryptedStorage(storage, keyring)
    return storage


async def sweep_abandoned_uploads(storage: Storage, older_than: timedelta, every: float) -> None:
    """Abort multipart uploads older than `older_than` at once, then every `every` seconds, until cancelled;
    retention or not (issue 11, item 18). Storage without multipart uploads (the filesystem) returns at once."""
    abort = getattr(innermost(storage), "abort_stale_uploads", None)  # through the read cache and encryption
    if abort is None:
        return
    while True:
        try:
            aborted = await abort(older_than, datetime.now(UTC))
            if aborted:
                log.info("aborted %d abandoned multipart upload(s)", aborted)
        except Exception as exc:  # the sweep is housekeeping: report, and try again next time
            log.warning("could not sweep abandoned multipart uploads: %s", exc)
        await asyncio.sleep(every)
