"""The one sticky comment of a pull/merge request, rendered from the layers' plans (pure; issue 15).

`render(results, limit)` always fits the provider's limit (its module's `comment_limit`: GitHub 65,536
characters, GitLab 1,000,000, Gitea configurable) and fills it in a fixed priority:

1. the hidden marker that identifies the comment (edited in place), and the status line: head commit, then
   "planning 3/7 layers…" while plans run, or the outcome;
2. a ⚠ block listing every destroy and replace first, with Terraform's reason (`action_reason`,
   `replace_paths`);
3. the summary table: layer, path, `+add ~change -destroy ±replace`, policy verdict;
4. failed layers, each with the last 40 lines of its log;
   then each changed layer's attribute diffs (`comment_attributes.py`), collapsed, the largest resources cut first;
5. each changed layer's plan in a collapsed `<details>` (a ```diff fence), the largest cut first, each cut
   saying how to get the whole plan;
6. the unchanged layers, in one line.

Parts 1 to 3 are never cut while they fit (the ⚠ block names at most `MAX_WARNINGS` resources, then says how
many more); the rest shrinks to fit. Every fence and `<details>` is closed whatever is cut: a fence is longer
than any run of backticks in what it holds, and a part is dropped whole rather than cut inside its markup.
Values never appear: plans come from the plan model (sensitive values masked) and the runner's masked log, and
each layer's `hide` (the values of its run's Secret-fed variables, from the inputs record's `secretVariables`, and
of its sensitive ones: `plans/masking.py`) is replaced wherever it occurs in the plan model, the plan text and the
log before anything is rendered.
"""

from __future__ import annotations

import hashlib
import html
import re
from collections.abc import Sequence
from dataclasses import dataclass, field, replace
from typing import Literal

from burrito_py.gitproviders import github
from burrito_py.plans.attributes import one_line
from burrito_py.plans.masking import SecretValues, masked_model, scrub_text
from burrito_py.plans.model import PlanModel, ResourceChange
from burrito_py.pullrequests.comment_attributes import attribute_sections

__all__ = [
    "LOG_LINES",
    "MAX_WARNINGS",
    "MIN_LIMIT",
    "LayerResult",
    "PullRequestResults",
    "comment_key",
    "marker",
    "render",
]

MIN_LIMIT = 4_096
MAX_WARNINGS = 20
LOG_LINES = 40
LayerState = Literal["pending", "planning", "planned", "failed"]
_SYMBOLS = {"create": "+", "update": "~", "delete": "-", "replace": "±"}


@dataclass(frozen=True, slots=True)
class LayerResult:
    """One affected layer of the pull request, as far as its plan has come."""

    namespace: str
    name: str
    path: str
    state: LayerState
    plan: PlanModel | None = None  # once planned
    plan_text: str = ""  # Terraform's human-readable plan (the datastore's `pretty` format)
    log_tail: tuple[str, ...] = ()  # for a failed plan: the last lines of its log (masked by the runner)
    verdict: str | None = None  # the plan policies' verdict, when policies select the layer
    downstream: bool = False  # not changed itself: an upstream it depends on is (informational)
    # The values of its run's Secret-fed and sensitive variables (plans/masking.py): masked wherever they appear.
    hide: SecretValues = field(default_factory=SecretValues)
    # The binary plan's recorded sum: what `/burrito-py apply` applies, exactly (apply before merge, §11.3).
    plan_sum: str = ""

    def masked(self) -> LayerResult:
        """This result with every hidden value replaced: in the plan model, the plan text and the log."""
        if self.hide.empty:
            return self
        return replace(self, plan=masked_model(self.plan, self.hide) if self.plan is not None else None,
                       plan_text=scrub_text(self.plan_text, self.hide),
                       log_tail=tuple(scrub_text(line, self.hide) for line in self.log_tail),
                       path=scrub_text(self.path, self.hide), hide=SecretValues())

    @property
    def key(self) -> str:
        return f"{self.namespace}/{self.name}"

    @property
    def changed(self) -> bool:
        return self.state == "planned" and self.plan is not None and self.plan.has_changes


@dataclass(frozen=True, slots=True)
class PullRequestResults:
    repository: str  # <namespace>/<name> of the TerraformRepository
    number: int
    head_sha: str
    layers: tuple[LayerResult, ...] = field(default=())
    # Why the head is not planned (a fork's pull request awaiting approval, or not planned at all): then the
    # comment and the aggregate status say this, and list no layer (pullrequests/forks.py).
    notice: str | None = None
    notice_short: str = ""  # the same for the commit status (140 characters)
    key: str = ""  # the marker's key (`comment_key`): what only we write on our comment's first line


def marker(repository: str, number: int, key: str = "") -> str:
    """The hidden first line that finds our comment again among the pull request's comments. `key`
    (`comment_key`) is what no one else can write: the pull request's number and repository are public, and a
    comment anyone wrote with them first would be taken for ours and edited (then edited back by its author)."""
    return f"<!-- burrito-py:pull-request {repository}#{number} -->" + (f"<!-- {key} -->" if key else "")


