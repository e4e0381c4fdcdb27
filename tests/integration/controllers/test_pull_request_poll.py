"""Pull requests without webhooks (docs/architecture.md §11.3), against the real controllers (emulator, datastore,
a git server over HTTP) and a fake GitHub and GitLab: a pull request opened, pushed to and closed (merged) on the
host is reflected in its TerraformPullRequest as its webhooks would make it, with no webhook and no server at all;
the token is the repository Secret's; a host that rate-limits the poll is a condition on the repository."""

from __future__ import annotations

import base64
import contextlib
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import timedelta
from pathlib import Path
from typing import Any

import httpx
import pytest
from burrito_local.apply import Applier
from burrito_local.identity import admin_client

from burrito_py.api import annotations as ann
from burrito_py.api.crdgen import generate_crds
from burrito_py.controllers.settings import ControllerSettings
from burrito_py.datastore.in_process import running_datastore
from burrito_py.gitproviders.delivery import Delivery, pull_request_event
from burrito_py.gitproviders.registry import provider_named
from burrito_py.operator.main import ControllerThread
from burrito_py.pullrequests.events import pull_request_write
from tests.support.emulator import running_apiserver, wait_for
from tests.support.fakes.providers import Fake, running_fake_provider
from tests.support.git_repos import make_bare, make_repo
from tests.support.git_servers import running_http_git_server

pytestmark = pytest.mark.slow

TF = f"/apis/{ann.GROUP}/{ann.VERSION}"
NS = "team-a"
TOKEN = "poll-token-value"
HEAD_REFS = {"github": "refs/pull/{n}/head", "gitlab": "refs/merge-requests/{n}/head"}


@dataclass
class World:
    http: httpx.Client
    fake: Fake
    api_url: str
    push: Any  # (number, files) → the new head, pushed to the branch and the provider's pull request ref

    def pull_request(self, number: int) -> dict[str, Any] | None:
        response = self.http.get(f"{TF}/namespaces/{NS}/terraformpullrequests/infra-pr-{number}")
        return response.json() if response.status_code == 200 else None

    def repository(self) -> dict[str, Any]:
        result: dict[str, Any] = self.http.get(f"{TF}/namespaces/{NS}/terraformrepositories/infra").json()
        return result

    def condition(self, kind: str) -> dict[str, Any] | None:
        conditions = (self.repository().get("status") or {}).get("conditions") or ()
        return next((c for c in conditions if c["type"] == kind), None)


@contextlib.contextmanager
def running_world(tmp_path: Path, provider: str, datastore_port: int | None = None) -> Iterator[World]:
    """With `datastore_port`, the controllers use a datastore on that port that the test starts (and stops)."""
    kubeconfig = tmp_path / "kubeconfig"
    with contextlib.ExitStack() as stack:
        api = stack.enter_context(running_apiserver(tmp_path, kubeconfig=kubeconfig))
        applier = Applier(api.url)
        stack.callback(applier.close)
        for crd in generate_crds().values():
            applier.apply(crd)
        http = stack.enter_context(admin_client(api.url))
        http.post("/api/v1/namespaces", json={"metadata": {"name": NS}}).raise_for_status()
        fake, fake_url = stack.enter_context(running_fake_provider(provider))
        # One token for git and for the API, as a GitHub or GitLab token is (git sends it as x-access-token).
        srv = stack.enter_context(running_http_git_server(tmp_path / "srv", "x-access-token", TOKEN))
        make_bare(tmp_path / "srv" / "team" / "infra.git")
        remote = srv.url_for("team/infra.git").replace("http://", f"http://x-access-token:{TOKEN}@")
        work = make_repo(tmp_path / "work")
        work.push(remote, "main")

        def push(number: int, files: dict[str, str]) -> str:
            work.branch("feature")
            head = work.commit(files, f"change for #{number}")
            work.git("push", "-q", "--force", remote, "feature:refs/heads/feature",
                     f"feature:{HEAD_REFS[provider].format(n=number)}")
            work.checkout("main")
            return head

        secret = {"token": TOKEN, "allowedHosts": "http://127.0.0.1"}
        http.post(f"/api/v1/namespaces/{NS}/secrets", json={"metadata": {"name": "git"}, "data": {
            k: base64.b64encode(v.encode()).decode() for k, v in secret.items()}}).raise_for_status()
        api_url = fake_url + ("/api/v4" if provider == "gitlab" else "")
        http.post(f"{TF}/namespaces/{NS}/terraformrepositories", json={
            "apiVersion": ann.API_VERSION, "kind": "TerraformRepository", "metadata": {"name": "infra"},
            "spec": {"repository": {"url": srv.url_for("team/infra.git"), "secretName": "git"},
                     "pullRequests": {"enabled": True, "apiUrl": api_url,
                                      "poll": {"provider": provider, "interval": "10s"}}}}).raise_for_status()
        datastore_url = (stack.enter_context(running_datastore(tmp_path / "datastore")) if datastore_port is None
                         else f"http://127.0.0.1:{datastore_port}")
        settings = ControllerSettings(
            datastore_url=datastore_url, git_cache_dir=tmp_path / "git", metrics_port=0, agl_enabled=False,
            outbound_allowed_networks=["127.0.0.0/8"], repository_poll_interval=timedelta(seconds=30))
        stack.enter_context(ControllerThread(settings, kubeconfig))
        yield World(http, fake, api_url, push)


