"""Prometheus metrics. Gauges of layers and runs by state are computed from the inventory when
scraped, so keeping them costs nothing between scrapes."""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterator

from prometheus_client import REGISTRY, Gauge, Histogram
from prometheus_client import Counter as PromCounter
from prometheus_client.core import GaugeMetricFamily
from prometheus_client.registry import Collector

from burrito_py.kube.inventory import Inventory
from burrito_py.timeutil import parse_time

RECONCILE_SECONDS = Histogram(
    "burrito_py_reconcile_duration_seconds",
    "Time spent in one reconcile.",
    ["controller"],
    buckets=(0.0005, 0.001, 0.005, 0.01, 0.05, 0.1, 0.5, 1, 5, 30),
)
RECONCILE_ERRORS = PromCounter("burrito_py_reconcile_errors_total", "Reconciles that raised.", ["controller"])
STARTUP_EVALUATION_SECONDS = Gauge(
    "burrito_py_startup_evaluation_seconds",
    "From the operator's start (or a new leader's) to every primed layer evaluated once.",
)
GIT_FETCHES = PromCounter("burrito_py_git_fetches_total", "git fetches of repository mirrors.", ["repository"])
PLAN_POLICY_VERDICTS = PromCounter(
    "burrito_py_plan_policy_verdicts_total",
    "Plans reviewed, by the strictest enforcement level of the policies selecting them (none: no policy) and verdict.",
    ["level", "result"],
)
PULL_REQUEST_PROVIDER_CALLS = Histogram(
    "burrito_py_pull_request_provider_calls",
    "Provider API calls per pull request update (comment and commit statuses; 0 when nothing changed).",
    buckets=(0, 1, 2, 3, 5, 10),
)
PROVIDER_MIRROR_FALLBACKS = PromCounter(
    "burrito_py_provider_mirror_fallbacks_total",
    "Runner attempts whose provider mirror was unavailable, so terraform installed providers directly "
    "(lines 'burrito-py: provider mirror unavailable:' in their logs), by namespace.",
    ["namespace"],
)
RUNNER_PODS_NOT_STARTED = PromCounter(
    "burrito_py_runner_pods_not_started_total",
    "Runner pods deleted because they had not started within runner_start_timeout (an image not pulled, a Secret "
    "missing, no node), by namespace.",
    ["namespace"],
)
RUNNER_TIMEOUTS = PromCounter(
    "burrito_py_runner_timeouts_total",
    "Runner pods stopped by their kubelet at their deadline (runner_plan_timeout, runner_apply_timeout): their runs "
    "failed without a retry, by namespace and run action.",
    ["namespace", "action"],
)
NOTIFICATIONS = PromCounter(
    "burrito_py_notifications_total", "Notifications sent, by target kind, event and result.",
    ["kind", "event", "result"],
)


class InventoryCollector(Collector):
    def __init__(self, inventory: Inventory) -> None:
        self._inventory = inventory

    def collect(self) -> Iterator[GaugeMetricFamily]:
        layers = GaugeMetricFamily("burrito_py_layers", "TerraformLayers by state.", labels=["state"])
        for state, count in sorted(
            Counter((layer.get("status") or {}).get("state") or "Unknown" for layer in self._inventory.layers).items()
        ):
            layers.add_metric([state], count)
        yield layers
        runs = GaugeMetricFamily("burrito_py_runs", "TerraformRuns by action and state.", labels=["action", "state"])
        for (action, state), count in sorted(
            Counter(
                (
                    (run.get("spec") or {}).get("action") or "unknown",
                    (run.get("status") or {}).get("state") or "Initial",
                )
                for run in self._inventory.runs
            ).items()
        ):
            runs.add_metric([action, state], count)
        yield runs
        yield from _drift_metrics(self._inventory)


def _drift_metrics(inventory: Inventory) -> Iterator[GaugeMetricFamily]:
    """Per layer, from `status.drift` (plan_review.py): drifted or not, how many resources, the last check."""
    labels = ["namespace", "layer", "repository"]
    drifted = GaugeMetricFamily("burrito_py_layer_drifted", "1 when the layer's plan corrects drift.", labels=labels)
    resources = GaugeMetricFamily("burrito_py_layer_drift_resources", "Resources that drifted.", labels=labels)
    checked = GaugeMetricFamily("burrito_py_layer_last_drift_check_timestamp_seconds",
                                "When the plan the drift state is judged from was made.", labels=labels)
    for layer in inventory.layers:
        drift = (layer.get("status") or {}).get("drift")
        if not drift:
            continue
        meta, spec = layer["metadata"], layer.get("spec") or {}
        key = [meta.get("namespace", ""), meta["name"], (spec.get("repository") or {}).get("name", "")]
        drifted.add_metric(key, 1.0 if drift.get("state") == "Drifted" else 0.0)
        resources.add_metric(key, float(drift.get("resources") or 0))
        when = parse_time(drift.get("lastCheck"))
        if when is not None:
            checked.add_metric(key, when.timestamp())
    yield drifted
    yield resources
    yield checked


_registered: list[InventoryCollector] = []


def watch_inventory(inventory: Inventory) -> None:
    """Expose `inventory` (one per process; a new one replaces the old, e.g. across test runs)."""
    for old in _registered:
        REGISTRY.unregister(old)
    _registered.clear()
    collector = InventoryCollector(inventory)
    REGISTRY.register(collector)
    _registered.append(collector)
