"""Which notifications a layer's new status calls for, and sending them (docs/architecture.md §5.10).

Each event has a key; `status.notified` keeps the last key sent per event, so a notification goes out once:
- PlanPendingApproval / PolicyDenied: the plan's content (summary, addresses, rules), not its sum, so identical
  drift checks, each a new plan with a new sum, do not notify again;
- DriftDetected: when the drift began (`status.drift.since`); DriftResolved: the end of that drift;
- RunFailed: the run that failed at its retry limit; ApplySucceeded: the apply (`apply-run`).
The key is recorded in the status write that shows the event (at most once per event); delivery then runs in the
background with retries (notify/deliver.py), so a slow receiver never holds a reconcile.
"""

from __future__ import annotations

import asyncio
import base64
import hashlib
import logging
from collections.abc import Coroutine, Mapping
from dataclasses import replace
from datetime import datetime
from typing import Any

import httpx
from pydantic import ValidationError

from burrito_py.api import annotations as ann
from burrito_py.api.errors import InvalidSpec
from burrito_py.api.notifier import NOTIFIER_SECRET, TerraformNotifier
from burrito_py.api.patterns import object_name_problem
from burrito_py.api.runner_secrets import is_open_to_runners
from burrito_py.controllers import metrics
from burrito_py.controllers.run.decide import TIMED_OUT, TIMED_OUT_SAYS
from burrito_py.kube.client import Kube, KubeError, crd_path, path
from burrito_py.kube.events import post_event
from burrito_py.kube.inventory import Store
from burrito_py.notify.deliver import Target, deliver, notification_client
from burrito_py.notify.message import Notification
from burrito_py.outbound import OutboundPolicy
from burrito_py.timeutil import format_time, utcnow

__all__ = ["Notifications", "layer_link", "notifications_due"]

log = logging.getLogger(__name__)


def _fingerprint(*parts: Any) -> str:
    return hashlib.sha256(repr(parts).encode()).hexdigest()[:16]


def _rules(policy: Mapping[str, Any]) -> tuple[str, ...]:
    return tuple(f"{f.get('policy')}/{f.get('rule')}" for f in policy.get("denied") or ())


def notifications_due(
    old: Mapping[str, Any], new: Mapping[str, Any], annotations: Mapping[str, str], namespace: str, name: str,
    now: datetime, link: str | None,
) -> tuple[list[Notification], dict[str, str]]:
    """The notifications the change from `old` to `new` status calls for, and `status.notified` after them."""
    notified: dict[str, str] = dict(old.get("notified") or {})
    policy, drift = new.get("policy") or {}, new.get("drift") or {}
    facts = policy.get("plan") or {}
    pending = new.get("pendingPlan") or {}
    summary = annotations.get(ann.PLAN_SUMMARY)
    addresses = tuple(facts.get("addresses") or ())
    count = int(facts.get("resources") or len(addresses))
    candidates: list[tuple[str, str, Notification]] = []

    def make(event: str, plan_sum: str | None, reason: str | None, rules: tuple[str, ...] = (),
             shown: tuple[str, ...] = addresses, total: int = count, text: str | None = summary) -> Notification:
        return Notification(event, namespace, name, plan_sum, text, shown, total, rules, reason, link, now)

    if pending.get("sum"):
        key = _fingerprint(summary, addresses, policy.get("verdict"))
        candidates.append(("PlanPendingApproval", key, make("PlanPendingApproval", pending["sum"],
                                                            pending.get("reason") or "approve the plan's sum")))
    if policy.get("verdict") in ("Denied", "GatesAutoApply") and policy.get("planSum") == annotations.get(ann.PLAN_SUM):
        rules = _rules(policy)
        denied = tuple(a for f in policy.get("denied") or () for a in f.get("addresses") or ())
        candidates.append(("PolicyDenied", _fingerprint(summary, denied, rules), make(
            "PolicyDenied", policy.get("planSum"), f"verdict {policy.get('verdict')}", rules, denied,
            sum(int(f.get("count") or 0) for f in policy.get("denied") or ()))))
    if drift.get("state") == "Drifted" and drift.get("since"):
        candidates.append(("DriftDetected", str(drift["since"]), make(
            "DriftDetected", drift.get("planSum"), None, (), tuple(drift.get("addresses") or ()),
            int(drift.get("resources") or 0))))
    detected = notified.get("DriftDetected")
    if drift.get("state") == "InSync" and detected:
        candidates.append(("DriftResolved", detected, make("DriftResolved", drift.get("planSum"),
                                                           "the layer is in sync again", (), (), 0, None)))
    exhausted = new.get("exhaustedApply") or new.get("exhaustedPlan") or {}
    if new.get("state") == "MaxRetriesReached" and exhausted.get("run"):
        why = (TIMED_OUT_SAYS if exhausted.get("reason") == TIMED_OUT
               else f"failed after its last retry ({exhausted.get('reason')})")
        candidates.append(("RunFailed", str(exhausted["run"]), make(
            "RunFailed", None, f"run {exhausted['run']} {why}", (), (), 0, None)))
    applied = annotations.get(ann.APPLY_RUN)
    if applied and annotations.get(ann.APPLY_SUM) and str(new.get("lastResult") or "").startswith("Applied"):
        candidates.append(("ApplySucceeded", applied, make("ApplySucceeded", annotations.get(ann.APPLY_SUM), None,
                                                           (), (), 0, str(new.get("lastResult")))))
    due = []
    for event, key, notification in candidates:
        if key and notified.get(event) != key:
            notified[event] = key
            due.append(notification)
    return due, notified


