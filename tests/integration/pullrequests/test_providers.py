"""The GitHub, GitLab, Gitea and Bitbucket (Cloud, Data Center) clients against a fake provider on loopback that
answers with each provider's documented shapes and records every call: one comment per pull request, edited in place,
no call when nothing changed, at most 3 calls per update, paging, rate limits waited out, tokens never in errors."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

from burrito_py.gitproviders.bitbucket import BitbucketCloud
from burrito_py.gitproviders.bitbucket_datacenter import BitbucketDataCenter
from burrito_py.gitproviders.client import ApiHttp, ProviderError, RateLimited, RateLimits
from burrito_py.gitproviders.gitea import Gitea
from burrito_py.gitproviders.github import GitHub
from burrito_py.gitproviders.gitlab import GitLab
from burrito_py.outbound import LOOPBACK_NETWORKS, OutboundPolicy, OutboundRefused
from burrito_py.plans.model import parse_plan
from burrito_py.pullrequests.comment import LayerResult, PullRequestResults, marker, render
from burrito_py.pullrequests.providers import CALL_BUDGET, body_digest, publish
from burrito_py.pullrequests.statuses import commit_statuses

from ...support.fakes.providers import Fake, running_fake_provider
from ...unit.plans.plan_fixtures import fixture

TOKEN = "ghp-secret-token-value"
SHA = "0123456789abcdef0123456789abcdef01234567"
LOOPBACK = OutboundPolicy.of(LOOPBACK_NETWORKS)  # the fakes listen on loopback: allowed explicitly


@pytest.fixture(params=["github", "gitlab", "gitea", "bitbucket", "bitbucket-datacenter"])
def provider(request: pytest.FixtureRequest) -> Iterator[tuple[Fake, Any, list[float]]]:
    with running_fake_provider(request.param) as (fake, url):
        fake.reviewed_at = SHA  # GitHub/Gitea: approvals of the head these tests ask about
        slept: list[float] = []
        client: Any
        if fake.kind == "github":
            client = GitHub(url, "team", "infra", 7, TOKEN, sleep=slept.append, outbound=LOOPBACK)
        elif fake.kind == "gitlab":
            client = GitLab(url + "/api/v4", "team/infra", 7, TOKEN, sleep=slept.append, outbound=LOOPBACK)
        elif fake.kind == "bitbucket":
            client = BitbucketCloud(url + "/2.0", "team", "infra", 7, TOKEN, sleep=slept.append, outbound=LOOPBACK)
        elif fake.kind == "bitbucket-datacenter":
            client = BitbucketDataCenter(url + "/rest", "TEAM", "infra", 7, TOKEN, sleep=slept.append,
                                         outbound=LOOPBACK)
        else:
            client = Gitea(url + "/api/v1", "team", "infra", 7, TOKEN, sleep=slept.append, outbound=LOOPBACK)
        yield fake, client, slept
        client.close()


def results(plan: str) -> PullRequestResults:
    layer = LayerResult("team-a", "app", "layers/app", "planned", parse_plan(fixture(plan)))
    return PullRequestResults("team-a/infra", 7, SHA, (layer,))


MARK = marker("team-a/infra", 7)


def test_one_comment_edited_in_place_and_nothing_when_unchanged(provider: tuple[Fake, Any, list[float]]) -> None:
    fake, client, _ = provider
    fake.comments.update({11: "LGTM", 12: "please rebase", 13: "another bot\nsays hi"})
    first = render(results("create"))
    done = publish(client, MARK, first, None, None, SHA, commit_statuses(results("create")), {})
    assert done.calls <= CALL_BUDGET + 2  # the first update lists the comments (two pages here)
    assert [body for body in fake.comments.values() if body.startswith(MARK)] == [first]
    assert fake.statuses[0]["description"] == "1 layers planned"  # the aggregate first

    # Three more pushes: always the same comment, edited; at most 3 calls each.
    for plan in ("update", "replace", "delete"):
        body = render(results(plan))
        done = publish(client, MARK, body, done.comment_id, body_digest(first), SHA, commit_statuses(results(plan)),
                       done.sent)
        first = body
        assert done.calls <= CALL_BUDGET
    ours = [body for body in fake.comments.values() if body.startswith(MARK)]
    assert ours == [first] and len(fake.comments) == 4

    # Nothing changed: not a single call.
    before = len(fake.calls)
    again = publish(client, MARK, first, done.comment_id, body_digest(first), SHA,
                    commit_statuses(results("delete")), done.sent)
    assert again.calls == 0 and len(fake.calls) == before

    # A new controllers process (no id known): finds the comment by its marker instead of posting another.
    fresh = publish(client, MARK, first, None, None, SHA, commit_statuses(results("delete")), done.sent)
    assert fresh.comment_id == done.comment_id and len(fake.comments) == 4
    assert all(header.endswith(TOKEN) for header in fake.auth)


def test_a_deleted_comment_is_written_anew_and_the_statuses_still_go(provider: tuple[Fake, Any, list[float]]) -> None:
    """Fault test: someone deleted the bot's comment. Each update edited the comment id it had recorded, the
    provider answered 404, and the update failed there, before the commit statuses: for good, retried every 15 s,
    the head's statuses stale (branch protection reading them). Now a comment gone is written anew (or found again
    by its marker), and the statuses follow."""
    fake, client, _ = provider
    first = render(results("create"))
    done = publish(client, MARK, first, None, None, SHA, commit_statuses(results("create")), {})
    assert done.comment_id is not None
    del fake.comments[int(done.comment_id)]
    body = render(results("update"))
    sent = len(fake.statuses)
    again = publish(client, MARK, body, done.comment_id, body_digest(first), SHA, commit_statuses(results("update")),
                    {})  # a status still to send: it goes after the comment
    assert again.comment_id != done.comment_id
    assert [text for text in fake.comments.values() if text.startswith(MARK)] == [body]
    assert len(fake.statuses) > sent


def test_rate_limits_are_waited_out_once(provider: tuple[Fake, Any, list[float]]) -> None:
    fake, client, slept = provider
    fake.limited = 1
    client.create_comment("hello")
    assert slept == [1.0 if fake.kind == "github" else 2.0] and list(fake.comments.values()) == ["hello"]
    fake.limited = 2
    with pytest.raises(RateLimited) as refused:
        client.create_comment("again")
    assert TOKEN not in str(refused.value) and "rate limited by the provider" in str(refused.value)


def test_attack_a_long_rate_limit_never_holds_the_calling_thread(provider: tuple[Fake, Any, list[float]]) -> None:
    """A provider, or a host a tenant names as its pull requests' `apiUrl`, answering every call with a rate limit
    of `Retry-After: 600`: the call ends at once with RateLimited (the wait asked, for the caller to schedule), no
    sleep and no second call. Before, each call slept 60 s in a thread of the controllers' shared pool (six on two
    cores), so one tenant's pull requests could hold every thread that fetches and stores for all tenants."""
    fake, client, slept = provider
    fake.retry_after, fake.limited = "600", 1
    calls = len(fake.calls)
    with pytest.raises(RateLimited) as limited:
        client.create_comment("hello")
    assert slept == [] and limited.value.retry_after == 600.0 and len(fake.calls) == calls + 1
    # Asked again (the reconcile's retry): refused at once, the same words, no call, though the host would answer.
    with pytest.raises(RateLimited) as again:
        client.create_comment("hello")
    assert str(again.value) == str(limited.value) and 0 < again.value.retry_after <= 600.0
    assert len(fake.calls) == calls + 1 and fake.limited == 0 and not fake.comments


