"""The runner's few Kubernetes API calls, all reads of its run, layer and repository. It writes nothing to the
API and reads no Secret or ConfigMap: the controllers record its result and hand it its variables
(docs/architecture.md §9).

Why not the `kubernetes` package: importing it costs ~0.45 s, a third of what the runner added to a small
plan, for two endpoints. The runner speaks to the API with the standard library's `http.client`
(`httpclient.py`: importing httpx cost ~0.1 s more, issue 31) and reads its configuration in `load_config()`'s
order: a kubeconfig from `$KUBECONFIG` (or `~/.kube/config`) first — the local kubelet writes one per pod — else
the in-cluster service account. Kubeconfig users with a
token, a token file or a client certificate are supported; `exec` and `auth-provider` plugins are not (a
runner in a cluster uses its service account), and say so.

Every call is retried with a bounded exponential backoff (`RETRIES` tries, 0.25 s doubling up to 4 s, about
8 s in all; a 429's `Retry-After` within that cap is honoured) when the API cannot be reached, or answers 429 or
5xx: one lost response must not fail an attempt whose apply is done (issue 11, item 4). The calls are reads
and JSON merge patches of annotations, so repeating one whose response was lost changes nothing. A loop
rather than tenacity: importing it costs ~70 ms on every runner start, for ten lines.
"""

from __future__ import annotations

import json
import os
import shutil
import ssl
import tempfile
import time
from base64 import b64decode
from pathlib import Path
from typing import Any, NamedTuple

from burrito_py.api import annotations as ann
from burrito_py.httpclient import Answer, Http, TransportError

__all__ = ["ApiConfig", "Kube", "KubeError", "backoff", "load_api_config", "retryable"]

REQUEST_TIMEOUT = 30.0
RETRIES = 6
BASE_DELAY = 0.25
MAX_DELAY = 4.0
SERVICE_ACCOUNT_DIR = Path("/var/run/secrets/kubernetes.io/serviceaccount")


class KubeError(Exception):
    """An API call failed; `status` is the HTTP status when the server answered (404: not found)."""

    def __init__(self, message: str, status: int | None = None) -> None:
        super().__init__(message)
        self.status = status


class ApiConfig(NamedTuple):
    server: str
    token: str | None = None
    verify: ssl.SSLContext | bool = True  # a context carries the CA and any client certificate
    private_dir: Path | None = None  # where inline (`-data`) key material was written; removed on close


def _kubeconfig_paths() -> list[Path]:
    listed = [Path(p).expanduser() for p in os.environ.get("KUBECONFIG", "").split(os.pathsep) if p]
    return [p for p in listed or [Path("~/.kube/config").expanduser()] if p.exists()]


def _named(items: list[dict[str, Any]] | None, name: str, what: str, source: Path) -> dict[str, Any]:
    for item in items or []:
        if item.get("name") == name:
            return dict(item.get(what) or {})
    raise KubeError(f"kubeconfig {source}: no {what} named {name!r}")


class _Private:
    """A 0700 directory for inline key material, made on first use."""

    def __init__(self) -> None:
        self.path: Path | None = None

    def file(self, name: str) -> Path:
        if self.path is None:
            self.path = Path(tempfile.mkdtemp(prefix="burrito-py-kube-"))
        return self.path / name


def _material(entry: dict[str, Any], key: str, base: Path, private: _Private) -> str | None:
    """A file path for `key` (`<key>` is a path relative to the kubeconfig, `<key>-data` base64 content)."""
    if entry.get(f"{key}-data"):
        target = private.file(key)
        target.write_bytes(b64decode(entry[f"{key}-data"]))
        return str(target)
    if entry.get(key):
        return str((base / entry[key]).expanduser())
    return None


def _parse_kubeconfig(path: Path) -> Any:
    """A kubeconfig is YAML; one written as JSON (YAML's subset, as the local kubelet writes a pod's) is read with
    the json module, without importing and running PyYAML's pure-Python parser (~0.03 s of each runner start)."""
    text = path.read_text()
    if text.lstrip().startswith("{"):
        try:
            return json.loads(text)
        except ValueError:
            pass  # YAML's flow style, not JSON: the YAML parser decides
    import yaml

    try:
        return yaml.safe_load(text)
    except yaml.YAMLError as exc:
        raise KubeError(f"kubeconfig {path} is unreadable: {exc}") from None


def _from_kubeconfig(path: Path) -> ApiConfig:
    try:
        data = _parse_kubeconfig(path) or {}
    except OSError as exc:
        raise KubeError(f"kubeconfig {path} is unreadable: {exc}") from None
    if not isinstance(data, dict):
        raise KubeError(f"kubeconfig {path} is unreadable: not a mapping")
    context_name = data.get("current-context")
    if not context_name:
        raise KubeError(f"kubeconfig {path} has no current-context")
    context = _named(data.get("contexts"), context_name, "context", path)
    cluster = _named(data.get("clusters"), context.get("cluster", ""), "cluster", path)
    user = _named(data.get("users"), context.get("user", ""), "user", path) if context.get("user") else {}
    if "exec" in user or "auth-provider" in user:
        raise KubeError(f"kubeconfig {path}: exec and auth-provider users are not supported by the runner")
    server = cluster.get("server")
    if not server:
        raise KubeError(f"kubeconfig {path}: cluster {context.get('cluster')!r} has no server")
    private = _Private()
    token = user.get("token")
    if not token and user.get("tokenFile"):
        token = (path.parent / user["tokenFile"]).read_text().strip()
    certificate = _material(user, "client-certificate", path.parent, private)
    key = _material(user, "client-key", path.parent, private)
    verify: ssl.SSLContext | bool = False
    if server.startswith("https://"):
        verify = ssl.create_default_context(cafile=_material(cluster, "certificate-authority", path.parent, private))
        if cluster.get("insecure-skip-tls-verify"):
            verify.check_hostname, verify.verify_mode = False, ssl.CERT_NONE
        if certificate and key:
            verify.load_cert_chain(certificate, key)
    return ApiConfig(server, token, verify, private.path)


