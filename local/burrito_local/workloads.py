"""Pure decisions of the emulator's workload controllers and of the local kubelet: pod naming, rollouts,
Deployment status, Endpoints, service-link variables, cluster DNS entries, restart back-off, token refresh
and loopback address pools. No I/O here; `controller_manager.py` and `kubelet.py` act on the answers."""

from __future__ import annotations

import hashlib
import ipaddress
import json
import re
import secrets
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any

Obj = dict[str, Any]
TEMPLATE_HASH_LABEL = "pod-template-hash"
_SAFE_ALPHABET = "bcdfghjklmnpqrstvwxz2456789"  # apimachinery's rand.SafeEncodeString alphabet
TERMINAL = ("Succeeded", "Failed")
CLUSTER_DOMAIN = "cluster.local"


# -- addresses ---------------------------------------------------------------------------------------
class NodeAddress:
    """The pod addresses of a node whose pods share its network (`NodeMode.host_network`): every pod gets the
    node's own address, as `hostNetwork: true` pods do."""

    def __init__(self, address: str) -> None:
        self._address = address

    def allocate(self) -> str:
        return self._address

    def release(self, address: str) -> None:
        """Nothing to give back: the address is the node's."""


class IpPool:
    """Addresses of a loopback network handed out one by one (x.y.z.0 and x.y.z.255 skipped, so no
    address looks like a network or broadcast address); `release` returns one."""

    def __init__(self, network: str, taken: Iterable[str] = (), start: int = 1) -> None:
        """`start`: the offset of the first address tried. Kubelets and emulators of other processes on this
        machine share loopback, so theirs start at a random offset (`random_start`): a leftover process of an
        earlier run still bound to its pod IP then never collides with a new pod's."""
        self._network = ipaddress.IPv4Network(network)
        self._taken = set(taken)
        self._next = int(self._network.network_address) + start % self._network.num_addresses

    @staticmethod
    def random_start(network: str) -> int:
        return secrets.randbelow(ipaddress.IPv4Network(network).num_addresses)

    def allocate(self) -> str:
        first, size = int(self._network.network_address), self._network.num_addresses
        for step in range(size):
            candidate = first + (self._next - first + step) % size
            address = str(ipaddress.IPv4Address(candidate))
            if candidate % 256 in (0, 255) or address in self._taken:
                continue
            self._taken.add(address)
            self._next = candidate + 1
            return address
        raise RuntimeError(f"no free address left in {self._network}")

    def reserve(self, address: str) -> None:
        self._taken.add(address)

    def release(self, address: str) -> None:
        self._taken.discard(address)

    def __contains__(self, address: str) -> bool:
        try:
            return ipaddress.IPv4Address(address) in self._network
        except ValueError:
            return False


# -- Deployments ------------------------------------------------------------------------------------
def template_hash(template: Mapping[str, Any]) -> str:
    """A stable 10-character hash of a pod template (what `pod-template-hash` carries)."""
    digest = int.from_bytes(hashlib.sha256(json.dumps(template, sort_keys=True).encode()).digest()[:8], "big")
    out = []
    for _ in range(10):
        digest, index = divmod(digest, len(_SAFE_ALPHABET))
        out.append(_SAFE_ALPHABET[index])
    return "".join(out)


def pod_name(deployment: str, hash_: str, suffix: str | None = None) -> str:
    """`<deployment>-<template hash>-<5 random>`, the name a ReplicaSet's pod gets."""
    suffix = suffix if suffix is not None else "".join(secrets.choice(_SAFE_ALPHABET) for _ in range(5))
    return f"{deployment[:253 - 17]}-{hash_}-{suffix}"


def pod_ready(pod: Mapping[str, Any]) -> bool:
    conditions = (pod.get("status") or {}).get("conditions") or ()
    return any(c.get("type") == "Ready" and c.get("status") == "True" for c in conditions)


def pod_deletion_grace(pod: Mapping[str, Any], requested: int | None) -> int:
    """Seconds a deleted pod is kept (with `deletionTimestamp`) for its kubelet to stop it, as kube-apiserver's
    pod strategy decides: none for a pod no node runs (never bound) or one already ended; else the DELETE's
    `gracePeriodSeconds`, or the pod's `terminationGracePeriodSeconds` (30 by default)."""
    spec, status = pod.get("spec") or {}, pod.get("status") or {}
    if not spec.get("nodeName") or status.get("phase") in TERMINAL:
        return 0
    if requested is not None:
        return max(int(requested), 0)
    return max(int(spec.get("terminationGracePeriodSeconds", 30)), 0)


