"""Attack: a tenant who may edit notifiers, but may not read the namespace's Secrets, has one used as a notifier's
HMAC key (docs/architecture.md §5.10, §24).

A webhook notifier's `hmacSecretRef` named any Secret key of its namespace (a database password, another team's
token). With a URL the tenant receives at, each delivery brought them HMAC-SHA256(that value, a body they know), to
guess a weak value offline; and the outcome said whether a Secret and key existed. A notifier now reads only a Secret
annotated `api.burrito-py.io/notifier-secret: "true"` (by whoever may write it), with one refusal whether the Secret
exists or not. The controllers' own delivery, against the emulator and a receiver on loopback.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
from pathlib import Path
from typing import Any

from burrito_local.apiserver import ApiServer
from burrito_local.identity import admin_client

from burrito_py.api import annotations as ann
from burrito_py.api.notifier import NOTIFIER_SECRET
from burrito_py.notify.sign import SIGNATURE_HEADER
from burrito_py.outbound import LOOPBACK_NETWORKS, OutboundPolicy
from tests.integration.notify.test_delivery import NOTE, Receiver

from .conftest import delivery_outcome

PASSWORD = "hunter2"  # the application's password, in a Secret the tenant may not read
LAYER = {"metadata": {"name": "db", "namespace": "default", "labels": {}}}


def put_secret(admin: Any, name: str, data: dict[str, str], open_to_notifiers: bool) -> None:
    meta: dict[str, Any] = {"name": name, "namespace": "default"}
    if open_to_notifiers:
        meta["annotations"] = {NOTIFIER_SECRET: "true"}
    admin.post("/api/v1/namespaces/default/secrets", json={
        "apiVersion": "v1", "kind": "Secret", "metadata": meta,
        "data": {k: base64.b64encode(v.encode()).decode() for k, v in data.items()}}).raise_for_status()


def deliver_once(kubeconfig: Path, notifier: dict[str, Any]) -> str:
    """`status.lastDelivery.result` of `notifier` after the controllers send it one PolicyDenied."""
    return delivery_outcome(kubeconfig, LAYER, notifier, [NOTE], OutboundPolicy.of(LOOPBACK_NETWORKS))  # loopback


def test_attack_a_notifier_cannot_sign_with_a_secret_not_opened_to_notifiers(api: tuple[ApiServer, Path]) -> None:
    server, kubeconfig = api
    receiver = Receiver([(200, {})])  # the tenant's own endpoint
    try:
        with admin_client(server.url) as admin:
            put_secret(admin, "mine", {"url": receiver.url, "key": "a-key-meant-for-it"}, open_to_notifiers=True)
            put_secret(admin, "db", {"password": PASSWORD}, open_to_notifiers=False)

            def notifier(name: str, hmac_secret: str, key: str) -> dict[str, Any]:
                stored = admin.post(f"/apis/{ann.API_VERSION}/namespaces/default/terraformnotifiers", json={
                    "apiVersion": ann.API_VERSION, "kind": "TerraformNotifier",
                    "metadata": {"name": name, "namespace": "default"},
                    "spec": {"events": ["PolicyDenied"], "webhook": {
                        "urlSecretRef": {"name": "mine", "key": "url"},
                        "hmacSecretRef": {"name": hmac_secret, "key": key}}}})
                assert stored.status_code == 201, stored.text
                return dict(stored.json())

            stolen = deliver_once(kubeconfig, notifier("steal", "db", "password"))
            signatures = [headers.get(SIGNATURE_HEADER) for headers, _ in receiver.requests]
            oracle = [hmac.new(PASSWORD.encode(), body, hashlib.sha256).hexdigest() for _, body in receiver.requests]
            assert not receiver.requests, f"signed with the password: {signatures} == {oracle}"
            refusal = ('Secret default/{} (spec.webhook.hmacSecretRef) is not open to notifiers: a notifier reads '
                       f'only a Secret annotated {NOTIFIER_SECRET}: "true"; whoever may write the Secret adds the '
                       "annotation if it is meant for notifications")
            assert stolen == "not sent: " + refusal.format("db"), stolen
            # The same words for a Secret that does not exist, or a key it does not have: nothing is told.
            assert deliver_once(kubeconfig, notifier("probe", "nothing-here", "password")) == \
                "not sent: " + refusal.format("nothing-here")
            assert deliver_once(kubeconfig, notifier("probe-key", "db", "no-such-key")) == \
                "not sent: " + refusal.format("db")
            # A key its writers opened to notifiers signs as before.
            assert deliver_once(kubeconfig, notifier("fine", "mine", "key")) == "Delivered"
            assert len(receiver.requests) == 1
    finally:
        receiver.server.shutdown()
