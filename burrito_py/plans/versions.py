"""Terraform version constraints (`>= 1.5, < 2.0`, `~> 1.11.0`, `= 1.11.4`, `!= 1.6.0`), pure.

Semantics are those of hashicorp/go-version, which Terraform uses for `required_version` and tenv for
version selection:

- a constraint is a comma-joined list of clauses, all of which must hold;
- an operator-less clause (`1.2.3`) means `= 1.2.3`; versions have 1 to 3 numeric components, missing ones are
  0, an optional leading `v`, an optional `-prerelease` and `+build` (ignored in comparisons);
- `~> 1.2` allows `>= 1.2.0, < 2.0.0`; `~> 1.2.3` allows `>= 1.2.3, < 1.3.0`; `~> 1` (one component) bounds
  nothing above, so it means `>= 1.0.0` (go-version's reading);
- a prerelease version (`1.12.0-beta1`) is allowed only when some clause is `= <that exact version>` (and the
  other clauses hold), so `>= 1.0` never picks a beta.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from typing import Literal, NamedTuple

__all__ = ["Constraint", "InvalidVersionConstraint", "Version", "parse_constraint", "pick_latest"]

Operator = Literal["=", "!=", ">", ">=", "<", "<=", "~>"]

_VERSION = re.compile(
    r"^v?(?P<major>\d+)(?:\.(?P<minor>\d+))?(?:\.(?P<patch>\d+))?"
    r"(?:-(?P<pre>[0-9A-Za-z-]+(?:\.[0-9A-Za-z-]+)*))?(?:\+[0-9A-Za-z-]+(?:\.[0-9A-Za-z-]+)*)?$"
)
_CLAUSE = re.compile(r"^\s*(?P<op>~>|!=|>=|<=|=|>|<)?\s*(?P<version>[^\s,]+)\s*$")


class InvalidVersionConstraint(ValueError):
    """A version or constraint that cannot be read; the message names the offending text."""


class Version(NamedTuple):
    """Compared by SemVer precedence (`_key`), never as the tuple it is: `1.2` equals `1.2.0`, a release sorts
    after its prereleases."""

    major: int
    minor: int = 0
    patch: int = 0
    prerelease: str = ""
    components: int = 3  # how many numeric components were written (matters for `~>`)

    @classmethod
    def parse(cls, text: str) -> Version:
        match = _VERSION.match(text.strip())
        if match is None:
            raise InvalidVersionConstraint(f"{text!r} is not a version (expected e.g. 1.11.4)")
        written = 1 + (match["minor"] is not None) + (match["patch"] is not None)
        return cls(
            int(match["major"]), int(match["minor"] or 0), int(match["patch"] or 0), match["pre"] or "", written
        )

    def _key(self) -> tuple[int, int, int, tuple[tuple[int, int, str], ...]]:
        # SemVer precedence: a release sorts after its prereleases; prerelease identifiers compare
        # numerically when numeric, numbers before words.
        if not self.prerelease:
            pre: tuple[tuple[int, int, str], ...] = ((2, 0, ""),)
        else:
            pre = tuple((0, int(p), "") if p.isdigit() else (1, 0, p) for p in self.prerelease.split("."))
        return self.major, self.minor, self.patch, pre

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Version) and self._key() == other._key()

    def __ne__(self, other: object) -> bool:
        return not self == other

    def __hash__(self) -> int:
        return hash(self._key())

    # A tuple's own comparisons would compare the fields (and accept any tuple): each one is SemVer's here.
    def __lt__(self, other: tuple[object, ...]) -> bool:
        return self._key() < _version(other)._key()

    def __le__(self, other: tuple[object, ...]) -> bool:
        return self._key() <= _version(other)._key()

    def __gt__(self, other: tuple[object, ...]) -> bool:
        return self._key() > _version(other)._key()

    def __ge__(self, other: tuple[object, ...]) -> bool:
        return self._key() >= _version(other)._key()

    def __str__(self) -> str:
        return f"{self.major}.{self.minor}.{self.patch}" + (f"-{self.prerelease}" if self.prerelease else "")


def _version(other: object) -> Version:
    """The other side of an ordering: a Version only (a plain tuple would otherwise be compared field by field)."""
    if not isinstance(other, Version):
        raise TypeError(f"a Version is ordered against a Version, not {type(other).__name__}")
    return other


class Clause(NamedTuple):
    op: Operator
    version: Version

    def allows(self, v: Version) -> bool:
        c = self.version
        if self.op == "=":
            return v == c
        if self.op == "!=":
            return v != c
        if self.op == ">":
            return v > c
        if self.op == ">=":
            return v >= c
        if self.op == "<":
            return v < c
        if self.op == "<=":
            return v <= c
        # "~>": at least c, and the components written before the last one stay as written.
        if v < c:
            return False
        if c.components == 3:
            return (v.major, v.minor) == (c.major, c.minor)
        if c.components == 2:
            return v.major == c.major
        return True

    def __str__(self) -> str:
        return f"{self.op} {self.version}"


class Constraint(NamedTuple):
    text: str
    clauses: tuple[Clause, ...]

    def allows(self, version: str | Version) -> bool:
        """Whether `version` satisfies every clause. Raises InvalidVersionConstraint for a bad version."""
        v = Version.parse(version) if isinstance(version, str) else version
        if v.prerelease and not any(c.op == "=" and c.version == v for c in self.clauses):
            return False
        return all(clause.allows(v) for clause in self.clauses)

    def __str__(self) -> str:
        return self.text


ANY = Constraint("", ())  # no constraint: every release (no prerelease)


def parse_constraint(text: str) -> Constraint:
    """Parse `text`; raises InvalidVersionConstraint naming the constraint and the bad clause."""
    text = (text or "").strip()
    if not text:
        raise InvalidVersionConstraint("empty version constraint")
    clauses = []
    for part in text.split(","):
        match = _CLAUSE.match(part)
        if match is None:
            what = "an empty clause" if not part.strip() else f"{part.strip()!r} is not a clause"
            raise InvalidVersionConstraint(
                f"invalid version constraint {text!r}: {what} (expected e.g. \">= 1.5, < 2.0\" or \"~> 1.11\")"
            )
        try:
            version = Version.parse(match["version"])
        except InvalidVersionConstraint as exc:
            raise InvalidVersionConstraint(f"invalid version constraint {text!r}: {exc}") from None
        op: Operator = match["op"] or "="  # type: ignore[assignment]
        clauses.append(Clause(op, version))
    return Constraint(text, tuple(clauses))


def pick_latest(constraint: Constraint, versions: Iterable[str]) -> str | None:
    """The highest of `versions` that `constraint` allows, as written in `versions`; None if none does.
    Entries that are not versions (e.g. stray directory names) are ignored."""
    best: tuple[Version, str] | None = None
    for text in versions:
        try:
            version = Version.parse(text)
        except InvalidVersionConstraint:
            continue
        if constraint.allows(version) and (best is None or version > best[0]):
            best = (version, text)
    return best[1] if best else None
