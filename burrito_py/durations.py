"""Durations as settings take them, in flags and environment variables alike (issue 11, item 21).

Accepted forms: a plain number of seconds (`20`, `1.5`: what the flags take), Go-style units as Kubernetes and
burrito write them (`20s`, `5m`, `1h30m`, `500ms`, `1d`), and ISO 8601 (`PT20S`, `P1DT2H`). Negative
durations are refused. A bad value raises ValueError saying which forms are accepted (pydantic reports it
against the field; `duration_problem` turns that into one line naming the variable).
"""

from __future__ import annotations

import math
import re
from datetime import timedelta
from typing import Annotated, Any

from pydantic import BeforeValidator, TypeAdapter, ValidationError

__all__ = ["Duration", "format_duration", "parse_duration"]

_UNITS = {"ms": 0.001, "s": 1.0, "m": 60.0, "h": 3600.0, "d": 86400.0}
_GO = re.compile(r"(?:(\d+(?:\.\d+)?)(ms|s|m|h|d))")
_ISO = TypeAdapter(timedelta)
FORMS = "seconds (20), units (20s, 5m, 1h30m, 500ms) or ISO 8601 (PT20S)"


def parse_duration(value: Any) -> timedelta:
    """A timedelta from any accepted form (a timedelta or a number passes through as seconds)."""
    if isinstance(value, timedelta):
        seconds = value.total_seconds()
    elif isinstance(value, int | float) and not isinstance(value, bool):
        seconds = float(value)
    elif isinstance(value, str):
        seconds = _seconds(value.strip())
    else:
        raise ValueError(f"expected a duration: {FORMS}")
    if not math.isfinite(seconds) or seconds < 0:
        raise ValueError(f"{value!r} is not a non-negative duration")
    return timedelta(seconds=seconds)


def _seconds(text: str) -> float:
    if not text:
        raise ValueError(f"an empty value is not a duration: {FORMS}")
    try:
        return float(text)
    except ValueError:
        pass
    if re.fullmatch(f"{_GO.pattern}+", text.lower()):
        return sum(float(number) * _UNITS[unit] for number, unit in _GO.findall(text.lower()))
    if text[:1] in ("P", "p"):
        try:
            return _ISO.validate_python(text.upper()).total_seconds()
        except ValidationError:
            pass
    raise ValueError(f"{text!r} is not a duration: {FORMS}")


Duration = Annotated[timedelta, BeforeValidator(parse_duration)]


def format_duration(value: timedelta) -> str:
    """`value` in the Go-style units it can be given in (`1h30m`, `10m`, `8s`, `500ms`), for messages."""
    millis = round(value.total_seconds() * 1000)
    if millis < 1000:
        return f"{millis}ms"
    seconds = millis // 1000
    parts = [(seconds // 3600, "h"), (seconds % 3600 // 60, "m"), (seconds % 60, "s")]
    return "".join(f"{n}{unit}" for n, unit in parts if n) or "0s"
