"""Pure decisions of the workload controllers and the local kubelet."""

from __future__ import annotations

import socket
from pathlib import Path
from typing import Any

import pytest
from burrito_local.workloads import (
    IpPool,
    deployment_status,
    endpoint_subsets,
    hosts_file,
    plan_rollout,
    pod_name,
    ready_backends,
    restart_delay,
    service_link_env,
    template_hash,
    token_refresh_delay,
)

from burrito_py.kube import pod_dns as dns
from burrito_py.kube.pod_paths import pod_path_setting


def pod(name: str, hash_: str = "h1", ready: bool = True, phase: str = "Running", ip: str = "127.10.0.1",
        labels: dict[str, str] | None = None, created: str = "2025-01-01T00:00:00Z", **spec: Any) -> dict[str, Any]:
    return {"metadata": {"name": name, "namespace": "ns", "uid": f"uid-{name}", "creationTimestamp": created,
                         "labels": {"app": "web", "pod-template-hash": hash_, **(labels or {})}},
            "spec": spec, "status": {"phase": phase, "podIP": ip,
                                     "conditions": [{"type": "Ready", "status": "True" if ready else "False"}]}}


def test_template_hash_is_stable_and_tracks_changes() -> None:
    template = {"metadata": {"labels": {"app": "web"}}, "spec": {"containers": [{"name": "a"}]}}
    same = {"spec": {"containers": [{"name": "a"}]}, "metadata": {"labels": {"app": "web"}}}
    assert template_hash(template) == template_hash(same) and len(template_hash(template)) == 10
    changed = {**template, "metadata": {"labels": {"app": "web"}, "annotations": {"checksum": "2"}}}
    assert template_hash(changed) != template_hash(template)
    name = pod_name("web", "abc", "xyz12")
    assert name == "web-abc-xyz12"
    assert len(pod_name("web", "abc")) == len("web-abc-") + 5


def test_scaling_without_a_rollout() -> None:
    assert plan_rollout(3, "h1", [pod("a")]).create == 2
    step = plan_rollout(1, "h1", [pod("a"), pod("b", ready=False), pod("c")])
    assert step.create == 0 and step.delete[0] == "b" and len(step.delete) == 2
    assert plan_rollout(2, "h1", [pod("a"), pod("b", phase="Failed")]).delete == ["b"]
    assert plan_rollout(2, "h1", [pod("a"), pod("b", phase="Failed")]).create == 1


def test_a_rollout_surges_one_and_deletes_old_only_when_new_is_ready() -> None:
    old = [pod("o1", "h0"), pod("o2", "h0")]
    first = plan_rollout(2, "h1", old)
    assert (first.create, first.delete) == (1, [])
    waiting = plan_rollout(2, "h1", [*old, pod("n1", ready=False)])
    assert (waiting.create, waiting.delete) == (0, [])
    ready = plan_rollout(2, "h1", [*old, pod("n1")])
    assert ready.create == 0 and len(ready.delete) == 1
    last = plan_rollout(2, "h1", [pod("o2", "h0"), pod("n1")])
    assert (last.create, last.delete) == (1, [])
    done = plan_rollout(2, "h1", [pod("o2", "h0"), pod("n1"), pod("n2")])
    assert done.delete == ["o2"]
    broken_old = plan_rollout(2, "h1", [pod("o1", "h0", ready=False), pod("o2", "h0", ready=False)])
    assert broken_old.delete == ["o1", "o2"] and broken_old.create == 1


def test_deployment_status_and_conditions() -> None:
    deployment = {"metadata": {"name": "web", "generation": 3}, "spec": {"replicas": 2}}
    status = deployment_status(deployment, "h1", [pod("a"), pod("b", ready=False)], "now")
    assert status["observedGeneration"] == 3 and status["replicas"] == 2 and status["readyReplicas"] == 1
    assert status["unavailableReplicas"] == 1
    conditions = {c["type"]: c for c in status["conditions"]}
    assert conditions["Available"]["status"] == "False"
    assert conditions["Progressing"]["reason"] == "ReplicaSetUpdated"
    later = deployment_status({**deployment, "status": status}, "h1", [pod("a"), pod("b")], "later")
    conditions = {c["type"]: c for c in later["conditions"]}
    assert conditions["Available"]["status"] == "True" and conditions["Available"]["lastTransitionTime"] == "later"
    assert conditions["Progressing"]["reason"] == "NewReplicaSetAvailable"
    assert conditions["Progressing"]["lastTransitionTime"] == "now", "still True: no transition"
    assert "unavailableReplicas" not in later


