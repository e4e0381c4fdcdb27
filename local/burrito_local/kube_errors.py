"""`kind: Status` errors of the API emulator, worded as kube-apiserver words them."""

from __future__ import annotations

from typing import Any

Obj = dict[str, Any]

_REASONS = {
    400: "BadRequest",
    401: "Unauthorized",
    403: "Forbidden",
    404: "NotFound",
    405: "MethodNotAllowed",
    406: "NotAcceptable",
    409: "Conflict",
    410: "Expired",
    415: "UnsupportedMediaType",
    422: "Invalid",
    429: "TooManyRequests",
    500: "InternalError",
    503: "ServiceUnavailable",
    504: "Timeout",
}


class ApiError(Exception):
    """An API failure; `status()` is the body clients decode (reason, code, details.causes)."""

    def __init__(self, code: int, reason: str, message: str, details: Obj | None = None) -> None:
        super().__init__(message)
        self.code, self.reason, self.message, self.details = code, reason, message, details or {}

    def status(self) -> Obj:
        body: Obj = {
            "kind": "Status",
            "apiVersion": "v1",
            "metadata": {},
            "status": "Failure",
            "message": self.message,
            "reason": self.reason,
            "code": self.code,
        }
        if self.details:
            body["details"] = self.details
        return body


def reason_for(code: int) -> str:
    return _REASONS.get(code, "InternalError" if code >= 500 else "BadRequest")


def qualified(plural: str, group: str) -> str:
    """`pods`, `terraformlayers.terraform.burrito-py.io`: how errors name a resource."""
    return f"{plural}.{group}" if group else plural


def bad_request(message: str) -> ApiError:
    return ApiError(400, "BadRequest", message)


def not_found(plural: str, group: str, name: str) -> ApiError:
    details = {"name": name, "group": group, "kind": plural}
    return ApiError(404, "NotFound", f'{qualified(plural, group)} "{name}" not found', details)


def unknown_resource(path: str) -> ApiError:
    return ApiError(404, "NotFound", "the server could not find the requested resource", {"causes": [
        {"reason": "UnexpectedServerResponse", "message": f"404 page not found: {path}"}
    ]})


def already_exists(plural: str, group: str, name: str) -> ApiError:
    return ApiError(
        409,
        "AlreadyExists",
        f'{qualified(plural, group)} "{name}" already exists',
        {"name": name, "group": group, "kind": plural},
    )


def conflict(plural: str, group: str, name: str, why: str) -> ApiError:
    return ApiError(
        409,
        "Conflict",
        f'Operation cannot be fulfilled on {qualified(plural, group)} "{name}": {why}',
        {"name": name, "group": group, "kind": plural},
    )


STALE = "the object has been modified; please apply your changes to the latest version and try again"


def invalid(kind: str, group: str, name: str, causes: list[Obj]) -> ApiError:
    """422 Invalid; each cause is {reason, message, field} and the message lists `field: message`."""
    listed = [f"{c['field']}: {c['message']}" if c.get("field") else str(c["message"]) for c in causes]
    summary = listed[0] if len(listed) == 1 else "[" + ", ".join(listed) + "]"
    return ApiError(
        422,
        "Invalid",
        f'{kind}{"." + group if group else ""} "{name}" is invalid: {summary}',
        {"name": name, "group": group, "kind": kind, "causes": causes},
    )


def field_cause(field: str, message: str, reason: str = "FieldValueInvalid") -> Obj:
    return {"reason": reason, "message": message, "field": field}
