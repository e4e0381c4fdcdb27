"""What a set of rendered RBAC objects grants to whom, as flat tuples (for the chart's allow-list test and
the rule counts in the docs)."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

__all__ = ["Grant", "grants", "grants_per_component", "rules_by_subject"]


@dataclass(frozen=True, order=True)
class Grant:
    """One verb on one resource for one subject. `scope` is "cluster" or the namespace of a RoleBinding."""

    subject: str  # "<namespace>/<serviceaccount>" or "<Kind>:<name>"
    api_group: str
    resource: str
    verb: str
    scope: str
    resource_names: tuple[str, ...] = ()


def _subject(subject: Mapping[str, Any], binding_namespace: str | None) -> str:
    if subject.get("kind") == "ServiceAccount":
        return f"{subject.get('namespace') or binding_namespace}/{subject['name']}"
    return f"{subject.get('kind')}:{subject.get('name')}"


def rules_by_subject(objects: Iterable[Mapping[str, Any]]) -> dict[str, list[tuple[str, Mapping[str, Any]]]]:
    """subject → [(scope, rule)] for every rule some binding gives it."""
    objects = list(objects)
    roles = {
        (o["kind"], (o["metadata"].get("namespace") if o["kind"] == "Role" else None), o["metadata"]["name"]): o
        for o in objects
        if o.get("kind") in ("Role", "ClusterRole")
    }
    out: dict[str, list[tuple[str, Mapping[str, Any]]]] = {}
    for binding in objects:
        if binding.get("kind") not in ("RoleBinding", "ClusterRoleBinding"):
            continue
        namespace = binding["metadata"].get("namespace") if binding["kind"] == "RoleBinding" else None
        ref = binding["roleRef"]
        role = roles.get((ref["kind"], namespace if ref["kind"] == "Role" else None, ref["name"]))
        if role is None:
            raise ValueError(f"{binding['kind']} {binding['metadata']['name']} refers to a missing {ref['kind']} "
                             f"{ref['name']}")
        scope = namespace or "cluster"
        for subject in binding.get("subjects") or ():
            out.setdefault(_subject(subject, namespace), []).extend((scope, rule) for rule in role.get("rules") or ())
    return out


def grants(objects: Iterable[Mapping[str, Any]]) -> set[Grant]:
    """Every (subject, apiGroup, resource, verb, scope, resourceNames) the RBAC objects grant."""
    out: set[Grant] = set()
    for subject, rules in rules_by_subject(objects).items():
        for scope, rule in rules:
            names = tuple(sorted(rule.get("resourceNames") or ()))
            for group in rule.get("apiGroups") or ():
                for resource in rule.get("resources") or ():
                    for verb in rule.get("verbs") or ():
                        out.add(Grant(subject, group, resource, verb, scope, names))
    return out


def grants_per_component(objects: Iterable[Mapping[str, Any]], release: str) -> dict[str, int]:
    """Distinct grants per component ServiceAccount (`<release>-controllers` → "controllers", the runner's
    `burrito-py-runner` → "runner"): the figure compared with other charts."""
    counts: dict[str, int] = {}
    for grant in grants(objects):
        component = grant.subject.rsplit("/", 1)[-1].removeprefix(f"{release}-").removeprefix("burrito-py-")
        counts[component] = counts.get(component, 0) + 1
    return counts
