"""The git providers, by name (docs/architecture.md §11.1, §11.3).

The one list of names is `PullRequestProvider` in `burrito_py/api/pullrequest.py`: the TerraformPullRequest
CRD's enum is generated from it, and each name is the module of this package that implements that provider
(`PROVIDER: GitProvider`; a `-` in a name is a `_` in its module's: `bitbucket-datacenter` is
`bitbucket_datacenter.py`). So a new provider is its module here plus its name there (then `burrito-py crds
generate` and `burrito-py chart generate`); nothing else names a provider. The models live a floor below this
package (they import nothing of ours but each other), so the names are read from there, never the other way.

Webhook detection asks the providers in the reverse of that list's order: a provider whose deliveries also carry
another's headers comes after it (Gitea and Forgejo send `X-GitHub-Event` besides `X-Gitea-Event`), so it is
asked first. A provider whose deliveries have no header of their own (Azure DevOps) claims them from their body
(`BodyDetecting`), asked only once every header-based one declined: a delivery with a provider's header is that
provider's whatever its body says.
"""

from __future__ import annotations

from collections.abc import Mapping
from importlib import import_module
from typing import Any, get_args

from burrito_py.api.pullrequest import PullRequestProvider
from burrito_py.gitproviders.base import BodyDetecting, GitProvider, ListsPullRequests

__all__ = ["PROVIDERS", "detect", "detect_body", "event_headers", "find", "lister_of", "module_name", "names",
           "provider_named", "push_events"]


def module_name(name: str) -> str:
    """The module of this package implementing provider `name` (a module name has no `-`)."""
    return name.replace("-", "_")


def _load(name: str) -> GitProvider:
    module = import_module(f"burrito_py.gitproviders.{module_name(name)}")
    provider = getattr(module, "PROVIDER", None)
    if not isinstance(provider, GitProvider) or provider.name != name:
        raise ImportError(f"{module.__name__}.PROVIDER is not a GitProvider named {name!r}")
    return provider


# name → provider, in `PullRequestProvider`'s order (tests add one of their own with monkeypatch.setitem).
PROVIDERS: dict[str, GitProvider] = {name: _load(name) for name in get_args(PullRequestProvider)}


def names() -> tuple[str, ...]:
    return tuple(PROVIDERS)


def find(name: str) -> GitProvider | None:
    return PROVIDERS.get(name)


def provider_named(name: str) -> GitProvider:
    """The provider called `name`; ValueError naming the known ones otherwise."""
    provider = PROVIDERS.get(name)
    if provider is None:
        raise ValueError(f"unknown pull request provider {name!r} (expected one of {', '.join(PROVIDERS)})")
    return provider


def lister_of(name: str) -> ListsPullRequests | None:
    """Provider `name` when its open pull requests can be listed (a repository may poll it), else None."""
    provider = PROVIDERS.get(name)
    return provider if isinstance(provider, ListsPullRequests) else None


def detect(headers: Mapping[str, str]) -> tuple[GitProvider, str, str | None] | None:
    """The provider whose webhook `headers` (lower-case names) are, with the event type and delivery id."""
    for provider in reversed(PROVIDERS.values()):
        found = provider.detect(headers)
        if found is not None:
            return provider, found[0], found[1]
    return None


def detect_body(headers: Mapping[str, str], payload: Mapping[str, Any]) -> tuple[GitProvider, str, str | None] | None:
    """The provider that claims a delivery no provider's headers named, from its JSON object `payload`; asked
    only after `detect` found none."""
    for provider in reversed(PROVIDERS.values()):
        if isinstance(provider, BodyDetecting):
            found = provider.detect_body(headers, payload)
            if found is not None:
                return provider, found[0], found[1]
    return None


def event_headers() -> str:
    """The providers' event headers, each once, for a message: `X-GitHub-Event, …, X-Gitea-Event or X-Event-Key`
    (a provider told by its body has none)."""
    headers = list(dict.fromkeys(p.event_header for p in PROVIDERS.values() if p.event_header))  # Bitbucket's twice
    return " or ".join([", ".join(headers[:-1]), headers[-1]] if len(headers) > 1 else headers)


def push_events() -> frozenset[str]:
    """Every provider's push event types. A delivery is a push when its event is any of them, whichever provider
    sent it (as before the providers had modules: a push by any provider's name is acted on as a push)."""
    return frozenset().union(*(provider.push_events for provider in PROVIDERS.values()))
