"""What the rules of the selected policies say about one plan, and what that means for applying it (pure)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, Literal

from pydantic import BaseModel, Field

__all__ = ["ADDRESSES_KEPT", "ADDRESS_CHARS", "RuleResult", "Verdict", "VerdictResult", "rule_result"]

ADDRESSES_KEPT = 20
ADDRESS_CHARS = 300  # an address the plan JSON (tenant code) made long must not swell the status or an event
MESSAGES_KEPT = 5
MESSAGE_CHARS = 200
Outcome = Literal["deny", "warn", "error"]
VerdictResult = Literal["Allowed", "Warned", "GatesAutoApply", "Denied"]


class RuleResult(BaseModel):
    """One rule that denied, warned or failed. `messages` (a Rego or CEL rule's own words) are kept in the
    datastore's review only, never in status or events: a rule's author can put values in them."""

    policy: str
    kind: str
    rule: str
    enforcement: str
    outcome: Outcome
    addresses: list[str] = Field(default_factory=list)
    count: int = 0
    messages: list[str] = Field(default_factory=list)
    # Why the rule could not be evaluated, in the controllers' own words (a limit it exceeded: sandbox.py), so
    # unlike `messages` it may be shown in status, conditions and events.
    error: str | None = None

    def finding(self) -> dict[str, Any]:
        found = {"policy": self.policy, "rule": self.rule, "enforcement": self.enforcement,
                 "addresses": self.addresses, "count": self.count}
        if self.error:
            found["error"] = self.error
        return found

    def naming_only(self, known: frozenset[str]) -> RuleResult:
        """This result with only the addresses in `known` (the plan's, as `rule_result` keeps them)."""
        kept = [a for a in self.addresses if a in known]
        return self if len(kept) == len(self.addresses) else self.model_copy(update={"addresses": kept,
                                                                                       "count": len(kept)})


def rule_result(policy: str, kind: str, rule: str, enforcement: str, outcome: Outcome, addresses: Sequence[str],
                messages: Sequence[str] = (), error: str | None = None) -> RuleResult:
    unique = sorted({a[:ADDRESS_CHARS] for a in addresses})
    return RuleResult(policy=policy, kind=kind, rule=rule, enforcement=enforcement, outcome=outcome,
                      addresses=unique[:ADDRESSES_KEPT], count=len(unique),
                      messages=[m[:MESSAGE_CHARS] for m in list(messages)[:MESSAGES_KEPT]],
                      error=error[:500] if error else None)


class Verdict(BaseModel):
    plan_sum: str
    result: VerdictResult
    results: list[RuleResult] = Field(default_factory=list)

    @classmethod
    def of(cls, plan_sum: str, results: Sequence[RuleResult]) -> Verdict:
        """Denied: a mandatory rule denies (an evaluation error denies: fail closed); GatesAutoApply: a
        gateAutoApply rule does; Warned: a warning, or an advisory denial; else Allowed."""
        blocking = [r for r in results if r.outcome in ("deny", "error")]
        result: VerdictResult = "Allowed"
        if any(r.enforcement == "mandatory" for r in blocking):
            result = "Denied"
        elif any(r.enforcement == "gateAutoApply" for r in blocking):
            result = "GatesAutoApply"
        elif results:
            result = "Warned"
        return cls(plan_sum=plan_sum, result=result, results=list(results))

    @property
    def gates_auto_apply(self) -> bool:
        return self.result in ("GatesAutoApply", "Denied")

    @property
    def needs_override(self) -> bool:
        return self.result == "Denied"

    def status_view(self) -> dict[str, Any]:
        """`status.policy`'s verdict part: rule names and addresses, never messages."""
        denied = [r.finding() for r in self.results if r.outcome in ("deny", "error") and r.enforcement != "advisory"]
        warned = [r.finding() for r in self.results if r.outcome == "warn" or
                  (r.outcome in ("deny", "error") and r.enforcement == "advisory")]
        return {"verdict": self.result, "planSum": self.plan_sum, "denied": denied, "warned": warned}
