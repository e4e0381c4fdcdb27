"""What the pages show, computed from the API's objects and the stored plan (pure): layer rows with their
filters, sort and pages; a plan's changes by kind; pending approvals; pull requests."""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import urlencode

from burrito_py.api import annotations as ann
from burrito_py.api.layer import LAYER_STATES
from burrito_py.plans.attributes import AttributeChange, Leaf, Marker, display, one_line
from burrito_py.plans.model import PlanModel, ResourceChange
from burrito_py.server.views import repository_key

PAGE_SIZE = 50
SORT_KEYS = ("namespace", "name", "state", "repository", "drift", "result", "policy")
STATES = LAYER_STATES  # the one list (api/layer.py)
DRIFTS = ("InSync", "Drifted", "CodeChange", "Unknown")


def _dict(value: Any) -> Mapping[str, Any]:
    return value if isinstance(value, Mapping) else {}


def _str(value: Any) -> str:
    return value if isinstance(value, str) else ""


@dataclass(frozen=True, slots=True)
class LayerRow:
    namespace: str
    name: str
    state: str
    last_result: str
    drift: str
    policy: str
    repository: str  # <namespace>/<name>
    branch: str
    path: str
    pending_sum: str
    search: str  # lowercased text the free-text filter matches

    @property
    def key(self) -> str:
        return f"{self.namespace}/{self.name}"


def layer_row(layer: Mapping[str, Any]) -> LayerRow:
    meta, spec, status = _dict(layer.get("metadata")), _dict(layer.get("spec")), _dict(layer.get("status"))
    repo_ns, repo = repository_key(layer)
    row = dict(namespace=_str(meta.get("namespace")), name=_str(meta.get("name")), state=_str(status.get("state")),
               last_result=_str(status.get("lastResult")), drift=_str(_dict(status.get("drift")).get("state")),
               policy=_str(_dict(status.get("policy")).get("verdict")), repository=f"{repo_ns}/{repo}",
               branch=_str(spec.get("branch")), path=_str(spec.get("path")),
               pending_sum=_str(_dict(status.get("pendingPlan")).get("sum")))
    search = " ".join(row[k] for k in ("namespace", "name", "repository", "branch", "path", "last_result")).lower()
    return LayerRow(**row, search=search)


@dataclass(frozen=True, slots=True)
class LayerQuery:
    """The layers page's filters, sort and page: all in the query string, so a view can be bookmarked and shared."""

    namespace: str = ""
    repository: str = ""
    state: str = ""
    drift: str = ""
    q: str = ""
    sort: str = "namespace"
    desc: bool = False
    page: int = 1

    @classmethod
    def from_params(cls, params: Mapping[str, str]) -> LayerQuery:
        def text(name: str) -> str:
            return params.get(name, "").strip()[:200]

        sort = text("sort")
        try:
            page = max(1, min(int(params.get("page", "1")), 1_000_000))
        except ValueError:
            page = 1
        return cls(namespace=text("namespace"), repository=text("repository"), state=text("state"),
                   drift=text("drift"), q=text("q"), sort=sort if sort in SORT_KEYS else "namespace",
                   desc=params.get("dir") == "desc", page=page)

    def matches(self, row: LayerRow) -> bool:
        if self.namespace and row.namespace != self.namespace:
            return False
        # A repository filter names <namespace>/<name>, or just a name in any namespace.
        if self.repository and row.repository != self.repository and row.repository.split("/", 1)[1] != self.repository:
            return False
        if self.state and row.state != self.state:
            return False
        if self.drift and row.drift != self.drift:
            return False
        return not self.q or all(word in row.search for word in self.q.lower().split())

    def params(self, **changes: Any) -> str:
        """The query string of this view with `changes`, leaving out defaults (for links)."""
        values = {"namespace": self.namespace, "repository": self.repository, "state": self.state,
                  "drift": self.drift, "q": self.q, "sort": self.sort, "dir": "desc" if self.desc else "",
                  "page": self.page}
        values.update(changes)
        kept = {k: v for k, v in values.items() if v and not (k == "sort" and v == "namespace")
                and not (k == "page" and v == 1)}
        return urlencode(kept)


