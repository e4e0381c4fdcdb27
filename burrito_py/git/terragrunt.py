"""Terragrunt units read from a branch's tree: their `dependency` blocks and the files they read
(docs/architecture.md §9.1). Pure: the tree is a snapshot (`TerragruntTree`) the git mirror gathers
(`GitMirror.terragrunt_tree`); no I/O, no terragrunt.

A **unit** is a directory holding a `terragrunt.hcl`. For one unit, `analyze_unit` finds:
- its **dependencies**: each `dependency "<name>" { config_path = … }` block and each `dependencies { paths = […] }`
  entry, of the unit and of the files it `include`s (terragrunt merges them into the unit and evaluates them in
  its directory), resolved to the repository path of another unit, with the outputs the unit reads of it
  (`dependency.<name>.outputs.<output>` anywhere in those files; a reference to the whole `outputs` object, or
  none at all, reads them all: terragrunt fetches them anyway; `skip_outputs = true` and `dependencies` entries
  read none);
- what it **reads**: the files it includes (`include { path = … }`) and reads (`read_terragrunt_config(…)`), and
  theirs in turn, and the local module of `terraform { source = "../modules//vpc" }`: a change to any of them
  is a change to the unit (its trigger paths, §8);
- its **problems**, each with the reason a kubectl user sees: `PathOutsideRepository` (a `config_path`, an
  include, a read or a source escaping the repository, `..` or an absolute path or a symlink leading out; never
  followed: the runner would read the pod's own files), `DependencyNotFound` (a `config_path` to a directory
  with no `terragrunt.hcl`), `TerragruntConfigInvalid` (a file that does not parse, a `config_path` that cannot
  be evaluated here).

Expressions are evaluated as far as terragrunt's path functions go: string literals with `${…}` of
`get_terragrunt_dir()`, `get_repo_root()`, `get_parent_terragrunt_dir()` (the unit's own directory here),
`find_in_parent_folders("<name>")` (nearest parent directory of the unit holding `<name>`, terragrunt's search;
without an argument `terragrunt.hcl`). Anything else (locals,
`format`, conditionals) is not evaluated: a `config_path` so written is `TerragruntConfigInvalid`; an include or a
read so written is listed in `unresolved` (the unit still runs, only its trigger paths miss that file).
"""

from __future__ import annotations

import functools
import posixpath
import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

__all__ = [
    "CONFIG",
    "INVALID",
    "NOT_FOUND",
    "OUTSIDE",
    "Problem",
    "TerragruntTree",
    "UnitAnalysis",
    "UnitDependency",
    "analyze_unit",
    "units_of",
]

CONFIG = "terragrunt.hcl"
OUTSIDE = "PathOutsideRepository"
NOT_FOUND = "DependencyNotFound"
INVALID = "TerragruntConfigInvalid"
MAX_LINKS = 40  # symlinks followed while resolving one path (as the kernel's ELOOP limit)
MAX_DEPTH = 16  # files read through files read (include → read_terragrunt_config → …)

_IDENT = r"[A-Za-z_][A-Za-z0-9_-]*"
# `dependency.vpc.outputs.id`, `dependency.vpc.outputs["id"]`, or the whole `dependency.vpc.outputs`.
_OUTPUT_REF = re.compile(rf"\bdependency\.({_IDENT})\.outputs(?:\.({_IDENT})|\[\s*\"([^\"]+)\"\s*\])?")
_READ_CALL = re.compile(r"\bread_terragrunt_config\(")
# find_in_parent_folders(), ("name"), ("name", fallback): with a fallback, a file not found is no error.
_FIND = re.compile(r"^find_in_parent_folders\(\s*(?:\"([^\"$]*)\")?\s*(,.*)?\)$", re.DOTALL)
NOTHING = "\0\0"  # find_in_parent_folders found nothing and had a fallback: there is no file to read
_INTERPOLATION = re.compile(r"\$\{([^{}]*)\}")
ROOTED = "\0"  # an evaluated path that starts at the repository root (get_terragrunt_dir() and the like)
_DIR_FUNCTIONS = ("get_terragrunt_dir()", "get_parent_terragrunt_dir()", "get_original_terragrunt_dir()")
_UNREAD = ("larger than 1 MiB, a symlink to more than 4096 bytes, or beyond the 16 MiB of .hcl files and symlinks "
           "read per commit")


