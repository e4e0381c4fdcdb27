"""Which binary runs a layer, and at which version (docs/architecture.md §9).

Resolution: the effective tool of the layer (layer spec → repository spec, `burrito_py.api.effective`)
gives terraform or opentofu and maybe a version; without one, the `required_version` of the code's
`terraform {}` blocks (every `*.tf`, `*.tf.json` and, for OpenTofu, `*.tofu` file of the layer directory; all
of them must hold, so they are joined with commas). No version anywhere means "any release".

Installation:
- with `tenv` on PATH: a version already installed under tenv's root, or baked into the image under a
  `BURRITO_RUNNER_TOOLS_PATH` directory (same layout), that satisfies the constraint is used as is (the latest
  such, exactly as tenv's own proxies resolve versions, and without network); otherwise
  `tenv tf|tofu|tg install <version or constraint>` (`latest-stable` without a constraint), then the latest
  installed version that satisfies it. We rely on tenv's install layout,
  `$TENV_ROOT/{Terraform,OpenTofu,Terragrunt}/<version>/{terraform,tofu,terragrunt}` with `TENV_ROOT`
  defaulting to `~/.tenv` (tenv also honours `TOFUENV_ROOT`, `TFENV_ROOT`), and run that binary directly
  rather than tenv's proxy, so nothing depends on the working directory's version files.
- without tenv: the `terraform`/`tofu` binary on PATH, if its `version -json` satisfies the constraint.
- with the datastore's tool mirror (`BURRITO_TOOL_MIRROR_URL`, a `ToolMirror`), for terraform and opentofu: a
  baked or already installed version, then (without tenv only, as above) the binary on PATH, when one satisfies
  the constraint; otherwise the runner installs the newest version of `GET <mirror><tool>/versions` that
  satisfies it, from `GET <mirror><tool>/<version>/linux/<arch>` (bearer token, the mirror's CA), checked
  against the `X-Burrito-Sha256` header, unpacked into tenv's layout under TENV_ROOT (a staging directory
  renamed into place, so no partial install is ever found). Never tenv, hence never GitHub.

Terragrunt (`spec.terragrunt.enabled`): resolved the same way (`tenv tg install`, else `terragrunt` on PATH,
whose `--version` prints `terragrunt version v0.67.0`); its version comes from the spec only. The steps then
run `terragrunt <command>` with `TG_TF_PATH`/`TERRAGRUNT_TFPATH` pointing at the resolved terraform/tofu.
"""

from __future__ import annotations

import hashlib
import json
import os
import platform
import re
import shutil
import subprocess
import tempfile
import time
import zipfile
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Literal, TypeVar

from burrito_py.kube.pod_paths import pod_path_setting
from burrito_py.plans.versions import ANY, Constraint, InvalidVersionConstraint, parse_constraint, pick_latest
from burrito_py.runner.signals import stopping

if TYPE_CHECKING:
    import httpx

    from burrito_py.api.effective import EffectiveTool

__all__ = [
    "Tool",
    "ToolError",
    "ToolKind",
    "ToolMirror",
    "code_required_version",
    "install_from_mirror",
    "mirror_arch",
    "prefetch_version",
    "preinstalled_roots",
    "resolve_tool",
    "tenv_install_args",
    "tenv_root",
]

ToolKind = Literal["terraform", "opentofu", "terragrunt"]
BINARY = {"terraform": "terraform", "opentofu": "tofu", "terragrunt": "terragrunt"}
TENV_SUBCOMMAND = {"terraform": "tf", "opentofu": "tofu", "terragrunt": "tg"}
TENV_FOLDER = {"terraform": "Terraform", "opentofu": "OpenTofu", "terragrunt": "Terragrunt"}
TENV_LATEST = "latest-stable"
_REQUIRED_VERSION = re.compile(r"\brequired_version\b")
_TERRAGRUNT_VERSION = re.compile(r"\bv?(\d+\.\d+\.\d+(?:-[0-9A-Za-z.-]+)?)")
R = TypeVar("R")
VERSION_TIMEOUT = 60.0
INSTALL_TIMEOUT = 600.0
TOOLS_PATH_ENV = "BURRITO_RUNNER_TOOLS_PATH"
SHA256_HEADER = "X-Burrito-Sha256"
MIRROR_TRIES = 3
MIRROR_TIMEOUT = 60.0
MIRROR_CONNECT_TIMEOUT = 10.0
_ARCH = {"x86_64": "amd64", "amd64": "amd64", "aarch64": "arm64", "arm64": "arm64"}