def comment_key(uid: str) -> str:
    """The marker's key for a TerraformPullRequest: a digest of its uid, which the API gives to those who may read
    it, never to the pull request's commenters (a recreated object writes a comment of its own)."""
    return "key " + hashlib.sha256(f"burrito-py:pull-request-comment:{uid}".encode()).hexdigest()[:32]


def _fence(text: str, info: str = "") -> str:
    """`text` in a fenced block that nothing in it can close: longer than its longest backtick run."""
    longest = max((len(run) for run in re.findall(r"`+", text)), default=0)
    ticks = "`" * max(3, longest + 1)
    return f"{ticks}{info}\n{text.rstrip(chr(10))}\n{ticks}"


def _code(text: str) -> str:
    """An inline code span holding `text` as it is (addresses may hold backticks in their keys)."""
    longest = max((len(run) for run in re.findall(r"`+", text)), default=0)
    ticks = "`" * (longest + 1)
    pad = " " if text.startswith("`") or text.endswith("`") else ""
    return f"{ticks}{pad}{text}{pad}{ticks}"


def _html_code(text: str) -> str:
    """Code inside HTML (a `<summary>`), where markdown's backticks are not read."""
    return f"<code>{html.escape(text)}</code>"


def _cell(text: str) -> str:
    """Table cell text: pipes and newlines would break the row."""
    return text.replace("\\", "\\\\").replace("|", "\\|").replace("\n", " ")


def _status_line(results: PullRequestResults) -> str:
    layers = [r for r in results.layers if not r.downstream]
    done = sum(1 for r in layers if r.state in ("planned", "failed"))
    sha = _code(results.head_sha[:12])
    if results.notice is not None:
        return f"**burrito-py** at {sha}: not planned: {_cell(results.notice)}."
    if not layers:
        return f"**burrito-py** at {sha}: no layer is affected by this pull request."
    if done < len(layers):
        return f"**burrito-py** at {sha}: planning {done}/{len(layers)} layers…"
    changed = sum(1 for r in layers if r.changed)
    failed = sum(1 for r in layers if r.state == "failed")
    parts = [f"{len(layers)} layer{'s' if len(layers) != 1 else ''} planned", f"{changed} with changes"]
    if failed:
        parts.append(f"**{failed} failed**")
    return f"**burrito-py** at {sha}: " + ", ".join(parts) + "."


_PLAIN = re.compile(r"[A-Za-z0-9_.,\-]*")


def _plan_text(text: str) -> str:
    """Text from the plan JSON (which the code a runner runs can write, §5.9) outside a fence: as it is when it is
    plain words (Terraform's reasons and attribute names), else one line in a code span, where markdown, HTML and
    mentions are not read and no line break ends it."""
    return text if _PLAIN.fullmatch(text) else _code(one_line(text))


def _reason(change: ResourceChange) -> str:
    bits: list[str] = [change.action]
    if change.action_reason:
        bits.append(_plan_text(change.action_reason))
    if change.replace_paths:
        paths = ", ".join(_plan_text(".".join(str(p) for p in path)) for path in change.replace_paths[:3])
        bits.append(f"because of {paths}")
    return "; ".join(bits)


def _warnings(results: PullRequestResults) -> list[str]:
    found = [(r, c) for r in results.layers if r.changed and r.plan is not None
             for c in r.plan.resource_changes if c.action in ("delete", "replace")]
    if not found:
        return []
    lines = [f"> [!WARNING]\n> **{len(found)} resource{'s' if len(found) != 1 else ''} will be destroyed or "
             "replaced:**"]
    for layer, change in found[:MAX_WARNINGS]:
        lines.append(f"> - {_code(layer.key)}: {_code(one_line(change.address))} ({_cell(_reason(change))})")
    if len(found) > MAX_WARNINGS:
        lines.append(f"> - … and {len(found) - MAX_WARNINGS} more (see the plans below)")
    return ["\n".join(lines)]


def _counts(layer: LayerResult) -> str:
    if layer.state == "failed":
        return "**plan failed**"
    if layer.plan is None:
        return "planning…" if layer.state == "planning" else "waiting"
    c = layer.plan.counts
    if not layer.plan.has_changes:
        return "no changes"
    return f"+{c.add} ~{c.change} -{c.destroy} ±{c.replace}"


def _table(results: PullRequestResults) -> list[str]:
    if not results.layers:
        return []
    rows = ["| layer | path | changes | policy |", "| --- | --- | --- | --- |"]
    for layer in results.layers:
        name = _code(layer.key) + (" (downstream)" if layer.downstream else "")
        rows.append(f"| {name} | {_cell(_code(layer.path))} | {_counts(layer)} | {_cell(layer.verdict or '—')} |")
    return ["\n".join(rows)]


