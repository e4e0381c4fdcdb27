"""A notification and its bodies for Slack, Teams and a generic webhook (pure).

A notification carries names only (layer, plan sum, resource addresses, rule names, a short reason), never
attribute values: it is built from the layer's status, which holds none. Every body fits in 1 KiB: long fields
are cut in a fixed order (addresses, then rules, then the reason, then the summary) with "(+N more)".

Its text comes partly from tenant code (the runner's summary, the plan's addresses), so it is never markup: Slack's
control characters are escaped (`<!channel>`, `<https://…|Approve here>` show as written), and Teams' lines are
TextRuns, which render no Markdown.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass, replace
from datetime import datetime
from typing import Any

from burrito_py.timeutil import format_time

__all__ = ["BODY_LIMIT", "Notification", "render", "slack_body", "teams_body", "webhook_body"]

BODY_LIMIT = 1024
ADDRESSES_SHOWN = 5
TITLES = {
    "PlanPendingApproval": "plan waits for approval",
    "PolicyDenied": "plan denied by a policy",
    "DriftDetected": "drift detected",
    "DriftResolved": "drift resolved",
    "RunFailed": "run failed at its retry limit",
    "ApplySucceeded": "apply succeeded",
}


@dataclass(frozen=True, slots=True)
class Notification:
    event: str
    namespace: str
    layer: str
    plan_sum: str | None
    summary: str | None
    addresses: tuple[str, ...]
    address_count: int
    rules: tuple[str, ...]
    reason: str | None
    link: str | None
    occurred_at: datetime

    @property
    def dedup_key(self) -> tuple[str, str, str, str]:
        return self.namespace, self.layer, self.plan_sum or "", self.event

    @property
    def delivery_id(self) -> str:
        """The same for every retry of this notification, so a receiver can de-duplicate."""
        return hashlib.sha256("\0".join(self.dedup_key).encode()).hexdigest()[:32]

    @property
    def title(self) -> str:
        return f"{self.namespace}/{self.layer}: {TITLES.get(self.event, self.event)}"


def _listed(items: tuple[str, ...], total: int, shown: int) -> str:
    head = ", ".join(items[:shown])
    more = total - min(shown, len(items))
    return head + (f" (+{more} more)" if more > 0 else "")


def _lines(n: Notification, shown: int) -> list[str]:
    lines = []
    if n.summary:
        lines.append(n.summary)
    if n.addresses:
        lines.append("Resources: " + _listed(n.addresses, max(n.address_count, len(n.addresses)), shown))
    if n.rules:
        lines.append("Rules: " + _listed(n.rules, len(n.rules), shown))
    if n.reason:
        lines.append(n.reason)
    if n.plan_sum:
        lines.append(f"Plan: {n.plan_sum}")
    return lines


def _slack_text(text: str) -> str:
    """`text` as Slack shows it, never as a mention, a link or a command (Slack's message formatting: escape `&`,
    `<` and `>`, and only those)."""
    return text.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")


def slack_body(n: Notification, shown: int = ADDRESSES_SHOWN) -> dict[str, Any]:
    text = "\n".join([f"*{_slack_text(n.title)}*", *(_slack_text(line) for line in _lines(n, shown))])
    if n.link:
        text += f"\n<{n.link}|Open the layer>"
    return {"text": text}


def teams_body(n: Notification, shown: int = ADDRESSES_SHOWN) -> dict[str, Any]:
    card: dict[str, Any] = {
        "type": "AdaptiveCard", "version": "1.4",
        # A TextBlock renders Markdown (links included); a RichTextBlock's TextRun never does.
        "body": [{"type": "RichTextBlock", "inlines": [{"type": "TextRun", "text": n.title, "weight": "Bolder"}]},
                 *({"type": "RichTextBlock", "inlines": [{"type": "TextRun", "text": line}]}
                   for line in _lines(n, shown))],
    }
    if n.link:
        card["actions"] = [{"type": "Action.OpenUrl", "title": "Open the layer", "url": n.link}]
    return {"type": "message", "attachments": [{"contentType": "application/vnd.microsoft.card.adaptive",
                                                "content": card}]}


def webhook_body(n: Notification, shown: int = ADDRESSES_SHOWN) -> dict[str, Any]:
    return {"event": n.event, "namespace": n.namespace, "layer": n.layer, "planSum": n.plan_sum,
            "summary": n.summary, "addresses": list(n.addresses[:shown]), "addressCount": n.address_count,
            "rules": list(n.rules[:shown]), "reason": n.reason, "link": n.link,
            "occurredAt": format_time(n.occurred_at), "deliveryId": n.delivery_id}


_RENDERERS = {"slack": slack_body, "teams": teams_body, "webhook": webhook_body}


def _cut(text: str | None, limit: int) -> str | None:
    return text if text is None or len(text) <= limit else text[: max(limit - 1, 0)] + "…"


def render(kind: str, n: Notification) -> bytes:
    """The body for `kind` (slack, teams, webhook), serialized, within BODY_LIMIT bytes."""
    renderer = _RENDERERS[kind]
    attempts = [
        (n, ADDRESSES_SHOWN),
        (replace(n, addresses=tuple(_cut(a, 80) or "" for a in n.addresses)), 2),
        (replace(n, addresses=tuple(_cut(a, 60) or "" for a in n.addresses[:1]), rules=tuple(
            _cut(r, 60) or "" for r in n.rules[:1]), reason=_cut(n.reason, 120)), 1),
        (replace(n, addresses=(), rules=(), reason=_cut(n.reason, 60), summary=_cut(n.summary, 80),
                 layer=_cut(n.layer, 100) or "", namespace=_cut(n.namespace, 63) or "", link=_cut(n.link, 150)), 0),
    ]
    for candidate, shown in attempts:
        body = json.dumps(renderer(candidate, shown), ensure_ascii=False, separators=(",", ":")).encode()
        if len(body) <= BODY_LIMIT:
            return body
    raise ValueError("a notification does not fit in its budget even with every optional field cut")