def test_a_long_rate_limit_is_remembered_for_its_host_and_token_until_it_ends() -> None:
    """Every client of the process with that host and token is refused without a call until the wait asked has
    passed; another token on the same host is not held; the memory keeps a digest of the credentials, not them."""
    clock = [1000.0]
    limits = RateLimits(clock=lambda: clock[0])
    with running_fake_provider("github") as (fake, url):
        def comment(token: str) -> None:
            http = ApiHttp(url, {"Authorization": f"Bearer {token}"}, sleep=lambda _: None, outbound=LOOPBACK,
                           limits=limits)
            try:
                http.request("POST", "/repos/team/infra/issues/7/comments", "creating the comment", json={"body": "x"})
            finally:
                http.close()

        fake.retry_after, fake.limited = "600", 1
        with pytest.raises(RateLimited, match="for 600 s"):
            comment(TOKEN)
        calls = len(fake.calls)
        with pytest.raises(RateLimited, match="for 600 s"):
            comment(TOKEN)  # a new client, the same token: no call
        assert len(fake.calls) == calls
        comment("another-token")  # another token is its own
        assert len(fake.calls) == calls + 1
        assert TOKEN not in repr(limits.__dict__)
        clock[0] += 601
        comment(TOKEN)  # the wait has passed
        assert len(fake.calls) == calls + 2


