"""`burrito-py state …` and `burrito-py operation …`: the server's REST API (docs/architecture.md §11.2) from the
command line, with only a kubeconfig, as `burrito-py plan download` reaches the datastore (`plan_download.py`).

The token is the kubeconfig user's (`kube_token`); the server is `--server-url` when given, else reached through the
Kubernetes API server's service proxy in the release namespace (`kube/service_proxy.py`), the token travelling again
in `X-Burrito-Py-Authorization` because the API server drops `Authorization`. The server authorizes the caller as
for any REST call (a SubjectAccessReview per request): the CLI decides nothing, it shows the server's answer. A
refusal exits non-zero with the server's reason (which names the field or the permission)."""

from __future__ import annotations

import json
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any
from urllib.parse import quote

import httpx

from burrito_py.kube.service_proxy import find_server, proxy_headers, proxy_url, tls_context
from burrito_py.plan_download import kube_token, load_kube_configuration

TIMEOUT_SECONDS = 60.0


class ServerError(Exception):
    """The server refused or failed: its status and its reason (`{"error": …}`), or why it could not be reached."""

    def __init__(self, message: str, status: int | None = None) -> None:
        super().__init__(message)
        self.status = status


def layer_ref(ref: str) -> tuple[str, str]:
    """`NAMESPACE/LAYER` (both required: an operation or a rollback on the wrong namespace's layer is a mistake
    worth refusing)."""
    namespace, slash, name = ref.partition("/")
    if not slash or not namespace or not name or "/" in name:
        raise ValueError(f"layer: expected NAMESPACE/LAYER, got {ref!r}")
    return namespace, name


def layer_path(ref: str, *parts: str | int) -> str:
    namespace, name = layer_ref(ref)
    return "/".join(["/api/layers", quote(namespace, safe=""), quote(name, safe=""),
                     *(quote(str(p), safe="") for p in parts)])


@contextmanager
def server_client(server_url: str | None, kubeconfig: Path | None, release_namespace: str) -> Iterator[httpx.Client]:
    """An HTTP client for the server's REST API with the kubeconfig user's token."""
    configuration = load_kube_configuration(kubeconfig)
    token = kube_token(configuration)
    if not token:
        raise ServerError("the kubeconfig's user has no bearer token (a token, tokenFile or exec plugin): the server "
                          "authenticates callers by their Kubernetes token")
    if server_url:
        client = httpx.Client(base_url=server_url.rstrip("/"), headers={"Authorization": f"Bearer {token}"},
                              timeout=TIMEOUT_SECONDS)
    else:
        service, port = find_server(configuration, release_namespace)
        context = tls_context(configuration)
        client = httpx.Client(base_url=proxy_url(configuration, release_namespace, service, port),
                              headers=proxy_headers(token), verify=context if context is not None else True,
                              timeout=TIMEOUT_SECONDS)
    with client:
        yield client


def call(client: httpx.Client, method: str, path: str, **kwargs: Any) -> httpx.Response:
    """The answer, or ServerError with the server's reason."""
    try:
        response = client.request(method, path, **kwargs)
    except httpx.HTTPError as exc:
        raise ServerError(f"cannot reach the server at {client.base_url}: {exc}") from None
    if response.status_code >= 400:
        try:
            reason = response.json().get("error")
        except (ValueError, AttributeError):
            reason = None
        if not isinstance(reason, str):
            # Not the server's JSON: the API server's service proxy (a Status) or something between.
            try:
                reason = response.json().get("message")
            except (ValueError, AttributeError):
                reason = None
        raise ServerError(f"HTTP {response.status_code}: {reason or response.text[:300] or response.reason_phrase}",
                          response.status_code)
    return response


# -- what the commands print ----------------------------------------------------------------------------------
def versions_table(versions: Sequence[Mapping[str, Any]]) -> str:
    """Newest first, one line each; a rollback says of which version and by whom."""
    if not versions:
        return "no state versions (the layer's state is not managed, or nothing was written yet)\n"
    rows = [("SERIAL", "CREATED", "WRITER", "RUN/ATTEMPT", "RESOURCES", "SIZE", "NOTE")]
    for v in reversed(versions):
        run = f"{v.get('run')}/{v.get('attempt')}" if v.get("run") else "-"
        note = (f"rollback of {v.get('rollbackOf')} by {v.get('requestedBy') or '?'}"
                if v.get("rollbackOf") is not None else "")
        rows.append((str(v.get("serial")), str(v.get("created") or "-"), str(v.get("writer") or "-"), run,
                     str(v.get("resources", "-")), str(v.get("size", "-")), note))
    widths = [max(len(row[i]) for row in rows) for i in range(len(rows[0]))]
    return "".join("  ".join(cell.ljust(width) for cell, width in zip(row, widths, strict=True)).rstrip() + "\n"
                   for row in rows)


def diff_text(diff: Mapping[str, Any]) -> str:
    """`+` added, `-` removed, `~` changed with the attribute names; outputs by name. Never a value."""
    lines = [f"state version {diff.get('from')} -> {diff.get('to')}"]
    lines += [f"+ {address}" for address in diff.get("added") or ()]
    lines += [f"- {address}" for address in diff.get("removed") or ()]
    lines += [f"~ {c.get('address')}: {', '.join(c.get('attributes') or ())}" for c in diff.get("changed") or ()]
    outputs = diff.get("outputs") or {}
    for sign, key in (("+", "added"), ("-", "removed"), ("~", "changed")):
        lines += [f"{sign} output.{name}" for name in outputs.get(key) or ()]
    if len(lines) == 1:
        lines.append("no resource or output changed")
    return "\n".join(lines) + "\n"


# -- the calls --------------------------------------------------------------------------------------------------
def state_versions(client: httpx.Client, ref: str) -> list[dict[str, Any]]:
    found = call(client, "GET", layer_path(ref, "state", "versions")).json()
    return [v for v in found if isinstance(v, dict)] if isinstance(found, list) else []


def state_diff(client: httpx.Client, ref: str, from_serial: int | None, to_serial: int | None) -> dict[str, Any]:
    params = {k: str(v) for k, v in (("from", from_serial), ("to", to_serial)) if v is not None}
    answer: dict[str, Any] = call(client, "GET", layer_path(ref, "state", "diff"), params=params).json()
    return answer


def state_rollback(client: httpx.Client, ref: str, serial: int) -> dict[str, Any]:
    answer: dict[str, Any] = call(client, "POST", layer_path(ref, "state", "rollback"), json={"serial": serial}).json()
    return answer


def state_download(client: httpx.Client, ref: str, serial: int) -> bytes:
    return call(client, "GET", layer_path(ref, "state", "versions", serial)).content


def operation(client: httpx.Client, ref: str, body: Mapping[str, Any]) -> dict[str, Any]:
    answer: dict[str, Any] = call(client, "POST", layer_path(ref, "operations"), json=dict(body)).json()
    return answer


def as_json(value: Any) -> str:
    return json.dumps(value, indent=2, sort_keys=True) + "\n"