def pod_active(pod: Mapping[str, Any]) -> bool:
    """Counts towards a Deployment's replicas: not being deleted and not finished."""
    return not pod["metadata"].get("deletionTimestamp") and (pod.get("status") or {}).get("phase") not in TERMINAL


@dataclass
class RolloutStep:
    create: int = 0
    delete: list[str] = field(default_factory=list)


def plan_rollout(replicas: int, current_hash: str, pods: list[Obj]) -> RolloutStep:
    """What to do next for a Deployment that owns `pods`, rolling with maxSurge 1 and maxUnavailable 0:
    a new pod first, an old one deleted once a new one is Ready. Finished pods are deleted (they
    are replaced)."""
    step = RolloutStep(delete=[p["metadata"]["name"] for p in pods
                               if (p.get("status") or {}).get("phase") in TERMINAL
                               and not p["metadata"].get("deletionTimestamp")])
    live = [p for p in pods if pod_active(p)]
    new = [p for p in live if p["metadata"].get("labels", {}).get(TEMPLATE_HASH_LABEL) == current_hash]
    old = [p for p in live if p not in new]

    def unready_first(group: list[Obj]) -> list[Obj]:
        # Unready before ready, then newest first (as the ReplicaSet controller picks victims).
        return sorted(group, key=lambda p: (pod_ready(p), _negated(p["metadata"].get("creationTimestamp") or "")))

    if not old:
        if len(new) < replicas:
            step.create = replicas - len(new)
        elif len(new) > replicas:
            step.delete += [p["metadata"]["name"] for p in unready_first(new)[: len(new) - replicas]]
        return step
    if replicas == 0:
        step.delete += [p["metadata"]["name"] for p in old]
        step.delete += [p["metadata"]["name"] for p in new]
        return step
    surge_room = replicas + 1 - len(live)
    step.create = max(0, min(replicas - len(new), surge_room))
    ready_new = sum(1 for p in new if pod_ready(p))
    ready_old = [p for p in old if pod_ready(p)]
    step.delete += [p["metadata"]["name"] for p in old if not pod_ready(p)]
    removable = max(0, ready_new + len(ready_old) - replicas)
    step.delete += [p["metadata"]["name"] for p in unready_first(ready_old)[:removable]]
    return step


def _negated(timestamp: str) -> str:
    """Sort key putting later RFC 3339 timestamps first."""
    return "".join(chr(0x10FFFF - ord(c)) for c in timestamp)


def _condition(previous: list[Obj], kind: str, status: str, reason: str, message: str, now: str) -> Obj:
    before = next((c for c in previous if c.get("type") == kind), None)
    same = before is not None and before.get("status") == status
    unchanged = same and before is not None and before.get("reason") == reason
    return {
        "type": kind,
        "status": status,
        "lastUpdateTime": before.get("lastUpdateTime", now) if unchanged and before else now,
        "lastTransitionTime": before.get("lastTransitionTime", now) if same and before else now,
        "reason": reason,
        "message": message,
    }


def deployment_status(deployment: Mapping[str, Any], current_hash: str, pods: list[Obj], now: str) -> Obj:
    """The status a Deployment controller reports for the pods it owns (no ReplicaSets: "updated" means
    the pod carries the current template hash; available means Ready, minReadySeconds is not honoured)."""
    spec = deployment.get("spec") or {}
    wanted = int(spec.get("replicas", 1))
    live = [p for p in pods if pod_active(p)]
    updated = [p for p in live if p["metadata"].get("labels", {}).get(TEMPLATE_HASH_LABEL) == current_hash]
    ready = sum(1 for p in live if pod_ready(p))
    updated_ready = sum(1 for p in updated if pod_ready(p))
    previous = list((deployment.get("status") or {}).get("conditions") or ())
    name = deployment["metadata"]["name"]
    if ready >= wanted:
        available = _condition(previous, "Available", "True", "MinimumReplicasAvailable",
                               "Deployment has minimum availability.", now)
    else:
        available = _condition(previous, "Available", "False", "MinimumReplicasUnavailable",
                               "Deployment does not have minimum availability.", now)
    complete = len(updated) == wanted and len(live) == wanted and updated_ready == wanted
    if complete:
        progressing = _condition(previous, "Progressing", "True", "NewReplicaSetAvailable",
                                 f'Deployment "{name}" has successfully progressed.', now)
    else:
        progressing = _condition(previous, "Progressing", "True", "ReplicaSetUpdated",
                                 f'Deployment "{name}" is progressing (pods of template {current_hash}).', now)
    status: Obj = {
        "observedGeneration": int(deployment["metadata"].get("generation") or 1),
        "replicas": len(live),
        "updatedReplicas": len(updated),
        "readyReplicas": ready,
        "availableReplicas": ready,
        "conditions": [available, progressing],
    }
    if wanted - ready > 0:
        status["unavailableReplicas"] = wanted - ready
    return {k: v for k, v in status.items() if v != 0 or k == "observedGeneration"}