@dataclass(frozen=True, slots=True)
class TerragruntTree:
    """What the analysis reads of one commit: every blob path, the text of the `*.hcl` files, and the symlinks
    (path → target as stored)."""

    paths: frozenset[str]
    texts: Mapping[str, str]
    symlinks: Mapping[str, str] = field(default_factory=dict)
    unread: frozenset[str] = frozenset()  # `*.hcl` files and symlinks too large, or beyond the bytes read per commit


@dataclass(frozen=True, slots=True, order=True)
class Problem:
    reason: str
    message: str


@dataclass(frozen=True, slots=True)
class UnitDependency:
    """One upstream unit: `name` the block's label (`paths[i]` for a `dependencies` entry), `path` the unit's
    repository path, `outputs` those read (sorted; None: the whole outputs object)."""

    name: str
    path: str
    outputs: tuple[str, ...] | None = ()


@dataclass(frozen=True, slots=True)
class UnitAnalysis:
    path: str
    dependencies: tuple[UnitDependency, ...] = ()
    reads: tuple[str, ...] = ()  # repository paths of the files and module directories it reads, sorted
    unresolved: tuple[str, ...] = ()  # include/read expressions not evaluated here
    problems: tuple[Problem, ...] = ()


class _Outside(ValueError):
    reason = OUTSIDE


class _Unread(_Outside):
    """A path through a symlink whose target was not read (GitMirror.terragrunt_tree): where it leads is unknown."""

    reason = INVALID


def units_of(tree: TerragruntTree, under: str = "") -> tuple[str, ...]:
    """The units (directories with a terragrunt.hcl) at or below `under`, sorted; `.terragrunt-cache` copies and
    hidden directories are not units."""
    found = []
    for path in tree.paths:
        directory, name = posixpath.split(path)
        if name != CONFIG or any(part.startswith(".") for part in directory.split("/") if part):
            continue
        if not under or directory == under or directory.startswith(under.rstrip("/") + "/"):
            found.append(directory)
    return tuple(sorted(found))


# -- paths ------------------------------------------------------------------------------------------------
def _resolve(tree: TerragruntTree, base: str, target: str) -> str:
    """`target` (relative to the repository directory `base`, or absolute, which is outside) as a repository
    path with every symlink on the way followed inside the tree. Raises _Outside."""
    if target.startswith("/"):
        raise _Outside(f"{target!r} is an absolute path")
    pending = [p for p in target.split("/") if p not in ("", ".")]
    parts = [p for p in base.split("/") if p]
    links = 0
    while pending:
        part = pending.pop(0)
        if part == "..":
            if not parts:
                raise _Outside(f"{target!r} leads above the repository root")
            parts.pop()
            continue
        parts.append(part)
        current = "/".join(parts)
        link = tree.symlinks.get(current)
        if link is None:
            # Unread are `*.hcl` files (a file read says so itself) and symlinks: one on the way, or at the end
            # not named `.hcl`, is a symlink.
            if current in tree.unread and (pending or not current.endswith(".hcl")):
                raise _Unread(f"{target!r} goes through the symlink {current}, which was not read ({_UNREAD})")
            continue
        links += 1
        if links > MAX_LINKS:
            raise _Outside(f"{target!r} goes through more than {MAX_LINKS} symlinks")
        if link.startswith("/"):
            raise _Outside(f"{target!r} goes through the symlink {current} to the absolute path {link!r}")
        parts.pop()
        pending = [p for p in link.split("/") if p not in ("", ".")] + pending
    return "/".join(parts)


def _unquote(value: str) -> str:
    text = value.strip()
    if len(text) >= 2 and text[0] == text[-1] == '"':
        return text[1:-1]
    return text