def test_statuses_beyond_the_budget_wait_for_the_next_update(provider: tuple[Fake, Any, list[float]]) -> None:
    fake, client, _ = provider
    layers = tuple(LayerResult("team-a", f"l{i}", f"layers/l{i}", "planned", parse_plan(fixture("update")))
                   for i in range(5))
    pr = PullRequestResults("team-a/infra", 7, SHA, layers)
    body, statuses = render(pr), commit_statuses(pr)
    comment = client.create_comment(body)
    first = publish(client, MARK, body, comment, body_digest(body), SHA, statuses, {})
    first_context = fake.statuses[0].get("context") or fake.statuses[0].get("name")
    assert first.calls == CALL_BUDGET and first_context == "burrito-py"
    second = publish(client, MARK, body, comment, body_digest(body), SHA, statuses, first.sent)
    third = publish(client, MARK, body, comment, body_digest(body), SHA, statuses, second.sent)
    assert set(third.sent) == {s.context for s in statuses}
    assert publish(client, MARK, body, comment, body_digest(body), SHA, statuses, third.sent).calls == 0
    if fake.kind == "gitlab":
        assert {s["state"] for s in fake.statuses} == {"success"} and "name" in fake.statuses[0]


def test_a_next_page_link_to_another_host_is_not_followed_with_the_token() -> None:
    """A provider (or whoever answers for it) names another host in GitHub's `Link` header: the token goes to the
    API's own origin only."""
    with running_fake_provider("github") as (fake, url), running_fake_provider("github", "127.0.0.2") as (
            attacker, attacker_url):
        fake.comments.update({11: "one", 12: "two", 13: "three"})  # two per page: a next page is linked
        fake.next_page_host = attacker_url.removeprefix("http://")
        client = GitHub(url, "team", "infra", 7, TOKEN, outbound=LOOPBACK)
        try:
            client.list_comments()
        except ProviderError as exc:
            error: ProviderError | None = exc
        else:
            error = None
        client.close()
    assert attacker.calls == [] and attacker.auth == [], f"the other host received {attacker.auth}"
    assert len(fake.calls) == 1
    assert error is not None and str(error).endswith("the provider pointed to another host (127.0.0.2); not followed")


def test_by_default_a_client_reaches_nothing_internal() -> None:
    with running_fake_provider("gitea") as (fake, url):
        client = Gitea(url + "/api/v1", "team", "infra", 7, TOKEN)  # no allow-list: the controllers' default
        with pytest.raises(OutboundRefused) as refused:
            client.list_comments()
        client.close()
    assert "127.0.0.1 is a loopback address" in str(refused.value) and fake.calls == []


