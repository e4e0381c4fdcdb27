"""Which binary runs a layer: tool and version from the layer → repository → `required_version` in
the code; installed through `tenv` when it is on PATH, else a matching binary already on PATH."""

from __future__ import annotations

import json
import shutil
import subprocess
from dataclasses import dataclass
from pathlib import Path

from burrito_py.runner.versions import InvalidVersionConstraint, parse_constraint


class ToolError(Exception):
    pass


@dataclass(frozen=True)
class Tool:
    kind: str  # terraform | opentofu
    binary: str
    version: str


def required_version(layer_dir: Path) -> str | None:
    """`terraform { required_version = "…" }` from the layer's *.tf files (python-hcl2)."""
    import hcl2

    constraints = []
    for path in sorted(layer_dir.glob("*.tf")):
        try:
            with path.open() as handle:
                parsed = hcl2.load(handle)
        except Exception as exc:  # hcl2 raises lark errors of many kinds
            raise ToolError(f"cannot parse {path.name}: {str(exc).splitlines()[0]}") from None
        for block in parsed.get("terraform") or ():
            value = block.get("required_version")
            if value:
                constraints.append(str(value).strip('"'))
    return ", ".join(constraints) or None


def _binary_name(kind: str) -> str:
    return "tofu" if kind == "opentofu" else "terraform"


def tenv_install_args(kind: str, version: str) -> list[str]:
    return ["tenv", "tofu" if kind == "opentofu" else "tf", "install", version]


def binary_version(binary: str) -> str:
    try:
        out = subprocess.run([binary, "version", "-json"], capture_output=True, text=True, check=True, timeout=60)
        return str(json.loads(out.stdout).get("terraform_version", ""))
    except (OSError, subprocess.SubprocessError, ValueError) as exc:
        raise ToolError(f"cannot run {binary} version -json: {exc}") from None


def resolve_tool(kind: str, spec_version: str | None, layer_dir: Path) -> Tool:
    constraint_text = spec_version or required_version(layer_dir)
    try:
        constraint = parse_constraint(constraint_text) if constraint_text else None
    except InvalidVersionConstraint as exc:
        raise ToolError(str(exc)) from None
    name = _binary_name(kind)
    if shutil.which("tenv") and constraint_text:
        result = subprocess.run(tenv_install_args(kind, constraint_text), capture_output=True, text=True, check=False)
        if result.returncode != 0:
            raise ToolError(f"tenv could not install {name} {constraint_text}: {result.stderr.strip()}")
    binary = shutil.which(name)
    if binary is None:
        raise ToolError(f"no {name} binary on PATH; install tenv or {name}")
    version = binary_version(binary)
    if constraint is not None and not constraint.allows(version):
        raise ToolError(
            f'{name} {version} on PATH does not satisfy "{constraint_text}"; install tenv or a matching binary'
        )
    return Tool(kind, binary, version)