def _evaluate(tree: TerragruntTree, unit: str, raw: Any) -> str | None:
    """A path expression, as python-hcl2 gives it, to a path relative to the unit (or rooted at the repository
    root: `ROOTED` then the path), or None when it is not one of the forms evaluated here."""
    if not isinstance(raw, str):
        return None
    text = raw.strip()
    whole = re.fullmatch(r"\$\{(.*)\}", text)
    if whole and not _INTERPOLATION.sub("", text):
        return _function(tree, unit, whole.group(1).strip())
    if not (len(text) >= 2 and text[0] == text[-1] == '"'):
        return None
    body = text[1:-1]
    out: list[str] = []
    position = 0
    for match in _INTERPOLATION.finditer(body):
        out.append(body[position:match.start()])
        value = _function(tree, unit, match.group(1).strip())
        if value is None or value == NOTHING:
            return value
        out.append(value)
        position = match.end()
    out.append(body[position:])
    return "".join(out)


def _function(tree: TerragruntTree, unit: str, call: str) -> str | None:
    if call in _DIR_FUNCTIONS:
        return ROOTED + unit
    if call == "get_repo_root()":
        return ROOTED
    found = _FIND.match(call)
    if found:
        return _find_in_parent_folders(tree, unit, found.group(1) or CONFIG, fallback=bool(found.group(2)))
    return None


def _find_in_parent_folders(tree: TerragruntTree, unit: str, name: str, fallback: bool = False) -> str:
    """Terragrunt's search: from the unit's parent directory up to the repository root. Not found inside the
    repository is outside it (terragrunt would go on searching the pod's own directories), unless the call has a
    fallback value (`NOTHING`: no file is read)."""
    directory = unit
    while directory:
        directory = posixpath.dirname(directory)
        try:
            candidate = _resolve(tree, directory, name)
        except _Unread:
            raise
        except _Outside:
            break
        if candidate in tree.paths:
            return ROOTED + candidate
    if fallback:
        return NOTHING
    raise _Outside(f"find_in_parent_folders({name!r}) from {unit or '.'} finds no {name} inside the repository")


def _locate(tree: TerragruntTree, unit: str, path: str) -> str:
    """An evaluated path (relative to the unit, or rooted) as a repository path. Raises _Outside."""
    if path.startswith(ROOTED):
        return _resolve(tree, "", path[len(ROOTED):].lstrip("/"))
    if "\0" in path:
        raise _Outside(f"{path!r} holds a NUL byte")
    return _resolve(tree, unit, path)


# -- files ------------------------------------------------------------------------------------------------
CACHED_TEXT = 64 << 10  # files up to 64 KiB are parsed once per content (4,096 of them: 256 MiB at most)


def _parse(text: str) -> dict[str, Any]:
    """Parsed once per content (python-hcl2 takes ~20 ms a unit file): a new head re-parses only what changed,
    and `root.hcl` is parsed once for all the units including it. The result is only read."""
    return _parse_cached(text) if len(text) <= CACHED_TEXT else _parse_text(text)


@functools.lru_cache(maxsize=4096)
def _parse_cached(text: str) -> dict[str, Any]:
    return _parse_text(text)


def _parse_text(text: str) -> dict[str, Any]:
    import hcl2  # ~0.1 s to import; only repositories with Terragrunt layers pay it

    parsed = hcl2.loads(text)
    if not isinstance(parsed, dict):
        raise ValueError("not an HCL body")
    return parsed


def _labelled(blocks: Any) -> Iterable[tuple[str | None, Mapping[str, Any]]]:
    """python-hcl2's blocks: `[{"\"label\"": {...}}]` for labelled ones, `[{...}]` for bare ones."""
    for block in blocks if isinstance(blocks, list) else ():
        if not isinstance(block, Mapping):
            continue
        if block.get("__is_block__"):
            yield None, block
            continue
        for label, body in block.items():
            if isinstance(body, Mapping):
                yield _unquote(str(label)), body