def _failure(layer: LayerResult, lines: int) -> str:
    tail = "\n".join(layer.log_tail[-lines:]) if lines else ""
    body = _fence(tail, "text") if tail else "(no log)"
    return f"<details open><summary>❌ {_html_code(layer.key)}: the plan failed</summary>\n\n{body}\n\n</details>"


def _diff(plan_text: str) -> str:
    """Terraform's plan with each change symbol moved to the start of its line, so a ```diff fence colours it."""
    out = []
    for line in plan_text.splitlines():
        stripped = line.lstrip(" ")
        for symbol in ("-/+", "+/-", "+", "-", "~", "<="):
            if stripped.startswith(symbol + " "):
                mark = {"-/+": "!", "+/-": "!", "~": "!", "<=": " "}.get(symbol, symbol)
                line = mark + " " * (len(line) - len(stripped)) + stripped[len(symbol):]
                break
        out.append(line)
    return "\n".join(out)


def _plan(layer: LayerResult, budget: int | None) -> str:
    """The collapsed plan of a changed layer; cut to `budget` characters when given (None: whole)."""
    assert layer.plan is not None
    head = f"<details><summary>{_html_code(layer.key)}: {html.escape(layer.plan.summary())}</summary>\n\n"
    if re.fullmatch(r"sha256:[0-9a-f]{64}", layer.plan_sum):
        head += f"plan `{layer.plan_sum}` (what `/burrito-py apply` applies, exactly)\n\n"
    tail = "\n\n</details>"
    text = _diff(layer.plan_text) if layer.plan_text else layer.plan.summary()
    whole = head + _fence(text, "diff") + tail
    if budget is None or len(whole) <= budget:
        return whole
    note = (f"\n\n… cut to fit the comment: the whole plan is `burrito-py plan download {layer.key}` "
            "(or the REST API's plan of the layer)")
    room = budget - len(head) - len(tail) - len(note) - 16  # the fence's own lines
    if room < 200:
        return ""
    cut = text[:room].rsplit("\n", 1)[0]
    return head + _fence(cut, "diff") + note + tail


def render(results: PullRequestResults, limit: int = github.COMMENT_LIMIT) -> str:
    """The comment's body, at most `limit` characters (≥ MIN_LIMIT)."""
    if limit < MIN_LIMIT:
        raise ValueError(f"limit: {limit} is below {MIN_LIMIT} characters, too small for a plan comment")
    # Secret-fed values never reach the provider (issue 24, P2/P3): each layer's texts masked before anything.
    results = replace(results, layers=tuple(layer.masked() for layer in results.layers))
    essential = [marker(results.repository, results.number, results.key), _status_line(results), *_warnings(results),
                 *_table(results)]
    body = "\n\n".join(essential)
    if len(body) > limit:  # a very long table: keep the marker, status and warnings, shorten the table
        body = _shrink_table(essential, limit)
    sections: list[str] = []
    room = limit - len(body)

    def add(section: str) -> bool:
        nonlocal room
        if section and len(section) + 2 <= room:
            sections.append(section)
            room -= len(section) + 2
            return True
        return False

    for layer in results.layers:
        # The whole tail when it fits, else its last 5 lines, else the row alone says it failed.
        if layer.state == "failed" and not add(_failure(layer, LOG_LINES)) and not add(_failure(layer, 5)):
            add(_failure(layer, 0))
    changed = [layer for layer in results.layers if layer.changed]
    for section in _attribute_sections(changed, room):
        add(section)
    # Smallest first, each given an equal share of what is left: the largest plans are the ones cut.
    for index, layer in enumerate(sorted(changed, key=lambda r: len(r.plan_text))):
        share = (room - 2) // (len(changed) - index) if room > 2 else 0
        add(_plan(layer, share))
    unchanged = [layer for layer in results.layers if layer.state == "planned" and not layer.changed]
    if unchanged:
        add("No changes in " + ", ".join(_code(layer.key) for layer in unchanged) + ".")
    return "\n\n".join([body, *sections])


def _attribute_sections(changed: Sequence[LayerResult], room: int) -> list[str]:
    """The attribute diffs (comment_attributes.py), before the plans: the room the plans do not need whole, and at
    least half of what is left, so a big diff never leaves the plans nothing."""
    plans_whole = sum(len(layer.plan_text) + len(layer.key) + 120 for layer in changed)
    return attribute_sections([(layer.key, layer.plan) for layer in changed if layer.plan is not None],
                              max(room // 2, room - plans_whole))


def _shrink_table(essential: Sequence[str], limit: int) -> str:
    """Marker, status, warnings and as many table rows as fit, then a line saying how many are left out."""
    head = "\n\n".join(essential[:-1])
    rows = essential[-1].split("\n")
    kept = rows[:2]
    for index, row in enumerate(rows[2:]):
        left = len(rows) - 2 - index
        note = f"\n\n… and {left} more layers (`kubectl get tfl` lists them all)."
        if len(head) + 2 + len("\n".join([*kept, row])) + len(note) > limit:
            return head + "\n\n" + "\n".join(kept) + note
        kept.append(row)
    return head + "\n\n" + "\n".join(kept)
