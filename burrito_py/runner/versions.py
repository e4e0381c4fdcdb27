"""Terraform version constraints (`>= 1.5, < 2.0`, `~> 1.11.0`, `= 1.11.4`, `!= 1.6.0`). Pure."""

from __future__ import annotations

import re
from dataclasses import dataclass

_VERSION = re.compile(r"^v?(\d+)(?:\.(\d+))?(?:\.(\d+))?(?:-([0-9A-Za-z.-]+))?$")
_CLAUSE = re.compile(r"^\s*(=|!=|>=|<=|>|<|~>)?\s*(\S+)\s*$")


class InvalidVersionConstraint(ValueError):
    pass


@dataclass(frozen=True, order=True)
class Version:
    major: int
    minor: int
    patch: int
    prerelease: str = ""

    @classmethod
    def parse(cls, text: str) -> Version:
        match = _VERSION.match(text.strip())
        if not match:
            raise InvalidVersionConstraint(f"{text!r} is not a version")
        major, minor, patch, pre = match.groups()
        return cls(int(major), int(minor or 0), int(patch or 0), pre or "")

    def key(self) -> tuple[int, int, int, int, str]:
        # A prerelease sorts before its release.
        return self.major, self.minor, self.patch, 0 if self.prerelease else 1, self.prerelease

    def __str__(self) -> str:
        return f"{self.major}.{self.minor}.{self.patch}" + (f"-{self.prerelease}" if self.prerelease else "")


@dataclass(frozen=True)
class Clause:
    op: str
    version: Version
    precision: int  # how many components were written (for ~>)

    def allows(self, v: Version) -> bool:
        k, c = v.key(), self.version.key()
        if self.op == "=":
            return k == c
        if self.op == "!=":
            return k != c
        if self.op == ">":
            return k > c
        if self.op == ">=":
            return k >= c
        if self.op == "<":
            return k < c
        if self.op == "<=":
            return k <= c
        # ~> 1.2 allows >= 1.2, < 2.0; ~> 1.2.3 allows >= 1.2.3, < 1.3.0
        if k < c:
            return False
        if self.precision <= 2:
            return v.major == self.version.major
        return (v.major, v.minor) == (self.version.major, self.version.minor)


@dataclass(frozen=True)
class Constraint:
    text: str
    clauses: tuple[Clause, ...]

    def allows(self, version: str | Version) -> bool:
        v = Version.parse(version) if isinstance(version, str) else version
        if v.prerelease and not any(c.op == "=" and c.version == v for c in self.clauses):
            return False  # prereleases only match an exact constraint, as in Terraform
        return all(clause.allows(v) for clause in self.clauses)


def parse_constraint(text: str) -> Constraint:
    if not text or not text.strip():
        raise InvalidVersionConstraint("empty version constraint")
    clauses = []
    for part in text.split(","):
        match = _CLAUSE.match(part)
        if not match:
            raise InvalidVersionConstraint(f"invalid version constraint {text!r}")
        op, version = match.group(1) or "=", match.group(2)
        try:
            parsed = Version.parse(version)
        except InvalidVersionConstraint:
            raise InvalidVersionConstraint(
                f"invalid version constraint {text!r}: {version!r} is not a version"
            ) from None
        clauses.append(Clause(op, parsed, version.lstrip("v").split("-")[0].count(".") + 1))
    return Constraint(text, tuple(clauses))


def pick_latest(constraint: Constraint, versions: list[str]) -> str | None:
    allowed = [Version.parse(v) for v in versions if constraint.allows(v)]
    return str(max(allowed, key=Version.key)) if allowed else None
