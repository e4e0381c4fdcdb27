"""The controllers' in-memory view of the cluster, fed by watch events and by our own writes.

Decisions read from here instead of the API, so evaluating a layer costs no request. Every body
is kept only if it is newer (by resourceVersion) than the one held, so a late watch event can
never roll back what a write response already told us.
"""

from __future__ import annotations

from collections import OrderedDict, defaultdict
from collections.abc import Callable, Iterator, Mapping
from typing import Any

from burrito_py.api import annotations as ann
from burrito_py.api.dependencies import find_cycle, layer_dependencies

Key = tuple[str, str]  # (namespace, name)
Body = dict[str, Any]


def key_of(body: Mapping[str, Any]) -> Key:
    meta = body["metadata"]
    return meta.get("namespace") or "", meta["name"]


def _newer(candidate: Mapping[str, Any], held: Mapping[str, Any] | None) -> bool:
    if held is None:
        return True
    new_rv, old_rv = candidate["metadata"].get("resourceVersion", ""), held["metadata"].get("resourceVersion", "")
    if str(new_rv).isdigit() and str(old_rv).isdigit():
        return int(new_rv) >= int(old_rv)
    return True


class Store:
    """Objects of one kind, with optional secondary indexes by label values."""

    def __init__(self, index_label: str | None = None, *more_labels: str) -> None:
        self._objects: dict[Key, Body] = {}
        self._labels = tuple(label for label in (index_label, *more_labels) if label)
        self._by_label: dict[tuple[str, str, str], set[str]] = defaultdict(set)  # (label, namespace, value)

    def observe(self, body: Mapping[str, Any]) -> bool:
        """Keep `body` if it is newer than what we hold; True when it was kept."""
        key = key_of(body)
        held = self._objects.get(key)
        if not _newer(body, held):
            return False
        self._objects[key] = dict(body)
        if held is not None:
            self._unindex(key, held)
        labels = body["metadata"].get("labels") or {}
        for label in self._labels:
            if labels.get(label):
                self._by_label[(label, key[0], labels[label])].add(key[1])
        return True

    def forget(self, body: Mapping[str, Any]) -> None:
        key = key_of(body)
        held = self._objects.pop(key, None)
        if held is not None:
            self._unindex(key, held)

    def _unindex(self, key: Key, held: Mapping[str, Any]) -> None:
        labels = held["metadata"].get("labels") or {}
        for label in self._labels:
            index = (label, key[0], labels.get(label) or "")
            names = self._by_label.get(index)
            if names is not None:
                names.discard(key[1])
                if not names:
                    del self._by_label[index]

    def get(self, key: Key) -> Body | None:
        return self._objects.get(key)

    def by_label(self, namespace: str, value: str, label: str | None = None) -> list[Body]:
        """Objects of `namespace` whose `label` (default: the first indexed) has `value`."""
        index = (label or self._labels[0], namespace, value)
        return [self._objects[(namespace, name)] for name in self._by_label.get(index, ())]

    def __iter__(self) -> Iterator[Body]:
        return iter(list(self._objects.values()))

    def __len__(self) -> int:
        return len(self._objects)


# Told of every change of a held layer: (key, before, after (None: forgotten), its upstreams before).
LayerChange = Callable[[Key, Body | None, Body | None, tuple[Key, ...]], None]
# Told of every change of a held object: (key, before, after (None: forgotten)).
Change = Callable[[Key, Body | None, Body | None], None]


class RepositoryStore(Store):
    """The repositories. `on_change` hears of each change whatever path it reaches the inventory by: a watch
    event, or our own status write's response, which comes first, so the watch event that follows looks like
    no change at all. Whoever reads a repository (its layers) must be woken from here, not from the watch."""

    def __init__(self) -> None:
        super().__init__()
        self.on_change: Change | None = None

    def observe(self, body: Mapping[str, Any]) -> bool:
        key = key_of(body)
        before = self.get(key)
        kept = super().observe(body)
        if kept and self.on_change is not None:
            self.on_change(key, before, self.get(key))
        return kept

    def forget(self, body: Mapping[str, Any]) -> None:
        key = key_of(body)
        before = self.get(key)
        super().forget(body)
        if self.on_change is not None and before is not None:
            self.on_change(key, before, None)


