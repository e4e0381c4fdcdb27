"""The Terragrunt tree analysis (git/terragrunt.py): units, their dependency blocks, what they read, and every
way out of the repository refused; with property tests against a brute-force model of the graph."""

from __future__ import annotations

import itertools
import json
import time
from collections.abc import Mapping

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from burrito_py.api.dependencies import find_cycle, layer_dependencies, terragrunt_problems, terragrunt_reads
from burrito_py.controllers.repository.terragrunt import decide_terragrunt, terragrunt_enabled
from burrito_py.git.terragrunt import (
    INVALID,
    NOT_FOUND,
    OUTSIDE,
    TerragruntTree,
    UnitDependency,
    _read_arguments,
    analyze_unit,
    units_of,
)

ROOT_HCL = 'remote_state {\n  backend = "local"\n  config = { path = "state" }\n}\n'
VPC = ('include "root" {\n  path = find_in_parent_folders("root.hcl")\n}\n'
       'terraform {\n  source = "../../modules//vpc"\n}\n')
APP = """include "root" {
  path = find_in_parent_folders("root.hcl")
}
locals {
  env = read_terragrunt_config(find_in_parent_folders("env.hcl"))
  acct = read_terragrunt_config("${get_terragrunt_dir()}/../../account.hcl", {})
}
dependency "vpc" {
  config_path = "../vpc"
}
dependencies {
  paths = ["${get_terragrunt_dir()}/../db"]
}
inputs = {
  vpc_id = dependency.vpc.outputs.vpc_id
  name   = dependency.vpc.outputs["name"]
}
"""


def tree(texts: Mapping[str, str], others: tuple[str, ...] = (), symlinks: Mapping[str, str] | None = None
         ) -> TerragruntTree:
    return TerragruntTree(frozenset([*texts, *others, *(symlinks or {})]), dict(texts), dict(symlinks or {}))


def stack(**extra: str) -> TerragruntTree:
    return tree({"root.hcl": ROOT_HCL, "live/env.hcl": 'locals { env = "dev" }\n', "account.hcl": "locals {}\n",
                 "live/vpc/terragrunt.hcl": VPC, "live/db/terragrunt.hcl": "", "live/app/terragrunt.hcl": APP,
                 **extra}, ("modules/vpc/main.tf", "live/.terragrunt-cache/x/terragrunt.hcl"))


def test_units_are_directories_with_a_terragrunt_hcl_outside_caches() -> None:
    assert units_of(stack()) == ("live/app", "live/db", "live/vpc")
    assert units_of(stack(), "live/a") == ()
    assert units_of(stack(), "live/app") == ("live/app",)


def test_a_unit_its_dependencies_outputs_and_reads() -> None:
    analysis = analyze_unit(stack(), "live/app")
    assert analysis.problems == ()
    assert analysis.dependencies == (UnitDependency("paths[0]", "live/db", ()),
                                     UnitDependency("vpc", "live/vpc", ("name", "vpc_id")))
    assert analysis.reads == ("account.hcl", "live/env.hcl", "root.hcl")
    vpc = analyze_unit(stack(), "live/vpc")
    # `../../modules//vpc`: terragrunt copies all of modules/, so all of it is read.
    assert (vpc.dependencies, vpc.reads, vpc.problems) == ((), ("modules", "root.hcl"), ())


def test_the_whole_outputs_object_reads_them_all() -> None:
    unit = 'dependency "vpc" {\n  config_path = "../vpc"\n}\ninputs = dependency.vpc.outputs\n'
    analysis = analyze_unit(stack(**{"live/app/terragrunt.hcl": unit}), "live/app")
    assert analysis.dependencies == (UnitDependency("vpc", "live/vpc", None),)


