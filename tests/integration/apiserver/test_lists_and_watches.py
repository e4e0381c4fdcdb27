"""KUBE-API-FIDELITY.md § Lists and watches."""

from __future__ import annotations

import json
import threading
import time
from typing import Any

import httpx
from burrito_local.apiserver import ApiServer
from kubernetes import client, watch

from tests.integration.apiserver.conftest import CMS, MERGE, cm, stream_lines
from tests.support.emulator import wait_for, watching

PODS = "/api/v1/namespaces/default/pods"
EVENTS = "/api/v1/namespaces/default/events"


def names(response: httpx.Response) -> list[str]:
    return [i["metadata"]["name"] for i in response.json()["items"]]


def test_lists_carry_kind_list_api_version_and_a_numeric_resource_version(http: httpx.Client) -> None:
    http.post(CMS, json=cm("a"))
    listed = http.get(CMS).json()
    assert listed["kind"] == "ConfigMapList" and listed["apiVersion"] == "v1"
    assert listed["metadata"]["resourceVersion"].isdigit()
    leases = http.get("/apis/coordination.k8s.io/v1/leases").json()
    assert leases["kind"] == "LeaseList" and leases["apiVersion"] == "coordination.k8s.io/v1"
    everywhere = http.get("/api/v1/configmaps").json()["items"]
    assert [i["metadata"]["namespace"] for i in everywhere] == ["default"]


def test_label_selectors_support_equality_inequality_sets_and_existence(http: httpx.Client) -> None:
    http.post(CMS, json=cm("a", {"app": "web", "tier": "front"}))
    http.post(CMS, json=cm("b", {"app": "db"}))
    http.post(CMS, json=cm("c"))
    cases = {
        "app=web": ["a"], "app==web": ["a"], "app!=web": ["b", "c"], "app in (web, db)": ["a", "b"],
        "app notin (web)": ["b", "c"], "tier": ["a"], "!tier": ["b", "c"], "app,!tier": ["b"],
        "app in (web,db),tier=front": ["a"],
    }
    for selector, expected in cases.items():
        assert names(http.get(CMS, params={"labelSelector": selector})) == expected, selector
    assert http.get(CMS, params={"labelSelector": "app in (web"}).status_code == 400


def test_field_selectors_support_name_namespace_pod_phase_and_event_objects(
    apiserver: ApiServer, http: httpx.Client
) -> None:
    http.post(CMS, json=cm("a"))
    http.post(CMS, json=cm("b"))
    assert names(http.get(CMS, params={"fieldSelector": "metadata.name=a"})) == ["a"]
    assert names(http.get(CMS, params={"fieldSelector": "metadata.name!=a"})) == ["b"]
    assert names(http.get("/api/v1/configmaps", params={"fieldSelector": "metadata.namespace=default"})) == ["a", "b"]
    for name in ("p1", "p2"):
        http.post(PODS, json={"metadata": {"name": name}, "spec": {"containers": [{"name": "c", "image": "i"}]}})
    http.patch(f"{PODS}/p2/status", json={"status": {"phase": "Running"}}, headers=MERGE)
    assert names(http.get(PODS, params={"fieldSelector": "status.phase=Running"})) == ["p2"]
    assert names(http.get(PODS, params={"fieldSelector": "status.phase!=Running"})) == ["p1"]
    event = {"metadata": {"name": "e1"}, "involvedObject": {"kind": "Pod", "name": "p2", "namespace": "default"},
             "reason": "Started", "message": "hi", "type": "Normal"}
    http.post(EVENTS, json=event)
    http.post(EVENTS, json={**event, "metadata": {"name": "e2"}, "involvedObject": {"kind": "Pod", "name": "p1"}})
    selector = "involvedObject.name=p2,involvedObject.namespace=default,involvedObject.kind=Pod"
    assert names(http.get(EVENTS, params={"fieldSelector": selector})) == ["e1"]
    unsupported = http.get(CMS, params={"fieldSelector": "data.x=y"})
    assert unsupported.status_code == 400 and "field label not supported" in unsupported.json()["message"]