class ToolError(Exception):
    """The tool cannot be resolved or installed; the message says why and what to do."""


@dataclass(frozen=True)
class Tool:
    """What runs the steps: `binary` is terraform or tofu; `terragrunt` wraps it when set."""

    kind: Literal["terraform", "opentofu"]
    binary: str
    version: str
    terragrunt: str | None = None
    terragrunt_version: str | None = None

    def describe(self) -> str:
        text = f"{self.kind} {self.version} ({self.binary})"
        if self.terragrunt:
            text += f" through terragrunt {self.terragrunt_version} ({self.terragrunt})"
        return text


# -- required_version in the code ---------------------------------------------------------------
def _unquote(value: object) -> str:
    text = str(value).strip()
    # python-hcl2 keeps the quotes of string literals.
    if len(text) >= 2 and text[0] == text[-1] == '"':
        text = text[1:-1]
    return text.strip()


def _from_hcl(path: Path, text: str) -> list[str]:
    import hcl2  # ~0.1 s to import; only layers without a version in their spec pay it

    try:
        parsed = hcl2.loads(text)
    except Exception as exc:  # lark raises many exception types; all mean "not HCL"
        first = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        raise ToolError(f"cannot parse {path.name} to read required_version: {first}") from None
    blocks = parsed.get("terraform") or []
    return [_unquote(b["required_version"]) for b in blocks if isinstance(b, dict) and b.get("required_version")]


def _from_json(path: Path, text: str) -> list[str]:
    try:
        parsed = json.loads(text)
    except ValueError as exc:
        raise ToolError(f"cannot parse {path.name} to read required_version: {exc}") from None
    blocks = parsed.get("terraform") if isinstance(parsed, dict) else None
    blocks = blocks if isinstance(blocks, list) else [blocks] if isinstance(blocks, dict) else []
    return [str(b["required_version"]).strip() for b in blocks if isinstance(b, dict) and b.get("required_version")]


def code_required_version(layer_dir: Path, kind: str = "terraform") -> str | None:
    """The `required_version` constraints of the layer's code joined with `, `, or None.

    Only files that mention `required_version` are parsed: parsing a 1,000-resource file with python-hcl2
    takes seconds, and the version almost always sits in a small `versions.tf`."""
    patterns = ["*.tf", "*.tf.json"] + (["*.tofu", "*.tofu.json"] if kind == "opentofu" else [])
    files = sorted({p for pattern in patterns for p in layer_dir.glob(pattern) if p.is_file()})
    constraints: list[str] = []
    for path in files:
        try:
            text = path.read_text(encoding="utf-8")
        except (OSError, UnicodeDecodeError) as exc:
            raise ToolError(f"cannot read {path.name} to read required_version: {exc}") from None
        if not _REQUIRED_VERSION.search(text):
            continue
        found = _from_json(path, text) if path.name.endswith(".json") else _from_hcl(path, text)
        for constraint in found:
            try:
                parse_constraint(constraint)
            except InvalidVersionConstraint as exc:
                raise ToolError(f"{path.name}: required_version: {exc}") from None
        constraints += found
    return ", ".join(constraints) or None


# -- tenv ---------------------------------------------------------------------------------------
def tenv_root(environ: Mapping[str, str] | None = None) -> Path:
    env = os.environ if environ is None else environ
    root = env.get("TENV_ROOT") or env.get("TOFUENV_ROOT") or env.get("TFENV_ROOT")
    # A path inside the pod: under the local kubelet it lives below the pod's root, as the work dir does.
    return pod_path_setting(Path(root)) or Path(root) if root else Path.home() / ".tenv"