class Notifications:
    """The notifiers the controllers hold (fed by a watch) and the deliveries in flight."""

    def __init__(self, outbound: OutboundPolicy | None = None) -> None:
        self.notifiers = Store()
        self._tasks: set[asyncio.Task[None]] = set()
        self._client: httpx.AsyncClient | None = None
        # Invalid notifiers (uid, resourceVersion) already said so in an event: once per version, not per send.
        self._said_invalid: set[tuple[str, str]] = set()
        # What deliveries may reach besides public addresses (the controllers' outbound settings; Context sets it).
        self.outbound = outbound or OutboundPolicy()

    def _selected(self, kube: Kube, namespace: str, labels: Mapping[str, str], event: str) -> list[TerraformNotifier]:
        chosen = []
        for body in self.notifiers:
            if body["metadata"].get("namespace") != namespace:
                continue
            try:
                notifier = TerraformNotifier.model_validate(body)
            except ValidationError as exc:
                self._say_invalid(kube, body, str(InvalidSpec.from_validation_error(exc)))
                continue
            spec = notifier.spec
            if (not spec.events or event in spec.events) and (
                    spec.layer_selector is None or spec.layer_selector.matches(dict(labels))):
                chosen.append(notifier)
        return chosen

    def _say_invalid(self, kube: Kube, body: Mapping[str, Any], problems: str) -> None:
        """A notifier the API took before a rule refused it (the CRD's CEL rules are newer than some objects): it
        sends nothing, and says so on itself (a Warning event `Invalid`, once per version), not only in the log."""
        meta = body["metadata"]
        message = f"the notifier is invalid and sends nothing: {problems}"
        log.warning("TerraformNotifier %s/%s: %s", meta.get("namespace"), meta.get("name"), message)
        version = (str(meta.get("uid") or ""), str(meta.get("resourceVersion") or ""))
        if version in self._said_invalid:
            return
        if len(self._said_invalid) > 10_000:
            self._said_invalid.clear()
        self._said_invalid.add(version)
        self._start(post_event(kube, body, "Warning", "Invalid", message[:1000]), f"{meta.get('name')}: invalid")

    def _start(self, work: Coroutine[Any, Any, None], name: str) -> None:
        task = asyncio.create_task(work, name=f"notify:{name}")
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    def send(self, kube: Kube, layer: Mapping[str, Any], due: list[Notification]) -> None:
        """Start delivering `due` to every notifier that selects the layer and the event (in the background)."""
        labels = layer["metadata"].get("labels") or {}
        for notification in due:
            for notifier in self._selected(kube, notification.namespace, labels, notification.event):
                self._start(self._deliver(kube, notifier, notification), f"{notifier.namespace}/{notifier.name}")

    async def _deliver(self, kube: Kube, notifier: TerraformNotifier, notification: Notification) -> None:
        kind = notifier.spec.target_kind
        try:
            target = await _target(kube, notifier)
        except (KubeError, ValueError) as exc:
            await _record(kube, notifier, notification, f"not sent: {exc}")
            metrics.NOTIFICATIONS.labels(kind, notification.event, "error").inc()
            return
        if self._client is None:
            self._client = notification_client(self.outbound)
        if notifier.spec.link_base:
            notification = replace(notification, link=layer_link(notifier.spec.link_base, notification.namespace,
                                                                 notification.layer))
        result = await deliver(target, notification, client=self._client)
        if result.refused:
            metrics.NOTIFICATIONS.labels(kind, notification.event, "refused").inc()
            outcome = f"not sent: {result.error}"
            await _record(kube, notifier, notification, outcome)
            await post_event(kube, _body(notifier), "Warning", "NotificationRefused", f"{notification.event} for "
                             f"layer {notification.layer} {outcome}")
            return
        metrics.NOTIFICATIONS.labels(kind, notification.event, "sent" if result.ok else "failed").inc()
        outcome = "Delivered" if result.ok else f"failed after {result.attempts} attempts: {result.error}"
        await _record(kube, notifier, notification, outcome)

    async def close(self) -> None:
        for task in list(self._tasks):
            task.cancel()
        if self._client is not None:
            await self._client.aclose()


