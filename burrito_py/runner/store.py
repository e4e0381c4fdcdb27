"""The runner's datastore calls, on `httpclient.py` (no httpx): the source archive and an apply's plan down to
files, its attempt's four plan formats, logs, outputs and applied record up, its run's inputs and applied record
read, and a migration's state copy. The protocol's pieces (URLs, retry policy, error answers, declared sums) are
`datastore/wire.py`, shared with `datastore/client.py`; the calls, their retries and their error messages are the
same as that client's (docs/architecture.md §9, §10)."""

from __future__ import annotations

import json
import os
import ssl
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import TypeVar
from urllib.parse import quote, urlencode

from burrito_py.datastore.wire import (
    RETRIES,
    SHA_HEADER,
    DatastoreError,
    ServerError,
    applied_record,
    applied_sum,
    check_answer,
    declared,
    retry_wait,
    run_url,
    stored_sum,
    url_path,
)
from burrito_py.httpclient import Answer, Http, TransportError

__all__ = ["DatastoreError", "RunnerStore"]

T = TypeVar("T")
Body = bytes | Path


def _checked(answer: Answer, what: str) -> Answer:
    check_answer(answer.status, answer.headers.get("retry-after"), answer.body, what)
    return answer


class RunnerStore:
    """`token` goes as a bearer token with every call, to the datastore only."""

    def __init__(self, base_url: str, token: str | None = None, timeout: float = 30.0,
                 context: ssl.SSLContext | None = None) -> None:
        headers = {"Authorization": f"Bearer {token}"} if token else {}
        self._http = Http(base_url.rstrip("/") + "/api/v1", headers, context, timeout)

    def close(self) -> None:
        self._http.close()

    def __enter__(self) -> RunnerStore:
        return self

    def __exit__(self, *_: object) -> None:
        self.close()

    # -- transport ------------------------------------------------------------------------------
    @staticmethod
    def _retry(call: Callable[[], T], what: str) -> T:
        """Every call here is idempotent: no answer and 5xx are tried again with a short backoff."""
        for attempt in range(RETRIES):
            try:
                return call()
            except (TransportError, ServerError) as exc:
                if attempt == RETRIES - 1:
                    raise DatastoreError(f"{what}: datastore unavailable ({exc})") from None
                time.sleep(retry_wait(attempt, exc.retry_after if isinstance(exc, ServerError) else 0.0))
        raise AssertionError("unreachable")

    def _put(self, url: str, data: Body, what: str) -> str | None:
        """The sum the datastore computed of what it stored (`sha256:<hex>`; None from an older datastore)."""

        def call() -> str | None:
            if isinstance(data, Path):
                with data.open("rb") as handle:  # streamed from the file, never read whole
                    answer = self._http.request("PUT", url, body=handle, headers=declared(handle))
            else:
                import hashlib  # the uploads only: not on the runner's path before `init`

                answer = self._http.request("PUT", url, body=data,
                                            headers={SHA_HEADER: hashlib.sha256(data).hexdigest()})
            sha = _checked(answer, what).headers.get(SHA_HEADER)
            return stored_sum(sha) if sha else None

        return self._retry(call, what)

    def _get(self, url: str, what: str) -> bytes:
        return self._retry(lambda: _checked(self._http.request("GET", url), what).body, what)

    def _download(self, url: str, dest: Path, what: str) -> None:
        """To `dest` whole or not at all (a temporary file beside it, renamed)."""

        def call() -> None:
            dest.parent.mkdir(parents=True, exist_ok=True)
            fd, tmp = tempfile.mkstemp(prefix=f".{dest.name}.", dir=dest.parent)
            try:
                with os.fdopen(fd, "wb") as handle:
                    _checked(self._http.request("GET", url, sink=handle), what)
                os.replace(tmp, dest)
            except BaseException:
                Path(tmp).unlink(missing_ok=True)
                raise

        self._retry(call, what)

    # -- the calls ------------------------------------------------------------------------------
    def put_plan(self, ns: str, layer: str, run: str, attempt: int, fmt: str, data: Body) -> str | None:
        return self._put(f"{run_url(ns, layer, run, attempt)}/plan?format={quote(fmt, safe='')}", data,
                         f"upload of the {fmt} plan of {ns}/{layer} run {run} attempt {attempt}")

    def download_plan(self, ns: str, layer: str, run: str, attempt: int | None, fmt: str, dest: Path) -> None:
        self._download(f"{run_url(ns, layer, run, attempt)}/plan?{urlencode({'format': fmt})}", dest,
                       f"plan of {ns}/{layer} run {run} (format {fmt})")

    def put_logs(self, ns: str, layer: str, run: str, attempt: int, data: Body) -> None:
        self._put(f"{run_url(ns, layer, run, attempt)}/logs", data,
                  f"upload of the logs of {ns}/{layer} run {run} attempt {attempt}")

    def put_outputs(self, ns: str, layer: str, run: str, attempt: int, data: Body) -> None:
        """`terraform output -json` of a successful apply (sensitive values included: never log `data`)."""
        self._put(f"{run_url(ns, layer, run, attempt)}/outputs", data,
                  f"upload of the outputs of {ns}/{layer} run {run} attempt {attempt}")

    def put_applied(self, ns: str, layer: str, run: str, attempt: int, plan_sum: str) -> None:
        """Record that this attempt applied the plan `plan_sum` (before the layer is annotated)."""
        self._put(f"{run_url(ns, layer, run, attempt)}/applied", applied_record(plan_sum, attempt),
                  f"upload of the applied record of {ns}/{layer} run {run} attempt {attempt}")

    def get_applied(self, ns: str, layer: str, run: str) -> str | None:
        """The plan sum the run's latest attempt with an applied record recorded as applied; None when none did."""
        try:
            body = self._get(f"{run_url(ns, layer, run, None)}/applied", f"applied record of {ns}/{layer} run {run}")
        except DatastoreError as exc:
            if exc.status_code == 404:
                return None
            raise
        found = applied_sum(body)
        if found is None:
            raise DatastoreError(f"applied record of {ns}/{layer} run {run} is not valid JSON")
        return found

    def get_inputs(self, ns: str, layer: str, run: str) -> bytes:
        return self._get(f"{run_url(ns, layer, run, None)}/inputs", f"inputs of {ns}/{layer} run {run}")

    def download_source(self, ns: str, repo: str, revision: str, dest: Path) -> None:
        self._download(url_path("repositories", ns, repo, "revisions", revision, "source"), dest,
                       f"source of {ns}/{repo} at {revision}")

    def copy_state_in(self, ns: str, layer: str, body: bytes, lock_info: dict[str, str]) -> None:
        """Store `body` as the layer's state exactly as given (its lineage and serial), under the state lock as
        Terraform's http backend writes: LOCK, POST `?ID=`, UNLOCK (a migration into the datastore, §5.12). The
        datastore's checks apply (another lineage, a lower serial: 409, nothing stored). The lock is released
        whatever happens. Not retried: a lost answer is seen in the state read after."""
        what = f"copy of the state into the datastore for {ns}/{layer}"
        state_url = url_path("layers", ns, layer, "state")
        lock_url, lock = f"{state_url}/lock", json.dumps(lock_info).encode()

        def once(answer: Answer, doing: str) -> None:
            if answer.status >= 500:
                raise DatastoreError(f"{what}: datastore error (HTTP {answer.status})", answer.status)
            _checked(answer, doing)

        try:
            once(self._http.request("LOCK", lock_url, body=lock), f"{what}: the state lock")
            try:
                once(self._http.request("POST", f"{state_url}?{urlencode({'ID': lock_info['ID']})}", body=body,
                                        headers={"Content-Type": "application/json"}), what)
            finally:
                self._http.request("UNLOCK", lock_url, body=lock)
        except TransportError as exc:
            raise DatastoreError(f"{what}: datastore unavailable ({exc})") from None