def _read_arguments(text: str) -> list[str]:
    """The first argument of every `read_terragrunt_config(…)` call (balanced parentheses, strings respected; a
    second argument, the default, is not a file). A call is scanned up to the next one at most, so the text is read
    once: many unclosed calls (`# read_terragrunt_config(` on every line) took minutes a file. A first argument
    holding another call, never a path, is not listed."""
    found = []
    calls = list(_READ_CALL.finditer(text))
    for number, match in enumerate(calls):
        limit = calls[number + 1].start() if number + 1 < len(calls) else len(text)
        depth, index, quoted, comma = 1, match.end(), False, -1
        while index < limit and depth:
            char = text[index]
            if quoted:
                if char == "\\":
                    index += 1
                elif char == '"':
                    quoted = False
            elif char == '"':
                quoted = True
            elif char == "(":
                depth += 1
            elif char == ")":
                depth -= 1
            elif char == "," and depth == 1 and comma < 0:
                comma = index
            index += 1
        if not depth:
            argument = text[match.end():(comma if comma >= 0 else index - 1)].strip()
        elif comma >= 0 and limit < len(text):  # the next call is in its second argument: the first is whole
            argument = text[match.end():comma].strip()
        else:
            argument = ""
        if argument:
            found.append(argument if argument.startswith('"') else "${" + argument + "}")
    return found


@dataclass
class _Walk:
    tree: TerragruntTree
    unit: str
    reads: set[str] = field(default_factory=set)
    unresolved: set[str] = field(default_factory=set)
    problems: set[Problem] = field(default_factory=set)
    dependency_blocks: list[tuple[str, Any, str]] = field(default_factory=list)  # (name, raw config_path, file)
    references: dict[str, set[str] | None] = field(default_factory=dict)
    skip_outputs: set[str] = field(default_factory=set)
    visited: set[str] = field(default_factory=set)

    def file(self, path: str, depth: int, included: bool) -> None:
        """Read one file of the unit: the unit's own, an included one (its dependency blocks count) or a read
        one (only the files it reads in turn)."""
        if path in self.visited or depth > MAX_DEPTH:
            return
        self.visited.add(path)
        text = self.tree.texts.get(path)
        if text is None:
            if path in self.tree.unread:
                self.problems.add(Problem(INVALID, f"{path} was not read ({_UNREAD})"))
            return
        try:
            parsed = _parse(text)
        except Exception as exc:  # lark raises many exception types; all mean "not HCL"
            first = (str(exc).strip().splitlines() or [type(exc).__name__])[0]
            self.problems.add(Problem(INVALID, f"{path} does not parse: {first}"))
            return
        if included:
            self._dependencies(parsed, path, text)
        for _, block in _labelled(parsed.get("include")):
            self._follow(block.get("path"), path, "include", depth, included=True)
        for argument in _read_arguments(text):
            self._follow(argument, path, "read_terragrunt_config", depth, included=False)
        for _, block in _labelled(parsed.get("terraform")):
            self._source(block.get("source"), path)

    def _follow(self, raw: Any, where: str, what: str, depth: int, included: bool) -> None:
        try:
            evaluated = _evaluate(self.tree, self.unit, raw)
            if evaluated == NOTHING:
                return
            if evaluated is None:
                self.unresolved.add(f"{where}: {what} {_unquote(str(raw))}")
                return
            target = _locate(self.tree, self.unit, evaluated)
        except _Outside as exc:
            self.problems.add(Problem(exc.reason, f"{where}: {what} {_unquote(str(raw))}: {exc}"))
            return
        self.reads.add(target)
        self.file(target, depth + 1, included)

    def _source(self, raw: Any, where: str) -> None:
        text = _unquote(str(raw)) if raw is not None else ""
        try:
            evaluated = _evaluate(self.tree, self.unit, raw)
        except _Outside as exc:
            self.problems.add(Problem(exc.reason, f"{where}: terraform source {text}: {exc}"))
            return
        if evaluated == NOTHING:
            return
        if evaluated is None:
            if raw is not None and "${" in str(raw):
                self.unresolved.add(f"{where}: terraform source {text}")
            return
        rooted = evaluated.startswith(ROOTED)
        local = evaluated[len(ROOTED):].lstrip("/") if rooted else evaluated
        if not rooted and not local.startswith(("./", "../")):  # a registry, git or http source: not this tree
            return
        # `../modules//vpc`: terragrunt copies all of `../modules` (vpc may use its siblings), so all of it counts.
        directory = local.split("?", 1)[0].split("//", 1)[0]
        try:
            target = _locate(self.tree, self.unit, (ROOTED if rooted else "") + directory)
        except _Outside as exc:
            self.problems.add(Problem(exc.reason, f"{where}: terraform source {text}: {exc}"))
            return
        self.reads.add(target)

    def _dependencies(self, parsed: Mapping[str, Any], path: str, text: str) -> None:
        for name, block in _labelled(parsed.get("dependency")):
            if name is not None:
                self.dependency_blocks.append((name, block.get("config_path"), path))
                if str(block.get("skip_outputs", "")).strip().lower() == "true":
                    self.skip_outputs.add(name)
        for _, block in _labelled(parsed.get("dependencies")):
            paths = block.get("paths")
            for index, raw in enumerate(paths if isinstance(paths, list) else ()):
                self.dependency_blocks.append((f"paths[{index}]", raw, path))
        for match in _OUTPUT_REF.finditer(text):
            name, output = match.group(1), match.group(2) or match.group(3)
            held = self.references.setdefault(name, set())
            if output is None:
                self.references[name] = None
            elif held is not None:
                held.add(output)


