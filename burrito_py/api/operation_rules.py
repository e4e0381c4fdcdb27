"""The rules of day-2 operations (docs/architecture.md §5.12) that need no pydantic: the checks of every value bound
for terraform's command line, which fields each operation needs, and the one-line description. `operations.py`
(the request and the run's `spec.operation` model) builds on them; the runner reads its run's operation with them
alone (runner/objects.py), so its start-up imports no pydantic."""

from __future__ import annotations

import re
from collections.abc import Sequence
from typing import Literal, Protocol, get_args

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
    "OperationFields",
    "OperationKind",
    "check_address",
    "check_import_id",
    "check_lock_id",
    "describe",
    "missing_for",
]

OperationKind = Literal["import", "state-rm", "state-mv", "plan", "force-unlock", "migrate-state"]
# The run actions that are day-2 operations of their own (a `-replace`/`-target` plan is a `plan` run).
OPERATION_ACTIONS: tuple[str, ...] = ("import", "state-rm", "state-mv", "force-unlock", "migrate-state")
# Those after which the layer plans again at once: they changed the state, or (a migration) where it lives, and the
# next plan shows that nothing was lost (docs/architecture.md §5.12).
STATE_ACTIONS: tuple[str, ...] = ("import", "state-rm", "state-mv", "migrate-state")
# Where `migrate-state` may move a layer's state: the datastore, or the backend the layer's code declares. Never a
# backend the request names (that would let a requester copy the state, and its secrets, to their own bucket).
MigrationTarget = Literal["managed", "code"]
MIGRATION_TARGETS: tuple[str, ...] = get_args(MigrationTarget)
MAX_VALUE_LENGTH = 1024
MAX_ADDRESSES = 20

# A Terraform address: `module.NAME[KEY].` any number of times, then optionally `data.`, `TYPE.NAME[KEY]`; or module
# instances alone (`state rm`/`-target` accept a whole module). A KEY is a number or a double-quoted string without
# quotes, backslashes or control characters (Terraform's own keys may hold more; such resources are named by hand).
_IDENT = r"[A-Za-z_][A-Za-z0-9_-]*"
_KEY = r'(\[([0-9]+|"[^"\\\x00-\x1f\x7f]*")\])?'
_MODULE = rf"module\.{_IDENT}{_KEY}"
_RESOURCE = rf"(data\.)?{_IDENT}\.{_IDENT}{_KEY}"
ADDRESS_PATTERN = re.compile(rf"({_MODULE}\.)*{_RESOURCE}|{_MODULE}(\.{_MODULE})*")
# Printable, one line, not an option: what an import ID or a lock ID may be (ARNs, paths, UUIDs, JSON-ish IDs).
_CONTROL = re.compile(r"[\x00-\x1f\x7f\u2028\u2029\u0085]")
LOCK_ID_PATTERN = re.compile(r"[A-Za-z0-9][A-Za-z0-9._:/+=@-]{0,255}")


class BadOperation(ValueError):
    """An operation request that is refused, naming the field and the reason."""

class OperationFields(Protocol):
    """What a run's `spec.operation` holds: the model (operations.RunOperation) or the runner's reading of it."""

    @property
    def requested_by(self) -> str: ...
    @property
    def address(self) -> str | None: ...
    @property
    def id(self) -> str | None: ...
    @property
    def source(self) -> str | None: ...
    @property
    def destination(self) -> str | None: ...
    @property
    def replace(self) -> Sequence[str]: ...
    @property
    def target(self) -> Sequence[str]: ...
    @property
    def lock_id(self) -> str | None: ...
    @property
    def to(self) -> str | None: ...


def _one_argument(value: str, field: str, required: str, option: str) -> str:
    """The checks every value bound for terraform's command line passes: present, bounded, never an option, one
    line. `required` and `option` say why for this kind of value."""
    if not isinstance(value, str) or not value:
        raise BadOperation(f"{field}: {required}")
    if len(value) > MAX_VALUE_LENGTH:
        raise BadOperation(f"{field}: longer than {MAX_VALUE_LENGTH} characters")
    if value.startswith("-"):
        raise BadOperation(f"{field}: {value[:60]!r} starts with '-': {option}")
    if _CONTROL.search(value):
        raise BadOperation(f"{field}: holds a newline or another control character")
    return value


def check_address(value: str, field: str) -> str:
    """`value` when it is a Terraform resource or module address, else BadOperation naming `field`."""
    _one_argument(value, field, "a resource address is required", "an address is never an option")
    if ADDRESS_PATTERN.fullmatch(value) is None:
        raise BadOperation(f"{field}: {value[:200]!r} is not a Terraform resource address (TYPE.NAME, "
                           "data.TYPE.NAME, module.NAME..., with [index] or [\"key\"])")
    return value


def check_import_id(value: str, field: str = "id") -> str:
    """An import ID: the provider's own, so any printable text on one line, but never an option."""
    _one_argument(value, field, "the ID of the object to import is required", "it would be read as an option")
    if value != value.strip():
        raise BadOperation(f"{field}: starts or ends with white space")
    return value


def check_lock_id(value: str, field: str = "lockId") -> str:
    if not isinstance(value, str) or not value:
        raise BadOperation(f"{field}: the ID of the lock to release is required (terraform prints it)")
    if LOCK_ID_PATTERN.fullmatch(value) is None:
        raise BadOperation(f"{field}: {value[:60]!r} is not a lock ID (letters, digits and ._:/+=@-, at most 256, "
                           "not starting with '-')")
    return value


def missing_for(operation: OperationFields, kind: str) -> str | None:
    """The field `kind` needs and lacks (or has and must not), else None."""
    need: dict[str, tuple[str, ...]] = {
        "import": ("address", "id"), "state-rm": ("address",), "state-mv": ("source", "destination"),
        "force-unlock": ("lock_id",), "plan": (), "migrate-state": ("to",),
    }
    wanted = need.get(kind)
    if wanted is None:
        return f"operation: {kind!r} is not an operation ({', '.join(get_args(OperationKind))})"
    for name in wanted:
        if getattr(operation, name) is None:
            return f"{_camel(name)}: required by {kind}"
    extra = [name for name in ("address", "id", "source", "destination", "lock_id", "to")
             if name not in wanted and getattr(operation, name) is not None]
    if kind != "plan" and (operation.replace or operation.target):
        extra.append("replace" if operation.replace else "target")
    if extra:
        return f"{_camel(extra[0])}: not a field of {kind}"
    if kind == "plan" and not (operation.replace or operation.target):
        return "replace: a plan operation names at least one address in replace or target"
    return None


def _camel(name: str) -> str:
    head, *rest = name.split("_")
    return head + "".join(part.capitalize() for part in rest)


def describe(kind: str, operation: OperationFields) -> str:
    """One line for events and logs: `state-mv aws_instance.a -> aws_instance.b`."""
    if kind == "import":
        return f"import {operation.address} (ID {operation.id})"
    if kind == "state-rm":
        return f"state rm {operation.address}"
    if kind == "state-mv":
        return f"state mv {operation.source} -> {operation.destination}"
    if kind == "force-unlock":
        return f"force-unlock {operation.lock_id}"
    if kind == "migrate-state":
        return f"migrate-state to {operation.to}"
    parts = [*(f"-replace={a}" for a in operation.replace), *(f"-target={a}" for a in operation.target)]
    return "plan " + " ".join(parts)