_SORT_FIELDS: dict[str, tuple[str, ...]] = {
    "namespace": ("namespace", "name"), "name": ("name", "namespace"), "state": ("state", "namespace", "name"),
    "repository": ("repository", "namespace", "name"), "drift": ("drift", "namespace", "name"),
    "result": ("last_result", "namespace", "name"), "policy": ("policy", "namespace", "name"),
}


def _sort_key(sort: str) -> Callable[[LayerRow], tuple[str, ...]]:
    fields = _SORT_FIELDS[sort]  # namespace and name break every tie

    def key(row: LayerRow) -> tuple[str, ...]:
        return tuple(getattr(row, f) for f in fields)

    return key


@dataclass(frozen=True, slots=True)
class LayerPage:
    rows: list[LayerRow]
    total: int  # layers matching the filters
    page: int
    pages: int
    namespaces: list[str] = field(default_factory=list)  # for the filter's choices
    repositories: list[str] = field(default_factory=list)


def layer_page(rows: Iterable[LayerRow], query: LayerQuery, page_size: int = PAGE_SIZE) -> LayerPage:
    every = list(rows)
    matching = [r for r in every if query.matches(r)]
    matching.sort(key=_sort_key(query.sort), reverse=query.desc)
    pages = max(1, math.ceil(len(matching) / page_size))
    page = min(query.page, pages)
    start = (page - 1) * page_size
    return LayerPage(rows=matching[start:start + page_size], total=len(matching), page=page, pages=pages,
                     namespaces=sorted({r.namespace for r in every}),
                     repositories=sorted({r.repository for r in every}))


# -- plans ---------------------------------------------------------------------------------------------
GROUPS = ("create", "update", "replace", "delete", "import", "moved", "forget")
GROUP_TITLES = {"create": "Create", "update": "Update in place", "replace": "Replace (destroy, then create)",
                "delete": "Destroy", "import": "Import", "moved": "Moved", "forget": "Forget (removed from state)"}
REASONS = {
    "replace_because_cannot_update": "a changed attribute forces replacement",
    "replace_because_tainted": "the object is tainted",
    "replace_by_request": "replacement was requested (-replace)",
    "replace_by_triggers": "replace_triggered_by",
    "delete_because_no_resource_config": "its configuration was removed",
    "delete_because_no_module": "its module was removed",
    "delete_because_wrong_repetition": "count/for_each changed shape",
    "delete_because_count_index": "its count index is gone",
    "delete_because_each_key": "its for_each key is gone",
    "delete_because_no_move_target": "its moved target does not exist",
}


UI_VALUE_CHARS = 1_000  # a longer value is cut on the page, saying its length (the download has it whole)


@dataclass(frozen=True, slots=True)
class ShownValue:
    """One side of an attribute change as the page shows it: `text` empty when there is no value."""

    text: str
    marker: bool  # (sensitive) or (known after apply), not a value


@dataclass(frozen=True, slots=True)
class AttributeRow:
    path: str
    kind: str  # add, remove, change
    before: ShownValue
    after: ShownValue
    forces_replace: bool


def _shown(value: Leaf) -> ShownValue:
    if value is None:
        return ShownValue("", False)
    return ShownValue(display(value, UI_VALUE_CHARS), isinstance(value, Marker))


def attribute_rows(changes: Iterable[AttributeChange]) -> list[AttributeRow]:
    """A resource's attribute diff (plans/attributes.py) as the plan page's table rows (Jinja escapes them)."""
    return [AttributeRow(c.path, c.kind, _shown(c.before), _shown(c.after), c.forces_replace) for c in changes]


@dataclass(frozen=True, slots=True)
class PlanItem:
    address: str
    reason: str
    previous_address: str
    replace_paths: list[str]
    destroys: bool
    attributes: list[AttributeRow] = field(default_factory=list)  # in the resource's first group only
    attributes_cut: int = 0


def _group(rc: ResourceChange) -> list[str]:
    """A resource may belong to several groups: an import that also updates, a move that also replaces."""
    found: list[str] = []
    if rc.action in ("create", "update", "replace", "delete", "forget"):
        found.append(rc.action)
    if rc.importing:
        found.append("import")
    if rc.moved:
        found.append("moved")
    return found