def analyze_unit(tree: TerragruntTree, unit: str) -> UnitAnalysis:
    """The unit at repository path `unit` (its directory): dependencies, reads, problems. See the module."""
    walk = _Walk(tree, unit)
    own = posixpath.join(unit, CONFIG) if unit else CONFIG
    if own not in tree.texts and own not in tree.unread:
        return UnitAnalysis(unit, problems=(Problem(NOT_FOUND, f"{unit or '.'} holds no {CONFIG}"),))
    walk.file(own, 0, included=True)
    dependencies: dict[str, UnitDependency] = {}
    for name, raw, where in walk.dependency_blocks:
        label = f'dependency "{name}"' if not name.startswith("paths[") else f"dependencies {name}"
        shown = _unquote(str(raw)) if raw is not None else "(none)"
        try:
            evaluated = _evaluate(tree, unit, raw)
            if evaluated is None or evaluated == NOTHING:
                walk.problems.add(Problem(INVALID, f"{where}: {label}: config_path {shown} cannot be evaluated "
                                          "here (use a relative path or get_terragrunt_dir())"))
                continue
            target = _locate(tree, unit, evaluated)
        except _Outside as exc:
            walk.problems.add(Problem(exc.reason, f"{where}: {label}: config_path {shown}: {exc}"))
            continue
        config = posixpath.join(target, CONFIG) if target else CONFIG
        if config not in tree.paths:
            walk.problems.add(Problem(NOT_FOUND, f"{where}: {label}: config_path {shown} is {target or '.'}, "
                                      f"which holds no {CONFIG}"))
            continue
        outputs: tuple[str, ...] | None = ()
        if not name.startswith("paths[") and name not in walk.skip_outputs:
            # A block whose outputs are never named still has them fetched by terragrunt (it fails on an upstream
            # with none): it waits for them all. `skip_outputs = true` makes it order only.
            read = walk.references.get(name)
            outputs = None if read is None else tuple(sorted(read))
        held = dependencies.get(target)
        if held is not None:  # two blocks naming one unit: it reads what both read
            outputs = None if held.outputs is None or outputs is None else tuple(sorted({*held.outputs, *outputs}))
            name = min(held.name, name)
        dependencies[target] = UnitDependency(name, target, outputs)
    return UnitAnalysis(
        path=unit,
        dependencies=tuple(sorted(dependencies.values(), key=lambda d: d.path)),
        reads=tuple(sorted(walk.reads - {own})),
        unresolved=tuple(sorted(walk.unresolved)),
        problems=tuple(sorted(walk.problems)),
    )
