"""The git provider registry (issue 28): one list of providers, and a provider is one module.

The first tests hold the list to one place: every provider module is registered, and the TerraformPullRequest
CRD's enum is the registry's names. The last ones register a provider the product has never heard of, in the
test alone, and follow a delivery of it through detection, verification, parsing and the pull request's API:
no other module of the product is changed for it.
"""

from __future__ import annotations

import hashlib
import hmac
import json
import pkgutil
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from importlib import import_module
from typing import Any, get_args

import pytest

import burrito_py.gitproviders
from burrito_py.api.crdgen import crd_for
from burrito_py.api.pullrequest import PullRequestProvider, TerraformPullRequest
from burrito_py.gitproviders import registry
from burrito_py.gitproviders.base import CommentEvent, Detected, GitProvider, PullRequestEvent, field_of, time_of
from burrito_py.gitproviders.client import CommitStatus, ProviderClient, ReviewFacts
from burrito_py.gitproviders.delivery import comment_event, pull_request_event
from burrito_py.outbound import OutboundPolicy
from burrito_py.pullrequests.credentials import StaticToken, client_for, default_api_url, provider_token_source
from burrito_py.server.webhook_keys import hmac_key
from burrito_py.server.webhooks import BadDelivery, read_delivery, signature_valid, verified_by

SHARED = {"__init__", "base", "client", "registry", "delivery"}  # the package's modules that are no provider


def test_every_provider_module_is_registered_under_its_own_name() -> None:
    modules = {m.name for m in pkgutil.iter_modules(burrito_py.gitproviders.__path__)} - SHARED
    assert modules == {registry.module_name(name) for name in registry.names()}
    for name in registry.names():
        provider = import_module(f"burrito_py.gitproviders.{registry.module_name(name)}").PROVIDER
        assert isinstance(provider, GitProvider) and provider.name == name
        assert registry.provider_named(name) is provider


def test_the_crd_enum_is_the_registrys_names() -> None:
    schema = crd_for(TerraformPullRequest)["spec"]["versions"][0]["schema"]["openAPIV3Schema"]
    provider = schema["properties"]["spec"]["properties"]["provider"]
    assert tuple(provider["enum"]) == registry.names() == get_args(PullRequestProvider)
    # written from the list, as it was by hand
    assert provider["description"] == "github, gitlab, gitea, bitbucket, bitbucket-datacenter or azure-devops."


def test_an_unknown_name_is_refused_naming_the_known_ones() -> None:
    with pytest.raises(ValueError, match=r"unknown pull request provider 'sourcehut' \(expected one of github, "
                                         r"gitlab, gitea, bitbucket, bitbucket-datacenter, azure-devops\)"):
        registry.provider_named("sourcehut")
    assert registry.find("sourcehut") is None


def test_detection_asks_the_later_providers_first_as_before() -> None:
    """Gitea sends GitHub's event header too: it is Gitea's. A (forged) delivery with GitLab's and GitHub's
    headers is read as GitLab's, as it always was."""
    both = {"x-gitea-event": "push", "x-github-event": "push", "x-gitea-delivery": "g"}
    assert read_delivery(both, b"{}").provider == "gitea"
    assert read_delivery({"x-gitlab-event": "Push Hook", "x-github-event": "push"}, b"{}").provider == "gitlab"
    with pytest.raises(BadDelivery, match="no X-GitHub-Event, X-Gitlab-Event, X-Gitea-Event or X-Event-Key header"):
        read_delivery({"x-other-event": "push"}, b"{}")


# A provider the product does not know: its webhooks say `X-Fake-Event`, sign with `X-Fake-Signature` (hex
# HMAC-SHA256), and its pull request events are `change` deliveries.
@dataclass
class FakeClient:
    api_url: str
    project: str
    number: int
    token: str
    calls: int = 0

    def list_comments(self) -> dict[str, str]:
        return {}

    def close(self) -> None:
        pass

    def create_comment(self, body: str) -> str:
        return "1"

    def edit_comment(self, comment_id: str, body: str) -> None:
        pass

    def set_status(self, sha: str, status: CommitStatus, target_url: str | None) -> None:
        pass

    def write_permission(self, login: str, user_id: int | None) -> bool:
        return login == "maintainer"

    def review_facts(self, base: str, head: str) -> ReviewFacts:
        return ReviewFacts("author", ("reviewer",), True, 0)