def plan_groups(plan: PlanModel) -> dict[str, list[PlanItem]]:
    groups: dict[str, list[PlanItem]] = {name: [] for name in GROUPS}
    for rc in plan.changed():
        for index, name in enumerate(_group(rc)):
            reason = REASONS.get(rc.action_reason or "", rc.action_reason or "")
            groups[name].append(PlanItem(
                # One line, nothing that reorders it (a for_each key is the author's text): plans/attributes.py.
                address=one_line(rc.address), reason=reason if name in ("replace", "delete") else "",
                previous_address=one_line(rc.previous_address or "") if name == "moved" else "",
                replace_paths=[".".join(str(p) for p in path) for path in rc.replace_paths] if name == "replace"
                else [],
                destroys=name in ("replace", "delete"),
                attributes=attribute_rows(rc.attributes) if index == 0 else [],
                attributes_cut=rc.attributes_cut if index == 0 else 0))
    return {name: items for name, items in groups.items() if items}


# -- approvals and pull requests --------------------------------------------------------------------------
@dataclass(frozen=True, slots=True)
class Approval:
    namespace: str
    name: str
    plan_sum: str
    run: str  # <run>/<attempt>
    revision: str
    reason: str
    summary: str
    verdict: str
    denied: list[str]
    warned: list[str]


def _findings(policy: Mapping[str, Any], key: str) -> list[str]:
    return [f"{_str(_dict(f).get('policy'))}: {_str(_dict(f).get('rule'))}" for f in policy.get(key) or ()]


def approvals(layers: Iterable[Mapping[str, Any]]) -> list[Approval]:
    found = []
    for layer in layers:
        meta, status = _dict(layer.get("metadata")), _dict(layer.get("status"))
        pending = _dict(status.get("pendingPlan"))
        if not _str(pending.get("sum")):
            continue
        annotations = _dict(meta.get("annotations"))
        policy = _dict(status.get("policy"))
        # The plan-summary annotation is of the latest plan, which is the pending one when their runs agree.
        summary = _str(annotations.get(ann.PLAN_SUMMARY)) if annotations.get(ann.PLAN_RUN) == pending.get("run") \
            else ""
        found.append(Approval(
            namespace=_str(meta.get("namespace")), name=_str(meta.get("name")), plan_sum=pending["sum"],
            run=_str(pending.get("run")), revision=_str(pending.get("revision")), reason=_str(pending.get("reason")),
            summary=summary or _str(status.get("lastResult")),
            verdict=_str(policy.get("verdict")) if policy.get("planSum") == pending["sum"] else "",
            denied=_findings(policy, "denied") if policy.get("planSum") == pending["sum"] else [],
            warned=_findings(policy, "warned") if policy.get("planSum") == pending["sum"] else []))
    found.sort(key=lambda a: (a.namespace, a.name))
    return found


@dataclass(frozen=True, slots=True)
class PullRequestRow:
    namespace: str
    name: str
    provider: str
    project: str
    number: int
    title: str
    url: str
    state: str
    head_sha: str
    base: str
    layers: list[tuple[str, str, str]]  # (namespace/name, state, summary)


def pull_request_rows(objects: Iterable[Mapping[str, Any]]) -> list[PullRequestRow]:
    rows = []
    for obj in objects:
        meta, spec, status = _dict(obj.get("metadata")), _dict(obj.get("spec")), _dict(obj.get("status"))
        number = spec.get("number")
        url = _str(spec.get("url"))
        rows.append(PullRequestRow(
            namespace=_str(meta.get("namespace")), name=_str(meta.get("name")), provider=_str(spec.get("provider")),
            project=_str(spec.get("project")), number=number if isinstance(number, int) else 0,
            title=_str(spec.get("title")), url=url if url.startswith(("https://", "http://")) else "",
            state=_str(status.get("state")) or _str(spec.get("state")) or "open",
            head_sha=_str(spec.get("headSha"))[:12],
            base=_str(spec.get("base")),
            layers=[(f"{_str(_dict(item).get('namespace'))}/{_str(_dict(item).get('name'))}",
                     _str(_dict(item).get("state")), _str(_dict(item).get("summary")))
                    for item in status.get("layers") or ()]))
    rows.sort(key=lambda r: (r.state in ("closed", "merged", "Closed", "Merged"), r.namespace, r.name))
    return rows
