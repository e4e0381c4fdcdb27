"""A webhook delivery read into one shape, whatever its provider (docs/architecture.md §11.1), and what it means
for a pull request (§11.3). Pure: `burrito_py.server.webhooks` reads and verifies deliveries, this describes one.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from burrito_py.git.urls import repository_identity
from burrito_py.gitproviders import registry
from burrito_py.gitproviders.base import CommentEvent, PullRequestEvent

__all__ = ["BRANCH_REF_PREFIX", "Delivery", "comment_event", "pull_request_event"]

BRANCH_REF_PREFIX = "refs/heads/"


@dataclass(frozen=True)
class Delivery:
    provider: str  # a registered provider's name (`registry.py`)
    event: str
    delivery_id: str | None
    payload: dict[str, Any]

    @property
    def is_push(self) -> bool:
        return self.event in registry.push_events()

    @property
    def branch(self) -> str | None:
        """The pushed branch; None for tags and other refs."""
        ref = self.payload.get("ref")
        if isinstance(ref, str) and ref.startswith(BRANCH_REF_PREFIX):
            return ref[len(BRANCH_REF_PREFIX) :]
        return None

    def repository_urls(self) -> list[str]:
        """Every URL the payload gives for its repository (clone, ssh and web forms), as its provider reads it."""
        provider = registry.find(self.provider)
        return provider.repository_urls(self.payload) if provider is not None else []

    def identities(self) -> set[tuple[str, str]]:
        return {identity for url in self.repository_urls() if (identity := repository_identity(url)) is not None}


def pull_request_event(delivery: Delivery) -> PullRequestEvent | None:
    """What a (verified) delivery means for a pull request, by its provider's reading; None when nothing.
    BadPullRequest names a field the payload lacks."""
    provider = registry.find(delivery.provider)
    return provider.pull_request_event(delivery.event, delivery.payload) if provider is not None else None


def comment_event(delivery: Delivery) -> CommentEvent | None:
    """A new comment on a pull request in a (verified) delivery, by its provider's reading; None when it is not
    one. BadPullRequest names a field the payload lacks."""
    provider = registry.find(delivery.provider)
    return provider.comment_event(delivery.event, delivery.payload) if provider is not None else None