def tenv_install_args(kind: ToolKind, version: str | None) -> list[str]:
    """`tenv tf install 1.11.4`, `tenv tofu install "~> 1.8"`, `tenv tg install latest-stable`."""
    return ["tenv", TENV_SUBCOMMAND[kind], "install", version or TENV_LATEST]


def preinstalled_roots(environ: Mapping[str, str] | None = None) -> list[Path]:
    """`BURRITO_RUNNER_TOOLS_PATH`: directories in tenv's layout holding tools baked into the runner image
    (`/opt/burrito-py/tools` in burrito-py-runner), searched before TENV_ROOT and never installed into: TENV_ROOT
    is an emptyDir in the runner pod, so nothing baked there would survive its mount."""
    env = os.environ if environ is None else environ
    return [Path(part) for part in env.get(TOOLS_PATH_ENV, "").split(os.pathsep) if part.strip()]


def _tenv_installed(kind: ToolKind, constraint: Constraint) -> Path | None:
    """The latest version satisfying `constraint` among the baked tools and tenv's installs."""
    found: dict[str, Path] = {}
    for root in [*preinstalled_roots(), tenv_root()]:
        folder = root / TENV_FOLDER[kind]
        try:
            versions = [entry.name for entry in folder.iterdir() if entry.is_dir()]
        except OSError:
            continue
        for name in versions:
            found.setdefault(name, folder / name)  # the first root holding a version wins
    version = pick_latest(constraint, list(found))
    if version is None:
        return None
    binary = found[version] / BINARY[kind]
    if not binary.is_file():
        raise ToolError(f"{found[version]} holds no {BINARY[kind]} binary; reinstall it with tenv")
    return binary


def _tenv(tenv: str, kind: ToolKind, text: str | None, constraint: Constraint) -> Path:
    installed = _tenv_installed(kind, constraint)
    if installed is not None:
        return installed
    args = [tenv, *tenv_install_args(kind, text)[1:]]
    stop = stopping()
    if stop.requested:
        raise ToolError(f"not installing {BINARY[kind]} {text or TENV_LATEST}: {stop.signal_name} received")
    print(f"$ {' '.join(args)}", flush=True)
    try:
        # Its own process group, like the steps: a termination signal reaches it once, from the runner.
        process = stop.start(f"tenv {TENV_SUBCOMMAND[kind]} install", lambda: subprocess.Popen(
            args, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
            process_group=0,
        ))
    except OSError as exc:
        raise ToolError(f"tenv could not install {BINARY[kind]} {text or TENV_LATEST}: {exc}") from None
    try:
        stdout, stderr = process.communicate(timeout=INSTALL_TIMEOUT)
    except subprocess.TimeoutExpired as exc:
        process.kill()
        process.communicate()
        raise ToolError(f"tenv could not install {BINARY[kind]} {text or TENV_LATEST}: {exc}") from None
    finally:
        stop.finished(process)
    if process.returncode != 0:
        output = (stderr.strip() or stdout.strip()).splitlines()
        detail = output[-1] if output else f"exit code {process.returncode}"
        raise ToolError(f"tenv could not install {BINARY[kind]} {text or TENV_LATEST}: {detail}")
    installed = _tenv_installed(kind, constraint)
    if installed is None:
        raise ToolError(
            f"tenv installed {BINARY[kind]} {text or TENV_LATEST} but no version satisfying it is under "
            f"{tenv_root() / TENV_FOLDER[kind]}"
        )
    return installed


# -- PATH ---------------------------------------------------------------------------------------
def _version_args(binary: str, kind: ToolKind) -> list[str]:
    return [binary, "--version"] if kind == "terragrunt" else [binary, "version", "-json"]


# `version -json` answers started ahead of time by prefetch_version, by binary path.
_prefetched: dict[str, subprocess.Popen[str]] = {}