# -- comment commands (issue 30): the commenter's write permission and the apply requirements' facts ----------------
def test_write_permission_as_each_provider_says(provider: tuple[Fake, Any, list[float]]) -> None:
    fake, client, _ = provider
    fake.permissions.update({"alice": "write", "rita": "read", "ada": "admin"})
    fake.members.update({5: 30, 6: 20})
    if fake.kind == "gitlab":  # by user id: Developer (30) and above may write; a non-member is a 404
        assert [client.write_permission(login, uid) for login, uid in (("alice", 5), ("rita", 6), ("x", 7))] == [
            True, False, False]
        assert client.write_permission("alice", None) is False
        assert fake.calls[-1][1].endswith("/members/all/7")
    elif fake.kind == "bitbucket":  # by account id, the workspace's effective permission (read, write, admin)
        fake.permissions = {"557058:alice": "write", "557058:rita": "read", "557058:ada": "admin"}
        assert [client.write_permission(f"557058:{u}", None) for u in ("alice", "rita", "ada", "nobody")] == [
            True, False, True, False]
        assert fake.calls[-1][1].endswith("/workspaces/team/permissions/repositories/infra")
    elif fake.kind == "bitbucket-datacenter":  # an explicit grant on the repository, else on its project
        fake.permissions = {"alice": "REPO_WRITE", "rita": "REPO_READ", "ada": "PROJECT_ADMIN", "pat": "PROJECT_READ"}
        assert [client.write_permission(u, None) for u in ("alice", "rita", "ada", "pat", "nobody")] == [
            True, False, True, False, False]
        assert fake.calls[-1][1].endswith("/rest/api/1.0/projects/TEAM/permissions/users")
    else:
        assert [client.write_permission(login, None) for login in ("alice", "rita", "ada", "nobody")] == [
            True, False, True, False]
        assert fake.calls[-1][1].endswith("/collaborators/nobody/permission")
    assert TOKEN not in str(fake.calls)


WRITE = {"github": "write", "gitea": "write", "bitbucket": "write", "bitbucket-datacenter": "REPO_WRITE"}
READ = {"github": "read", "gitea": "read", "bitbucket": "read", "bitbucket-datacenter": "REPO_READ"}


def test_review_facts_as_each_provider_says(provider: tuple[Fake, Any, list[float]]) -> None:
    fake, client, _ = provider
    fake.approved_by = ["rev"]
    if fake.kind in WRITE:
        fake.permissions["rev"] = WRITE[fake.kind]
    facts = client.review_facts("main", SHA)
    if fake.kind == "bitbucket":  # its API says who approves, never whether it merges or how far behind it is
        assert (facts.author, facts.approved_by, facts.mergeable, facts.behind) == ("author", ("rev",), None, None)
        return
    assert (facts.author, facts.approved_by, facts.mergeable, facts.behind) == ("author", ("rev",), True, 0)
    fake.mergeable, fake.behind, fake.approved_by = False, 2, []
    facts = client.review_facts("main", SHA)
    assert facts.approved_by == () and facts.mergeable is False
    assert facts.behind == (1 if fake.kind == "gitea" else 2)  # Gitea says only whether (its merge base)


def test_attack_an_approval_without_write_permission_does_not_count(provider: tuple[Fake, Any, list[float]]) -> None:
    """Attack test: any account that can read a pull request may approve it (GitHub, Gitea and Bitbucket show such
    a review as approving): the author's second account, or anyone at all on a public repository. The `approved`
    apply requirement counted it as the second person in the loop, so an author with write permission could apply
    their own change before merge with nobody's review. Now an approval counts only from an account the provider
    says may write to the repository. (GitLab lets only eligible members approve.)"""
    fake, client, _ = provider
    if fake.kind not in WRITE:  # GitLab: only eligible members can approve, so its approvals count as it says
        fake.approved_by = ["puppet"]
        assert client.review_facts("main", SHA).approved_by == ("puppet",)
        return
    fake.approved_by = ["puppet"]
    fake.permissions.update({"puppet": READ[fake.kind]})
    assert client.review_facts("main", SHA).approved_by == ()
    fake.approved_by = ["puppet", "rev"]
    fake.permissions["rev"] = WRITE[fake.kind]
    assert client.review_facts("main", SHA).approved_by == ("rev",)


