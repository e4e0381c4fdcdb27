"""The pull request comment with attribute diffs (issue 30 item 7): a plan of 1,000 changes (creates, updates and
replaces of resources with nested tags, lists, a sensitive and an unknown attribute each), `show -json` shaped.
Times the parse with attribute diffs (`parse_plan(..., attributes=True)`, what the pull request controller does)
and the comment's render (`render`, GitHub's limit) with Terraform's text beside it, and prints the comment's size
against the 65,536-character limit and how many resources' attribute changes it shows. Asserts nothing.

Run: python3 tests/bench/bench_comment_render.py [CHANGES] [REPEATS]
"""

from __future__ import annotations

import json
import re
import statistics
import sys
import time
from typing import Any

from burrito_py.gitproviders.github import COMMENT_LIMIT
from burrito_py.plans.model import parse_plan
from burrito_py.pullrequests.comment import LayerResult, PullRequestResults, render


def plan(changes: int) -> dict[str, Any]:
    resources = []
    for i in range(changes):
        actions = [["create"], ["update"], ["delete", "create"]][i % 3]
        before = None if actions == ["create"] else {
            "id": f"i-{i:06d}", "ami": "ami-old", "password": "old-secret",
            "tags": {"Name": f"web-{i}", "Env": "dev", "Team": "core"},
            "ingress": [{"port": 443, "cidr_blocks": ["10.0.0.0/8", f"192.168.{i % 250}.0/24"]}]}
        after = {"ami": "ami-new" if i % 3 == 2 else "ami-old", "password": f"new-secret-{i}",
                 "tags": {"Name": f"web-{i}-v2", "Team": "core", "Owner": f"team-{i % 7}"},
                 "ingress": [{"port": 443, "cidr_blocks": ["10.0.0.0/8", f"172.16.{i % 250}.0/24"]}]}
        sensitive = {"password": True}
        resources.append({
            "address": f"aws_instance.web[{i}]", "mode": "managed", "type": "aws_instance", "name": "web",
            "provider_name": "registry.terraform.io/hashicorp/aws",
            "change": {"actions": actions, "before": before, "after": after, "after_unknown": {"id": True},
                       "before_sensitive": False if before is None else sensitive, "after_sensitive": sensitive,
                       **({"replace_paths": [["ami"]]} if actions == ["delete", "create"] else {})},
            **({"action_reason": "replace_because_cannot_update"} if actions == ["delete", "create"] else {})})
    return {"format_version": "1.2", "terraform_version": "1.11.4", "resource_changes": resources}


def main() -> None:
    changes = int(sys.argv[1]) if len(sys.argv) > 1 else 1000
    repeats = int(sys.argv[2]) if len(sys.argv) > 2 else 7
    document = json.dumps(plan(changes))
    text = "\n".join(f"  # aws_instance.web[{i}] will be updated in-place\n  ~ tags = {{ Name = \"web-{i}\" }}"
                     for i in range(changes))
    parse_times, render_times = [], []
    body = ""
    for _ in range(repeats):
        started = time.perf_counter()
        model = parse_plan(document, attributes=True)
        parse_times.append(time.perf_counter() - started)
        results = PullRequestResults("team-a/infra", 42, "a" * 40,
                                     (LayerResult("team-a", "app", "layers/app", "planned", model, text),))
        started = time.perf_counter()
        body = render(results, COMMENT_LIMIT)
        render_times.append(time.perf_counter() - started)
    shown = len(re.findall(r"^@@ .*@@$", body, re.M))
    cut = re.search(r"attribute changes of (\d+) resources cut", body)
    attributes = sum(len(rc.attributes) for rc in model.resource_changes)
    print(f"plan: {changes} changes, {len(document):,} bytes of JSON, {attributes:,} attribute changes")
    print(f"parse with attribute diffs: median {statistics.median(parse_times) * 1000:.0f} ms "
          f"(without: {_parse_without(document, repeats) * 1000:.0f} ms)")
    print(f"render: median {statistics.median(render_times) * 1000:.0f} ms over {repeats}")
    print(f"comment: {len(body):,} characters of the {COMMENT_LIMIT:,} limit ({len(body) / COMMENT_LIMIT:.1%}); "
          f"attribute changes of {shown} resources shown, {cut.group(1) if cut else 0} cut")


def _parse_without(document: str, repeats: int) -> float:
    times = []
    for _ in range(repeats):
        started = time.perf_counter()
        parse_plan(document)
        times.append(time.perf_counter() - started)
    return statistics.median(times)


if __name__ == "__main__":
    main()