def prefetch_version(kind: ToolKind = "terraform") -> None:
    """Start `<binary on PATH> version -json` now, in the background, when tenv is not there: it takes about
    as long as the runner's own imports (~0.05 s), so binary_version later finds the answer ready."""
    binary = shutil.which(BINARY[kind])
    if binary is None or binary in _prefetched or shutil.which("tenv") is not None:
        return
    try:
        _prefetched[binary] = subprocess.Popen(
            _version_args(binary, kind), stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
            text=True,
        )
    except OSError:
        return  # binary_version runs it again and reports the error


def _run_version(args: list[str], binary: str) -> tuple[int, str, str]:
    process = _prefetched.pop(binary, None)
    if process is None or process.args != args:
        process = subprocess.Popen(
            args, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
        )
    try:
        stdout, stderr = process.communicate(timeout=VERSION_TIMEOUT)
    except subprocess.TimeoutExpired:
        process.kill()
        process.communicate()
        raise
    return process.returncode, stdout, stderr


def binary_version(binary: str, kind: ToolKind) -> str:
    """`terraform|tofu version -json` → `terraform_version`; `terragrunt --version` → its version."""
    args = _version_args(binary, kind)
    try:
        code, stdout, stderr = _run_version(args, binary)
    except (OSError, subprocess.TimeoutExpired) as exc:
        raise ToolError(f"cannot run {' '.join(args)}: {exc}") from None
    if code != 0:
        raise ToolError(f"{' '.join(args)} failed (exit code {code}): {stderr.strip()}")
    if kind == "terragrunt":
        match = _TERRAGRUNT_VERSION.search(stdout)
        if match is None:
            raise ToolError(f"{' '.join(args)} printed no version: {stdout.strip()!r}")
        return match.group(1)
    try:
        version = json.loads(stdout)["terraform_version"]
    except (ValueError, KeyError, TypeError):
        raise ToolError(f"{' '.join(args)} printed no terraform_version: {stdout.strip()[:200]!r}") from None
    return str(version)


def _on_path(kind: ToolKind, text: str | None, constraint: Constraint) -> tuple[str, str]:
    name = BINARY[kind]
    binary = shutil.which(name)
    if binary is None:
        wanted = f' "{text}"' if text else ""
        raise ToolError(f"no {name} binary on PATH and no tenv to install {name}{wanted}")
    version = binary_version(binary, kind)
    try:
        allowed = constraint.allows(version)
    except InvalidVersionConstraint as exc:
        raise ToolError(f"{binary}: {exc}") from None
    if not allowed:
        raise ToolError(f'{name} {version} on PATH does not satisfy "{text}"; install tenv or a matching binary')
    return binary, version


# -- the datastore's tool mirror ----------------------------------------------------------------
@dataclass(frozen=True)
class ToolMirror:
    """The datastore's tool binaries: `url` ends with a slash (`https://<datastore>:8443/tools/v1/`); `token`
    is the runner's datastore token, `ca_bundle` the CAs that verify the mirror (None: the system's)."""

    url: str
    token: str | None = None
    ca_bundle: Path | None = None


def mirror_arch(machine: str | None = None) -> str:
    text = (machine if machine is not None else platform.machine()).lower()
    try:
        return _ARCH[text]
    except KeyError:
        raise ToolError(f"the tool mirror has no binaries for machine {text!r} (only amd64, arm64)") from None


def _mirror_client(mirror: ToolMirror) -> httpx.Client:
    import httpx

    from burrito_py.runner.mirror import ssl_context

    headers = {"Authorization": f"Bearer {mirror.token}"} if mirror.token else {}
    return httpx.Client(headers=headers, verify=ssl_context(mirror.ca_bundle),
                        timeout=httpx.Timeout(MIRROR_TIMEOUT, connect=MIRROR_CONNECT_TIMEOUT))


def _retried(what: str, call: Callable[[], R]) -> R:
    """`call` again on connection errors and 5xx (the datastore may be restarting), a few times; the error
    names `what`, never the token."""
    import httpx

    problem = "not tried"
    for attempt in range(MIRROR_TRIES):
        if attempt:
            time.sleep(0.5 * 2 ** (attempt - 1))
        try:
            return call()
        except httpx.HTTPStatusError as exc:
            problem = f"{exc.response.status_code} {exc.response.reason_phrase}"
            if exc.response.status_code < 500:
                break
        except httpx.HTTPError as exc:
            problem = f"{type(exc).__name__}: {exc}" if str(exc) else type(exc).__name__
    raise ToolError(f"{what}: {problem}")


