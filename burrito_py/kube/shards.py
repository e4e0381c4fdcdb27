"""Sharding the controllers by namespace sets (docs/architecture.md §2.1). Pure.

Every shard process knows the whole shard list (`BURRITO_PY_SHARDS`) and its own name (`BURRITO_PY_SHARD`).
A shard's namespace set is a list of kopf namespace patterns over namespace *names* (`team-a-*,!*-sandbox`):
kopf watches what any of them matches, server-side, and follows namespaces created later. Patterns may
overlap, so ownership is decided here: the owner of a namespace is the FIRST shard in the list with a
matching pattern. A shard ignores the objects of a namespace it watches but does not own (one warning per
namespace); a namespace no shard matches is reconciled by nobody. Cluster-scoped work (the AGL's
ApplicationDefinitions → CRDs) runs in the first listed shard only.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field

# kopf's own matcher, so ownership is decided by exactly the rule kopf's watches use (globs, `!` negations,
# an implied `*` before a leading negation). A kopf upgrade moving it fails this import, loudly.
from kopf._cogs.structs.references import match_namespace
from pydantic import BaseModel, ConfigDict, Field, field_validator

__all__ = [
    "SHARD_NAME", "Scope", "Shard", "is_literal", "matches", "owner_of", "pattern_problem", "scope_of", "shard_problem",
]

log = logging.getLogger(__name__)

# A shard name ends up in object names (`<release>-controllers-<shard>`) and a label value: a DNS label.
SHARD_NAME = r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$"


def pattern_problem(pattern: str) -> str | None:
    """Why a namespace pattern is unusable, else None."""
    globs = [glob.strip() for glob in pattern.split(",")]
    if not pattern.strip():
        return "a namespace pattern is empty"
    if any(not glob.lstrip("!") for glob in globs):
        return f"{pattern!r} has an empty glob (between commas, or a lone '!')"
    return None


def is_literal(pattern: str) -> bool:
    """A plain namespace name (kopf lists it directly), not a glob or a negation."""
    return not any(c in pattern for c in "*?[!,")


class Shard(BaseModel):
    """One controllers Deployment and its namespace set."""

    model_config = ConfigDict(extra="forbid")

    name: str = Field(..., pattern=SHARD_NAME, max_length=63, description="Shard name (a DNS label).")
    namespaces: list[str] = Field(
        ...,
        min_length=1,
        description="kopf namespace patterns over namespace names: a string like 'team-a-*,!*-sandbox' (globs, "
        "`!` negations, left to right) or a list of them (a namespace matching any one is in the set).",
    )

    @field_validator("namespaces", mode="before")
    @classmethod
    def _one_or_many(cls, value: object) -> object:
        return [value] if isinstance(value, str) else value

    @field_validator("namespaces", mode="after")
    @classmethod
    def _usable(cls, value: list[str]) -> list[str]:
        for pattern in value:
            problem = pattern_problem(pattern)
            if problem:
                raise ValueError(problem)
        return value


def matches(namespace: str, patterns: Iterable[str]) -> bool:
    """Whether kopf, given these patterns, watches `namespace` (no patterns: every namespace)."""
    patterns = list(patterns)
    return not patterns or any(match_namespace(namespace, p) for p in patterns)  # type: ignore[arg-type]


def owner_of(namespace: str, shards: Sequence[Shard]) -> str | None:
    """The shard owning `namespace`: the first listed whose patterns match; None when none does."""
    for shard in shards:
        if matches(namespace, shard.namespaces):
            return shard.name
    return None


def shard_problem(shard: str, shards: Sequence[Shard]) -> str | None:
    """Why this process's `shard` does not fit the shard list, else None."""
    names = [s.name for s in shards]
    twice = sorted({n for n in names if names.count(n) > 1})
    if twice:
        return f"BURRITO_PY_SHARDS: shard name(s) {', '.join(map(repr, twice))} listed more than once"
    if shards and not shard:
        return "BURRITO_PY_SHARD: required when BURRITO_PY_SHARDS lists shards (which one is this process?)"
    if shard and shard not in names:
        return f"BURRITO_PY_SHARD: {shard!r} is not one of BURRITO_PY_SHARDS ({', '.join(map(repr, names)) or 'none'})"
    return None


@dataclass
class Scope:
    """What one controllers process watches (`patterns`, kopf's) and owns (`shard` among `shards`)."""

    patterns: list[str] = field(default_factory=list)
    shard: str = ""
    shards: list[Shard] = field(default_factory=list)
    _warned: set[str] = field(default_factory=set, repr=False)

    @property
    def sharded(self) -> bool:
        return bool(self.shard)

    @property
    def cluster_work(self) -> bool:
        """Cluster-scoped writes (AGL definitions → CRDs) are this process's: unsharded, or the first shard."""
        return not self.shards or self.shards[0].name == self.shard

    @property
    def literal(self) -> bool:
        """Every pattern is a plain name: each namespace can be listed directly, none needs discovering."""
        return all(is_literal(p) for p in self.patterns)

    def watches(self, namespace: str) -> bool:
        return matches(namespace, self.patterns)

    def owner(self, namespace: str) -> str | None:
        return owner_of(namespace, self.shards) if self.sharded else ("" if self.watches(namespace) else None)

    def owns(self, namespace: str | None) -> bool:
        """Whether this process reconciles the objects of `namespace` (cluster-scoped objects: None, always)."""
        if namespace is None:
            return True
        owner = self.owner(namespace)
        if owner == self.shard:
            return True
        if owner is not None and namespace not in self._warned and self.watches(namespace):
            self._warned.add(namespace)
            log.warning(
                "namespace %s matches the namespaces of shard %r but belongs to shard %r (the first listed "
                "shard whose namespaces match): shard %r ignores its objects",
                namespace, self.shard, owner, self.shard,
            )
        return False

    def listing(self, existing: Iterable[str] | None) -> list[str | None]:
        """The namespaces to list objects from at start-up: None = one cluster-wide listing (no patterns);
        plain names directly; otherwise the `existing` namespaces (names) this process owns."""
        if not self.patterns:
            return [None]
        names = self.patterns if self.literal else list(existing or ())
        return [*sorted({n for n in names if self.owns(n)})]

    def foreign_repository(self, namespace: str) -> str | None:
        """Why a repository of `namespace` is invisible here (another shard's, or no shard's), else None."""
        if self.owns(namespace):
            return None
        owner = self.owner(namespace)
        if self.sharded:
            where = f"shard {owner!r}" if owner is not None else "no shard"
            return f"namespace {namespace!r} is outside shard {self.shard!r} (it belongs to {where})"
        return f"namespace {namespace!r} is not watched by these controllers"


def scope_of(namespaces: Sequence[str], shard: str, shards: Sequence[Shard]) -> Scope:
    return Scope(patterns=list(namespaces), shard=shard, shards=list(shards))