class LayerStore(Store):
    """The layers, with the dependency index (upstream → dependents, dependencies.py) kept in step with every
    observe and forget. `on_change` hears of each: whatever path a layer reaches the inventory by (a watch event,
    a write's response, a fresh read), its dependents learn of it once (dependencies.wake_related)."""

    def __init__(self) -> None:
        super().__init__()
        self._upstreams: dict[Key, tuple[Key, ...]] = {}
        self._dependents: dict[Key, set[Key]] = defaultdict(set)
        self.on_change: LayerChange | None = None

    def observe(self, body: Mapping[str, Any]) -> bool:
        key = key_of(body)
        before = self.get(key)
        kept = super().observe(body)
        if kept:
            upstreams = self.upstreams_of(key)
            self._index(key, tuple(d.upstream for d in layer_dependencies(body, key[0])))
            if self.on_change is not None:
                self.on_change(key, before, self.get(key), upstreams)
        return kept

    def forget(self, body: Mapping[str, Any]) -> None:
        key = key_of(body)
        before, upstreams = self.get(key), self.upstreams_of(key)
        super().forget(body)
        self._index(key, ())
        if self.on_change is not None and before is not None:
            self.on_change(key, before, None, upstreams)

    def _index(self, key: Key, upstreams: tuple[Key, ...]) -> None:
        for old in self._upstreams.get(key, ()):
            dependents = self._dependents.get(old)
            if dependents is not None:
                dependents.discard(key)
                if not dependents:
                    del self._dependents[old]
        if upstreams:
            self._upstreams[key] = upstreams
            for up in upstreams:
                self._dependents[up].add(key)
        else:
            self._upstreams.pop(key, None)

    def upstreams_of(self, key: Key) -> tuple[Key, ...]:
        return self._upstreams.get(key, ())

    def dependents_of(self, key: Key) -> tuple[Key, ...]:
        """Layers (held: a forgotten layer leaves the index) whose dependsOn names `key`, sorted."""
        return tuple(sorted(self._dependents.get(key, ())))

    def cycle_through(self, key: Key) -> tuple[Key, ...] | None:
        return find_cycle(key, self._upstreams)


def creation_order(run: Mapping[str, Any]) -> tuple[str, str, str]:
    """Sort key of runs by creation: the API's whole seconds, then our sub-second stamp, then name."""
    meta = run["metadata"]
    stamp = (meta.get("annotations") or {}).get(ann.RUN_CREATED_AT, "")
    return meta.get("creationTimestamp", ""), stamp, meta["name"]


# Runner pods seen deleted, remembered so their run learns at once that its attempt lost its pod.
DELETED_PODS_KEPT = 10_000


class Inventory:
    def __init__(self) -> None:
        self.repositories = RepositoryStore()
        self.layers = LayerStore()
        self.runs = Store(ann.LABEL_LAYER, ann.LABEL_PULL_REQUEST)
        self.pods = Store(index_label=ann.LABEL_RUN)
        self.pull_requests = Store()
        self._deleted_pods: OrderedDict[Key, frozenset[str]] = OrderedDict()

    def forget_pod(self, body: Mapping[str, Any]) -> None:
        """A runner pod's DELETE event: forget it, and remember which runs owned it (a tombstone). The event of a
        pod that another of its name already replaced (a run deletes a pod it found under its attempt's name, then
        makes its own, whose create's answer may come before this event) leaves the new one alone."""
        held = self.pods.get(key_of(body))
        uid = body["metadata"].get("uid")
        if held is not None and uid and held["metadata"].get("uid") not in (None, uid):
            return
        self.pods.forget(body)
        owners = frozenset(str(ref.get("uid")) for ref in body["metadata"].get("ownerReferences") or ())
        self._deleted_pods[key_of(body)] = owners
        self._deleted_pods.move_to_end(key_of(body))
        while len(self._deleted_pods) > DELETED_PODS_KEPT:
            self._deleted_pods.popitem(last=False)

    def pod_deleted(self, namespace: str, name: str, run: Mapping[str, Any]) -> bool:
        """Whether the watch saw pod `name` of `run` deleted (not a same-named pod of another run)."""
        owners = self._deleted_pods.get((namespace, name))
        return owners is not None and str(run["metadata"].get("uid")) in owners

    def runs_of_pull_request(self, namespace: str, name: str) -> list[Body]:
        """A pull request's runs (the label holds `layer_label(name)`; spec.pullRequest confirms it), of its own
        namespace's layers only: a run naming another namespace's layer is nobody's pull request run (the run
        controller refuses it), and its name must never lead the controllers, which may delete and read any
        namespace's artifacts, to another tenant's run's artifacts."""
        return [run for run in self.runs.by_label(namespace, ann.layer_label(name), ann.LABEL_PULL_REQUEST)
                if (run.get("spec") or {}).get("pullRequest") == name
                and ((run["spec"].get("layer") or {}).get("namespace") or namespace) == namespace]

    def runs_of_layer(self, namespace: str, layer: str) -> list[Body]:
        """Newest first: creation time, then our sub-second creation stamp, then name.

        The label holds `layer_label(layer)` (a hash for long names); spec.layer.name confirms the layer."""
        runs = [
            run
            for run in self.runs.by_label(namespace, ann.layer_label(layer))
            if ((run.get("spec") or {}).get("layer") or {}).get("name", layer) == layer
        ]
        runs.sort(key=creation_order, reverse=True)
        return runs

    def layers_of_repository(self, namespace: str, name: str) -> list[Body]:
        found = []
        for layer in self.layers:
            ref = (layer.get("spec") or {}).get("repository") or {}
            if ref.get("name") == name and (ref.get("namespace") or layer["metadata"]["namespace"]) == namespace:
                found.append(layer)
        return found

    def repository_of(self, layer: Mapping[str, Any]) -> Body | None:
        ref = (layer.get("spec") or {}).get("repository") or {}
        if not ref.get("name"):
            return None
        return self.repositories.get((ref.get("namespace") or layer["metadata"]["namespace"], ref["name"]))
