"""The Azure DevOps client against the fake Azure DevOps on loopback (issue 30 item 6): one comment thread per
pull request, edited in place, no call when nothing changed; the pull request statuses API; review facts; a
personal access token as basic authentication; write permission never granted by this provider's answer."""

from __future__ import annotations

import base64

from burrito_py.gitproviders.azure_devops import AzureDevOps
from burrito_py.gitproviders.client import CommitStatus
from burrito_py.outbound import LOOPBACK_NETWORKS, OutboundPolicy
from burrito_py.pullrequests.providers import body_digest, publish

from ...support.fakes.providers import running_fake_provider

TOKEN = "ado-pat-value"
SHA = "0123456789abcdef0123456789abcdef01234567"


def test_publish_review_facts_and_permissions() -> None:
    with running_fake_provider("azure-devops") as (fake, url):
        client = AzureDevOps(url, "contoso", "Platform", "infra", 21, TOKEN, sleep=lambda _: None,
                             outbound=OutboundPolicy.of(LOOPBACK_NETWORKS))
        statuses = [CommitStatus("burrito-py", "pending", "planning"), CommitStatus("burrito-py/a/b", "success", "ok")]
        first = publish(client, "<!-- m -->", "<!-- m -->\nbody", None, None, SHA, statuses, {}, budget=10)
        assert first.comment_id is not None and ":" in first.comment_id
        assert list(fake.comments.values()) == ["<!-- m -->\nbody"]  # the system thread is not ours
        assert [(s["context"], s["state"]) for s in fake.statuses] == [("burrito-py", "pending"),
                                                                       ("burrito-py/a/b", "succeeded")]
        assert all(s["context"] for s in fake.statuses)
        calls = len(fake.calls)
        again = publish(client, "<!-- m -->", "<!-- m -->\nbody", first.comment_id, body_digest("<!-- m -->\nbody"),
                        SHA, statuses, first.sent)
        assert again.calls == 0 and len(fake.calls) == calls
        # A new process finds its thread by the marker and edits it.
        found = publish(client, "<!-- m -->", "<!-- m -->\nnew", None, None, SHA, statuses, first.sent)
        assert found.comment_id == first.comment_id and list(fake.comments.values()) == ["<!-- m -->\nnew"]
        fake.approved_by, fake.author, fake.mergeable = ["carol@contoso.com"], "ann@contoso.com", False
        facts = client.review_facts("main", SHA)
        assert (facts.author, facts.approved_by, facts.mergeable, facts.behind) == (
            "ann@contoso.com", ("carol@contoso.com",), False, None)
        calls = len(fake.calls)
        assert client.write_permission("carol@contoso.com", None) is False and len(fake.calls) == calls
        expected = "Basic " + base64.b64encode(f":{TOKEN}".encode()).decode()
        assert set(fake.auth) == {expected}
        client.close()
