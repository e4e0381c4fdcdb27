"""The one error the AGL's pure functions raise: what is wrong, and where."""

from __future__ import annotations

from collections.abc import Sequence


class Invalid(ValueError):
    """An instance (or definition) cannot be compiled. `field` is dotted in the manifest's names
    (`spec.storagePool`, `metadata.name`); `problems` holds every (field, reason) found, first first."""

    def __init__(self, field: str, reason: str, problems: Sequence[tuple[str, str]] = ()) -> None:
        self.field = field
        self.reason = reason
        self.problems: tuple[tuple[str, str], ...] = tuple(problems) or ((field, reason),)
        super().__init__("; ".join(f"{where}: {why}" for where, why in self.problems))
