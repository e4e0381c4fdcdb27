"""The tiny template language of ApplicationDefinitions: `{{ variable | filter | ... }}` in plain text.

Names of Secrets and backend keys need per-instance values and nothing more, so no expressions, no loops
and no attribute access: the language cannot do anything surprising, and every mistake in a definition
(unknown variable, unknown filter, unclosed braces) is found before any instance uses it.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping

from burrito_py.agl.errors import Invalid

__all__ = ["FILTERS", "VARIABLES", "check_template", "render_template"]

VARIABLES = ("name", "namespace", "kind", "group", "plural", "singular", "prefix", "layer")
FILTERS: Mapping[str, Callable[[str], str]] = {"lower": str.lower, "upper": str.upper}
_PLACEHOLDER = re.compile(r"\{\{(.*?)\}\}")


def _parse(template: str, field: str) -> list[str | tuple[str, tuple[str, ...]]]:
    """Literal text and (variable, filters) placeholders, in order."""
    parts: list[str | tuple[str, tuple[str, ...]]] = []
    pos = 0
    for match in _PLACEHOLDER.finditer(template):
        parts.append(template[pos:match.start()])
        variable, *filters = (piece.strip() for piece in match.group(1).split("|"))
        if variable not in VARIABLES:
            raise Invalid(field, f"unknown variable {variable!r} in {match.group(0)!r}; known: {', '.join(VARIABLES)}")
        for name in filters:
            if name not in FILTERS:
                raise Invalid(field, f"unknown filter {name!r} in {match.group(0)!r}; known: {', '.join(FILTERS)}")
        parts.append((variable, tuple(filters)))
        pos = match.end()
    parts.append(template[pos:])
    for text in parts:
        if isinstance(text, str) and ("{{" in text or "}}" in text):
            raise Invalid(field, f"unbalanced '{{{{' or '}}}}' in {template!r}")
    return parts


def check_template(template: str, field: str) -> None:
    """Raise `Invalid` naming `field` when the template cannot be rendered for any instance."""
    _parse(template, field)


def render_template(template: str, values: Mapping[str, str], field: str) -> str:
    out: list[str] = []
    for part in _parse(template, field):
        if isinstance(part, str):
            out.append(part)
            continue
        variable, filters = part
        value = values[variable]
        for name in filters:
            value = FILTERS[name](value)
        out.append(value)
    return "".join(out)
