"""The pull request comment's attribute diffs (pure; docs/architecture.md §11.3, issue 30 item 7).

One collapsed `<details>` per changed layer whose plan has attribute changes (`plans/attributes.py`): a ```diff
fence holding, per resource, a `@@ address: action @@` line and one line per attribute that changes —
`+ path: after` (set), `- path: before` (removed), `! path: before → after` — with `# forces replacement` on the
attributes in Terraform's `replace_paths`. Sensitive values are `(sensitive)`, unknown ones `(known after apply)`.

Everything taken from the plan is inert: it is inside a fence longer than any backtick run it holds (so neither
markdown nor HTML in a value is read), each value and path is one line (JSON, with control, format and separator
characters escaped), and the summary's only plan text is HTML-escaped.

`attribute_sections(layers, room)` fits `room`: when the whole does not fit, the layers get equal shares of it,
smallest first (a small layer stays whole), and inside a layer the resources with the largest blocks are dropped
first; the section's last line says how many of its resources were cut and where the whole plan is
(`burrito-py plan download`). A layer whose frame does not fit its share is left out, and one line says how many.
"""

from __future__ import annotations

import html
import re
from collections.abc import Sequence
from dataclasses import dataclass

from burrito_py.plans.attributes import AttributeChange, display, one_line
from burrito_py.plans.model import PlanModel, ResourceChange

__all__ = ["MAX_VALUE_CHARS", "attribute_line", "attribute_sections", "resource_block"]

MAX_VALUE_CHARS = 120  # a longer value is cut, saying its length
_MARKS = {"add": "+", "remove": "-", "change": "!"}


def attribute_line(change: AttributeChange) -> str:
    before, after = display(change.before, MAX_VALUE_CHARS), display(change.after, MAX_VALUE_CHARS)
    value = after if change.kind == "add" else before if change.kind == "remove" else f"{before} → {after}"
    forces = "  # forces replacement" if change.forces_replace else ""
    return f"{_MARKS[change.kind]} {change.path}: {value}{forces}"


def resource_block(change: ResourceChange) -> str:
    """The lines of one resource: its header, its attributes, and how many more the parse did not keep."""
    lines = [f"@@ {one_line(change.address)}: {change.action} @@", *map(attribute_line, change.attributes)]
    if change.attributes_cut:
        lines.append(f"  … and {change.attributes_cut} more attribute changes (in the whole plan)")
    return "\n".join(lines)


@dataclass(frozen=True, slots=True)
class _Layer:
    key: str
    blocks: tuple[str, ...]
    ticks: str

    def head(self) -> str:
        count = len(self.blocks)
        return (f"<details><summary>Attribute changes of <code>{html.escape(self.key)}</code>: {count} "
                f"resource{'s' if count != 1 else ''}</summary>\n\n{self.ticks}diff\n")

    def note(self, cut: int) -> str:
        return (f"… attribute changes of {cut} resource{'s' if cut != 1 else ''} cut to fit the comment: "
                f"burrito-py plan download {one_line(self.key)} has them all\n")

    def tail(self) -> str:
        return f"{self.ticks}\n\n</details>"

    def whole(self) -> int:
        return len(self.head()) + sum(len(block) + 1 for block in self.blocks) + len(self.tail())

    def fit(self, budget: int) -> str | None:
        """The section in `budget` characters: whole, else without its largest resources (its last line says how
        many), else None."""
        kept = [True] * len(self.blocks)
        if self.whole() > budget:
            total = self.whole() + len(self.note(len(self.blocks)))
            for size, j in sorted(((len(block) + 1, j) for j, block in enumerate(self.blocks)),
                                  key=lambda item: (-item[0], item[1])):
                if total <= budget:
                    break
                kept[j] = False
                total -= size
            if total > budget:
                return None
        body = "".join(block + "\n" for block, keep in zip(self.blocks, kept, strict=True) if keep)
        cut = kept.count(False)
        return self.head() + body + (self.note(cut) if cut else "") + self.tail()


def _layer(key: str, plan: PlanModel) -> _Layer | None:
    blocks = tuple(resource_block(rc) for rc in plan.changed() if rc.attributes or rc.attributes_cut)
    if not blocks:
        return None
    longest = max((len(run) for block in blocks for run in re.findall(r"`+", block)), default=0)
    return _Layer(key, blocks, "`" * max(3, longest + 1))


def attribute_sections(layers: Sequence[tuple[str, PlanModel]], room: int) -> list[str]:
    """The sections of the layers (key, plan model already masked), each to be joined with "\\n\\n": together
    with those separators at most `room` characters. As the plans are: smallest first, each given an equal share of
    what is left, so a small layer is whole and the largest are cut; inside a layer, the largest resources go first.
    A layer whose frame does not fit its share is left out, and one line says how many were."""
    found = [layer for key, plan in layers if (layer := _layer(key, plan)) is not None]
    reserve = len(_layers_note(len(found))) + 2 if len(found) > 1 else 0
    left = room - reserve
    shown: dict[int, str] = {}
    order = sorted(range(len(found)), key=lambda i: found[i].whole())
    for position, i in enumerate(order):
        share = left // (len(order) - position)
        section = found[i].fit(share - 2)
        if section is not None:
            shown[i] = section
            left -= len(section) + 2
    sections = [shown[i] for i in sorted(shown)]
    if len(shown) < len(found):
        note = _layers_note(len(found) - len(shown))
        if sum(len(s) + 2 for s in sections) + len(note) + 2 <= room:
            sections.append(note)
    return sections


def _layers_note(count: int) -> str:
    return f"Attribute changes of {count} more layer{'s' if count != 1 else ''} cut to fit the comment."
