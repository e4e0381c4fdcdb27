"""Storage settings from BURRITO_PY_DATASTORE_*: defaults, S3 and encryption, errors naming the setting."""

from __future__ import annotations

from pathlib import Path

import pytest
from pydantic import ValidationError

from burrito_py.datastore.backends import StorageSettings, build_storage
from burrito_py.datastore.encryption import EncryptedStorage, EncryptionError, Keyring
from burrito_py.datastore.s3 import S3Storage
from burrito_py.datastore.storage import FilesystemStorage


def test_defaults_are_the_filesystem_without_encryption_or_retention(tmp_path: Path):
    settings = StorageSettings(data_dir=tmp_path)
    assert (settings.backend, settings.encryption_enabled, settings.retention_enabled) == ("filesystem", False, False)
    assert isinstance(build_storage(settings), FilesystemStorage)


def test_s3_and_encryption_from_the_environment(monkeypatch: pytest.MonkeyPatch, tmp_path: Path):
    for name, value in {
        "BACKEND": "s3", "S3_BUCKET": "plans", "S3_PREFIX": "prod", "S3_ENDPOINT_URL": "http://127.0.0.1:9",
        "S3_REGION": "eu-west-3", "S3_PATH_STYLE": "true", "S3_PART_SIZE": str(16 * 1024 * 1024),
        "ENCRYPTION_ENABLED": "true", "ENCRYPTION_ACTIVE_KEY_ID": "k1", "UNRELATED_SETTING": "ignored",
    }.items():
        monkeypatch.setenv(f"BURRITO_PY_DATASTORE_{name}", value)
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", "x")
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "x")
    settings = StorageSettings()
    storage = build_storage(settings, Keyring({"k1": bytes(32)}, "k1"))
    assert isinstance(storage, EncryptedStorage) and isinstance(storage.inner, S3Storage)
    inner = storage.inner
    assert (inner.bucket, inner.prefix, inner.part_size) == ("plans", "prod/", 16 * 1024 * 1024)
    assert inner.client.meta.region_name == "eu-west-3"
    assert inner.client.meta.endpoint_url == "http://127.0.0.1:9"
    assert inner.client.meta.config.s3["addressing_style"] == "path"
    with pytest.raises(ValueError, match="no keyring"):
        build_storage(settings)


@pytest.mark.parametrize(("values", "named"), [
    ({"backend": "s3"}, "BURRITO_PY_DATASTORE_S3_BUCKET is required"),
    ({"backend": "gcs"}, "backend"),
    ({"encryption_enabled": True}, "BURRITO_PY_DATASTORE_ENCRYPTION_ACTIVE_KEY_ID is required"),
    ({"s3_part_size": 1024}, "s3_part_size"),
    ({"retention_schedule": "every hour"}, "'every hour' is not a cron expression"),
    ({"retention_grace_seconds": -1}, "retention_grace_seconds"),
])
def test_bad_settings_name_the_setting(values: dict[str, object], named: str, tmp_path: Path):
    with pytest.raises(ValidationError, match=named):
        StorageSettings(data_dir=tmp_path, **values)  # type: ignore[arg-type]


def test_keyring_refuses_bad_keys_without_echoing_them():
    with pytest.raises(EncryptionError, match="Secret ns/name key 'k1': not valid base64"):
        Keyring.from_secret_data({"k1": "%%%"}, "k1", "Secret ns/name")
    with pytest.raises(EncryptionError, match="key id 'bad/id'"):
        Keyring({"bad/id": bytes(32)}, "bad/id")
