"""A small async Kubernetes client over `kubernetes_asyncio`, returning plain dicts for every kind.

The controllers keep bodies as dicts (the same shape kopf hands to handlers), so one generic
wrapper serves custom resources, pods, leases and events alike.
"""

from __future__ import annotations

import asyncio
import builtins
import json
from collections.abc import AsyncIterator, Mapping
from typing import Any
from urllib.parse import unquote

from kubernetes_asyncio import client, config
from kubernetes_asyncio.client.exceptions import ApiException

from burrito_py.api import annotations as ann

Body = dict[str, Any]
MERGE_PATCH = "application/merge-patch+json"
JSON_PATCH = "application/json-patch+json"


class KubeError(Exception):
    def __init__(self, status: int, reason: str, message: str) -> None:
        super().__init__(f"{status} {reason}: {message}")
        self.status, self.reason, self.message = status, reason, message


def _error(exc: ApiException) -> KubeError:
    reason, message = str(exc.reason or ""), ""
    try:
        status = json.loads(exc.body or "{}")
        reason, message = status.get("reason", reason), status.get("message", "")
    except (TypeError, ValueError):
        message = str(exc.body or "")[:200]
    return KubeError(int(exc.status or 0), reason, message)


# client-go's rest client: a 429 or 5xx answer with Retry-After is retried after that many seconds, at most 10
# times (`maxRetries`). kube-apiserver sends one while a new resource's storage initializes ("storage is
# (re)initializing", Retry-After: 1) and when API Priority and Fairness sheds load; the request was not processed.
RETRY_AFTER_ATTEMPTS = 10
RETRY_AFTER_CAP = 10.0  # seconds; a longer Retry-After is waited for this long (a caller's own deadline still binds)


def retry_after(status: int, headers: Mapping[str, str] | None) -> float | None:
    """Seconds to wait before sending the request again, or None: do not retry (client-go's `checkWait`: only a
    429 or 5xx answer carrying a whole number of seconds in Retry-After)."""
    if status != 429 and status < 500:
        return None
    value = next((v for k, v in (headers or {}).items() if k.lower() == "retry-after"), None)
    if value is None or not value.strip().isdigit():
        return None
    return min(float(value.strip()), RETRY_AFTER_CAP)


class UnsafePathSegment(KubeError):
    """A namespace, name or subresource that would not stay one segment of an API path: a 400 before anything is
    sent, so every caller that reports a refused read reports it."""

    def __init__(self, message: str) -> None:
        super().__init__(400, "Invalid", message)


def _segment(what: str, value: str) -> str:
    # The HTTP client resolves `..` (also percent-encoded) and a `/` adds segments: a name read from a tenant's
    # spec (`varsFrom`, a Secret reference) could then reach an object of another namespace with the controllers'
    # rights. Refused, whoever calls.
    if value in (".", "..") or any(c in value for c in "/%?#\\") or not value.isprintable() or " " in value:
        raise UnsafePathSegment(f"{what} {value[:80]!r} is not an object name")
    return value


def _dot_segments(resource_path: str) -> bool:
    """Whether the HTTP client would resolve a segment of the path (`.`, `..`, or one percent-encoded)."""
    return any(unquote(segment) in (".", "..") for segment in resource_path.split("/"))


def path(
    api_version: str, plural: str, namespace: str | None = None, name: str | None = None, sub: str | None = None
) -> str:
    """The API path of a collection or an object. Every part given must be one plain segment (UnsafePathSegment)."""
    base = "/api/v1" if api_version == "v1" else f"/apis/{api_version}"
    parts = [base]
    if namespace:
        parts.append(f"namespaces/{_segment('namespace', namespace)}")
    parts.append(plural)
    if name:
        parts.append(_segment("name", name))
    if sub:
        parts.append(_segment("subresource", sub))
    return "/".join(parts)


def crd_path(plural: str, namespace: str | None = None, name: str | None = None, sub: str | None = None) -> str:
    return path(ann.API_VERSION, plural, namespace, name, sub)