def test_dependency_blocks_of_an_included_file_count() -> None:
    common = 'dependency "vpc" {\n  config_path = "${get_terragrunt_dir()}/../vpc"\n}\n' \
             'inputs = { id = dependency.vpc.outputs.id }\n'
    unit = 'include "common" {\n  path = "${get_repo_root()}/_envcommon/app.hcl"\n}\n'
    analysis = analyze_unit(stack(**{"_envcommon/app.hcl": common, "live/app/terragrunt.hcl": unit}), "live/app")
    assert analysis.dependencies == (UnitDependency("vpc", "live/vpc", ("id",)),)
    assert analysis.reads == ("_envcommon/app.hcl",)


@pytest.mark.parametrize("config_path", [
    "../../../etc", "../../../../etc/passwd", "/etc", "${get_terragrunt_dir()}/../../../etc",
    "${get_repo_root()}/../outside",
])
def test_a_config_path_escaping_the_repository_is_refused(config_path: str) -> None:
    unit = f'dependency "evil" {{\n  config_path = "{config_path}"\n}}\n'
    analysis = analyze_unit(stack(**{"live/app/terragrunt.hcl": unit}), "live/app")
    assert analysis.dependencies == ()
    assert [p.reason for p in analysis.problems] == [OUTSIDE]
    assert 'dependency "evil"' in analysis.problems[0].message
    assert config_path in analysis.problems[0].message


def test_an_escape_through_a_symlink_is_refused() -> None:
    # live/link -> ../.. is the repository root's parent: ../link/x leads out of the repository.
    links = {"live/link": "../..", "live/abs": "/etc", "live/ok": "vpc"}
    for target, reason in (("../link/etc", OUTSIDE), ("../abs", OUTSIDE)):
        unit = f'dependency "x" {{\n  config_path = "{target}"\n}}\n'
        units = TerragruntTree(stack().paths | set(links), {**stack().texts, "live/app/terragrunt.hcl": unit}, links)
        analysis = analyze_unit(units, "live/app")
        assert [p.reason for p in analysis.problems] == [reason], target
        assert "symlink" in analysis.problems[0].message or "above" in analysis.problems[0].message
    # A symlink that stays inside resolves to the unit it names.
    unit = 'dependency "x" {\n  config_path = "../ok"\n}\n'
    inside = TerragruntTree(stack().paths | set(links), {**stack().texts, "live/app/terragrunt.hcl": unit}, links)
    assert analyze_unit(inside, "live/app").dependencies == (UnitDependency("x", "live/vpc", None),)


def test_a_symlink_loop_is_refused_not_followed_forever() -> None:
    links = {"live/a": "b", "live/b": "a"}
    unit = 'dependency "x" {\n  config_path = "../a"\n}\n'
    looped = TerragruntTree(stack().paths | set(links), {**stack().texts, "live/app/terragrunt.hcl": unit}, links)
    [problem] = analyze_unit(looped, "live/app").problems
    assert problem.reason == OUTSIDE and "symlinks" in problem.message


@pytest.mark.parametrize("include", ['"../../../etc/passwd"', 'find_in_parent_folders("nowhere.hcl")'])
def test_an_include_escaping_the_repository_is_refused(include: str) -> None:
    unit = f'include "root" {{\n  path = {include}\n}}\n'
    analysis = analyze_unit(stack(**{"live/app/terragrunt.hcl": unit}), "live/app")
    assert [p.reason for p in analysis.problems] == [OUTSIDE]
    assert analysis.reads == ()


def test_a_read_escaping_the_repository_is_refused() -> None:
    unit = 'locals {\n  x = read_terragrunt_config("../../../../etc/shadow")\n}\n'
    [problem] = analyze_unit(stack(**{"live/app/terragrunt.hcl": unit}), "live/app").problems
    assert problem.reason == OUTSIDE and "read_terragrunt_config" in problem.message


def test_a_missing_unit_and_an_unevaluated_config_path_and_a_bad_file() -> None:
    unit = ('dependency "gone" {\n  config_path = "../gone"\n}\n'
            'dependency "computed" {\n  config_path = local.where\n}\n')
    problems = analyze_unit(stack(**{"live/app/terragrunt.hcl": unit}), "live/app").problems
    assert sorted(p.reason for p in problems) == [NOT_FOUND, INVALID]
    assert any("live/gone, which holds no terragrunt.hcl" in p.message for p in problems)
    broken = analyze_unit(stack(**{"live/app/terragrunt.hcl": "dependency {{{"}), "live/app")
    assert [p.reason for p in broken.problems] == [INVALID]
    assert analyze_unit(stack(), "live/none").problems[0].reason == NOT_FOUND