def _mirror_versions(client: httpx.Client, mirror: ToolMirror, kind: ToolKind) -> list[str]:
    url = f"{mirror.url}{kind}/versions"

    def get() -> object:
        response = client.get(url)
        response.raise_for_status()
        return response.json()

    try:
        body = _retried(f"cannot list {kind} versions on the tool mirror ({url})", get)
    except ValueError:
        raise ToolError(f"the tool mirror's {url} is not JSON") from None
    versions = body.get("versions") if isinstance(body, dict) else None
    if not isinstance(versions, list):
        raise ToolError(f'the tool mirror\'s {url} has no "versions" list')
    return [str(v) for v in versions]


def _download(client: httpx.Client, url: str, dest: Path) -> tuple[str, str]:
    """Stream `url` to `dest`; (sha256 of what came, the X-Burrito-Sha256 header)."""

    def get() -> tuple[str, str]:
        digest = hashlib.sha256()
        with client.stream("GET", url) as response, dest.open("wb") as handle:
            response.raise_for_status()
            for chunk in response.iter_bytes(1024 * 1024):
                digest.update(chunk)
                handle.write(chunk)
            return digest.hexdigest(), response.headers.get(SHA256_HEADER, "").strip().lower()

    return _retried(f"cannot download {url}", get)


def _unzip_binary(archive: Path, name: str, dest: Path, what: str) -> None:
    """Only the member `name` at the archive's root, written to `dest`: no other path is ever created."""
    try:
        with zipfile.ZipFile(archive) as bundle:
            member = next((info for info in bundle.infolist() if info.filename == name), None)
            if member is None:
                raise ToolError(f"{what}: the release archive holds no {name} binary")
            with bundle.open(member) as source, dest.open("wb") as target:
                shutil.copyfileobj(source, target, 1024 * 1024)
    except (zipfile.BadZipFile, OSError) as exc:
        raise ToolError(f"{what}: cannot unpack the release archive: {exc}") from None
    dest.chmod(0o755)


def install_from_mirror(mirror: ToolMirror, kind: Literal["terraform", "opentofu"], text: str | None,
                        constraint: Constraint) -> tuple[Path, str]:
    """Install the newest version the mirror has that satisfies `constraint` into tenv's layout under
    TENV_ROOT; (binary, version). Raises ToolError; leaves nothing behind on failure."""
    stop = stopping()
    if stop.requested:
        raise ToolError(f"not installing {BINARY[kind]} {text or 'latest'}: {stop.signal_name} received")
    arch = mirror_arch()
    with _mirror_client(mirror) as client:
        available = _mirror_versions(client, mirror, kind)
        version = pick_latest(constraint, available)
        if version is None:
            listed = ", ".join(available[:5]) + (", …" if len(available) > 5 else "") or "none"
            raise ToolError(f'no {kind} version satisfying "{text or "any"}" on the tool mirror {mirror.url} '
                            f"(it has {listed})")
        what = f"{kind} {version} from the tool mirror"
        root = tenv_root()
        target = root / TENV_FOLDER[kind] / version
        url = f"{mirror.url}{kind}/{version}/linux/{arch}"  # runner pods are Linux
        print(f"burrito-py: installing {kind} {version} from the tool mirror ({url})", flush=True)
        try:
            root.mkdir(parents=True, exist_ok=True)
            # Staged inside TENV_ROOT (one filesystem: the rename is atomic) and renamed into place once whole.
            staging = Path(tempfile.mkdtemp(prefix=".burrito-py-install-", dir=root))
        except OSError as exc:
            raise ToolError(f"{what}: cannot write under TENV_ROOT {root}: {exc}") from None
        try:
            archive = staging / "release.zip"
            got, expected = _download(client, url, archive)
            if not expected:
                raise ToolError(f"{what}: the mirror sent no {SHA256_HEADER} header; not installed")
            if got != expected:
                raise ToolError(f"{what}: the download's sha256 {got} does not match {SHA256_HEADER} {expected}; "
                                "not installed")
            unpacked = staging / version
            unpacked.mkdir(mode=0o755)
            _unzip_binary(archive, BINARY[kind], unpacked / BINARY[kind], what)
            try:
                target.parent.mkdir(parents=True, exist_ok=True)
                unpacked.rename(target)
            except OSError as exc:
                if not (target / BINARY[kind]).is_file():  # else another process installed it meanwhile
                    raise ToolError(f"{what}: cannot install into {target}: {exc}") from None
        finally:
            shutil.rmtree(staging, ignore_errors=True)
    print(f"burrito-py: installed {kind} {version} (sha256 {got}) into {target}", flush=True)
    return target / BINARY[kind], version


