"""What every reconcile shares: settings, the API client, the inventory, the work queues."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from datetime import timedelta
from typing import TYPE_CHECKING

from burrito_py.controllers.layer.crd_guard import CrdWatch
from burrito_py.controllers.layer.notifications import Notifications
from burrito_py.controllers.layer.outputs_cache import OutputsCache
from burrito_py.controllers.plan_budget import ParseBudget
from burrito_py.controllers.planpolicy.book import PolicyBook
from burrito_py.controllers.pullrequest.decide import PullRequestMemory
from burrito_py.controllers.repository.webhook_keys import WebhookKeyPublisher
from burrito_py.controllers.settings import ControllerSettings
from burrito_py.kube.client import Kube
from burrito_py.kube.inventory import Inventory, Key
from burrito_py.kube.scheduler import Scheduler
from burrito_py.policy.sandbox import PolicySandbox
from burrito_py.pullrequests.poll import PollMemory

if TYPE_CHECKING:
    from burrito_py.datastore.client import DatastoreClient

Reconcile = Callable[["Context", Key], Awaitable[None]]


@dataclass
class Context:
    settings: ControllerSettings
    kube: Kube
    inventory: Inventory = field(default_factory=Inventory)
    crds: CrdWatch = field(default_factory=CrdWatch)  # what the layer destroy guard knows of CRDs
    policies: PolicyBook = field(default_factory=PolicyBook)  # the plan policies (plan_review.py)
    sandbox: PolicySandbox = field(default_factory=PolicySandbox)  # where their CEL and Rego rules run
    notifications: Notifications = field(default_factory=Notifications)  # notifiers and deliveries
    outputs: OutputsCache = field(default_factory=OutputsCache)  # upstream outputs (dependencies.py)
    pull_request_memory: PullRequestMemory = field(default_factory=PullRequestMemory)  # pull_requests.py
    layers: Scheduler[Key] | None = None
    runs: Scheduler[Key] | None = None
    repositories: Scheduler[Key] | None = None
    pull_requests: Scheduler[Key] | None = None
    pull_request_polls: Scheduler[Key] | None = None  # by repository: its host asked for open pull requests
    poll_memory: PollMemory = field(default_factory=PollMemory)
    # A repository's status is written by its reconcile and by its pull request poll: one at a time, each from
    # the latest copy, so neither drops the other's condition.
    repository_status_locks: dict[Key, asyncio.Lock] = field(default_factory=dict)
    plan_policies: Scheduler[Key] | None = None  # their status (policies.py); key: ("", name) for a cluster policy
    datastore: DatastoreClient | None = None
    webhook_keys: WebhookKeyPublisher | None = None  # set from the settings when not given
    # Set once the initial listing is in the inventory: deciding before that could duplicate runs.
    primed: bool = False
    # The plan JSON read and parsed at once (plan_review.py, pull_requests.py): at most one plan's limit.
    parse_budget: ParseBudget = field(init=False)

    def __post_init__(self) -> None:
        if self.webhook_keys is None:
            from burrito_py.kube.pod_paths import own_namespace

            settings = self.settings
            self.webhook_keys = WebhookKeyPublisher(settings.webhook_keys_namespace or own_namespace(),
                                                    settings.webhook_keys_secret, settings.webhook_keys_per_namespace)
        self.notifications.outbound = self.settings.outbound_policy()
        self.parse_budget = ParseBudget(self.settings.max_plan_json_bytes)

    def wake_layer(self, key: Key, after: timedelta | float = 0.0) -> None:
        if self.layers is not None and self.primed:
            self.layers.schedule(key, _seconds(after))

    def wake_run(self, key: Key, after: timedelta | float = 0.0) -> None:
        if self.runs is not None and self.primed:
            self.runs.schedule(key, _seconds(after))

    def wake_pull_request(self, key: Key, after: timedelta | float = 0.0) -> None:
        if self.pull_requests is not None and self.primed:
            self.pull_requests.schedule(key, _seconds(after))

    def wake_pull_request_poll(self, key: Key, after: timedelta | float = 0.0) -> None:
        if self.pull_request_polls is not None and self.primed:
            self.pull_request_polls.schedule(key, _seconds(after))

    def repository_status_lock(self, key: Key) -> asyncio.Lock:
        return self.repository_status_locks.setdefault(key, asyncio.Lock())

    def wake_plan_policy(self, key: Key, after: timedelta | float = 0.0) -> None:
        if self.plan_policies is not None and self.primed:
            self.plan_policies.schedule(key, _seconds(after))

    def wake_repository(self, key: Key, after: timedelta | float = 0.0) -> None:
        if self.repositories is not None and self.primed:
            self.repositories.schedule(key, _seconds(after))


def _seconds(value: timedelta | float) -> float:
    return value.total_seconds() if isinstance(value, timedelta) else float(value)
