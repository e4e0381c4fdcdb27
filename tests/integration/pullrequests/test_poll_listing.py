"""The poll's listing of open pull requests (docs/architecture.md §11.3) against the fake GitHub, GitLab and Gitea:
each provider's paging, bounded by the poll's pages (an incomplete listing says so), one pull request read as the
host has it now (merged, closed, gone), rate limits waited out only when short (a longer Retry-After ends the poll),
and the poll's deadline."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from burrito_py.gitproviders.base import PollLimits, PullRequestLister
from burrito_py.gitproviders.client import ProviderError, RateLimited
from burrito_py.gitproviders.registry import lister_of
from burrito_py.outbound import LOOPBACK_NETWORKS, OutboundPolicy

from ...support.fakes.providers import Fake, running_fake_provider

TOKEN = "poll-secret-token-value"
LOOPBACK = OutboundPolicy.of(LOOPBACK_NETWORKS)
PREFIX = {"github": "", "gitlab": "/api/v4", "gitea": "/api/v1"}


@pytest.fixture(params=["github", "gitlab", "gitea"])
def host(request: pytest.FixtureRequest) -> Iterator[tuple[Fake, str]]:
    with running_fake_provider(request.param) as (fake, url):
        yield fake, url + PREFIX[request.param]


def lister(fake: Fake, api_url: str, limits: PollLimits, slept: list[float] | None = None) -> PullRequestLister:
    provider = lister_of(fake.kind)
    assert provider is not None
    return provider.lister(api_url, "team/infra", lambda: TOKEN, outbound=LOOPBACK, limits=limits,
                           sleep=(slept if slept is not None else []).append)


def test_every_open_pull_request_is_listed_across_pages(host: tuple[Fake, str]) -> None:
    fake, api_url = host
    for number in range(1, 6):
        fake.open_pull(number, f"{number:040x}")
    fake.close(3)
    pulls = lister(fake, api_url, PollLimits(per_page=2))
    listing = pulls.open_pull_requests()
    assert [e.number for e in listing.events] == [1, 2, 4, 5] and listing.complete
    assert all(e.action == "opened" and e.project == "team/infra" and not e.from_fork for e in listing.events)
    assert {e.head_sha for e in listing.events} == {f"{n:040x}" for n in (1, 2, 4, 5)}
    assert pulls.calls == (1 if fake.kind == "gitea" else 2)  # Gitea: pages of 50


def test_a_listing_beyond_the_poll_s_pages_is_incomplete() -> None:
    for kind in ("github", "gitlab"):
        with running_fake_provider(kind) as (fake, url):
            for number in range(1, 6):
                fake.open_pull(number, f"{number:040x}")
            listing = lister(fake, url + PREFIX[kind], PollLimits(per_page=2, max_pages=2)).open_pull_requests()
            assert [e.number for e in listing.events] == [1, 2, 3, 4] and not listing.complete
            assert len(fake.calls) == 2


def test_one_pull_request_as_the_host_has_it_now(host: tuple[Fake, str]) -> None:
    fake, api_url = host
    fake.open_pull(1, "a" * 40, fork=True)
    fake.open_pull(2, "b" * 40)
    fake.close(1, merged=True)
    fake.close(2)
    pulls = lister(fake, api_url, PollLimits())
    merged, closed = pulls.pull_request(1), pulls.pull_request(2)
    assert merged is not None and merged.action == "merged" and merged.from_fork
    assert closed is not None and closed.action == "closed" and closed.updated_at.startswith("2030-01-01T00:00:04")
    assert pulls.pull_request(99) is None  # the host has no such pull request


def test_a_short_rate_limit_is_waited_out_and_a_long_one_ends_the_poll(host: tuple[Fake, str]) -> None:
    fake, api_url = host
    fake.open_pull(1, "a" * 40)
    slept: list[float] = []
    fake.limited, fake.retry_after = 1, "2"
    assert [e.number for e in lister(fake, api_url, PollLimits(), slept).open_pull_requests().events] == [1]
    assert slept == [2.0]
    calls = len(fake.calls)
    fake.limited, fake.retry_after = 1, "600"
    with pytest.raises(RateLimited) as caught:
        lister(fake, api_url, PollLimits(), slept).open_pull_requests()
    assert caught.value.retry_after == 600.0 and slept == [2.0] and len(fake.calls) == calls + 1
    assert TOKEN not in str(caught.value)


def test_the_poll_s_deadline_ends_it(host: tuple[Fake, str]) -> None:
    fake, api_url = host
    with pytest.raises(ProviderError, match="time is up"):
        lister(fake, api_url, PollLimits(timeout=0.0)).open_pull_requests()
    assert fake.calls == []
