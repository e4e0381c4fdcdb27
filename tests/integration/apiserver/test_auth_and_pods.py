"""KUBE-API-FIDELITY.md § Auth and pods: TokenRequest / TokenReview, and pod logs from the kubelet's files."""

from __future__ import annotations

import base64
import json
import threading
import time
from pathlib import Path
from typing import Any

import httpx
from burrito_local.apiserver import ApiServer

from tests.integration.apiserver.conftest import MERGE
from tests.support.emulator import wait_for

SA = "/api/v1/namespaces/default/serviceaccounts"
PODS = "/api/v1/namespaces/default/pods"
REVIEWS = "/apis/authentication.k8s.io/v1/tokenreviews"


def token_for(http: httpx.Client, account: str = "runner", **spec: Any) -> httpx.Response:
    return http.post(f"{SA}/{account}/token", json={"apiVersion": "authentication.k8s.io/v1", "kind": "TokenRequest",
                                                    "spec": spec})


def review(http: httpx.Client, token: str, audiences: list[str] | None = None) -> dict[str, Any]:
    spec: dict[str, Any] = {"token": token}
    if audiences is not None:
        spec["audiences"] = audiences
    response = http.post(REVIEWS, json={"apiVersion": "authentication.k8s.io/v1", "kind": "TokenReview",
                                        "spec": spec})
    assert response.status_code == 201
    status: dict[str, Any] = response.json()["status"]
    return status


def make_pod(http: httpx.Client, name: str, containers: tuple[str, ...] = ("main",)) -> dict[str, Any]:
    body = {"metadata": {"name": name}, "spec": {"containers": [{"name": c, "image": "i"} for c in containers]}}
    created: dict[str, Any] = http.post(PODS, json=body).json()
    return created


def test_token_request_issues_a_signed_token_that_token_review_authenticates(http: httpx.Client) -> None:
    account = http.post(SA, json={"metadata": {"name": "runner"}}).json()
    issued = token_for(http, audiences=["burrito-datastore"], expirationSeconds=3600)
    assert issued.status_code == 201
    body = issued.json()
    assert body["kind"] == "TokenRequest" and body["status"]["expirationTimestamp"].endswith("Z")
    token = body["status"]["token"]
    claims = json.loads(base64.urlsafe_b64decode(token.split(".")[1] + "=="))
    assert claims["sub"] == "system:serviceaccount:default:runner" and claims["aud"] == ["burrito-datastore"]
    status = review(http, token, ["burrito-datastore"])
    assert status["authenticated"] is True and status["audiences"] == ["burrito-datastore"]
    assert status["user"]["username"] == "system:serviceaccount:default:runner"
    assert status["user"]["uid"] == account["metadata"]["uid"]
    assert "system:serviceaccounts:default" in status["user"]["groups"]


def test_token_review_audiences_must_intersect(http: httpx.Client) -> None:
    http.post(SA, json={"metadata": {"name": "runner"}})
    token = token_for(http, audiences=["a", "b"]).json()["status"]["token"]
    assert review(http, token, ["b", "c"])["audiences"] == ["b"]
    assert review(http, token, ["c"])["authenticated"] is False
    assert review(http, token)["authenticated"] is False  # defaults to the API server's own audience
    default = token_for(http).json()["status"]["token"]
    assert review(http, default)["authenticated"] is True


def test_token_review_rejects_forged_expired_and_orphaned_tokens(apiserver: ApiServer, http: httpx.Client) -> None:
    http.post(SA, json={"metadata": {"name": "runner"}})
    token = token_for(http, audiences=["x"], expirationSeconds=600).json()["status"]["token"]
    head, body, signature = token.split(".")
    claims = json.loads(base64.urlsafe_b64decode(body + "=="))
    claims["sub"] = "system:serviceaccount:kube-system:admin"
    forged_body = base64.urlsafe_b64encode(json.dumps(claims).encode()).rstrip(b"=").decode()
    for forged in (f"{head}.{forged_body}.{signature}", "not-a-jwt", token[:-4] + "AAAA", ""):
        assert review(http, forged, ["x"])["authenticated"] is False, forged
    assert review(http, token, ["x"])["authenticated"] is True
    real_clock = apiserver.tokens.clock
    apiserver.tokens.clock = lambda: real_clock() + 601
    try:
        expired = review(http, token, ["x"])
        assert expired["authenticated"] is False and "expired" in expired["error"]
    finally:
        apiserver.tokens.clock = real_clock
    http.delete(f"{SA}/runner")
    assert review(http, token, ["x"])["authenticated"] is False


