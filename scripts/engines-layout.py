"""Assemble a tenv root and a tool mirror from engine binaries (docs/architecture.md §23).

    engines-layout.py --out DIR --platform linux_amd64 --engine tofu=1.12.6=/path/to/tofu [--engine ...]

DIR/tenv/ is a TENV_ROOT: <Folder>/<version>/<binary>, the folder OpenTofu, Terraform or Terragrunt and the
version without "v". tenv counts a version as installed when that directory exists, lists local versions from
the directories it finds there (real directories: it skips symlinks) and runs <Folder>/<version>/<binary>.
DIR/bin/tenv is tenv itself when it was built.

DIR/mirror/ holds the files at the paths tenv fetches in its "direct" install mode from a remote URL:
  opentofu/opentofu/releases/download/v<v>/tofu_<v>_<os>_<arch>.zip     and tofu_<v>_SHA256SUMS beside it
  terraform/<v>/terraform_<v>_<os>_<arch>.zip                            and terraform_<v>_SHA256SUMS
  gruntwork-io/terragrunt/releases/download/v<v>/terragrunt_<os>_<arch>  (the bare binary) and SHA256SUMS
A SHA256SUMS file is in sha256sum's format ("<hex>  <file name>"); a zip has one entry named after the tool
with mode 0755, as the upstream archives (tenv extracts each entry with its own mode). The zips are
reproducible: the same binary always gives the same archive and digest.

DIR/engines.json lists what was assembled, with each file's SHA-256.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import shutil
import sys
import zipfile
from dataclasses import dataclass
from pathlib import Path

FOLDERS = {"tofu": "OpenTofu", "terraform": "Terraform", "terragrunt": "Terragrunt"}
ZIP_TIME = (1980, 1, 1, 0, 0, 0)  # the oldest a zip can say: the archive depends on the binary alone


@dataclass(frozen=True)
class Engine:
    tool: str
    version: str
    source: Path


def parse_engine(text: str) -> Engine:
    tool, sep, rest = text.partition("=")
    version, sep2, source = rest.partition("=")
    if not (sep and sep2 and tool and version and source):
        raise argparse.ArgumentTypeError(f"--engine {text!r}: expected TOOL=VERSION=BINARY")
    if tool not in FOLDERS and tool != "tenv":
        raise argparse.ArgumentTypeError(f"--engine {text!r}: unknown tool {tool!r}")
    if version.startswith("v"):
        raise argparse.ArgumentTypeError(f"--engine {text!r}: the version is written without 'v'")
    if not os.access(source, os.X_OK):
        raise argparse.ArgumentTypeError(f"--engine {text!r}: {source} is not an executable file")
    return Engine(tool, version, Path(source))


def sha256_file(path: Path) -> str:
    digest = hashlib.sha256()
    with path.open("rb") as f:
        while chunk := f.read(1 << 20):
            digest.update(chunk)
    return digest.hexdigest()


def place(source: Path, target: Path) -> None:
    """A hard link to the cached binary when the filesystem allows it (no copy of ~100 MB), else a copy. A link
    shares the source's inode, so its mode is left as it is (the source is executable, parse_engine checked)."""
    target.parent.mkdir(parents=True, exist_ok=True)
    try:
        os.link(source, target)
    except OSError:
        shutil.copy2(source, target)
        target.chmod(0o755)


def write_zip(source: Path, archive: Path, entry: str) -> None:
    info = zipfile.ZipInfo(entry, date_time=ZIP_TIME)
    info.create_system = 3  # unix: the high 16 bits of external_attr are the file's mode
    info.external_attr = (0o100755 & 0xFFFF) << 16
    info.compress_type = zipfile.ZIP_DEFLATED
    archive.parent.mkdir(parents=True, exist_ok=True)
    with zipfile.ZipFile(archive, "w") as zf, source.open("rb") as src, zf.open(info, "w") as dst:
        shutil.copyfileobj(src, dst, 1 << 20)


def mirror_files(engine: Engine, platform: str) -> tuple[str, str, bool]:
    """(the artefact's path in the mirror, its SHA256SUMS file's path, whether the artefact is a zip)."""
    v = engine.version
    if engine.tool == "tofu":
        base = f"opentofu/opentofu/releases/download/v{v}"
        return f"{base}/tofu_{v}_{platform}.zip", f"{base}/tofu_{v}_SHA256SUMS", True
    if engine.tool == "terraform":
        base = f"terraform/{v}"
        return f"{base}/terraform_{v}_{platform}.zip", f"{base}/terraform_{v}_SHA256SUMS", True
    base = f"gruntwork-io/terragrunt/releases/download/v{v}"
    return f"{base}/terragrunt_{platform}", f"{base}/SHA256SUMS", False


def assemble(out: Path, platform: str, engines: list[Engine]) -> dict[str, object]:
    seen: set[tuple[str, str]] = set()
    entries: list[dict[str, object]] = []
    for engine in engines:
        if (engine.tool, engine.version) in seen:
            raise SystemExit(f"engines-layout: {engine.tool} {engine.version} given twice")
        seen.add((engine.tool, engine.version))
        binary_sha = sha256_file(engine.source)
        entry: dict[str, object] = {"tool": engine.tool, "version": engine.version, "source": str(engine.source),
                                    "sha256": binary_sha}
        if engine.tool == "tenv":
            place(engine.source, out / "bin" / "tenv")
            entry["path"] = "bin/tenv"
            entries.append(entry)
            continue
        rel = Path("tenv") / FOLDERS[engine.tool] / engine.version / engine.tool
        place(engine.source, out / rel)
        entry["path"] = str(rel)
        artefact, sums, zipped = mirror_files(engine, platform)
        if zipped:
            write_zip(engine.source, out / "mirror" / artefact, engine.tool)
        else:
            place(engine.source, out / "mirror" / artefact)
        artefact_sha = sha256_file(out / "mirror" / artefact)
        (out / "mirror" / sums).write_text(f"{artefact_sha}  {Path(artefact).name}\n")
        entry["mirror"] = {"artefact": f"mirror/{artefact}", "sha256": artefact_sha, "sha256sums": f"mirror/{sums}"}
        entries.append(entry)
        print(f"engines-layout: {engine.tool} {engine.version} -> {rel}, mirror/{artefact}", file=sys.stderr)
    return {"platform": platform, "engines": entries}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--out", type=Path, required=True, help="a directory that does not exist yet")
    parser.add_argument("--platform", required=True, help="<GOOS>_<GOARCH> of the binaries, e.g. linux_amd64")
    parser.add_argument("--engine", type=parse_engine, action="append", default=[], dest="engines")
    args = parser.parse_args(argv)
    if args.out.exists():
        parser.error(f"--out {args.out} exists: the layout is assembled into a new directory")
    if not args.engines:
        parser.error("no --engine given")
    args.out.mkdir(parents=True)
    manifest = assemble(args.out, args.platform, args.engines)
    (args.out / "engines.json").write_text(json.dumps(manifest, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
