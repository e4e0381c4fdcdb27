"""A TerraformNotifier the API stored before its CRD's rule refused such objects (here: the emulator, which does not
evaluate CEL rules, as an older CRD did not have them) sends nothing; before, only the controllers' log said why. It
now says so on itself, in a Warning event `Invalid` naming the problem, once per version of the object."""

from __future__ import annotations

import asyncio
import base64
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from burrito_local.apiserver import ApiServer
from burrito_local.identity import admin_client

from burrito_py.api import annotations as ann
from burrito_py.api.notifier import NOTIFIER_SECRET
from burrito_py.controllers.layer.notifications import Notifications
from burrito_py.kube.client import Kube
from burrito_py.notify.message import Notification

from .conftest import delivery_outcome

HOOK = {"urlSecretRef": {"name": "hooks", "key": "slack"}}
LAYER = {"metadata": {"name": "app", "namespace": "default", "labels": {}}}


def failed() -> Notification:
    return Notification("RunFailed", "default", "app", None, None, (), 0, (), "run r failed", None,
                        datetime(2026, 11, 28, tzinfo=UTC))


async def send_twice(kubeconfig: Path, stored: dict[str, Any]) -> list[dict[str, Any]]:
    kube = await Kube.connect(str(kubeconfig))
    notifications = Notifications()
    try:
        notifications.notifiers.observe(stored)
        for _ in range(2):  # two notifications for the same version of the notifier: one event
            notifications.send(kube, LAYER, [failed()])

        async def invalid() -> list[dict[str, Any]]:
            listed = await kube.get("/api/v1/namespaces/default/events")
            return [e for e in (listed or {}).get("items") or ()
                    if e["involvedObject"].get("kind") == "TerraformNotifier" and e["reason"] == "Invalid"]

        deadline = asyncio.get_running_loop().time() + 30
        while not await invalid() and asyncio.get_running_loop().time() < deadline:  # posted in the background
            await asyncio.sleep(0.05)
        await asyncio.sleep(0.5)  # a second event, were there one, would be posted by now
        return await invalid()
    finally:
        await notifications.close()
        await kube.close()


def test_an_invalid_notifier_stored_before_the_rule_says_so_in_an_event_once(api: tuple[ApiServer, Path]) -> None:
    server, kubeconfig = api
    body = {"apiVersion": ann.API_VERSION, "kind": "TerraformNotifier",
            "metadata": {"name": "both", "namespace": "default"},
            "spec": {"events": ["RunFailed"], "slack": HOOK, "teams": HOOK}}
    with admin_client(server.url) as admin:
        stored = admin.post(f"/apis/{ann.API_VERSION}/namespaces/default/terraformnotifiers", json=body)
        assert stored.status_code == 201, stored.text
    events = asyncio.run(send_twice(kubeconfig, stored.json()))
    assert [(e["type"], e["involvedObject"]["name"]) for e in events] == [("Warning", "both")]
    assert events[0]["message"] == ("the notifier is invalid and sends nothing: spec: exactly one of slack, teams, "
                                    "webhook must be set (found slack, teams)"), events[0]["message"]


def test_a_url_secret_that_is_not_text_is_named_never_quoted(api: tuple[ApiServer, Path]) -> None:
    """A tenant's notifier may name any Secret key opened to notifiers as its URL: one holding bytes that are not
    UTF-8 made the outcome in the notifier's status (which the tenant reads) name a byte of it and where it is."""
    server, kubeconfig = api
    notifier = {"apiVersion": ann.API_VERSION, "kind": "TerraformNotifier",
                "metadata": {"name": "hook", "namespace": "default"}, "spec": {"events": ["RunFailed"], "slack": HOOK}}
    with admin_client(server.url) as admin:
        admin.post("/api/v1/namespaces/default/secrets", json={
            "apiVersion": "v1", "kind": "Secret", "metadata": {"name": "hooks", "namespace": "default",
                                                               "annotations": {NOTIFIER_SECRET: "true"}},
            "data": {"slack": base64.b64encode(b"key-\xe9\xff-private").decode()}}).raise_for_status()
        stored = admin.post(f"/apis/{ann.API_VERSION}/namespaces/default/terraformnotifiers", json=notifier)
        assert stored.status_code == 201, stored.text


        assert delivery_outcome(kubeconfig, LAYER, stored.json(), [failed()]) == (
            "not sent: Secret default/hooks key 'slack' is not UTF-8 text")