def webhook_spec(world: World, provider: str, number: int, action: str) -> dict[str, Any]:
    """What the webhook path writes for pull request `number` as the fake has it now (§11.3)."""
    host = httpx.URL(world.api_url).netloc.decode()
    if provider == "github":
        pull = world.fake.github_pull(number, host)
        delivery = Delivery("github", "pull_request", "d", {"action": action, "pull_request": pull,
                                                              "repository": {"full_name": world.fake.project},
                                                              "sender": pull["user"]})
        event = pull_request_event(delivery)
    else:
        mr = world.fake.gitlab_mr(number, host)
        event = provider_named("gitlab").pull_request_event("Merge Request Hook", {
            "object_attributes": {"action": action, "iid": number, "target_branch": mr["target_branch"],
                                  "source_branch": mr["source_branch"], "last_commit": {"id": mr["sha"]},
                                  "oldrev": "0" * 40 if action == "update" else None,
                                  "title": mr["title"], "url": mr["web_url"], "updated_at": mr["updated_at"],
                                  "source_project_id": mr["source_project_id"],
                                  "target_project_id": mr["target_project_id"]},
            "project": {"path_with_namespace": world.fake.project}, "user": mr["author"]})
    assert event is not None
    return pull_request_write(event, "infra", {"enabled": True}).spec


def matches(world: World, expected: dict[str, Any]) -> dict[str, Any] | None:
    found = world.pull_request(int(expected["number"]))
    spec = (found or {}).get("spec") or {}
    return found if all(spec.get(k) == v for k, v in expected.items() if v is not None) else None


@pytest.mark.parametrize("provider", ["github", "gitlab"])
def test_opened_pushed_and_closed_on_the_host_without_webhooks(tmp_path: Path, provider: str) -> None:
    with running_world(tmp_path, provider) as world:
        first = world.push(7, {"app/main.tf": "# one\n"})
        world.fake.open_pull(7, first, title="Bigger db")
        opened = webhook_spec(world, provider, 7, "opened" if provider == "github" else "open")
        created = wait_for(lambda: matches(world, opened), 40, interval=0.2, what="the pull request, opened")
        assert created["spec"]["state"] == "open" and created["spec"]["headSha"] == first

        second = world.push(7, {"app/main.tf": "# two\n"})
        world.fake.push(7, second)
        pushed = webhook_spec(world, provider, 7, "synchronize" if provider == "github" else "update")
        wait_for(lambda: matches(world, pushed), 40, interval=0.2, what="the pull request at its new head")

        world.fake.close(7, merged=True)
        merged = webhook_spec(world, provider, 7, "closed" if provider == "github" else "merge")
        assert merged["state"] == "merged"
        wait_for(lambda: matches(world, merged), 40, interval=0.2, what="the pull request, merged")

        polled = world.condition("PullRequestsPolled")
        assert polled is not None and polled["status"] == "True", polled
        synced = wait_for(lambda: world.condition("Synced"), 30, interval=0.2, what="the repository's sync")
        assert synced["status"] == "True", synced  # the fetch's condition and the poll's live side by side
        # Every call carried the Secret's token, and nothing but the pull requests' routes was asked.
        assert set(world.fake.auth) == {f"Bearer {TOKEN}" if provider == "github" else TOKEN}
        assert all(("/pulls" in p) or ("/merge_requests" in p) for m, p in world.fake.calls if m == "GET"
                   and "/statuses" not in p and "/comments" not in p and "/notes" not in p)