def same_status(a: Mapping[str, Any] | None, b: Mapping[str, Any]) -> bool:
    """Equal but for condition timestamps (so an unchanged status is not written again)."""
    def strip(s: Mapping[str, Any] | None) -> Obj:
        s = dict(s or {})
        s["conditions"] = [{k: v for k, v in c.items() if not k.startswith("last")} for c in s.get("conditions") or ()]
        return s

    return strip(a) == strip(b)


def selector_matches(selector: Mapping[str, str], labels: Mapping[str, str]) -> bool:
    return all(labels.get(k) == v for k, v in selector.items())


def label_selector_matches(selector: Mapping[str, Any], labels: Mapping[str, str]) -> bool:
    """A metav1.LabelSelector (matchLabels + matchExpressions) against labels."""
    if not selector_matches(selector.get("matchLabels") or {}, labels):
        return False
    for expression in selector.get("matchExpressions") or ():
        key, op, values = expression.get("key", ""), expression.get("operator"), expression.get("values") or []
        if op == "In" and labels.get(key) not in values:
            return False
        if op == "NotIn" and key in labels and labels[key] in values:
            return False
        if op == "Exists" and key not in labels:
            return False
        if op == "DoesNotExist" and key in labels:
            return False
    return True


# -- Endpoints --------------------------------------------------------------------------------------
def _container_port(pod: Mapping[str, Any], name: str) -> int | None:
    for container in (pod.get("spec") or {}).get("containers") or ():
        for port in container.get("ports") or ():
            if port.get("name") == name:
                return int(port["containerPort"])
    return None


def endpoint_subsets(service: Mapping[str, Any], pods: list[Obj], node_name: str = "") -> list[Obj]:
    """The Endpoints subsets of a Service with a selector: pods matching it with an IP, ready ones under
    `addresses`, the others under `notReadyAddresses`, grouped by their resolved ports."""
    spec = service.get("spec") or {}
    selector = spec.get("selector") or {}
    namespace = service["metadata"].get("namespace")
    groups: dict[str, Obj] = {}
    for pod in sorted(pods, key=lambda p: p["metadata"]["name"]):
        meta = pod["metadata"]
        ip = (pod.get("status") or {}).get("podIP")
        if meta.get("namespace") != namespace or not ip or not pod_active(pod):
            continue
        if not selector_matches(selector, meta.get("labels") or {}):
            continue
        ports = []
        for port in spec.get("ports") or ():
            target = port.get("targetPort", port.get("port"))
            number = _container_port(pod, target) if isinstance(target, str) else int(target)
            if number is None:
                continue  # a named port this pod does not declare
            entry: Obj = {"port": number, "protocol": port.get("protocol", "TCP")}
            if port.get("name"):
                entry["name"] = port["name"]
            ports.append(entry)
        if not ports:
            continue
        key = json.dumps(ports, sort_keys=True)
        subset = groups.setdefault(key, {"ports": ports})
        address: Obj = {"ip": ip, "targetRef": {"kind": "Pod", "namespace": namespace, "name": meta["name"],
                                                "uid": meta.get("uid")}}
        if node_name or (pod.get("spec") or {}).get("nodeName"):
            address["nodeName"] = (pod.get("spec") or {}).get("nodeName") or node_name
        ready = pod_ready(pod) or bool(spec.get("publishNotReadyAddresses"))
        subset.setdefault("addresses" if ready else "notReadyAddresses", []).append(address)
    return list(groups.values())