def _satisfying_on_path(kind: ToolKind, constraint: Constraint) -> tuple[str, str] | None:
    binary = shutil.which(BINARY[kind])
    if binary is None:
        return None
    version = binary_version(binary, kind)
    try:
        return (binary, version) if constraint.allows(version) else None
    except InvalidVersionConstraint as exc:
        raise ToolError(f"{binary}: {exc}") from None


def _mirrored(kind: Literal["terraform", "opentofu"], text: str | None, constraint: Constraint,
              mirror: ToolMirror, path_too: bool) -> tuple[str, str]:
    """The existing order first (baked and installed versions; the PATH binary when there is no tenv, whose
    own `terraform` proxy would download from GitHub), then the mirror instead of tenv."""
    installed = _tenv_installed(kind, constraint)
    if installed is not None:
        return str(installed), installed.parent.name
    found = _satisfying_on_path(kind, constraint) if path_too else None
    if found is not None:
        return found
    binary, version = install_from_mirror(mirror, kind, text, constraint)
    return str(binary), version


# -- together -----------------------------------------------------------------------------------
def _constraint(text: str | None, where: str) -> Constraint:
    if not text:
        return ANY
    try:
        return parse_constraint(text)
    except InvalidVersionConstraint as exc:
        raise ToolError(f"{where}: {exc}") from None


def _resolve_one(kind: ToolKind, text: str | None, where: str, mirror: ToolMirror | None = None) -> tuple[str, str]:
    constraint = _constraint(text, where)
    tenv = shutil.which("tenv")
    if mirror is not None and kind != "terragrunt":  # the mirror serves terraform and tofu only
        return _mirrored(kind, text, constraint, mirror, path_too=tenv is None)
    if tenv is None:
        # The baked versions first, as with tenv: an image without tenv (scripts/build-images.sh --local) has its
        # tools under BURRITO_RUNNER_TOOLS_PATH and none on PATH.
        installed = _tenv_installed(kind, constraint)
        if installed is not None:
            return str(installed), installed.parent.name
        return _on_path(kind, text, constraint)
    binary = _tenv(tenv, kind, text, constraint)
    return str(binary), binary.parent.name


def resolve_tool(effective: EffectiveTool, layer_dir: Path, mirror: ToolMirror | None = None) -> Tool:
    """The binary (and version) that runs the layer in `layer_dir`. Raises ToolError."""
    text, where = effective.version, f"spec.{effective.kind}.version"
    if not text:
        text, where = code_required_version(layer_dir, effective.kind), "required_version in the code"
    binary, version = _resolve_one(effective.kind, text, where, mirror)
    terragrunt = terragrunt_version = None
    if effective.terragrunt is not None:
        terragrunt, terragrunt_version = _resolve_one("terragrunt", effective.terragrunt.version,
                                                      "spec.terragrunt.version")
    return Tool(effective.kind, binary, version, terragrunt, terragrunt_version)


def tool_for(kind: Literal["terraform", "opentofu"], version: str | None, layer_dir: Path,
             mirror: ToolMirror | None = None) -> Tool:
    """`resolve_tool` without API objects (for tests and tools)."""
    from burrito_py.api.effective import EffectiveTool

    return resolve_tool(EffectiveTool(kind=kind, version=version, terragrunt=None), layer_dir, mirror)
