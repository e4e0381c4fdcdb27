"""Overriding a mandatory policy denial: who may (the denying policies' `overrideBy`), as the REST action and
the controllers both check it."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any


def override_refusal(
    denials: Sequence[Mapping[str, Any]], allowed: Mapping[str, tuple[Sequence[str], Sequence[str]]], user: str,
    groups: Sequence[str],
) -> str | None:
    """None when `user` (or one of `groups`) is in the `overrideBy` of every mandatory policy that denies the
    plan (`allowed`: policy name → (users, groups)), else why not. Without a mandatory denial: nothing to
    override."""
    names = sorted({str(d.get("policy")) for d in denials if d.get("enforcement") == "mandatory"})
    if not names:
        return "no mandatory policy denies the plan: there is nothing to override"
    for name in names:
        users, allowed_groups = allowed.get(name, ((), ()))
        if user not in users and not set(groups) & set(allowed_groups):
            return f"{user} may not override the denial by {name}: its overrideBy names neither them nor their groups"
    return None