class Kube:
    def __init__(self, api_client: client.ApiClient) -> None:
        self._api = api_client

    @classmethod
    async def connect(cls, kubeconfig: str | None = None) -> Kube:
        """Kubeconfig ($KUBECONFIG or the given file) first, in-cluster service account otherwise."""
        configuration = client.Configuration()
        try:
            await config.load_kube_config(config_file=kubeconfig, client_configuration=configuration)
        except config.ConfigException:
            config.load_incluster_config(client_configuration=configuration)  # type: ignore[no-untyped-call]
        return cls(client.ApiClient(configuration=configuration))

    async def close(self) -> None:
        await self._api.close()

    async def _call(
        self,
        method: str,
        resource_path: str,
        *,
        body: Any = None,
        query: Mapping[str, Any] | None = None,
        content_type: str = "application/json",
        response: str = "object",
    ) -> Any:
        if _dot_segments(resource_path):  # whatever built the path: it would address something else
            raise UnsafePathSegment(f"the path {resource_path[:200]!r} has a dot segment")
        for attempt in range(RETRY_AFTER_ATTEMPTS + 1):
            try:
                return await self._api.call_api(
                    resource_path,
                    method,
                    query_params=[(k, v) for k, v in (query or {}).items() if v is not None],
                    header_params={"Accept": "application/json", "Content-Type": content_type},
                    body=body,
                    response_types_map={200: response, 201: response, 202: response},
                    auth_settings=["BearerToken"],
                    _return_http_data_only=True,
                )
            except ApiException as exc:
                wait = retry_after(int(exc.status or 0), exc.headers)
                if wait is None or attempt == RETRY_AFTER_ATTEMPTS:
                    raise _error(exc) from None
            await asyncio.sleep(wait)
        raise AssertionError("unreachable")  # the last attempt returns or raises

    async def get(self, resource_path: str) -> Body | None:
        try:
            result: Body = await self._call("GET", resource_path)
        except KubeError as exc:
            if exc.status == 404:
                return None
            raise
        return result

    async def list(self, resource_path: str, label_selector: str | None = None) -> list[Body]:
        result = await self._call("GET", resource_path, query={"labelSelector": label_selector})
        items: list[Body] = result.get("items") or []
        return items

    async def list_versioned(self, resource_path: str, field_selector: str | None = None
                             ) -> tuple[builtins.list[Body], str]:
        """The items and the list's resourceVersion, to watch from. `metadata.name=<n>` as `field_selector` lists
        one object with RBAC limited to that name."""
        result = await self._call("GET", resource_path, query={"fieldSelector": field_selector})
        return result.get("items") or [], str((result.get("metadata") or {}).get("resourceVersion") or "")

    async def create(self, resource_path: str, body: Mapping[str, Any]) -> Body:
        result: Body = await self._call("POST", resource_path, body=dict(body))
        return result

    async def replace(self, resource_path: str, body: Mapping[str, Any]) -> Body:
        result: Body = await self._call("PUT", resource_path, body=dict(body))
        return result

    async def merge_patch(self, resource_path: str, patch: Mapping[str, Any]) -> Body:
        result: Body = await self._call("PATCH", resource_path, body=dict(patch), content_type=MERGE_PATCH)
        return result

    async def json_patch(self, resource_path: str, operations: builtins.list[Mapping[str, Any]]) -> Body:
        """RFC 6902: a failed `test` operation is a 422 and changes nothing."""
        result: Body = await self._call("PATCH", resource_path, body=[dict(o) for o in operations],
                                        content_type=JSON_PATCH)
        return result

    async def remove_annotations(self, resource_path: str, acted_on: Mapping[str, str]) -> Body | None:
        """Remove each annotation that still holds the value it was acted on with; one rewritten since (a person's
        new request) stays, to be decided on. The object as stored after; None when it is gone.

        A merge patch would remove whatever value is there now: a request written between the read that acted and
        this removal would be lost without a trace."""
        wanted = dict(acted_on)
        for _ in range(3):
            if not wanted:
                return await self.get(resource_path)
            operations: builtins.list[Mapping[str, Any]] = []
            for key, value in wanted.items():
                pointer = "/metadata/annotations/" + key.replace("~", "~0").replace("/", "~1")
                operations += [{"op": "test", "path": pointer, "value": value}, {"op": "remove", "path": pointer}]
            try:
                return await self.json_patch(resource_path, operations)
            except KubeError as exc:
                if exc.status == 404:
                    return None
                if exc.status != 422:
                    raise
            # Some value changed or went: remove only those still as acted on.
            current = await self.get(resource_path)
            if current is None:
                return None
            present = (current.get("metadata") or {}).get("annotations") or {}
            wanted = {k: v for k, v in wanted.items() if present.get(k) == v}
        raise KubeError(409, "Conflict", f"{resource_path}: annotations kept changing while being removed")

    async def delete(
        self, resource_path: str, *, resource_version: str | None = None, uid: str | None = None,
        propagation: str = "Background",
    ) -> bool:
        """False when it was already gone; a stale `resource_version` or another `uid` (a same-named object that
        replaced it) precondition raises 409."""
        options: Body = {"kind": "DeleteOptions", "apiVersion": "v1", "propagationPolicy": propagation}
        preconditions = {k: v for k, v in (("resourceVersion", resource_version), ("uid", uid)) if v}
        if preconditions:
            options["preconditions"] = preconditions
        try:
            await self._call("DELETE", resource_path, body=options)
        except KubeError as exc:
            if exc.status == 404:
                return False
            raise
        return True

    async def read_text(self, resource_path: str, query: Mapping[str, Any] | None = None) -> str:
        text: str = await self._call("GET", resource_path, query=query, response="str")
        return text

    async def watch(
        self, resource_path: str, resource_version: str, timeout_seconds: int = 300, field_selector: str | None = None
    ) -> AsyncIterator[Body]:
        """The watch events of a collection from `resource_version` until the server ends the stream
        (after `timeout_seconds`, or when the resource stops being served); a refused watch raises."""
        if _dot_segments(resource_path):
            raise UnsafePathSegment(f"the path {resource_path[:200]!r} has a dot segment")
        query = [("watch", "true"), ("resourceVersion", resource_version), ("allowWatchBookmarks", "true"),
                 ("timeoutSeconds", str(timeout_seconds))]
        if field_selector:
            query.append(("fieldSelector", field_selector))
        response = await self._api.call_api(
            resource_path, "GET", query_params=query, header_params={"Accept": "application/json"},
            auth_settings=["BearerToken"], _preload_content=False, _request_timeout=timeout_seconds + 30,
        )
        try:
            if response.status != 200:
                body = await response.text()
                try:
                    status = json.loads(body)
                except ValueError:
                    status = {}
                raise KubeError(response.status, str(status.get("reason", "")), str(status.get("message", body[:200])))
            async for line in response.content:
                if line.strip():
                    yield json.loads(line)
        finally:
            response.release()