def test_an_include_not_evaluated_here_is_listed_not_refused() -> None:
    unit = 'include "x" {\n  path = "${local.root}/x.hcl"\n}\n'
    analysis = analyze_unit(stack(**{"live/app/terragrunt.hcl": unit}), "live/app")
    assert analysis.problems == ()
    assert analysis.unresolved == ("live/app/terragrunt.hcl: include ${local.root}/x.hcl",)


# -- the layers' side ----------------------------------------------------------------------------------------
def layer(name: str, path: str, terragrunt: bool | None = True, **annotations: str) -> dict[str, object]:
    spec: dict[str, object] = {"path": path, "branch": "main", "repository": {"name": "infra"}}
    if terragrunt is not None:
        spec["terragrunt"] = {"enabled": terragrunt}
    return {"metadata": {"namespace": "ns", "name": name, "annotations": annotations}, "spec": spec}


def test_units_map_to_the_layers_that_follow_them() -> None:
    layers = [layer("app", "live/app"), layer("vpc", "./live/vpc/"), layer("plain", "live/db", terragrunt=False)]
    decided = decide_terragrunt(stack(), layers, None)
    assert decided[("ns", "plain")].annotation is None
    record = json.loads(decided[("ns", "app")].annotation or "")
    assert record["dependencies"] == [
        {"name": "plain", "unit": "live/db", "block": "paths[0]", "outputs": []},
        {"name": "vpc", "unit": "live/vpc", "block": "vpc", "outputs": ["name", "vpc_id"]},
    ]
    assert decided[("ns", "app")].reads == ("account.hcl", "live/env.hcl", "root.hcl")
    body = layer("app", "live/app", **{"webhook.burrito-py.io/terragrunt": decided[("ns", "app")].annotation or ""})
    deps = layer_dependencies(body)
    assert [(d.upstream, d.watched, d.watch_all, d.inputs) for d in deps] == [
        (("ns", "plain"), (), False, ()), (("ns", "vpc"), ("name", "vpc_id"), False, ())]
    assert terragrunt_reads(body["metadata"]["annotations"]) == ("account.hcl", "live/env.hcl", "root.hcl")  # type: ignore[index]


def test_a_unit_no_layer_follows_is_not_found() -> None:
    decided = decide_terragrunt(stack(), [layer("app", "live/app"), layer("vpc", "live/vpc")], None)
    annotations = {"webhook.burrito-py.io/terragrunt": decided[("ns", "app")].annotation or ""}
    [(reason, message)] = terragrunt_problems(annotations)
    assert reason == NOT_FOUND and "follows the unit live/db" in message


def test_the_repository_decides_unless_the_layer_does() -> None:
    repository = {"spec": {"terragrunt": {"enabled": True}}}
    assert terragrunt_enabled(layer("a", "x", terragrunt=None), repository)
    assert not terragrunt_enabled(layer("a", "x", terragrunt=False), repository)
    assert not terragrunt_enabled(layer("a", "x", terragrunt=None), None)
    assert decide_terragrunt(None, [layer("a", "x")], repository)[("ns", "a")].annotation is None


def test_spec_depends_on_and_the_unit_merge_per_upstream() -> None:
    record = json.dumps({"dependencies": [{"name": "vpc", "outputs": None}]})
    body = layer("app", "live/app", **{"webhook.burrito-py.io/terragrunt": record})
    body["spec"]["dependsOn"] = [{"name": "vpc", "inputs": {"v": "id"}}]  # type: ignore[index]
    [dep] = layer_dependencies(body)
    assert (dep.inputs, dep.watch_all, dep.reads_outputs) == ((("v", "id"),), True, True)


# -- properties ----------------------------------------------------------------------------------------------
NAMES = [f"u{i}" for i in range(6)]


