"""The error raised when an object does not match its API model, naming the field and the reason.

Free of pydantic at import: the runner raises it from its own reading of its objects (runner/objects.py)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from pydantic import ValidationError

# Regex → what it means, so a pattern mismatch reads as a rule rather than as a regular expression.
# Filled in by the modules that declare the patterns (common.py, repository.py, layer.py).
PATTERN_EXPLANATIONS: dict[str, str] = {}


class InvalidSpec(ValueError):
    """An object failed validation. `field_path` is dotted and uses the manifest's (camelCase) names,
    e.g. `spec.syncWindows[0].schedule`; `problems` holds every (field_path, reason) found."""

    def __init__(self, field_path: str, reason: str, problems: Sequence[tuple[str, str]] = ()) -> None:
        self.field_path = field_path
        self.reason = reason
        self.problems: tuple[tuple[str, str], ...] = tuple(problems) or ((field_path, reason),)
        super().__init__("; ".join(f"{path}: {why}" for path, why in self.problems))

    @classmethod
    def from_validation_error(cls, error: ValidationError, prefix: str = "") -> InvalidSpec:
        problems = [(_join(prefix, _path(e["loc"])), _reason(e)) for e in error.errors(include_url=False)]
        if not problems:  # pragma: no cover - pydantic always reports at least one error
            problems = [(prefix or "<root>", str(error))]
        first_path, first_reason = problems[0]
        return cls(first_path, first_reason, problems)


def _path(loc: Sequence[int | str]) -> str:
    out = ""
    for part in loc:
        if isinstance(part, int):
            out += f"[{part}]"
        else:
            out += f".{part}" if out else part
    return out


def _join(prefix: str, path: str) -> str:
    if not prefix:
        return path or "<root>"
    if not path:
        return prefix
    return prefix + path if path.startswith("[") else f"{prefix}.{path}"


def _reason(error: Mapping[str, Any]) -> str:
    ctx = error.get("ctx") or {}
    if error.get("type") == "string_pattern_mismatch":
        explained = PATTERN_EXPLANATIONS.get(str(ctx.get("pattern", "")))
        if explained:
            return f"{explained} (got {error.get('input')!r})"
    message = str(error.get("msg", "invalid"))
    # Errors raised by our own validators arrive as "Value error, <what we said>".
    return message.removeprefix("Value error, ")
