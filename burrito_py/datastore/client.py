"""HTTP client of the datastore, used by the runner, the controllers and `burrito-py plan download`."""

from __future__ import annotations

import hashlib
import json
import os
import ssl
import tempfile
import threading
import time
from collections.abc import Callable, Generator, Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Any, Literal, TypeVar
from urllib.parse import quote, urlencode, urlsplit
from urllib.request import getproxies, proxy_bypass

import httpx

# The protocol's pieces the runner's own client (runner/store.py) shares.
from burrito_py.datastore.wire import (
    RETRIES,
    SHA_HEADER,
    TREE_HEADER,
    DatastoreError,
    ServerError,
    applied_record,
    applied_sum,
    check_answer,
    retry_wait,
)
from burrito_py.datastore.wire import declared as _declared
from burrito_py.datastore.wire import run_url as _run_url
from burrito_py.datastore.wire import stored_sum as _sum
from burrito_py.datastore.wire import url_path as _path
from burrito_py.httpclient import Http, TransportError
from burrito_py.kube.pod_paths import pod_path

__all__ = ["RETRIES", "SHA_HEADER", "TREE_HEADER", "DatastoreClient", "DatastoreError", "NotTheRecordedObject",
           "StoredObject", "applied_sum", "datastore_client"]

PlanFormat = Literal["bin", "json", "pretty", "short"]
Body = bytes | IO[bytes] | Path
T = TypeVar("T")


class NotTheRecordedObject(DatastoreError):
    """An object above the size the reader takes, or whose bytes do not have the recorded sum: reading it again
    gives the same answer."""


@dataclass(frozen=True, slots=True)
class StoredObject:
    """What the datastore recorded for an object: `sha256:<hex>` of its bytes (computed by the datastore as it
    stored them, never the writer's claim) and their size."""

    sha256: str
    size: int


class BearerTokenFile(httpx.Auth):
    """Sends the token a file holds now: the kubelet rewrites projected service-account tokens before they
    expire, so a long-lived client (the controllers) re-reads the file when it changes."""

    def __init__(self, path: Path) -> None:
        self._path = path
        self._seen: tuple[float, int] | None = None
        self._token = ""

    def token(self) -> str:
        try:
            stat = self._path.stat()
            if self._seen != (stat.st_mtime, stat.st_size):
                self._token = self._path.read_text().strip()
                self._seen = (stat.st_mtime, stat.st_size)
        except OSError as exc:
            raise DatastoreError(f"cannot read the datastore token {self._path}: {exc.strerror}") from None
        return self._token

    def auth_flow(self, request: httpx.Request) -> Generator[httpx.Request, httpx.Response, None]:
        token = self.token()
        if token:
            request.headers["Authorization"] = f"Bearer {token}"
        yield request