@st.composite
def unit_graphs(draw: st.DrawFn) -> dict[str, list[str]]:
    return {name: draw(st.lists(st.sampled_from(NAMES), max_size=4, unique=True)) for name in NAMES}


def graph_tree(graph: Mapping[str, list[str]]) -> TerragruntTree:
    texts = {f"live/{unit}/terragrunt.hcl": "".join(
        f'dependency "{up}" {{\n  config_path = "../{up}"\n}}\n' for up in ups) for unit, ups in graph.items()}
    return tree(texts)


def reachable(graph: Mapping[str, list[str]], start: str) -> set[str]:
    seen: set[str] = set()
    frontier = list(graph[start])
    while frontier:
        node = frontier.pop()
        if node not in seen:
            seen.add(node)
            frontier += graph[node]
    return seen


@settings(max_examples=150, deadline=None)
@given(unit_graphs())
def test_cycle_detection_never_misses_a_cycle_of_units(graph: dict[str, list[str]]) -> None:
    """Units' dependency blocks → layers' annotations → the dependency graph: a layer is reported in a cycle
    exactly when it can reach itself (brute force), and the cycle reported is a real path of edges."""
    units = graph_tree(graph)
    layers = [layer(name, f"live/{name}") for name in NAMES]
    decided = decide_terragrunt(units, layers, None)
    upstreams = {}
    for body in layers:
        name = body["metadata"]["name"]  # type: ignore[index]
        body["metadata"]["annotations"] = {"webhook.burrito-py.io/terragrunt": decided[("ns", name)].annotation}  # type: ignore[index]
        upstreams[("ns", name)] = [d.upstream for d in layer_dependencies(body)]
    for name in NAMES:
        assert {k[1] for k in upstreams[("ns", name)]} == set(graph[name])
        cycle = find_cycle(("ns", name), upstreams)
        assert (cycle is not None) == (name in reachable(graph, name))
        if cycle is not None:
            assert cycle[0] == cycle[-1] == ("ns", name)
            assert all(b in upstreams[a] for a, b in itertools.pairwise(cycle))


SEGMENTS = st.sampled_from(["..", ".", "live", "vpc", "app", "x", "link", ""])


@settings(max_examples=300, deadline=None)
@given(st.lists(SEGMENTS, min_size=1, max_size=8), st.sampled_from(["live/app", "live", ""]),
       st.dictionaries(st.sampled_from(["live/link", "link", "live/x"]), st.sampled_from(["..", "../..", "/etc",
                                                                                            "vpc", "live"])))
def test_a_resolved_config_path_is_always_inside_the_repository(parts: list[str], unit: str,
                                                                 links: dict[str, str]) -> None:
    """Whatever the path and the symlinks, a dependency is either a unit inside the repository or refused; a
    path that climbs above the root (counted without symlinks) is never accepted."""
    config_path = "/".join(parts)
    text = f'dependency "d" {{\n  config_path = "{config_path}"\n}}\n'
    own = f"{unit}/terragrunt.hcl" if unit else "terragrunt.hcl"
    texts = {own: text, "live/vpc/terragrunt.hcl": "", "live/app/terragrunt.hcl": text if unit == "live/app" else ""}
    units = TerragruntTree(frozenset([*texts, *links]), texts, links)
    analysis = analyze_unit(units, unit)
    for dep in analysis.dependencies:
        assert not dep.path.startswith(("/", "..")) and ".." not in dep.path.split("/")
        assert f"{dep.path}/terragrunt.hcl" in units.paths or (dep.path == "" and "terragrunt.hcl" in units.paths)
    depth = len([p for p in unit.split("/") if p])
    for part in (p for p in parts if p not in ("", ".")):
        depth += -1 if part == ".." else 1
        if depth < 0 and not links:
            assert analysis.dependencies == () and [p.reason for p in analysis.problems] == [OUTSIDE]
            break


