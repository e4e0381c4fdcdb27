"""The committed plan fixtures (tests/fixtures/plans, made by real terraform unless their generator says
otherwise) and a generated plan of any size."""

from __future__ import annotations

import json
from collections.abc import Sequence
from pathlib import Path
from typing import Any

FIXTURES = Path(__file__).resolve().parents[2] / "fixtures" / "plans"
SECRET = "hunter2-very-secret"  # the sensitive variable's value in sensitive.json


def fixture(name: str) -> dict[str, Any]:
    data: dict[str, Any] = json.loads((FIXTURES / f"{name}.json").read_text())
    return data


def diff_fixture(name: str) -> dict[str, Any]:
    """A plan of tests/fixtures/plans/diff/ (attribute diffs; outside the set every plan test iterates over)."""
    data: dict[str, Any] = json.loads((FIXTURES / "diff" / f"{name}.json").read_text())
    return data


def fixture_names() -> list[str]:
    return sorted(p.stem for p in FIXTURES.glob("*.json"))


def generated_plan(changes: int, *, types: tuple[str, ...] = ("aws_instance", "aws_iam_role", "aws_db_instance"),
                   actions: tuple[tuple[str, ...], ...] = (("create",), ("update",), ("delete",),
                                                           ("delete", "create"))) -> dict[str, Any]:
    """`changes` resource changes cycling through `types` and `actions`, shaped as `show -json` writes them."""
    resource_changes = []
    for i in range(changes):
        type_, acts = types[i % len(types)], actions[i % len(actions)]
        resource_changes.append({
            "address": f"{type_}.r{i}", "mode": "managed", "type": type_, "name": f"r{i}",
            "provider_name": "registry.terraform.io/hashicorp/aws",
            "change": {"actions": list(acts), "before": None if acts == ("create",) else {"id": str(i)},
                       "after": None if acts == ("delete",) else {"id": str(i), "tags": {"n": str(i)}},
                       "after_unknown": {}, "before_sensitive": False, "after_sensitive": {"tags": {}}},
            **({"action_reason": "replace_because_cannot_update"} if acts == ("delete", "create") else {}),
        })
    return {"format_version": "1.2", "terraform_version": "1.11.4", "resource_changes": resource_changes,
            "applyable": True, "errored": False}


HOSTILE = ["</details><img src=x onerror=alert(1)>", "[click here](https://evil.example/steal)",
           "```\n</details>\n<script>alert(2)</script>", "<a href='https://evil.example'>x</a>",
           "![img](https://evil.example/p.png)", "\u202egnp.exe", "line\n\n# heading\n- item"]


def hostile_plan(extra: Sequence[str] = ()) -> dict[str, Any]:
    """Updates whose values, map keys and for_each keys an author of the pull request chose (HTML, markdown, a fence
    breaker, a right-to-left override), one resource per value."""
    resources = []
    for i, value in enumerate([*HOSTILE, *extra]):
        address = f'terraform_data.x["{value}"]' if i % 2 == 0 else f"terraform_data.h{i}"
        resources.append({"address": address, "mode": "managed", "type": "terraform_data", "name": "x",
                          "change": {"actions": ["update"], "before": {"input": "old", "m": {value: "1"}},
                                     "after": {"input": value, "m": {value: "2"}}}})
    return {"format_version": "1.2", "terraform_version": "1.11.4", "resource_changes": resources}