def test_limit_and_continue_page_through_a_list(http: httpx.Client) -> None:
    for i in range(5):
        http.post(CMS, json=cm(f"c{i}"))
    seen: list[str] = []
    params = {"limit": "2"}
    pages = 0
    while True:
        page = http.get(CMS, params=params).json()
        pages += 1
        seen += [i["metadata"]["name"] for i in page["items"]]
        token = page["metadata"].get("continue")
        if not token:
            break
        assert page["metadata"]["remainingItemCount"] == 5 - len(seen)
        params = {"limit": "2", "continue": token}
    assert seen == [f"c{i}" for i in range(5)] and pages == 3


def test_watch_accepts_true_1_and_True(apiserver: ApiServer, http: httpx.Client) -> None:
    http.post(CMS, json=cm("a"))
    for flag in ("true", "1", "True"):
        events = stream_lines(apiserver, CMS, {"watch": flag}, 1)
        assert [(e["type"], e["object"]["metadata"]["name"]) for e in events] == [("ADDED", "a")]


def test_watch_without_resource_version_or_zero_lists_existing_as_added_then_streams_live_events(
    apiserver: ApiServer, http: httpx.Client
) -> None:
    http.post(CMS, json=cm("a"))
    for since in (None, "0"):
        apiserver.clear_requests()
        params = {"watch": "true"} | ({"resourceVersion": since} if since else {})
        got: list[dict[str, Any]] = []
        reader = threading.Thread(target=lambda p=params, g=got: g.extend(stream_lines(apiserver, CMS, p, 3)))
        reader.start()
        wait_for(lambda: watching(apiserver, CMS))
        name = f"b{since or 'x'}"
        http.post(CMS, json=cm(name))
        http.delete(f"{CMS}/{name}")
        reader.join(10)
        assert [(e["type"], e["object"]["metadata"]["name"]) for e in got] == [
            ("ADDED", "a"), ("ADDED", name), ("DELETED", name)]
        assert int(got[2]["object"]["metadata"]["resourceVersion"]) > int(got[1]["object"]["metadata"][
            "resourceVersion"])


def test_watch_from_a_resource_version_replays_only_newer_events(apiserver: ApiServer, http: httpx.Client) -> None:
    http.post(CMS, json=cm("old"))
    rv = http.get(CMS).json()["metadata"]["resourceVersion"]
    http.post(CMS, json=cm("new"))
    http.patch(f"{CMS}/old", json={"data": {"k": "v"}}, headers=MERGE)
    events = stream_lines(apiserver, CMS, {"watch": "true", "resourceVersion": rv}, 2)
    assert [(e["type"], e["object"]["metadata"]["name"]) for e in events] == [("ADDED", "new"), ("MODIFIED", "old")]


def test_watch_from_a_trimmed_resource_version_gets_a_410_expired_error_event() -> None:
    with ApiServer(event_log_size=5) as server, httpx.Client(base_url=server.url, headers=server.admin_headers) as http:
        start = http.get(CMS).json()["metadata"]["resourceVersion"]
        for i in range(10):
            http.post(CMS, json=cm(f"c{i}"))
        events = stream_lines(server, CMS, {"watch": "true", "resourceVersion": start}, 5)
        assert len(events) == 1 and events[0]["type"] == "ERROR"
        status = events[0]["object"]
        assert (status["kind"], status["code"], status["reason"]) == ("Status", 410, "Expired")
        recent = http.get(CMS).json()["metadata"]["resourceVersion"]
        assert stream_lines(server, CMS, {"watch": "true", "resourceVersion": recent, "timeoutSeconds": "1"}, 1) == []


def test_watch_timeout_seconds_ends_the_stream(apiserver: ApiServer) -> None:
    started = time.monotonic()
    events = stream_lines(apiserver, CMS, {"watch": "true", "timeoutSeconds": "1"}, 1)
    assert events == [] and 0.9 <= time.monotonic() - started < 5