def test_a_host_that_rate_limits_the_poll_is_a_condition_on_the_repository(tmp_path: Path) -> None:
    with running_world(tmp_path, "github") as world:
        wait_for(lambda: (world.condition("PullRequestsPolled") or {}).get("status") == "True", 40, interval=0.2,
                 what="a first poll")
        world.fake.retry_after = "600"
        world.fake.limited = 1000
        limited = wait_for(lambda: (c := world.condition("PullRequestsPolled")) and c["status"] == "False" and c,
                           40, interval=0.2, what="the rate-limited poll's condition")
        assert limited["reason"] == "RateLimited" and "rate limited by the provider for 600 s" in limited["message"]
        # The Event is posted beside the condition, not before it: waited for, not read at once.
        wait_for(lambda: any(e["reason"] == "RateLimited" and e["involvedObject"]["name"] == "infra"
                             for e in world.http.get(f"/api/v1/namespaces/{NS}/events").json()["items"]),
                 10, interval=0.2, what="the RateLimited Event")
        calls = len(world.fake.calls)
        # Retry-After is respected: no call while the host asked to wait (two intervals pass meanwhile).
        with contextlib.suppress(AssertionError):
            wait_for(lambda: len(world.fake.calls) > calls, 22, interval=0.5)
        assert len(world.fake.calls) == calls
        assert TOKEN not in limited["message"]


def test_attack_an_outsiders_comment_with_the_marker_is_never_taken_for_the_plan_comment(tmp_path: Path) -> None:
    """Attack test: the sticky comment is found again by the hidden marker on its first line, which anyone can
    read in the bot's comments (`<!-- burrito-py:pull-request <namespace>/<repository>#<n> -->`). An outsider who
    commented that line on a new pull request before the bot's first comment had theirs taken for the bot's: the
    bot edited the plan into the outsider's comment (a token that may write edits anyone's), which the outsider
    could then edit at will (a plan without its destroys), or, refused, never published the plan at all. Now the
    marker ends with a digest of the TerraformPullRequest's uid, which no outsider knows: their comment is left
    alone and the bot writes its own."""
    with running_world(tmp_path, "github") as world:
        head = world.push(7, {"app/main.tf": "# one\n"})
        planted = f"<!-- burrito-py:pull-request {NS}/infra#7 -->\n\n**burrito-py** at `{head[:12]}`: no changes."
        world.fake.comments[1] = planted
        world.fake.next_id = max(world.fake.next_id, 1)
        world.fake.open_pull(7, head)

        def published() -> dict[str, Any] | None:
            found = world.pull_request(7)
            comment = ((found or {}).get("status") or {}).get("comment") or {}
            return found if comment.get("id") else None

        wait_for(published, 60, interval=0.2, what="the pull request's comment published")
        assert world.fake.comments[1] == planted, "the outsider's comment was edited as the bot's"
        ours = [body for cid, body in world.fake.comments.items() if cid != 1]
        assert len(ours) == 1 and ours[0].startswith(f"<!-- burrito-py:pull-request {NS}/infra#7 -->")