def _body(notifier: TerraformNotifier) -> dict[str, Any]:
    """What an Event names of the notifier."""
    return {"apiVersion": notifier.api_version, "kind": TerraformNotifier.KIND, "metadata": notifier.metadata}


async def _secret_value(kube: Kube, namespace: str, name: str, key: str, field: str) -> bytes:
    problem = object_name_problem(name)
    if problem is not None:  # a path in the name would reach another namespace's Secret: never read
        raise ValueError(f"the Secret name {problem}")
    secret = await kube.get(path("v1", "secrets", namespace, name))
    if secret is None or not is_open_to_runners(secret, NOTIFIER_SECRET):
        # One refusal whether it exists or not: the notifier's author may not read the namespace's Secrets.
        raise ValueError(f"Secret {namespace}/{name} ({field}) is not open to notifiers: a notifier reads only a "
                         f'Secret annotated {NOTIFIER_SECRET}: "true"; whoever may write the Secret adds the '
                         "annotation if it is meant for notifications")
    data = secret.get("data") or {}
    if key not in data:
        raise ValueError(f"Secret {namespace}/{name} has no key {key!r}")
    return base64.b64decode(data[key])


async def _target(kube: Kube, notifier: TerraformNotifier) -> Target:
    spec, namespace = notifier.spec, notifier.namespace
    name = f"{namespace}/{notifier.name}"
    hook = spec.slack or spec.teams or spec.webhook
    assert hook is not None  # the model requires exactly one
    ref = hook.url_secret_ref
    raw = await _secret_value(kube, namespace, ref.name, ref.key, f"spec.{spec.target_kind}.urlSecretRef")
    try:
        url = raw.decode().strip()
    except UnicodeDecodeError:  # its text names a byte of the value, and the outcome goes to the status
        raise ValueError(f"Secret {namespace}/{ref.name} key {ref.key!r} is not UTF-8 text") from None
    key = None
    if spec.webhook is not None:
        hmac_ref = spec.webhook.hmac_secret_ref
        key = await _secret_value(kube, namespace, hmac_ref.name, hmac_ref.key, "spec.webhook.hmacSecretRef")
    return Target(spec.target_kind, url, key, name)


async def _record(kube: Kube, notifier: TerraformNotifier, notification: Notification, result: str) -> None:
    """`status.lastDelivery` of the notifier: the event, the layer and the outcome, never the URL."""
    body = {"status": {"lastDelivery": {"event": notification.event, "layer": notification.layer,
                                        "time": format_time(utcnow()), "result": result[:500]}}}
    try:
        await kube.merge_patch(crd_path("terraformnotifiers", notifier.namespace, notifier.name, "status"), body)
    except KubeError as exc:
        log.warning("could not record a delivery on TerraformNotifier %s/%s: %s", notifier.namespace, notifier.name,
                    exc)


def layer_link(base: str, namespace: str, name: str) -> str | None:
    return f"{base.rstrip('/')}/api/layers/{namespace}/{name}" if base else None