def test_watch_sends_bookmarks_when_allowed(apiserver: ApiServer) -> None:
    apiserver.bookmark_interval = 0.05
    events = stream_lines(apiserver, CMS, {"watch": "true", "allowWatchBookmarks": "true"}, 2)
    assert [e["type"] for e in events] == ["BOOKMARK", "BOOKMARK"]
    assert events[0]["object"]["kind"] == "ConfigMap" and events[0]["object"]["metadata"]["resourceVersion"].isdigit()
    quiet = stream_lines(apiserver, CMS, {"watch": "true", "timeoutSeconds": "1"}, 1)
    assert quiet == []


def test_selector_watches_see_objects_enter_and_leave_as_added_and_deleted(
    apiserver: ApiServer, http: httpx.Client
) -> None:
    http.post(CMS, json=cm("a", {"app": "x"}))
    http.post(CMS, json=cm("b"))
    since = http.get(CMS).json()["metadata"]["resourceVersion"]
    got: list[dict[str, Any]] = []
    params = {"watch": "true", "labelSelector": "app=x"}
    reader = threading.Thread(target=lambda: got.extend(stream_lines(apiserver, CMS, params, 4)))
    reader.start()
    wait_for(lambda: watching(apiserver, CMS))
    http.patch(f"{CMS}/b", json={"metadata": {"labels": {"app": "x"}}}, headers=MERGE)  # enters
    http.patch(f"{CMS}/a", json={"metadata": {"labels": {"app": "y"}}}, headers=MERGE)  # leaves
    http.patch(f"{CMS}/a", json={"data": {"k": "v"}}, headers=MERGE)  # outside: unseen
    http.delete(f"{CMS}/b")
    reader.join(10)
    assert [(e["type"], e["object"]["metadata"]["name"]) for e in got] == [
        ("ADDED", "a"), ("ADDED", "b"), ("DELETED", "a"), ("DELETED", "b")]
    replay = stream_lines(apiserver, CMS, {**params, "resourceVersion": since}, 3)
    assert [(e["type"], e["object"]["metadata"]["name"]) for e in replay] == [
        ("ADDED", "b"), ("DELETED", "a"), ("DELETED", "b")]


def test_watch_is_newline_delimited_json_over_chunked_application_json(
    apiserver: ApiServer, http: httpx.Client
) -> None:
    http.post(CMS, json=cm("a"))
    http.post(CMS, json=cm("b"))
    with httpx.stream("GET", apiserver.url + CMS, params={"watch": "true", "timeoutSeconds": "1"},
                      headers=apiserver.admin_headers) as response:
        assert response.headers["content-type"] == "application/json"
        assert response.headers["transfer-encoding"] == "chunked"
        raw = response.read()
    lines = raw.decode().splitlines()
    assert raw.endswith(b"\n") and [json.loads(line)["object"]["metadata"]["name"] for line in lines] == ["a", "b"]


def test_watch_streams_end_when_the_server_stops(http: httpx.Client) -> None:
    server = ApiServer().start()
    ended = threading.Event()

    def read() -> None:
        stream_lines(server, CMS, {"watch": "true"}, 100, timeout=30)
        ended.set()

    reader = threading.Thread(target=read, daemon=True)
    reader.start()
    wait_for(lambda: watching(server, CMS))
    started = time.monotonic()
    server.stop()
    assert ended.wait(5) and time.monotonic() - started < 2


def test_kubernetes_client_watch_sees_the_stream(apiserver: ApiServer, kube: Any, http: httpx.Client) -> None:
    api = client.CoreV1Api(kube)
    http.post(CMS, json=cm("a"))
    stream = watch.Watch().stream(api.list_namespaced_config_map, "default", timeout_seconds=5)
    first = next(stream)
    assert first["type"] == "ADDED" and first["object"].metadata.name == "a"
    http.patch(f"{CMS}/a", json={"data": {"k": "v"}}, headers=MERGE)
    second = next(stream)
    assert second["type"] == "MODIFIED" and second["object"].data == {"k": "v"}
    stream.close()
