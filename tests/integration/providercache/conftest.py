"""The S3 fixtures of the datastore tests (moto's standalone server over HTTP)."""

from ..datastore.conftest import moto_endpoint, s3_bucket

__all__ = ["moto_endpoint", "s3_bucket"]
