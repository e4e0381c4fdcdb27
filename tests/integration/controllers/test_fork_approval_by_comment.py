"""A fork's approval by comment counts only from an approver the provider says may write to the repository
(docs/architecture.md §11.3, "Forks"): against the real controllers (emulator, datastore, a git server over HTTP) and
a fake GitHub. The approval is written as the server writes it from a signed `/burrito-py approve` comment; what is
checked here is the controllers' part: they ask the provider once per approving comment, record the answer in
`status.approvalChecked`, and a provider that cannot be asked is a condition on the pull request, never a plan."""

from __future__ import annotations

import contextlib
from pathlib import Path
from typing import Any

import pytest

from tests.support.emulator import wait_for

from .test_pull_request_poll import NS, TF, World, running_world

pytestmark = pytest.mark.slow

MAINTAINER_ID = 4


def pull_request(world: World) -> dict[str, Any]:
    found = world.pull_request(7)
    assert found is not None
    return found


def condition(world: World, kind: str) -> dict[str, Any] | None:
    conditions = (pull_request(world).get("status") or {}).get("conditions") or ()
    return next((c for c in conditions if c["type"] == kind), None)


def approve_by_comment(world: World, head: str, comment: str) -> None:
    """What the server writes for maint's signed `/burrito-py approve` at `head` (server/app.py)."""
    world.http.patch(
        f"{TF}/namespaces/{NS}/terraformpullrequests/infra-pr-7",
        json={"spec": {
            "approval": {"by": "maint", "headSha": head, "label": "comment", "comment": comment,
                         "byId": MAINTAINER_ID},
            "commands": [{"id": comment, "by": "maint", "byId": MAINTAINER_ID, "text": "/burrito-py approve",
                          "headSha": head, "note": f"maint approved head {head[:12]} for planning"}]}},
        headers={"Content-Type": "application/merge-patch+json"},
    ).raise_for_status()


def test_an_approver_who_cannot_be_asked_about_plans_nothing_and_says_why(tmp_path: Path) -> None:
    with running_world(tmp_path, "github") as world:
        world.http.patch(
            f"{TF}/namespaces/{NS}/terraformrepositories/infra",
            json={"spec": {"pullRequests": {"forks": {"policy": "RequireApproval", "approvers": ["maint"]}}}},
            headers={"Content-Type": "application/merge-patch+json"},
        ).raise_for_status()
        head = world.push(7, {"app/main.tf": "# from a fork\n"})
        world.fake.open_pull(7, head, fork=True, author="outsider")
        wait_for(lambda: (world.pull_request(7) or {}).get("status", {}).get("state") == "AwaitingApproval", 40,
                 interval=0.2, what="the fork's pull request awaiting approval")

        # The provider refuses every call (a secondary rate limit): whether maint may write is unknown, so
        # nothing is planned, and the pull request says why.
        world.fake.limited = 10**6
        approve_by_comment(world, head, "c1")
        unavailable = wait_for(
            lambda: (c := condition(world, "Ready")) and c["reason"] == "ApproverPermissionUnavailable" and c, 40,
            interval=0.2, what="the condition saying the approver's permission cannot be asked")
        assert unavailable["status"] == "False"
        assert "cannot ask whether maint (who approved by comment) may write" in unavailable["message"]
        held = pull_request(world)
        assert held["status"].get("approvalChecked") is None and held["status"]["state"] == "AwaitingApproval"
        assert not world.http.get(f"{TF}/namespaces/{NS}/terraformruns").json()["items"]

        # Asked again once the provider answers: maint may write, recorded once for this comment; the gate opens.
        world.fake.limited = 0
        world.fake.permissions["maint"] = "write"
        checked = wait_for(lambda: (pull_request(world).get("status") or {}).get("approvalChecked"), 60,
                           interval=0.2, what="the approver's permission recorded")
        assert {k: checked[k] for k in ("comment", "by", "mayWrite")} == {"comment": "c1", "by": "maint",
                                                                         "mayWrite": True}
        opened = wait_for(lambda: (c := condition(world, "Planned")) and c["status"] == "True" and c, 40,
                          interval=0.2, what="the fork's head let through")
        assert opened["reason"] == "Approved" and "approved by maint" in opened["message"]

        def asked() -> int:
            return sum(1 for _, path in world.fake.calls if path.endswith("/collaborators/maint/permission"))

        calls = asked()
        with contextlib.suppress(AssertionError):  # not asked again for the same comment
            wait_for(lambda: asked() > calls, 5, interval=0.5)
        assert asked() == calls
