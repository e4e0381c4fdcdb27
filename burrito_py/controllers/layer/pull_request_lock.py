"""A layer locked to a pull request that applied its plan before merge (docs/architecture.md §11.3, "Apply before
merge"; §5.2): pure. While an open pull request holds the layer, the layer's own runs that change its state (an
apply, a day-2 operation that writes state) wait, visibly: the `PullRequestLock` condition names the holder. Plans
go on (they change nothing). The lock is the pull request controller's to take and release
(`pullrequests/apply.py`); a lock naming a pull request that is gone, merged or closed holds nothing."""

from __future__ import annotations

from dataclasses import replace

from burrito_py.api.operations import OPERATION_ACTIONS
from burrito_py.controllers.layer.decide import LayerDecision
from burrito_py.kube.conditions import Cond

__all__ = ["CONDITION", "hold_for_pull_request"]

CONDITION = "PullRequestLock"
# An apply and every day-2 operation run (a migration moves the state: it waits too).
_WRITES_STATE = ("apply", *OPERATION_ACTIONS)


def hold_for_pull_request(decision: LayerDecision, holder: str | None) -> LayerDecision:
    """`decision` with its state-changing run held back while pull request `holder` holds the layer."""
    if holder is None:
        return decision
    create = decision.create_run
    held = create is not None and create.action in _WRITES_STATE
    message = (f"locked to pull request {holder}, which applied its plan before merge: the layer's applies and "
               "state operations wait until it merges or closes (or `/burrito-py unlock` on it)")
    if held and create is not None:
        message += f"; the {create.action} of {create.revision or 'the plan'} waits"
    return replace(
        decision, create_run=None if held else create,
        # A consumed approval or operation request is kept: it is acted on once the lock is released.
        remove_approval=decision.remove_approval and not held,
        remove_operation=decision.remove_operation and not held,
        conditions=(*decision.conditions, Cond(CONDITION, False, "LockedByPullRequest", message)),
    )
