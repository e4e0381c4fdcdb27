"""Which version of which engine runs a layer, and where its binary comes from: pure decisions
(docs/architecture.md §9 step 3). `runner/tools.py` gathers the inputs (files, installed versions, the PATH
binary) and carries the decision out.

**Where the version comes from**, first found wins (tenv's own order, read in tenv v4's `RetrieveVersion`:
the version files of the working directory, its `required_version`, then the version files of each parent):

1. the spec: `spec.terraform.version` / `spec.opentofu.version` / `spec.terragrunt.version`, layer then
   repository (`burrito_py.api.effective`);
2. the engine's version file in the layer directory: `.terraform-version` for terraform, `.opentofu-version`
   for OpenTofu, `.terragrunt-version` for Terragrunt;
3. terraform and OpenTofu: the `required_version` of the layer's code (all `terraform {}` blocks joined);
4. the engine's version file in each parent directory, up to the repository root (never above it: the
   runner's HOME and the pod's filesystem are not the user's, unlike tenv's walk to `/` and `~`).

A version file holds one line: a version (`1.12.6`), a constraint (`~> 1.11.0`), `latest` / `latest-stable`
(any release) or `latest-allowed` (the code's `required_version`, else any release), tenv's keywords. Another
engine's version file is not read (a `.opentofu-version` does not switch a terraform layer to OpenTofu: the
engine is the spec's choice alone). The version chosen this way is still checked by terraform or tofu itself
against `required_version` at `init`.

**Where the binary comes from**, first that satisfies the request: the versions baked into the image
(`BURRITO_RUNNER_TOOLS_PATH`) and installed under `TENV_ROOT`, newest satisfying first; the binary on PATH
(not with tenv: its `terraform` on PATH is its proxy, which would download); then an install: with tenv when it
is on PATH (from the datastore's tool mirror when one is configured), else by the runner from the tool mirror
(terraform, OpenTofu, Terragrunt). When nothing can provide it the run fails naming the version, where the
request came from and every place looked at.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Literal, NamedTuple

from burrito_py.plans.versions import ANY, Constraint, InvalidVersionConstraint, parse_constraint, pick_latest

__all__ = [
    "VERSION_FILES",
    "BinaryChoice",
    "Candidate",
    "VersionRequest",
    "choose_binary",
    "request_version",
]

Engine = Literal["terraform", "opentofu", "terragrunt"]
VERSION_FILES: dict[Engine, str] = {
    "terraform": ".terraform-version",
    "opentofu": ".opentofu-version",
    "terragrunt": ".terragrunt-version",
}
_ANY_WORDS = ("latest", "latest-stable")
_ALLOWED_WORD = "latest-allowed"


class VersionChoiceError(ValueError):
    """A request that cannot be read: the message names the file or field and why."""


class VersionRequest(NamedTuple):
    """`text` is what must be satisfied (None: any release); `where` names where it was found."""

    text: str | None
    where: str

    @property
    def constraint(self) -> Constraint:
        if not self.text:
            return ANY
        try:
            return parse_constraint(self.text)
        except InvalidVersionConstraint as exc:
            raise VersionChoiceError(f"{self.where}: {exc}") from None

    def describe(self) -> str:
        return f'"{self.text}" (from {self.where})' if self.text else f"any release ({self.where})"


def _file_request(content: str, where: str, required_version: str | None) -> VersionRequest:
    lines = [line.strip() for line in content.splitlines() if line.strip() and not line.strip().startswith("#")]
    if not lines:
        raise VersionChoiceError(f"{where} is empty (expected a version such as 1.12.6)")
    text = lines[0]
    if text in _ANY_WORDS:
        return VersionRequest(None, where)
    if text == _ALLOWED_WORD:
        return VersionRequest(required_version, f"{where} ({_ALLOWED_WORD}: the code's required_version)")
    request = VersionRequest(text, where)
    request.constraint  # noqa: B018 - reading it is the check: a bad file fails here, naming itself
    return request


def request_version(
    engine: Engine,
    spec_version: str | None,
    spec_field: str,
    layer_files: Mapping[str, str],
    required_version: str | None,
    parent_files: Sequence[tuple[str, Mapping[str, str]]] = (),
) -> VersionRequest:
    """The version request of `engine` for a layer (pure; order in the module's docstring).

    `layer_files` maps the file names of the layer directory to their content (only version files matter);
    `parent_files` lists each parent directory (nearest first, up to the repository root) as (its path
    relative to the repository root, its files); `required_version` is the code's (None for terragrunt)."""
    if spec_version:
        request = VersionRequest(spec_version, spec_field)
        request.constraint  # noqa: B018 - the check
        return request
    name = VERSION_FILES[engine]
    if name in layer_files:
        return _file_request(layer_files[name], f"{name} in the layer directory", required_version)
    if required_version:
        request = VersionRequest(required_version, "required_version in the code")
        request.constraint  # noqa: B018 - the check
        return request
    for directory, files in parent_files:
        if name in files:
            shown = f"{directory}/{name}" if directory not in ("", ".") else f"{name} at the repository root"
            return _file_request(files[name], shown, required_version)
    return VersionRequest(None, "no version in the spec, the version files or the code")


class Candidate(NamedTuple):
    """A binary at hand: `source` is where it was found (`BURRITO_RUNNER_TOOLS_PATH /opt/…`, `TENV_ROOT /…`,
    `PATH`)."""

    version: str
    binary: str
    source: str


class BinaryChoice(NamedTuple):
    """One of: `use` a candidate; `install` with `installer` ("mirror" or "tenv"); or `error`."""

    use: Candidate | None = None
    installer: Literal["mirror", "tenv"] | None = None
    error: str | None = None


def _satisfies(constraint: Constraint, version: str) -> bool:
    try:
        return constraint.allows(version)
    except InvalidVersionConstraint:
        return False  # a directory or binary whose version cannot be read satisfies nothing


def choose_binary(
    engine: Engine,
    request: VersionRequest,
    installed: Sequence[Candidate],
    on_path: Candidate | None,
    *,
    looked_at: Sequence[str],
    mirror_url: str | None,
    tenv: bool,
) -> BinaryChoice:
    """Where `engine` at `request` comes from (pure; order in the module's docstring). `installed` holds the
    baked and TENV_ROOT versions (the first root holding a version wins, as listed); `on_path` the PATH binary
    (None: none, or not consulted); `looked_at` names every place searched, for the error."""
    constraint = request.constraint
    by_version: dict[str, Candidate] = {}
    for candidate in installed:
        by_version.setdefault(candidate.version, candidate)
    best = pick_latest(constraint, [v for v in by_version if _satisfies(constraint, v)])
    if best is not None:
        return BinaryChoice(use=by_version[best])
    if on_path is not None and _satisfies(constraint, on_path.version):
        return BinaryChoice(use=on_path)
    if tenv:
        return BinaryChoice(installer="tenv")
    if mirror_url:
        return BinaryChoice(installer="mirror")
    places = list(looked_at)
    if on_path is not None:
        places = [p if p != "PATH" else f"PATH ({on_path.binary} is {on_path.version})" for p in places]
    places.append(f"the tool mirror {mirror_url}" if mirror_url else "no tool mirror configured")
    have = sorted({c.version for c in installed})
    found = f"; versions found: {', '.join(have)}" if have else ""
    return BinaryChoice(error=f"no {engine} version satisfying {request.describe()}: looked in "
                              f"{'; '.join(places)}{found}")
