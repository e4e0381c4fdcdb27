"""Day-2 operations on a layer's state, run as TerraformRuns (docs/architecture.md §5.12): `import ADDR ID`,
`state rm ADDR`, `state mv SRC DST`, a plan with `-replace=ADDR`/`-target=ADDR`, and `force-unlock LOCK_ID`.

A request reaches the controllers as the layer annotation `api.burrito-py.io/operation` (JSON, below) with
`api.burrito-py.io/operation-by` (who asked: the chart's admission policy lets only that very user, or the server
recording its authenticated caller, set it). The values become command-line arguments of terraform, so they are
checked here, strictly, before any run exists: an address must be a resource or module address as Terraform writes
it, an import ID or lock ID one line of printable characters; nothing may start with `-` (it would be read as an
option). The runner passes them as argv (never through a shell).

The annotation's value:

    {"operation": "import", "address": "aws_s3_bucket.logs", "id": "my-logs-bucket"}
    {"operation": "state-rm", "address": "module.old.aws_instance.web[0]"}
    {"operation": "state-mv", "source": "aws_instance.a", "destination": "aws_instance.b"}
    {"operation": "plan", "replace": ["aws_instance.web"], "target": []}
    {"operation": "force-unlock", "lockId": "3f0c…"}
    {"operation": "migrate-state", "to": "managed"}    (or "to": "code")

`migrate-state` moves the layer's state between the datastore (`managed`, §10.6) and the backend the layer's own
code declares (`code`): the only two places it may go. No backend configuration, address or path is ever part of a
request (an unknown field is refused), so a requester cannot send a layer's state, which holds its secrets, to a
backend of their own.

plus an optional `"requestedAt"` (any string: two requests of the same operation differ by it).
"""

from __future__ import annotations

import hashlib
import json
from typing import Any

from pydantic import ConfigDict, Field, ValidationError, field_validator
from pydantic.alias_generators import to_camel

from burrito_py.api.common import ApiModel
from burrito_py.api.operation_rules import (
    ADDRESS_PATTERN,
    LOCK_ID_PATTERN,
    MAX_ADDRESSES,
    MAX_VALUE_LENGTH,
    MIGRATION_TARGETS,
    OPERATION_ACTIONS,
    STATE_ACTIONS,
    BadOperation,
    MigrationTarget,
    OperationKind,
    check_address,
    check_import_id,
    check_lock_id,
    describe,
    missing_for,
)

__all__ = [
    "ADDRESS_PATTERN",
    "LOCK_ID_PATTERN",
    "MAX_ADDRESSES",
    "MAX_VALUE_LENGTH",
    "MIGRATION_TARGETS",
    "OPERATION_ACTIONS",
    "STATE_ACTIONS",
    "BadOperation",
    "MigrationTarget",
    "OperationKind",
    "RunOperation",
    "check_address",
    "check_import_id",
    "check_lock_id",
    "describe",
    "operation_digest",
    "parse_request",
]