def test_attack_an_approval_of_an_earlier_commit_does_not_approve_the_head(
        provider: tuple[Fake, Any, list[float]]) -> None:
    """Attack test: GitHub keeps a review APPROVED after a push (unless branch protection dismisses stale reviews),
    and its review objects carry the `commit_id` they were given at, never Gitea's `stale`. So an author with write
    access could get a harmless commit approved, push a harmful one, and `/burrito-py apply` it before merge with
    the `approved` requirement met by nobody's review of it (and a merge of it counted as reviewed). Now a GitHub
    or Gitea review counts only at the head asked about. (GitLab and both Bitbuckets say who approves the pull
    request as it is now; whether a push resets approvals is their project setting.)"""
    fake, client, _ = provider
    if fake.kind not in ("github", "gitea"):
        return
    fake.approved_by = ["rev"]
    fake.permissions["rev"] = WRITE[fake.kind]
    assert client.review_facts("main", SHA).approved_by == ("rev",)
    fake.reviewed_at = "f" * 40  # the same approval, given at the commit before the head
    assert client.review_facts("main", SHA).approved_by == ()


# -- Bitbucket Cloud (issue 30 item 6) -------------------------------------------------------------------------
def test_bitbucket_build_statuses_fit_its_key_and_always_link() -> None:
    """Bitbucket refuses a build status without a URL or with a key over 40 characters (the fake does as it does):
    a long context is keyed by its digest and named in full, and a status given no URL links the pull request."""
    with running_fake_provider("bitbucket") as (fake, url):
        client = BitbucketCloud(url + "/2.0", "team", "infra", 7, TOKEN, outbound=LOOPBACK)
        layers = tuple(LayerResult("team-a", f"a-rather-long-layer-name-{i}", f"layers/l{i}", "planned",
                                   parse_plan(fixture("update"))) for i in range(2))
        statuses = commit_statuses(PullRequestResults("team-a/infra", 7, SHA, layers))
        for status in statuses:
            client.set_status(SHA, status, None)
        client.close()
    assert [s["name"] for s in fake.statuses] == [s.context for s in statuses]
    assert any(len(s.context) > 40 for s in statuses) and all(len(s["key"]) <= 40 for s in fake.statuses)
    assert len({s["key"] for s in fake.statuses}) == len(statuses)
    assert {s["state"] for s in fake.statuses} == {"SUCCESSFUL"}
    assert fake.statuses[0]["url"] == "https://bitbucket.org/team/infra/pull-requests/7"
    assert fake.calls[0] == ("POST", f"/2.0/repositories/team/infra/commit/{SHA}/statuses/build")


def test_bitbucket_next_page_on_another_host_is_not_followed() -> None:
    with running_fake_provider("bitbucket") as (fake, url), running_fake_provider("bitbucket", "127.0.0.2") as (
            attacker, attacker_url):
        fake.comments.update({11: "one", 12: "two", 13: "three"})
        fake.next_page_host = attacker_url.removeprefix("http://")  # its `next` names another host
        client = BitbucketCloud(url + "/2.0", "team", "infra", 7, TOKEN, outbound=LOOPBACK)
        with pytest.raises(ProviderError, match=r"the provider pointed to another host \(127\.0\.0\.2\)"):
            client.list_comments()
        client.close()
    assert attacker.calls == [] and len(fake.calls) == 1


def test_bitbucket_datacenter_edits_name_the_comments_version() -> None:
    """Data Center refuses an edit that does not name the comment's current version (the fake does as it does):
    each edit reads it first, so edits after edits (by anyone) go through."""
    with running_fake_provider("bitbucket-datacenter") as (fake, url):
        client = BitbucketDataCenter(url + "/rest", "TEAM", "infra", 7, TOKEN, outbound=LOOPBACK)
        comment = client.create_comment("one")
        fake.versions[int(comment)] = 5  # someone edited it in between
        client.edit_comment(comment, "two")
        client.edit_comment(comment, "three")
        status = commit_statuses(results("create"))[0]
        client.set_status(SHA, status, None)
        client.close()
    assert fake.comments == {int(comment): "three"} and fake.versions[int(comment)] == 7
    assert fake.statuses[0]["state"] == "SUCCESSFUL" and fake.statuses[0]["key"] == status.context
    assert fake.statuses[0]["url"].endswith("/projects/TEAM/repos/infra/pull-requests/7")
    assert fake.calls[-1] == ("POST", f"/rest/build-status/1.0/commits/{SHA}")
