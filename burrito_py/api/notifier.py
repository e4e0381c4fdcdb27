"""Notifications of what happens to layers (docs/architecture.md §5.10): a `TerraformNotifier` sends chosen
events of the layers it selects in its namespace to a Slack or Microsoft Teams incoming webhook, or to a generic
webhook with an HMAC-signed JSON body. URLs and keys live in Secrets (a Slack or Teams URL is a credential)."""

from __future__ import annotations

from typing import ClassVar, Literal, Self

from pydantic import ConfigDict, Field, JsonValue, model_validator

from burrito_py.api.common import AGE_COLUMN, ApiModel, ObjectName, PrinterColumn, Resource
from burrito_py.api.policy import LabelSelector

__all__ = ["NOTIFICATION_EVENTS", "NOTIFIER_SECRET", "NotificationEvent", "SecretKeyRef", "TerraformNotifier",
           "TerraformNotifierSpec"]

# A notifier reads a Secret only when its writers annotated it so (§5.10), as a runner is given one only when it
# carries `api.burrito-py.io/runner-secret` (api/runner_secrets.py): whoever may edit notifiers may not read every
# Secret, and a URL of their own with the HMAC key of another Secret hands them HMAC(that value, a known body).
NOTIFIER_SECRET = "api.burrito-py.io/notifier-secret"  # noqa: S105 - an annotation key, not a secret

NotificationEvent = Literal["PlanPendingApproval", "PolicyDenied", "DriftDetected", "DriftResolved", "RunFailed",
                            "ApplySucceeded"]
NOTIFICATION_EVENTS: tuple[NotificationEvent, ...] = ("PlanPendingApproval", "PolicyDenied", "DriftDetected",
                                                      "DriftResolved", "RunFailed", "ApplySucceeded")


class SecretKeyRef(ApiModel):
    name: ObjectName = Field(description="A Secret in the notifier's namespace.")
    key: str = Field(min_length=1, description="The key holding the value.")


class IncomingWebhook(ApiModel):
    url_secret_ref: SecretKeyRef = Field(description="The Secret key holding the webhook URL.")


class SignedWebhook(ApiModel):
    url_secret_ref: SecretKeyRef = Field(description="The Secret key holding the URL.")
    hmac_secret_ref: SecretKeyRef = Field(
        description="The Secret key holding the HMAC-SHA256 key: the body's signature is sent as "
        "X-Burrito-Py-Signature-256: sha256=<hex>."
    )


# The model's own rule, as kube-apiserver checks it (x-kubernetes-validations): a notifier with no target or two is
# refused when it is written, rather than stored and then sending nothing.
ONE_TARGET_RULE: dict[str, JsonValue] = {
    "rule": "[has(self.slack), has(self.teams), has(self.webhook)].filter(x, x).size() == 1",
    "message": "exactly one of slack, teams, webhook must be set",
}


class TerraformNotifierSpec(ApiModel):
    model_config = ConfigDict(json_schema_extra={"x-kubernetes-validations": [ONE_TARGET_RULE]})

    layer_selector: LabelSelector | None = Field(default=None, description="Which layers (by label); unset: all.")
    events: list[NotificationEvent] = Field(default_factory=list, description="Which events; empty: all.")
    link_base: str | None = Field(
        default=None, description="URL prefix of the link to a layer (<linkBase>/api/layers/<ns>/<name>); unset: the "
        "controllers' publicUrl setting, else no link."
    )
    slack: IncomingWebhook | None = Field(default=None, description="A Slack incoming webhook.")
    teams: IncomingWebhook | None = Field(default=None, description="A Microsoft Teams incoming webhook (workflow).")
    webhook: SignedWebhook | None = Field(default=None, description="A generic webhook, HMAC-signed.")

    @model_validator(mode="after")
    def _one_target(self) -> Self:
        given = [name for name in ("slack", "teams", "webhook") if getattr(self, name) is not None]
        if len(given) != 1:
            raise ValueError(f"exactly one of slack, teams, webhook must be set (found {', '.join(given) or 'none'})")
        return self

    @property
    def target_kind(self) -> Literal["slack", "teams", "webhook"]:
        return "slack" if self.slack is not None else "teams" if self.teams is not None else "webhook"


class LastDelivery(ApiModel):
    event: str = Field(description="The event sent.")
    layer: str = Field(description="The layer it was about.")
    time: str = Field(description="When (RFC 3339 UTC).")
    result: str = Field(description="Delivered, or why not (never the URL).")


class TerraformNotifierStatus(ApiModel):
    last_delivery: LastDelivery | None = Field(default=None, description="The last delivery attempted.")


class TerraformNotifier(Resource):
    """Sends chosen events of this namespace's layers to Slack, Teams or a signed webhook."""

    KIND: ClassVar[str] = "TerraformNotifier"
    PLURAL: ClassVar[str] = "terraformnotifiers"
    SINGULAR: ClassVar[str] = "terraformnotifier"
    SHORT_NAMES: ClassVar[tuple[str, ...]] = ("tfn",)
    PRINTER_COLUMNS: ClassVar[tuple[PrinterColumn, ...]] = (
        PrinterColumn("Last Event", "string", ".status.lastDelivery.event"),
        PrinterColumn("Result", "string", ".status.lastDelivery.result"),
        AGE_COLUMN,
    )

    kind: str = Field(default="TerraformNotifier", description="TerraformNotifier.")
    spec: TerraformNotifierSpec
    status: TerraformNotifierStatus = Field(default_factory=TerraformNotifierStatus)