def ready_backends(endpoints: Mapping[str, Any] | None, port_name: str) -> list[tuple[str, int]]:
    """(ip, port) of the ready addresses serving the service port named `port_name` ("" when unnamed)."""
    found = []
    for subset in (endpoints or {}).get("subsets") or ():
        port = next((p for p in subset.get("ports") or () if p.get("name", "") == port_name), None)
        if port is None:
            continue
        found += [(str(a["ip"]), int(port["port"])) for a in subset.get("addresses") or ()]
    return found


# -- what a kubelet gives a pod ---------------------------------------------------------------------
def _env_name(service: str) -> str:
    return re.sub(r"[^A-Za-z0-9_]", "_", service).upper()


def service_link_env(services: Iterable[Mapping[str, Any]]) -> dict[str, str]:
    """Docker-link style variables for Services with a cluster IP (`<SVC>_SERVICE_HOST`, `_SERVICE_PORT`,
    `_PORT`, `_PORT_<n>_<PROTO>...`), as the kubelet adds for a pod's namespace (enableServiceLinks)."""
    env: dict[str, str] = {}
    for service in sorted(services, key=lambda s: s["metadata"]["name"]):
        spec = service.get("spec") or {}
        ip = spec.get("clusterIP")
        ports = spec.get("ports") or []
        if not ip or ip == "None" or not ports:
            continue
        name = _env_name(service["metadata"]["name"])
        env[f"{name}_SERVICE_HOST"] = ip
        env[f"{name}_SERVICE_PORT"] = str(ports[0]["port"])
        for port in ports:
            if port.get("name"):
                env[f"{name}_SERVICE_PORT_{_env_name(port['name'])}"] = str(port["port"])
        first_proto = str(ports[0].get("protocol", "TCP")).lower()
        env[f"{name}_PORT"] = f"{first_proto}://{ip}:{ports[0]['port']}"
        for port in ports:
            proto = str(port.get("protocol", "TCP"))
            prefix = f"{name}_PORT_{port['port']}_{proto.upper()}"
            env[prefix] = f"{proto.lower()}://{ip}:{port['port']}"
            env[f"{prefix}_PROTO"] = proto.lower()
            env[f"{prefix}_PORT"] = str(port["port"])
            env[f"{prefix}_ADDR"] = ip
    return env


def hosts_file(namespace: str, services: Iterable[Mapping[str, Any]],
               endpoints: Mapping[tuple[str, str], Mapping[str, Any]]) -> str:
    """/etc/hosts-style lines resolving Service names for a pod in `namespace`: `<svc>.<ns>.svc.cluster.local`,
    `<svc>.<ns>.svc`, `<svc>.<ns>` for every Service, and the bare `<svc>` for the pod's own namespace (what
    the resolv.conf search list gives a pod). Headless Services resolve to their ready endpoints."""
    lines = []
    for service in sorted(services, key=lambda s: (s["metadata"].get("namespace", ""), s["metadata"]["name"])):
        meta, spec = service["metadata"], service.get("spec") or {}
        ns, name = meta.get("namespace", ""), meta["name"]
        names = [f"{name}.{ns}.svc.{CLUSTER_DOMAIN}", f"{name}.{ns}.svc", f"{name}.{ns}"]
        if ns == namespace:
            names.append(name)
        ip = spec.get("clusterIP")
        if ip and ip != "None":
            addresses = [ip]
        else:
            addresses = sorted({str(a["ip"]) for subset in (endpoints.get((ns, name)) or {}).get("subsets") or ()
                                for a in subset.get("addresses") or ()})
        lines += [f"{address} {' '.join(names)}" for address in addresses]
    return "".join(f"{line}\n" for line in lines)


def restart_delay(restarts: int, base: float = 10.0, cap: float = 300.0) -> float:
    """Back-off before restart number `restarts` + 1 of a container (10 s, 20 s, 40 s, … capped at 5 min)."""
    return float(min(base * 2 ** max(restarts, 0), cap))


RESET_BACKOFF_AFTER = 600.0  # a container that ran 10 minutes restarts without back-off, as on a node


def token_refresh_delay(ttl_seconds: float) -> float:
    """When the kubelet renews a projected token: at 80 % of its lifetime, or after 24 h, whichever first."""
    return min(0.8 * ttl_seconds, 24 * 3600.0)


def status_retry_delays(first: float = 0.1, cap: float = 5.0) -> Iterator[float]:
    """Pauses between attempts of a pod status write that failed: doubling from `first` to `cap`, without
    end (the kubelet keeps a pod's status until the API has it)."""
    delay = first
    while True:
        yield delay
        delay = min(delay * 2, cap)