def test_token_request_validation_and_missing_service_account_is_404(http: httpx.Client) -> None:
    missing = token_for(http, "nobody")
    assert missing.status_code == 404 and missing.json()["message"] == 'serviceaccounts "nobody" not found'
    too_short = token_for(http, "default", expirationSeconds=60)
    assert too_short.status_code == 422
    assert too_short.json()["details"]["causes"][0]["field"] == "spec.expirationSeconds"
    unbound = token_for(http, "default", boundObjectRef={"kind": "Pod", "apiVersion": "v1", "name": "ghost"})
    assert unbound.status_code == 404


def test_pod_bound_token_carries_the_pod_and_dies_with_it(http: httpx.Client) -> None:
    pod = make_pod(http, "runner-pod")
    uid = pod["metadata"]["uid"]
    issued = token_for(http, "default", audiences=["d"],
                       boundObjectRef={"kind": "Pod", "apiVersion": "v1", "name": "runner-pod", "uid": uid})
    assert issued.status_code == 201
    token = issued.json()["status"]["token"]
    extra = review(http, token, ["d"])["user"]["extra"]
    assert extra["authentication.kubernetes.io/pod-name"] == ["runner-pod"]
    assert extra["authentication.kubernetes.io/pod-uid"] == [uid]
    wrong = token_for(http, "default", boundObjectRef={"kind": "Pod", "apiVersion": "v1", "name": "runner-pod",
                                                       "uid": "other"})
    assert wrong.status_code == 409
    http.delete(f"{PODS}/runner-pod")
    assert review(http, token, ["d"])["authenticated"] is False
    make_pod(http, "runner-pod")  # same name, new uid: the old token stays dead
    assert review(http, token, ["d"])["authenticated"] is False


def write_log(server: ApiServer, pod: str, container: str, text: str) -> Path:
    assert server.pod_log_dir is not None
    path = server.pod_log_dir / "default" / pod / f"{container}.log"
    path.parent.mkdir(parents=True, exist_ok=True)
    with path.open("a") as handle:
        handle.write(text)
    return path


def test_pod_log_serves_what_the_kubelet_captured(apiserver: ApiServer, http: httpx.Client) -> None:
    assert http.get(f"{PODS}/ghost/log").status_code == 404
    make_pod(http, "p", ("main", "side"))
    assert http.get(f"{PODS}/p/log", params={"container": "main"}).text == ""  # exists, nothing logged yet
    write_log(apiserver, "p", "main", "one\ntwo\nthree\n")
    write_log(apiserver, "p", "side", "side-car\n")
    response = http.get(f"{PODS}/p/log", params={"container": "main"})
    assert response.status_code == 200 and response.text == "one\ntwo\nthree\n"
    assert response.headers["content-type"].startswith("text/plain")
    assert http.get(f"{PODS}/p/log", params={"container": "main", "tailLines": "2"}).text == "two\nthree\n"
    assert http.get(f"{PODS}/p/log", params={"container": "side"}).text == "side-car\n"
    ambiguous = http.get(f"{PODS}/p/log")
    assert ambiguous.status_code == 400 and "container name must be specified" in ambiguous.json()["message"]
    assert http.get(f"{PODS}/p/log", params={"container": "nope"}).status_code == 400


def test_pod_log_follow_streams_until_the_pod_finishes(apiserver: ApiServer, http: httpx.Client) -> None:
    make_pod(http, "p")
    write_log(apiserver, "p", "main", "first\n")
    received: list[str] = []
    done = threading.Event()

    def follow() -> None:
        with httpx.stream("GET", f"{apiserver.url}{PODS}/p/log", params={"follow": "true"}, timeout=10,
                          headers=apiserver.admin_headers) as r:
            for chunk in r.iter_text():
                received.append(chunk)
        done.set()

    threading.Thread(target=follow, daemon=True).start()
    wait_for(lambda: "".join(received) == "first\n")
    write_log(apiserver, "p", "main", "second\n")
    wait_for(lambda: "".join(received) == "first\nsecond\n")
    assert not done.is_set()
    write_log(apiserver, "p", "main", "last words\n")
    http.patch(f"{PODS}/p/status", json={"status": {"phase": "Succeeded"}}, headers=MERGE)
    assert done.wait(5) and "".join(received) == "first\nsecond\nlast words\n"


def test_pod_log_follow_ends_when_the_pod_is_deleted(apiserver: ApiServer, http: httpx.Client) -> None:
    make_pod(http, "p")
    done = threading.Event()

    def follow() -> None:
        with httpx.stream("GET", f"{apiserver.url}{PODS}/p/log", params={"follow": "1"}, timeout=10,
                          headers=apiserver.admin_headers) as r:
            r.read()
        done.set()

    threading.Thread(target=follow, daemon=True).start()
    wait_for(lambda: any(r.path.endswith("/p/log") for r in apiserver.requests))
    started = time.monotonic()
    http.delete(f"{PODS}/p")
    assert done.wait(5) and time.monotonic() - started < 2