def test_endpoints_split_ready_pods_and_resolve_named_ports() -> None:
    service = {"metadata": {"name": "web", "namespace": "ns"},
               "spec": {"selector": {"app": "web"}, "ports": [{"name": "http", "port": 80, "targetPort": "web"},
                                                              {"name": "metrics", "port": 9000,
                                                               "targetPort": 9464}]}}
    ports = {"containers": [{"ports": [{"name": "web", "containerPort": 8080}]}]}
    subsets = endpoint_subsets(service, [
        pod("a", ip="127.10.0.1", containers=ports["containers"]),
        pod("b", ip="127.10.0.2", ready=False, containers=ports["containers"]),
        pod("c", ip="127.10.0.3", labels={"app": "other"}, containers=ports["containers"]),
        pod("d", ip="", containers=ports["containers"]),
    ])
    assert len(subsets) == 1
    assert [a["ip"] for a in subsets[0]["addresses"]] == ["127.10.0.1"]
    assert [a["ip"] for a in subsets[0]["notReadyAddresses"]] == ["127.10.0.2"]
    assert subsets[0]["ports"] == [{"port": 8080, "protocol": "TCP", "name": "http"},
                                   {"port": 9464, "protocol": "TCP", "name": "metrics"}]
    assert ready_backends({"subsets": subsets}, "http") == [("127.10.0.1", 8080)]
    assert endpoint_subsets(service, [pod("a")]) == [{"ports": [{"port": 9464, "protocol": "TCP",
                                                                  "name": "metrics"}],
                                                       "addresses": [{"ip": "127.10.0.1", "targetRef": {
                                                           "kind": "Pod", "namespace": "ns", "name": "a",
                                                           "uid": "uid-a"}}]}]


def test_service_links_and_hosts() -> None:
    services = [{"metadata": {"name": "my-db", "namespace": "ns"},
                 "spec": {"clusterIP": "127.20.0.1", "ports": [{"name": "pg", "port": 5432, "protocol": "TCP"}]}},
                {"metadata": {"name": "headless", "namespace": "ns"}, "spec": {"clusterIP": "None", "ports": [
                    {"port": 80}]}},
                {"metadata": {"name": "api", "namespace": "other"}, "spec": {"clusterIP": "127.20.0.2"}}]
    env = service_link_env(services[:2])
    assert env["MY_DB_SERVICE_HOST"] == "127.20.0.1" and env["MY_DB_SERVICE_PORT"] == "5432"
    assert env["MY_DB_SERVICE_PORT_PG"] == "5432" and env["MY_DB_PORT"] == "tcp://127.20.0.1:5432"
    assert env["MY_DB_PORT_5432_TCP_ADDR"] == "127.20.0.1" and not any(k.startswith("HEADLESS") for k in env)
    endpoints = {("ns", "headless"): {"subsets": [{"addresses": [{"ip": "127.10.0.9"}]}]}}
    text = hosts_file("ns", services, endpoints)
    assert "127.20.0.1 my-db.ns.svc.cluster.local my-db.ns.svc my-db.ns my-db\n" in text
    assert "127.10.0.9 headless.ns.svc.cluster.local headless.ns.svc headless.ns headless\n" in text
    assert "127.20.0.2 api.other.svc.cluster.local api.other.svc api.other\n" in text


def test_the_dns_shim_answers_listed_names_and_defers_the_rest(tmp_path: Path) -> None:
    hosts = tmp_path / "ns.hosts"
    hosts.write_text("127.20.0.7 web.ns.svc.cluster.local web\n")
    assert dns.install({dns.ENV: str(hosts)})
    try:
        assert socket.getaddrinfo("web.ns.svc.cluster.local.", 80)[0][4] == ("127.20.0.7", 80)
        assert socket.getaddrinfo("WEB", 80, socket.AF_INET)[0][4] == ("127.20.0.7", 80)
        assert socket.getaddrinfo(b"web", 80, socket.AF_INET)[0][4] == ("127.20.0.7", 80)  # as httpclient asks
        assert socket.getaddrinfo("localhost", 80, socket.AF_INET)[0][4][0] == "127.0.0.1"
        hosts.write_text("127.20.0.8 web\n")  # replaced: read again
        assert socket.getaddrinfo("web", 80, socket.AF_INET)[0][4][0] == "127.20.0.8"
    finally:
        dns.uninstall()
    assert not dns.install({})


def test_backoff_refresh_and_address_pools(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    assert [restart_delay(n) for n in range(7)] == [10, 20, 40, 80, 160, 300, 300]
    assert restart_delay(0, base=0.5, cap=1) == 0.5
    assert token_refresh_delay(3600) == 2880 and token_refresh_delay(365 * 86400) == 86400
    pool = IpPool("127.10.0.0/16", taken=["127.10.0.1"])
    assert pool.allocate() == "127.10.0.2"
    pool.release("127.10.0.1")
    addresses = {pool.allocate() for _ in range(300)}
    assert len(addresses) == 300 and not any(a.endswith((".0", ".255")) for a in addresses)
    assert "127.10.3.4" in pool and "127.11.0.1" not in pool
    small = IpPool("127.30.0.0/30")
    assert [small.allocate() for _ in range(3)] == ["127.30.0.1", "127.30.0.2", "127.30.0.3"]
    with pytest.raises(RuntimeError, match="no free address"):
        small.allocate()
    monkeypatch.setenv("BURRITO_LOCAL_ROOT", str(tmp_path))
    assert pod_path_setting(Path("/var/lib/x")) == tmp_path / "var/lib/x"
    assert pod_path_setting(tmp_path / "a") == tmp_path / "a" and pod_path_setting(Path("rel")) == Path("rel")
    monkeypatch.delenv("BURRITO_LOCAL_ROOT")
    assert pod_path_setting(Path("/var/lib/x")) == Path("/var/lib/x")


def test_status_retry_delays_double_up_to_a_cap_without_end() -> None:
    from itertools import islice

    from burrito_local.workloads import status_retry_delays

    assert list(islice(status_retry_delays(0.1, 1.0), 7)) == [0.1, 0.2, 0.4, 0.8, 1.0, 1.0, 1.0]