class RunOperation(ApiModel):
    """What a day-2 operation run does, and who asked (the layer controller copies it from the request)."""

    requested_by: str = Field(min_length=1, max_length=512,
                              description="Who asked: the user the server authenticated (REST), or the author of the "
                              "layer annotation (the admission policy checks it is them).")
    requested_at: str | None = Field(default=None, max_length=64, description="When it was asked, as the request "
                                     "says (informational).")
    address: str | None = Field(default=None, description="import, state-rm: the resource address.")
    id: str | None = Field(default=None, description="import: the provider's ID of the object to import.")
    source: str | None = Field(default=None, description="state-mv: the address to move.")
    destination: str | None = Field(default=None, description="state-mv: the address to move it to.")
    replace: list[str] = Field(default_factory=list, max_length=MAX_ADDRESSES,
                               description="plan: addresses planned with -replace=ADDR.")
    target: list[str] = Field(default_factory=list, max_length=MAX_ADDRESSES,
                              description="plan: addresses planned with -target=ADDR (the layer plans whole again "
                              "once this plan is applied).")
    lock_id: str | None = Field(default=None, description="force-unlock: the ID of the state lock to release.")
    to: MigrationTarget | None = Field(default=None, description="migrate-state: where the state goes: managed (the "
                                       "burrito-py datastore) or code (the backend the layer's code declares).")

    @field_validator("address", "source", "destination")
    @classmethod
    def _address(cls, value: str | None, info: Any) -> str | None:
        return None if value is None else check_address(value, info.field_name)

    @field_validator("replace", "target")
    @classmethod
    def _addresses(cls, value: list[str], info: Any) -> list[str]:
        return [check_address(v, f"{info.field_name}[{i}]") for i, v in enumerate(value)]

    @field_validator("id")
    @classmethod
    def _id(cls, value: str | None) -> str | None:
        return None if value is None else check_import_id(value)

    @field_validator("lock_id")
    @classmethod
    def _lock_id(cls, value: str | None) -> str | None:
        return None if value is None else check_lock_id(value)

    def missing_for(self, kind: str) -> str | None:
        """The field `kind` needs and lacks (or has and must not), else None."""
        return missing_for(self, kind)


class _Request(ApiModel):
    # A misspelt field is named, not dropped.
    model_config = ConfigDict(populate_by_name=True, alias_generator=to_camel, extra="forbid")

    operation: OperationKind
    address: str | None = None
    id: str | None = None
    source: str | None = None
    destination: str | None = None
    replace: list[str] = Field(default_factory=list)
    target: list[str] = Field(default_factory=list)
    lock_id: str | None = None
    to: MigrationTarget | None = None
    requested_at: str | None = None


def parse_request(value: str | None, requested_by: str | None) -> tuple[str, RunOperation]:
    """The operation an annotation asks for: (its kind, the run's `spec.operation`). BadOperation names the field,
    prefixed `api.burrito-py.io/operation`."""
    where = "api.burrito-py.io/operation"
    if not requested_by:
        raise BadOperation("api.burrito-py.io/operation-by: missing: who asks must be named (the admission policy "
                           "checks it is the author of the request; the REST API fills it in)")
    try:
        raw = json.loads(value or "")
    except ValueError:
        raise BadOperation(f"{where}: not JSON (e.g. {{\"operation\": \"state-rm\", \"address\": \"TYPE.NAME\"}})") \
            from None
    if not isinstance(raw, dict):
        raise BadOperation(f"{where}: must be a JSON object")
    try:
        request = _Request.model_validate(raw)
    except ValidationError as exc:
        raise BadOperation(f"{where}: {_first_error(exc)}") from None
    try:
        operation = RunOperation(
            requested_by=requested_by, requested_at=request.requested_at, address=request.address, id=request.id,
            source=request.source, destination=request.destination, replace=request.replace, target=request.target,
            lock_id=request.lock_id, to=request.to,
        )
    except ValidationError as exc:
        raise BadOperation(f"{where}: {_first_error(exc)}") from None
    problem = operation.missing_for(request.operation)
    if problem is not None:
        raise BadOperation(f"{where}: {problem}")
    return request.operation, operation


def _first_error(exc: ValidationError) -> str:
    """`field: reason` of the first error; the checks above already name their field."""
    first = exc.errors()[0]
    message = str(first.get("msg", "invalid"))
    if first.get("type") == "value_error":
        return message.removeprefix("Value error, ")
    return f"{'.'.join(str(p) for p in first.get('loc', ())) or 'value'}: {message}"


def operation_digest(value: str | None, requested_by: str | None) -> str:
    """Stamped on the run an annotation made (`burrito-py.io/operation`): the same request never makes two runs."""
    return hashlib.sha256(f"{value or ''}\0{requested_by or ''}".encode()).hexdigest()[:16]