def _in_cluster() -> ApiConfig:
    host, port = os.environ.get("KUBERNETES_SERVICE_HOST"), os.environ.get("KUBERNETES_SERVICE_PORT")
    token_file = SERVICE_ACCOUNT_DIR / "token"
    if not host or not port or not token_file.exists():
        raise KubeError("no Kubernetes API configuration: no kubeconfig ($KUBECONFIG, ~/.kube/config) and not "
                        "in a cluster (KUBERNETES_SERVICE_HOST/PORT and a service account token)")
    host = f"[{host}]" if ":" in host else host
    verify = ssl.create_default_context(cafile=str(SERVICE_ACCOUNT_DIR / "ca.crt"))
    return ApiConfig(f"https://{host}:{port}", token_file.read_text().strip(), verify)


def load_api_config() -> ApiConfig:
    paths = _kubeconfig_paths()
    return _from_kubeconfig(paths[0]) if paths else _in_cluster()


def retryable(status: int | None) -> bool:
    """A failure worth another try: no answer (None), too many requests, or a server error."""
    return status is None or status == 429 or status >= 500


def backoff(attempt: int, retry_after: str | None = None, base: float = BASE_DELAY, cap: float = MAX_DELAY) -> float:
    """Seconds before try `attempt + 1` (attempt counts from 0): `base` doubling, at most `cap`; a numeric
    `Retry-After` replaces it, within the same cap."""
    if retry_after is not None:
        try:
            return min(cap, max(0.0, float(retry_after)))
        except ValueError:
            pass
    return float(min(cap, base * 2**attempt))


def _tls(verify: ssl.SSLContext | bool) -> ssl.SSLContext | None:
    """The context an `https://` server is verified with: the one given, None for the default trust (httpx's, see
    httpclient.py), or, for `False`, one that checks nothing (as httpx's `verify=False`)."""
    if isinstance(verify, ssl.SSLContext):
        return verify
    if verify:
        return None
    unchecked = ssl.create_default_context()
    unchecked.check_hostname, unchecked.verify_mode = False, ssl.CERT_NONE
    return unchecked


class Kube:
    def __init__(self, config: ApiConfig, retries: int = RETRIES, base_delay: float = BASE_DELAY) -> None:
        self.retries, self.base_delay = max(1, retries), base_delay
        self._private_dir = config.private_dir
        headers = {"Authorization": f"Bearer {config.token}"} if config.token else {}
        https = config.server.startswith("https://")
        try:
            self._http = Http(config.server.rstrip("/"), headers, _tls(config.verify) if https else None,
                              REQUEST_TIMEOUT)
        except ValueError as exc:
            raise KubeError(f"the Kubernetes API server {exc}") from None

    @classmethod
    def from_config(cls) -> Kube:
        return cls(load_api_config())

    def close(self) -> None:
        self._http.close()
        if self._private_dir is not None:
            shutil.rmtree(self._private_dir, ignore_errors=True)

    def _call(self, what: str, method: str, path: str) -> dict[str, Any]:
        error = KubeError(f"{what}: not tried")
        for attempt in range(self.retries):
            retry_after: str | None = None
            try:
                return self._call_once(what, method, path)
            except _Retryable as exc:
                error, retry_after = exc.error, exc.retry_after
            if attempt == self.retries - 1:
                break
            time.sleep(backoff(attempt, retry_after, self.base_delay))
        tries = f" (after {self.retries} tries)" if self.retries > 1 else ""
        raise KubeError(f"{error}{tries}", error.status)

    def _call_once(self, what: str, method: str, path: str) -> dict[str, Any]:
        try:
            answer = self._http.request(method, path)
        except TransportError as exc:
            raise _Retryable(KubeError(f"{what}: the Kubernetes API is unreachable ({exc})")) from None
        if answer.status >= 400:
            error = KubeError(f"{what}: HTTP {answer.status} {_reason(answer)}".rstrip(), answer.status)
            if retryable(answer.status):
                raise _Retryable(error, answer.headers.get("Retry-After"))
            raise error
        try:
            body = json.loads(answer.body)
        except ValueError:
            body = None
        if not isinstance(body, dict):
            raise KubeError(f"{what}: the Kubernetes API answered with no JSON object")
        return body

    @staticmethod
    def _path(namespace: str, plural: str, name: str) -> str:
        return f"/apis/{ann.GROUP}/{ann.VERSION}/namespaces/{namespace}/{plural}/{name}"

    def get(self, plural: str, namespace: str, name: str, kind: str) -> dict[str, Any]:
        return self._call(f"cannot read {kind} {namespace}/{name}", "GET", self._path(namespace, plural, name))


class _Retryable(Exception):
    def __init__(self, error: KubeError, retry_after: str | None = None) -> None:
        super().__init__(str(error))
        self.error, self.retry_after = error, retry_after


def _reason(answer: Answer) -> str:
    """The Status message the API server sent, else the HTTP reason."""
    try:
        message = json.loads(answer.body).get("message")
    except (ValueError, AttributeError):
        message = None
    return str(message or answer.reason or "")