class FakeProvider:
    name = "fake"
    event_header = "X-Fake-Event"
    push_events = frozenset({"pushed"})
    comment_limit = 12_345
    github_app = False

    def detect(self, headers: Mapping[str, str]) -> Detected | None:
        return (headers["x-fake-event"], headers.get("x-fake-id")) if "x-fake-event" in headers else None

    def signature_valid(self, headers: Mapping[str, str], body: bytes, key: bytes) -> bool:
        expected = hmac.new(key, body, hashlib.sha256).hexdigest()
        return hmac.compare_digest(headers.get("x-fake-signature", "").encode(), expected.encode())

    def repository_urls(self, payload: Mapping[str, Any]) -> list[str]:
        return [str(payload["repo"]["clone_url"])] if isinstance(payload.get("repo"), dict) else []

    def pull_request_event(self, event: str, payload: Mapping[str, Any]) -> PullRequestEvent | None:
        if event != "change":
            return None
        return PullRequestEvent(self.name, "opened", field_of(payload, "change.id", int),
                                field_of(payload, "change.target", str), field_of(payload, "change.source", str),
                                field_of(payload, "change.sha", str), project=field_of(payload, "repo.path", str),
                                updated_at=time_of(payload, "change.when"))

    def comment_event(self, event: str, payload: Mapping[str, Any]) -> CommentEvent | None:
        if event != "remark":
            return None
        return CommentEvent(self.name, field_of(payload, "change.id", int), str(field_of(payload, "remark.id", int)),
                            field_of(payload, "remark.text", str), field_of(payload, "remark.by", str),
                            field_of(payload, "repo.path", str))

    def head_ref(self, number: int, head_branch: str) -> str:
        return f"refs/changes/{int(number)}"

    def default_api_url(self, base: str, host: str) -> str:
        return f"{base}/fake-api"

    def client(self, api_url: str, project: str, number: int, token: Callable[[], str], *,
               sleep: Callable[[float], None], outbound: OutboundPolicy) -> ProviderClient:
        return FakeClient(api_url, project, number, token())


@pytest.fixture
def fake(monkeypatch: pytest.MonkeyPatch) -> FakeProvider:
    provider = FakeProvider()
    assert isinstance(provider, GitProvider)
    monkeypatch.setitem(registry.PROVIDERS, provider.name, provider)
    return provider


SECRET = b"fake-secret"
CHANGE = {"change": {"id": 5, "target": "main", "source": "topic", "sha": "a" * 40, "when": "2026-03-01T10:20:30Z"},
          "repo": {"path": "team/infra", "clone_url": "https://fake.example/team/infra.git"}}


def signed(body: bytes, event: str) -> dict[str, str]:
    return {"x-fake-event": event, "x-fake-id": "f1",
            "x-fake-signature": hmac.new(SECRET, body, hashlib.sha256).hexdigest()}


def test_a_registered_provider_is_detected_verified_and_parsed(fake: FakeProvider) -> None:
    body = json.dumps(CHANGE).encode()
    headers = signed(body, "change")
    delivery = read_delivery(headers, body)
    assert (delivery.provider, delivery.event, delivery.delivery_id) == ("fake", "change", "f1")
    assert not delivery.is_push
    assert delivery.identities() == {("fake.example", "/team/infra")}
    assert signature_valid(delivery, headers, body, hmac_key(SECRET))
    assert verified_by(delivery, headers, body, [hmac_key(b"other"), hmac_key(SECRET), None]) == [False, True, False]
    assert not signature_valid(delivery, {**headers, "x-fake-signature": "0" * 64}, body, hmac_key(SECRET))
    assert pull_request_event(delivery) == PullRequestEvent("fake", "opened", 5, "main", "topic", "a" * 40,
                                                            project="team/infra",
                                                            updated_at="2026-03-01T10:20:30.000000Z")
    push = json.dumps({"ref": "refs/heads/main", **CHANGE}).encode()
    pushed = read_delivery(signed(push, "pushed"), push)
    assert pushed.is_push and pushed.branch == "main" and pull_request_event(pushed) is None
    with pytest.raises(BadDelivery,
                       match="no X-GitHub-Event, X-Gitlab-Event, X-Gitea-Event, X-Event-Key or X-Fake-Event header"):
        read_delivery({}, body)
    # Its comments are comment commands (§11.3, "Comment commands"): nothing else names it.
    remark = json.dumps({**CHANGE, "remark": {"id": 9, "text": "/burrito-py plan", "by": "maintainer"}}).encode()
    said = read_delivery(signed(remark, "remark"), remark)
    assert comment_event(said) == CommentEvent("fake", 5, "9", "/burrito-py plan", "maintainer", "team/infra")
    assert pull_request_event(said) is None and comment_event(delivery) is None


def test_a_registered_provider_gets_its_api_and_credentials(fake: FakeProvider) -> None:
    assert default_api_url("fake", "https://fake.example:8443/team/infra.git") == "https://fake.example:8443/fake-api"
    secret = {"metadata": {"namespace": "n", "name": "s"},
              "data": {"apiToken": "dG9r", "allowedHosts": "ZmFrZS5leGFtcGxl"}}  # "tok", "fake.example"
    tokens = provider_token_source(secret, "fake", "https://fake.example/fake-api", "s")
    assert isinstance(tokens, StaticToken)
    client = client_for("fake", "https://fake.example/fake-api", "team/infra", 5, tokens)
    assert client == FakeClient("https://fake.example/fake-api", "team/infra", 5, "tok")
    assert registry.provider_named("fake").head_ref(5, "topic") == "refs/changes/5"
    assert registry.provider_named("fake").comment_limit == 12_345