def test_read_with_a_default_and_find_with_a_fallback() -> None:
    """`read_terragrunt_config(path, default)`: only the path is a file; `find_in_parent_folders(name, fallback)`
    finding nothing is no error and reads nothing (terragrunt returns the fallback)."""
    unit = ('locals {\n  env = read_terragrunt_config(find_in_parent_folders("env.hcl", "none"), {})\n'
            '  x = read_terragrunt_config(find_in_parent_folders("nowhere.hcl", "none"), { a = "b" })\n}\n')
    analysis = analyze_unit(stack(**{"live/app/terragrunt.hcl": unit}), "live/app")
    assert (analysis.reads, analysis.unresolved, analysis.problems) == (("live/env.hcl",), (), ())


def test_attack_many_unclosed_read_calls_are_scanned_in_linear_time() -> None:
    """A unit file of 1 MiB of `# read_terragrunt_config(` lines: each call was scanned to the end of the text for
    its closing parenthesis (64 KiB took 22 s, 1 MiB about an hour and a half, at every reconcile). Each is now
    scanned up to the next call at most; what the file reads is unchanged. The bounds are this process's CPU time,
    not the wall clock (a loaded CI machine took 3.6 s of wall time for 0.5 s of work), and far from the hour the
    quadratic scan took."""
    unit = ('locals {\n  env = read_terragrunt_config(find_in_parent_folders("env.hcl"), read_terragrunt_config('
            '"x.hcl"))\n}\n')
    text = unit + "# read_terragrunt_config(\n" * ((1 << 20) // 26)
    started = time.process_time()
    arguments = _read_arguments(text)
    scanned = time.process_time() - started
    assert scanned < 30, f"scanning took {scanned:.1f}s"
    assert arguments == ['${find_in_parent_folders("env.hcl")}', '"x.hcl"']
    started = time.process_time()
    analysis = analyze_unit(stack(**{"live/app/terragrunt.hcl": text, "live/app/x.hcl": "locals {}\n"}),
                            "live/app")
    analysed = time.process_time() - started  # mostly python-hcl2 parsing the MiB, in linear time
    assert analysed < 120, f"the analysis took {analysed:.1f}s"
    assert (analysis.reads, analysis.unresolved, analysis.problems) == (("live/app/x.hcl", "live/env.hcl"), (), ())


def test_a_block_naming_no_output_waits_for_them_all_unless_it_skips_them() -> None:
    unit = ('dependency "vpc" {\n  config_path = "../vpc"\n}\n'
            'dependency "db" {\n  config_path = "../db"\n  skip_outputs = true\n}\n')
    analysis = analyze_unit(stack(**{"live/app/terragrunt.hcl": unit}), "live/app")
    assert analysis.dependencies == (UnitDependency("db", "live/db", ()), UnitDependency("vpc", "live/vpc", None))


def test_a_pull_request_touching_root_hcl_affects_the_units_including_it() -> None:
    """Pull requests read the same annotation: a change to root.hcl plans the units that include it, and the
    layers depending on a touched unit through a dependency block are shown downstream."""
    from burrito_py.git.paths import Change
    from burrito_py.pullrequests.affected import affected_layers

    layers = [layer("app", "live/app"), layer("vpc", "live/vpc"), layer("db", "live/db")]
    decided = decide_terragrunt(stack(), layers, None)
    for body in layers:
        body["metadata"]["annotations"] = {  # type: ignore[index]
            "webhook.burrito-py.io/terragrunt": decided[("ns", body["metadata"]["name"])].annotation}  # type: ignore[index]
    root = affected_layers([Change("M", "root.hcl")], layers, ("ns", "infra"), "main")
    assert (root.layers, root.downstream) == ((("ns", "app"), ("ns", "vpc")), ())
    env = affected_layers([Change("M", "live/env.hcl")], layers, ("ns", "infra"), "main")
    assert (env.layers, env.downstream) == ((("ns", "app"),), ())
    vpc = affected_layers([Change("M", "modules/vpc/main.tf")], layers, ("ns", "infra"), "main")
    assert (vpc.layers, vpc.downstream) == ((("ns", "vpc"),), (("ns", "app"),))