class DatastoreClient:
    """`token` is sent as a bearer token; `token_file` instead names a file holding it (re-read when it
    changes)."""

    def __init__(
        self,
        base_url: str,
        token: str | None = None,
        timeout: float = 30.0,
        token_file: Path | None = None,
        headers: Mapping[str, str] | None = None,
        verify: ssl.SSLContext | None = None,
    ) -> None:
        """`headers` and `verify` serve a client going through the Kubernetes API's service proxy
        (`burrito_py.kube.service_proxy`): the API server's credentials and CA."""
        sent = {"Authorization": f"Bearer {token}"} if token else {}
        sent.update(headers or {})
        self._token_file = BearerTokenFile(token_file) if token_file is not None else None
        # Plain http needs no TLS context; building the default one (the CA bundle) costs ~0.2 s per runner.
        tls: ssl.SSLContext | bool = verify if verify is not None else base_url.startswith("https://")
        api = base_url.rstrip("/") + "/api/v1"
        self._http = httpx.Client(base_url=api, headers=sent, timeout=timeout, verify=tls, auth=self._token_file)
        # Downloads to a file go through http.client (httpclient.py), which reads 1 MiB at a time: httpx's
        # transport reads 64 KiB, which held a 50 MiB download at ~0.65x boto3's get_object (0.93x so, issue 31).
        # Not through a proxy the environment names for the datastore: httpx honours it, http.client does not.
        proxied = bool(getproxies().get(urlsplit(api).scheme)) and not proxy_bypass(urlsplit(api).hostname or "")
        self._bulk_args = None if proxied else (api, sent, verify, timeout)
        self._bulk: Http | None = None  # made at the first download: an https one loads a CA bundle
        self._bulk_lock = threading.Lock()  # the controllers download from several threads

    def close(self) -> None:
        self._http.close()
        if self._bulk is not None:
            self._bulk.close()

    def _bulk_http(self) -> Http | None:
        with self._bulk_lock:
            if self._bulk is None and self._bulk_args is not None:
                self._bulk = Http(*self._bulk_args)
            return self._bulk

    def __enter__(self) -> DatastoreClient:
        return self

    def __exit__(self, *_: object) -> None:
        self.close()

    # -- transport ------------------------------------------------------------------------------
    def _retry(self, call: Callable[[], T]) -> T:
        """PUTs, GETs and DELETEs here are idempotent: retry connection errors and 5xx with a short backoff."""
        for attempt in range(RETRIES):
            try:
                return call()
            except (httpx.TransportError, TransportError, ServerError) as exc:
                if attempt == RETRIES - 1:
                    raise
                # An overloaded datastore says when to come back (503 + Retry-After, docs/architecture.md §10.7).
                time.sleep(retry_wait(attempt, exc.retry_after if isinstance(exc, ServerError) else 0.0))
        raise AssertionError("unreachable")

    @staticmethod
    def _check(response: httpx.Response, what: str) -> None:
        if response.status_code >= 300:
            check_answer(response.status_code, response.headers.get("retry-after"), response.content, what)

    def _put(self, url: str, data: Body | None, what: str, headers: dict[str, str] | None = None) -> str | None:
        """The sum the datastore computed of what it stored (`sha256:<hex>`; None from an older datastore)."""

        def call() -> str | None:
            if data is None:
                response = self._http.put(url, content=b"", headers=headers)
            elif isinstance(data, Path):
                with data.open("rb") as handle:
                    response = self._http.put(url, content=_chunks(handle),
                                              headers={**(headers or {}), **_declared(handle)})
            elif isinstance(data, bytes):
                declared = {SHA_HEADER: hashlib.sha256(data).hexdigest()}
                response = self._http.put(url, content=data, headers={**(headers or {}), **declared})
            else:
                data.seek(0)
                response = self._http.put(url, content=_chunks(data), headers=headers)
            self._check(response, what)
            sha = response.headers.get(SHA_HEADER)
            return _sum(sha) if sha else None

        try:
            return self._retry(call)
        except (httpx.TransportError, ServerError) as exc:
            raise DatastoreError(f"{what}: datastore unavailable ({exc})") from None

    def _head(self, url: str, what: str, params: dict[str, str] | None = None) -> StoredObject | None:
        """What the datastore recorded for an object; None when it does not exist."""

        def call() -> StoredObject | None:
            response = self._http.head(url, params=params)
            if response.status_code >= 500:
                raise ServerError(response.status_code, response.headers.get("retry-after"))
            if response.status_code == 404:
                return None
            self._check(response, what)
            sha, size = response.headers.get(SHA_HEADER), response.headers.get("content-length", "")
            if not sha or not size.isdigit():
                raise DatastoreError(f"{what}: the datastore recorded no sum (an older datastore?)")
            return StoredObject(_sum(sha), int(size))

        try:
            return self._retry(call)
        except (httpx.TransportError, ServerError) as exc:
            raise DatastoreError(f"{what}: datastore unavailable ({exc})") from None

    def _get_verified(self, url: str, what: str, max_bytes: int, expected: str,
                      params: dict[str, str] | None = None) -> bytes:
        """The object, read only up to `max_bytes` (more is an error, never held) and only if its bytes have
        the sum `expected` (`sha256:<hex>`)."""

        def call() -> bytes:
            with self._http.stream("GET", url, params=params) as response:
                if response.status_code >= 300:
                    response.read()
                self._check(response, what)
                declared = response.headers.get("content-length", "")
                if declared.isdigit() and int(declared) > max_bytes:
                    raise NotTheRecordedObject(f"{what}: {declared} bytes, above the limit of {max_bytes}")
                digest, parts, size = hashlib.sha256(), [], 0
                for chunk in response.iter_bytes():
                    size += len(chunk)
                    if size > max_bytes:
                        raise NotTheRecordedObject(f"{what}: more than the limit of {max_bytes} bytes")
                    digest.update(chunk)
                    parts.append(chunk)
            got = _sum(digest.hexdigest())
            if got != expected:
                raise NotTheRecordedObject(f"{what}: its bytes have the sum {got}, not the recorded {expected}")
            return b"".join(parts)

        try:
            return self._retry(call)
        except (httpx.TransportError, ServerError) as exc:
            raise DatastoreError(f"{what}: datastore unavailable ({exc})") from None

    def _get(self, url: str, what: str, params: dict[str, str] | None = None) -> bytes:
        def call() -> bytes:
            response = self._http.get(url, params=params)
            self._check(response, what)
            return response.content

        try:
            return self._retry(call)
        except (httpx.TransportError, ServerError) as exc:
            raise DatastoreError(f"{what}: datastore unavailable ({exc})") from None

    def _delete(self, url: str, what: str) -> None:
        def call() -> None:
            self._check(self._http.delete(url), what)

        try:
            self._retry(call)
        except (httpx.TransportError, ServerError) as exc:
            raise DatastoreError(f"{what}: datastore unavailable ({exc})") from None

    def _download(self, url: str, dest: Path, what: str, params: dict[str, str] | None = None) -> None:
        """To `dest` whole or not at all (a temporary file beside it, renamed)."""

        def call() -> None:
            dest.parent.mkdir(parents=True, exist_ok=True)
            fd, tmp = tempfile.mkstemp(prefix=f".{dest.name}.", dir=dest.parent)
            try:
                with os.fdopen(fd, "wb") as handle:
                    if (bulk := self._bulk_http()) is not None:
                        token = self._token_file.token() if self._token_file is not None else ""
                        answer = bulk.request("GET", url + (f"?{urlencode(params)}" if params else ""),
                                              headers={"Authorization": f"Bearer {token}"} if token else None,
                                              sink=handle)
                        check_answer(answer.status, answer.headers.get("retry-after"), answer.body, what)
                    else:
                        with self._http.stream("GET", url, params=params) as response:
                            if response.status_code >= 300:
                                response.read()
                            self._check(response, what)
                            for chunk in response.iter_bytes():
                                handle.write(chunk)
                os.replace(tmp, dest)
            except BaseException:
                Path(tmp).unlink(missing_ok=True)
                raise

        try:
            self._retry(call)
        except (httpx.TransportError, TransportError, ServerError) as exc:
            raise DatastoreError(f"{what}: datastore unavailable ({exc})") from None

    # -- plans, logs and outputs -----------------------------------------------------------------
    _run_url = staticmethod(_run_url)

    def put_plan(self, ns: str, layer: str, run: str, attempt: int, fmt: PlanFormat, data: Body) -> str | None:
        return self._put(
            f"{self._run_url(ns, layer, run, attempt)}/plan?format={quote(fmt, safe='')}",
            data,
            f"upload of the {fmt} plan of {ns}/{layer} run {run} attempt {attempt}",
        )

    def get_plan(self, ns: str, layer: str, run: str, attempt: int | None, fmt: PlanFormat) -> bytes:
        where = f"attempt {attempt}" if attempt is not None else "any attempt"
        return self._get(
            f"{self._run_url(ns, layer, run, attempt)}/plan",
            f"plan of {ns}/{layer} run {run} {where} (format {fmt})",
            {"format": fmt},
        )

    def stat_plan(self, ns: str, layer: str, run: str, attempt: int, fmt: PlanFormat) -> StoredObject | None:
        """The sum and size the datastore recorded for one attempt's plan in that format; None when absent."""
        return self._head(f"{self._run_url(ns, layer, run, attempt)}/plan",
                          f"plan of {ns}/{layer} run {run} attempt {attempt} (format {fmt})", {"format": fmt})

    def get_plan_verified(self, ns: str, layer: str, run: str, attempt: int, fmt: PlanFormat, max_bytes: int,
                          expected: str) -> bytes:
        """One attempt's plan, only if at most `max_bytes` and of the sum `expected` (else DatastoreError)."""
        return self._get_verified(f"{self._run_url(ns, layer, run, attempt)}/plan",
                                  f"plan of {ns}/{layer} run {run} attempt {attempt} (format {fmt})", max_bytes,
                                  expected, {"format": fmt})

    def download_plan(self, ns: str, layer: str, run: str, attempt: int | None, fmt: PlanFormat, dest: Path) -> None:
        self._download(
            f"{self._run_url(ns, layer, run, attempt)}/plan",
            dest,
            f"plan of {ns}/{layer} run {run} (format {fmt})",
            {"format": fmt},
        )

    def put_logs(self, ns: str, layer: str, run: str, attempt: int, data: Body) -> None:
        self._put(
            f"{self._run_url(ns, layer, run, attempt)}/logs",
            data,
            f"upload of the logs of {ns}/{layer} run {run} attempt {attempt}",
        )

    def get_logs(self, ns: str, layer: str, run: str, attempt: int) -> bytes:
        return self._get(
            f"{self._run_url(ns, layer, run, attempt)}/logs", f"logs of {ns}/{layer} run {run} attempt {attempt}"
        )

    def put_outputs(self, ns: str, layer: str, run: str, attempt: int, data: Body) -> None:
        """`terraform output -json` of a successful apply (sensitive values included: never log `data`)."""
        self._put(
            f"{self._run_url(ns, layer, run, attempt)}/outputs",
            data,
            f"upload of the outputs of {ns}/{layer} run {run} attempt {attempt}",
        )

    def stat_outputs(self, ns: str, layer: str, run: str, attempt: int) -> StoredObject | None:
        return self._head(f"{self._run_url(ns, layer, run, attempt)}/outputs",
                          f"outputs of {ns}/{layer} run {run} attempt {attempt}")

    def get_outputs(self, ns: str, layer: str, run: str, attempt: int) -> bytes:
        return self._get(
            f"{self._run_url(ns, layer, run, attempt)}/outputs",
            f"outputs of {ns}/{layer} run {run} attempt {attempt}",
        )

    def put_review(self, ns: str, layer: str, run: str, attempt: int, body: bytes) -> None:
        """The controllers' review (policy verdict, drift) of this attempt's plan; only they may write it."""
        self._put(
            f"{self._run_url(ns, layer, run, attempt)}/review",
            body,
            f"upload of the review of {ns}/{layer} run {run} attempt {attempt}",
        )

    def put_inputs(self, ns: str, layer: str, run: str, body: bytes) -> None:
        """The upstream outputs a plan run is given as variables (dependencies); only the controllers write it."""
        self._put(f"{self._run_url(ns, layer, run, None)}/inputs", body,
                  f"upload of the inputs of {ns}/{layer} run {run}")

    def get_inputs(self, ns: str, layer: str, run: str) -> bytes:
        return self._get(f"{self._run_url(ns, layer, run, None)}/inputs", f"inputs of {ns}/{layer} run {run}")

    def get_review(self, ns: str, layer: str, run: str, attempt: int) -> bytes:
        return self._get(
            f"{self._run_url(ns, layer, run, attempt)}/review",
            f"review of {ns}/{layer} run {run} attempt {attempt}",
        )

    def put_applied(self, ns: str, layer: str, run: str, attempt: int, plan_sum: str) -> None:
        """Record that this attempt applied the plan `plan_sum` (before the layer is annotated)."""
        body = applied_record(plan_sum, attempt)
        self._put(
            f"{self._run_url(ns, layer, run, attempt)}/applied",
            body,
            f"upload of the applied record of {ns}/{layer} run {run} attempt {attempt}",
        )

    def get_applied(self, ns: str, layer: str, run: str, attempt: int | None = None) -> str | None:
        """The plan sum the run's latest attempt with an applied record (or attempt `attempt`) recorded as
        applied; None when none did."""
        body = self.get_applied_record(ns, layer, run, attempt)
        if body is None:
            return None
        found = applied_sum(body)
        if found is None:
            raise DatastoreError(f"applied record of {ns}/{layer} run {run} is not valid JSON")
        return found

    def get_applied_record(self, ns: str, layer: str, run: str, attempt: int | None = None) -> bytes | None:
        """The raw applied record (see `get_applied`); None when there is none."""
        try:
            url = f"{self._run_url(ns, layer, run, attempt)}/applied"
            return self._get(url, f"applied record of {ns}/{layer} run {run}")
        except DatastoreError as exc:
            if exc.status_code == 404:
                return None
            raise

    def state_versions(self, ns: str, layer: str) -> bytes:
        """A managed-state layer's kept versions' records (JSON list, oldest first; docs/architecture.md §10.6)."""
        return self._get(_path("layers", ns, layer, "state", "versions"),
                         f"state versions of {ns}/{layer}")

    def get_state_version(self, ns: str, layer: str, serial: int) -> bytes:
        return self._get(_path("layers", ns, layer, "state", "versions", serial),
                         f"state version {serial} of {ns}/{layer}")

    def post_state(self, ns: str, layer: str, body: bytes, rollback_of: int, requested_by: str) -> dict[str, Any]:
        """Store `body` as the layer's next state version, recorded as a rollback to `rollback_of` asked by
        `requested_by` (admins only; docs/architecture.md §10.6). Not retried: a lost answer is seen in the versions."""
        what = f"rollback of the state of {ns}/{layer} to version {rollback_of}"
        response = self._http.post(_path("layers", ns, layer, "state"), content=body,
                                   params={"rollbackOf": str(rollback_of), "requestedBy": requested_by},
                                   headers={"Content-Type": "application/json"})
        if response.status_code >= 500:
            raise DatastoreError(f"{what}: datastore error (HTTP {response.status_code})", response.status_code)
        self._check(response, what)
        answer = response.json()
        return answer if isinstance(answer, dict) else {}

    def copy_state_in(self, ns: str, layer: str, body: bytes, lock_info: dict[str, str]) -> dict[str, Any]:
        """Store `body` as the layer's state exactly as given (its lineage and serial), under the state lock as
        Terraform's http backend writes: LOCK, POST `?ID=`, UNLOCK (a migration into the datastore, docs/architecture.md
        §5.12). The datastore's checks apply: another lineage or a lower serial than it holds is a 409 and nothing is
        stored. The lock is released whatever happens. Not retried: a lost answer is seen in the state read after."""
        what = f"copy of the state into the datastore for {ns}/{layer}"
        lock_url, lock = _path("layers", ns, layer, "state", "lock"), json.dumps(lock_info).encode()
        try:
            taken = self._http.request("LOCK", lock_url, content=lock)
            if taken.status_code >= 500:
                raise DatastoreError(f"{what}: datastore error (HTTP {taken.status_code})", taken.status_code)
            self._check(taken, f"{what}: the state lock")
            try:
                response = self._http.post(_path("layers", ns, layer, "state"), content=body,
                                           params={"ID": lock_info["ID"]},
                                           headers={"Content-Type": "application/json"})
                if response.status_code >= 500:
                    raise DatastoreError(f"{what}: datastore error (HTTP {response.status_code})",
                                         response.status_code)
                self._check(response, what)
            finally:
                self._http.request("UNLOCK", lock_url, content=lock)
        except httpx.TransportError as exc:
            raise DatastoreError(f"{what}: datastore unavailable ({exc})") from None
        answer = response.json()
        return answer if isinstance(answer, dict) else {}

    def get_state_lock(self, ns: str, layer: str) -> dict[str, Any] | None:
        """The lock record of a managed-state layer's state (docs/architecture.md §10.6), None when not locked."""
        try:
            raw = self._get(_path("layers", ns, layer, "state", "lock"), f"state lock of {ns}/{layer}")
        except DatastoreError as exc:
            if exc.status_code == 404:
                return None
            raise
        parsed = json.loads(raw)
        return parsed if isinstance(parsed, dict) else None

    def unlock_state(self, ns: str, layer: str, lock_id: str) -> None:
        """Release the lock `lock_id` holds (an admin's UNLOCK naming it: a lock taken since, under another ID, stays;
        409 then). Releasing what is not locked is fine."""
        what = f"unlock of the state of {ns}/{layer}"

        def call() -> None:
            response = self._http.request("UNLOCK", _path("layers", ns, layer, "state", "lock"),
                                          content=json.dumps({"ID": lock_id}).encode())
            self._check(response, what)

        try:
            self._retry(call)
        except (httpx.TransportError, ServerError) as exc:
            raise DatastoreError(f"{what}: datastore unavailable ({exc})") from None

    def delete_run(self, namespace: str, layer: str, run: str) -> None:
        """Delete everything the run stored (every attempt's plans, logs, outputs, records, and its inputs), as
        when a closed pull request's plan runs are thrown away. Only admins (the controllers) may; succeeds
        when nothing is stored, so a retry after a lost answer is fine."""
        self._delete(self._run_url(namespace, layer, run, None), f"deletion of {namespace}/{layer} run {run}")

    # -- sources --------------------------------------------------------------------------------
    def _exists(self, url: str, what: str) -> bool:
        def call() -> bool:
            response = self._http.head(url)
            if response.status_code >= 500:
                raise ServerError(response.status_code, response.headers.get("retry-after"))
            if response.status_code not in (200, 404):
                self._check(response, what)
            return response.status_code == 200

        try:
            return self._retry(call)
        except (httpx.TransportError, ServerError) as exc:
            raise DatastoreError(f"{what}: datastore unavailable ({exc})") from None

    def has_tree(self, ns: str, repo: str, tree_id: str) -> bool:
        return self._exists(_path("repositories", ns, repo, "trees", tree_id), f"tree {tree_id} of {ns}/{repo}")

    def has_source(self, ns: str, repo: str, revision: str) -> bool:
        return self._exists(
            _path("repositories", ns, repo, "revisions", revision, "source"), f"source of {ns}/{repo} at {revision}"
        )

    def put_source(self, ns: str, repo: str, revision: str, tree_id: str, data: Body | None) -> None:
        """`data=None` links the revision to a tree already stored."""
        self._put(
            _path("repositories", ns, repo, "revisions", revision, "source"),
            data,
            f"upload of the source of {ns}/{repo} at {revision}",
            headers={TREE_HEADER: tree_id},
        )

    def download_source(self, ns: str, repo: str, revision: str, dest: Path) -> None:
        self._download(
            _path("repositories", ns, repo, "revisions", revision, "source"),
            dest,
            f"source of {ns}/{repo} at {revision}",
        )


def _chunks(handle: IO[bytes], size: int = 1024 * 1024) -> Iterator[bytes]:
    while chunk := handle.read(size):
        yield chunk


DATASTORE_TOKEN_PATH = Path("/var/run/secrets/burrito-py/token")


def datastore_client(url: str, token_path: Path | None, kubeconfig: Path | None) -> DatastoreClient:
    """The controllers' and server's datastore client. In a pod: the projected service-account token file
    (`token_path`, else the standard mount; re-read as it rotates); locally: the kubeconfig user's token
    (`burrito-py dev` makes that a service account the datastore knows)."""
    mounted = pod_path(DATASTORE_TOKEN_PATH)
    token_file = token_path or (mounted if mounted.exists() else None)
    if token_file is not None:
        return DatastoreClient(url, token_file=token_file)
    from burrito_py.kube.kubeconfig import read_kubeconfig  # here: it imports PyYAML, which runners do without

    token = read_kubeconfig(kubeconfig).token if kubeconfig is not None else None
    return DatastoreClient(url, token=token)
