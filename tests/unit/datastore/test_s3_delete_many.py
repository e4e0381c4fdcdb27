"""S3Storage.delete_many against a stub client: DeleteObjects batches of at most 1000 keys, failures of whole
batches and of single keys reported together, every key checked before anything is deleted."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest
from botocore.exceptions import ClientError, EndpointConnectionError

from burrito_py.datastore.s3 import S3Storage
from burrito_py.datastore.storage import DeleteFailed


class _Stub:
    def __init__(self, fail_batches: dict[int, Exception] | None = None, refuse: frozenset[str] = frozenset()):
        self.calls: list[dict[str, Any]] = []
        self.fail_batches = fail_batches or {}
        self.refuse = refuse

    def delete_objects(self, **kwargs: Any) -> dict[str, Any]:
        self.calls.append(kwargs)
        failure = self.fail_batches.get(len(self.calls))
        if failure is not None:
            raise failure
        keys = [o["Key"] for o in kwargs["Delete"]["Objects"]]
        return {"Errors": [{"Key": k, "Code": "AccessDenied"} for k in keys if k in self.refuse]}


def _keys(n: int) -> list[str]:
    return [f"layers/ns/app/run/{i}/plan.json" for i in range(n)]


def test_keys_go_in_batches_of_at_most_1000_with_the_prefix_and_quietly() -> None:
    stub = _Stub()
    asyncio.run(S3Storage(stub, "bucket", "/team/").delete_many(_keys(2500)))
    assert [len(c["Delete"]["Objects"]) for c in stub.calls] == [1000, 1000, 500]
    assert all(c["Bucket"] == "bucket" and c["Delete"]["Quiet"] is True for c in stub.calls)
    sent = [o["Key"] for c in stub.calls for o in c["Delete"]["Objects"]]
    assert sent == [f"team/{key}" for key in _keys(2500)]


def test_nothing_to_delete_makes_no_call() -> None:
    stub = _Stub()
    asyncio.run(S3Storage(stub, "bucket").delete_many([]))
    assert stub.calls == []


def test_failed_batches_and_refused_keys_are_named_after_every_batch_was_tried() -> None:
    denied = ClientError({"Error": {"Code": "SlowDown", "Message": "later"}}, "DeleteObjects")
    stub = _Stub({2: denied, 3: EndpointConnectionError(endpoint_url="http://s3")},
                 refuse=frozenset({"p/layers/ns/app/run/4/plan.json"}))
    with pytest.raises(DeleteFailed) as failed:
        asyncio.run(S3Storage(stub, "bucket", "p").delete_many(_keys(2001)))
    assert len(stub.calls) == 3  # the failed second batch did not stop the third
    assert len(failed.value.failed) == 1 + 1000 + 1
    assert failed.value.failed[0] == "layers/ns/app/run/4/plan.json (AccessDenied)"
    assert failed.value.failed[1] == "layers/ns/app/run/1000/plan.json (SlowDown)"
    assert failed.value.failed[-1] == "layers/ns/app/run/2000/plan.json (EndpointConnectionError)"
    assert str(failed.value).startswith("1002 of 2001 objects could not be deleted: layers/ns/app/run/4/")


def test_a_bad_key_refuses_the_whole_call_before_anything_is_deleted() -> None:
    stub = _Stub()
    with pytest.raises(ValueError, match="invalid storage key"):
        asyncio.run(S3Storage(stub, "bucket").delete_many(["layers/ns/app/run/1/plan.json", "layers/../etc"]))
    assert stub.calls == []
