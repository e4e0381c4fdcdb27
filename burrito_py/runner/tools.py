"""Which binary runs a layer, and at which version (docs/architecture.md §9 step 3): this module gathers the
inputs and carries out the pure decisions of `runner/tool_choice.py`.

The version: the spec (`burrito_py.api.effective`), else the engine's version file in the layer directory,
else the `required_version` of the code's `terraform {}` blocks (every `*.tf`, `*.tf.json` and, for OpenTofu,
`*.tofu` file of the layer directory, joined with commas), else the version files of the parent directories up
to the repository root. No version anywhere means "any release".

The binary: a version baked into the image (`BURRITO_RUNNER_TOOLS_PATH`) or installed under TENV_ROOT, in
tenv's layout `<root>/{Terraform,OpenTofu,Terragrunt}/<version>/{terraform,tofu,terragrunt}` (TENV_ROOT
defaulting to `~/.tenv`; tenv also honours `TOFUENV_ROOT`, `TFENV_ROOT`), run directly; else the binary on PATH
(not with tenv: its `terraform` is a downloading proxy) when its `version -json` satisfies; else an install.
With tenv on PATH, `tenv tf|tofu|tg install <request>`: from the datastore's tool mirror when one is configured
(`BURRITO_TOOL_MIRROR_URL`, a `ToolMirror`; tenv pointed at its tenv layout, `tenv_mirror_env`), else from tenv's
own remotes. Without tenv, from the tool mirror by the runner itself — `GET <mirror><tool>/versions`, the newest
satisfying, `GET <mirror><tool>/<version>/linux/<arch>` (bearer token, the mirror's CA) checked against
`X-Burrito-Sha256`, unpacked (Terragrunt's bare binary: as it is) into tenv's layout under TENV_ROOT through a
staging directory renamed into place. Never GitHub from the mirror paths.

Terragrunt (`spec.terragrunt.enabled`): the same, from `spec.terragrunt.version` or `.terragrunt-version`
(`terragrunt --version` prints `terragrunt version v0.67.0`). The steps then run `terragrunt <command>` with
`TG_TF_PATH`/`TERRAGRUNT_TFPATH` pointing at the resolved terraform/tofu.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import tempfile
import time
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Literal, NamedTuple, TypeVar
from urllib.parse import urljoin

from burrito_py.kube.pod_paths import pod_path_setting
from burrito_py.plans.versions import Constraint, InvalidVersionConstraint, parse_constraint, pick_latest
from burrito_py.runner.signals import stopping
from burrito_py.runner.tool_choice import (
    VERSION_FILES,
    Candidate,
    VersionChoiceError,
    VersionRequest,
    choose_binary,
    request_version,
)

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
    "tenv_mirror_env",
    "tenv_root",
]

ToolKind = Literal["terraform", "opentofu", "terragrunt"]
BINARY = {"terraform": "terraform", "opentofu": "tofu", "terragrunt": "terragrunt"}
TENV_SUBCOMMAND = {"terraform": "tf", "opentofu": "tofu", "terragrunt": "tg"}
TENV_FOLDER = {"terraform": "Terraform", "opentofu": "OpenTofu", "terragrunt": "Terragrunt"}
TENV_LATEST = "latest-stable"
# tenv's settings per engine (its `config/envname`): the remote and how to read it, and its basic-auth credentials.
TENV_PREFIX = {"terraform": "TFENV_", "opentofu": "TOFUENV_", "terragrunt": "TG_"}
TENV_MIRROR_USER = "burrito-py-runner"  # any name: the datastore reads the token from the password
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


class NotOnMirror(ToolError):
    """The tool mirror lists no version satisfying the request."""


class Tool(NamedTuple):
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


def tenv_install_args(kind: ToolKind, version: str | None, mirror: bool = False) -> list[str]:
    """`tenv tf install 1.11.4`, `tenv tofu install "~> 1.8"`, `tenv tg install latest-stable`. From the tool
    mirror, terraform and OpenTofu skip the signature check (`-s`): the datastore checked each archive against its
    release's SHA256SUMS when it stored it and serves that digest, which tenv checks; it serves no signatures."""
    skip = ["--skip-signature"] if mirror and kind != "terragrunt" else []
    return ["tenv", TENV_SUBCOMMAND[kind], "install", version or TENV_LATEST, *skip]


def tenv_mirror_env(mirror: ToolMirror, kind: ToolKind) -> dict[str, str]:
    """What points `tenv <kind> install` at the tool mirror (pure): its tenv layout (`/tools/tenv/` beside
    `/tools/v1/`) in tenv's direct install mode and html list mode, the runner's token as the basic-auth password
    (the only credentials tenv sends), the mirror's CA as Go's `SSL_CERT_FILE`, and no remote configuration file
    (a `remote.yaml` in TENV_ROOT could otherwise rewrite the download URLs)."""
    prefix, remote = TENV_PREFIX[kind], urljoin(mirror.url, "../tenv/")
    env = {f"{prefix}REMOTE": remote, f"{prefix}LIST_URL": remote, f"{prefix}INSTALL_MODE": "direct",
           f"{prefix}LIST_MODE": "html", "TENV_REMOTE_CONF": os.devnull}
    if mirror.token:
        env |= {f"{prefix}REMOTE_USER": TENV_MIRROR_USER, f"{prefix}REMOTE_PASSWORD": mirror.token}
    if mirror.ca_bundle is not None:
        env["SSL_CERT_FILE"] = str(mirror.ca_bundle)
    return env


def preinstalled_roots(environ: Mapping[str, str] | None = None) -> list[Path]:
    """`BURRITO_RUNNER_TOOLS_PATH`: directories in tenv's layout holding tools baked into the runner image
    (`/opt/burrito-py/tools` in burrito-py-runner), searched before TENV_ROOT and never installed into: TENV_ROOT
    is an emptyDir in the runner pod, so nothing baked there would survive its mount."""
    env = os.environ if environ is None else environ
    return [Path(part) for part in env.get(TOOLS_PATH_ENV, "").split(os.pathsep) if part.strip()]


def _installed_candidates(kind: ToolKind) -> list[Candidate]:
    """The versions baked into the image and installed under TENV_ROOT, in that order (the first root holding a
    version wins): tenv's layout, `<root>/<Folder>/<version>/<binary>`."""
    found: list[Candidate] = []
    baked = preinstalled_roots()
    for root in [*baked, tenv_root()]:
        folder = root / TENV_FOLDER[kind]
        source = f"{TOOLS_PATH_ENV} {root}" if root in baked else f"TENV_ROOT {root}"
        try:
            versions = sorted(entry.name for entry in folder.iterdir() if entry.is_dir())
        except OSError:
            continue
        found += [Candidate(name, str(folder / name / BINARY[kind]), source) for name in versions]
    return found


def _places(kind: ToolKind, path_consulted: bool) -> list[str]:
    places = [f"{TOOLS_PATH_ENV} {root}" for root in preinstalled_roots()]
    places.append(f"TENV_ROOT {tenv_root()}")
    if path_consulted:
        places.append("PATH")
    return places


def _checked(candidate: Candidate) -> Path:
    binary = Path(candidate.binary)
    if not binary.is_file():
        raise ToolError(f"{binary.parent} holds no {binary.name} binary; reinstall it")
    return binary


def _tenv_installed(kind: ToolKind, constraint: Constraint) -> Path | None:
    """The latest version satisfying `constraint` among the baked tools and tenv's installs."""
    candidates = _installed_candidates(kind)
    best = pick_latest(constraint, [c.version for c in candidates])
    chosen = next((c for c in candidates if c.version == best), None)
    return _checked(chosen) if chosen is not None else None


def _listed(versions: list[str]) -> str:
    return ", ".join(versions[:5]) + (", …" if len(versions) > 5 else "") or "none"


def _mirror_refusal(mirror: ToolMirror, kind: ToolKind, constraint: Constraint) -> str:
    """After tenv failed to install from the mirror: the mirror's own reason for refusing the archive tenv
    asked for (tenv reports only what it made of the answer, e.g. a missing checksum), else ""."""
    try:
        with _mirror_client(mirror) as client:
            available = _mirror_versions(client, mirror, kind)
            version = pick_latest(constraint, available)
            if version is None:
                return f"no {kind} version satisfying it (it has {_listed(available)})"
            with client.stream("GET", f"{mirror.url}{kind}/{version}/linux/{mirror_arch()}") as response:
                if not response.is_error:
                    return ""
                response.read()
                return _error_detail(response) or f"{response.status_code} {response.reason_phrase}"
    except (ToolError, OSError) as exc:
        return str(exc)
    except Exception as exc:  # httpx's errors: a diagnosis only, never the failure itself
        return type(exc).__name__


def _tenv(tenv: str, kind: ToolKind, text: str | None, constraint: Constraint,
          mirror: ToolMirror | None = None) -> Path:
    installed = _tenv_installed(kind, constraint)
    if installed is not None:
        return installed
    args = [tenv, *tenv_install_args(kind, text, mirror is not None)[1:]]
    # TENV_ROOT as the runner reads it (under the local pod root where pods are local processes, §22), so tenv
    # installs where the runner then looks.
    env = {**os.environ, "TENV_ROOT": str(tenv_root()), **(tenv_mirror_env(mirror, kind) if mirror else {})}
    stop = stopping()
    if stop.requested:
        raise ToolError(f"not installing {BINARY[kind]} {text or TENV_LATEST}: {stop.signal_name} received")
    print(f"$ {' '.join(args)}", flush=True)
    try:
        # Its own process group, like the steps: a termination signal reaches it once, from the runner.
        process = stop.start(f"tenv {TENV_SUBCOMMAND[kind]} install", lambda: subprocess.Popen(
            args, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
            process_group=0, env=env,
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
        if mirror is not None and (said := _mirror_refusal(mirror, kind, constraint)):
            detail += f"; the tool mirror {mirror.url} says: {said}"
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
    if _installed_candidates(kind):
        # PATH is asked only when no installed version satisfies: with some at hand (a runner image's baked
        # tools) the answer is seldom needed, and a Go process started for nothing costs a busy node's CPU.
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


# -- the datastore's tool mirror ----------------------------------------------------------------
class ToolMirror(NamedTuple):
    """The datastore's tool binaries: `url` ends with a slash (`https://<datastore>:8443/tools/v1/`); `token`
    is the runner's datastore token, `ca_bundle` the CAs that verify the mirror (None: the system's)."""

    url: str
    token: str | None = None
    ca_bundle: Path | None = None


def mirror_arch(machine: str | None = None) -> str:
    import platform  # the mirror paths only, like zipfile: not on a plain attempt's start

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


def _error_detail(response: httpx.Response) -> str:
    """The `error` of a datastore error document (read before raising, even when streamed), else ""."""
    try:
        body = response.json()
    except (ValueError, UnicodeDecodeError):
        return ""
    except Exception:
        return ""
    error = body.get("error") if isinstance(body, dict) else None
    return " ".join(str(error).split())[:500] if error else ""


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
            detail = _error_detail(exc.response)
            if detail:  # the datastore's reason, e.g. an upstream archive whose checksum did not match
                problem += f": {detail}"
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
        import hashlib  # the tool mirror's downloads only

        digest = hashlib.sha256()
        with client.stream("GET", url) as response, dest.open("wb") as handle:
            if response.is_error:
                response.read()  # a small error document: its reason goes into the message
            response.raise_for_status()
            for chunk in response.iter_bytes(1024 * 1024):
                digest.update(chunk)
                handle.write(chunk)
            return digest.hexdigest(), response.headers.get(SHA256_HEADER, "").strip().lower()

    return _retried(f"cannot download {url}", get)


def _unzip_binary(archive: Path, name: str, dest: Path, what: str) -> None:
    """Only the member `name` at the archive's root, written to `dest`: no other path is ever created."""
    import zipfile

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


def install_from_mirror(mirror: ToolMirror, kind: ToolKind, text: str | None,
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
            raise NotOnMirror(f'no {kind} version satisfying "{text or "any"}" on the tool mirror {mirror.url} '
                              f"(it has {_listed(available)})")
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
            archive = staging / ("release" if kind == "terragrunt" else "release.zip")
            got, expected = _download(client, url, archive)
            if not expected:
                raise ToolError(f"{what}: the mirror sent no {SHA256_HEADER} header; not installed")
            if got != expected:
                raise ToolError(f"{what}: checksum did not match: the download's sha256 {got} is not the "
                                f"{SHA256_HEADER} {expected}; not installed")
            unpacked = staging / version
            unpacked.mkdir(mode=0o755)
            if kind == "terragrunt":  # released as the bare binary
                archive.rename(unpacked / BINARY[kind])
                (unpacked / BINARY[kind]).chmod(0o755)
            else:
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


def _path_candidate(kind: ToolKind) -> Candidate | None:
    binary = shutil.which(BINARY[kind])
    if binary is None:
        return None
    return Candidate(binary_version(binary, kind), binary, "PATH")


# -- together -----------------------------------------------------------------------------------
def _resolve_one(kind: ToolKind, request: VersionRequest, mirror: ToolMirror | None = None) -> tuple[str, str]:
    """Gather what is at hand, let `choose_binary` decide, carry it out."""
    try:
        constraint = request.constraint
    except VersionChoiceError as exc:
        raise ToolError(str(exc)) from None
    tenv = shutil.which("tenv")
    mirror_url = mirror.url if mirror is not None else None
    installed = _installed_candidates(kind)
    path_consulted = tenv is None  # tenv's `terraform` on PATH is its proxy, which would download
    looked_at = _places(kind, path_consulted)
    # PATH costs a `version` call: asked only when nothing installed satisfies the request.
    choice = choose_binary(kind, request, installed, None, looked_at=looked_at, mirror_url=mirror_url,
                           tenv=tenv is not None)
    if choice.use is None and path_consulted:
        choice = choose_binary(kind, request, installed, _path_candidate(kind), looked_at=looked_at,
                               mirror_url=mirror_url, tenv=tenv is not None)
    if choice.error is not None:
        raise ToolError(choice.error)
    if choice.use is not None:
        return str(_checked(choice.use)) if choice.use.source != "PATH" else choice.use.binary, choice.use.version
    if choice.installer == "tenv" and tenv is not None:
        try:
            installed_path = _tenv(tenv, kind, request.text, constraint, mirror)
        except ToolError as exc:
            raise ToolError(f"{exc}; wanted {request.describe()}; also looked in {'; '.join(looked_at)}") from None
        return str(installed_path), installed_path.parent.name
    assert choice.installer == "mirror" and mirror is not None
    try:
        binary, version = install_from_mirror(mirror, kind, request.text, constraint)
    except NotOnMirror as exc:
        raise ToolError(f"{exc}; wanted {request.describe()}; also looked in {'; '.join(looked_at)}") from None
    return str(binary), version


def _version_files(directory: Path) -> dict[str, str]:
    files: dict[str, str] = {}
    for name in VERSION_FILES.values():
        path = directory / name
        if path.is_file():
            try:
                files[name] = path.read_text(encoding="utf-8")
            except (OSError, UnicodeDecodeError) as exc:
                raise ToolError(f"cannot read {path.name}: {exc}") from None
    return files


def _parents(layer_dir: Path, source_root: Path | None) -> list[tuple[str, dict[str, str]]]:
    """Each directory above the layer's, nearest first, up to and including the repository root."""
    if source_root is None:
        return []
    root, current = source_root.resolve(), layer_dir.resolve()
    if current != root and root not in current.parents:
        return []
    found: list[tuple[str, dict[str, str]]] = []
    while current != root:
        current = current.parent
        found.append((current.relative_to(root).as_posix(), _version_files(current)))
    return found


def resolve_tool(effective: EffectiveTool, layer_dir: Path, mirror: ToolMirror | None = None,
                 source_root: Path | None = None) -> Tool:
    """The binary (and version) that runs the layer in `layer_dir` (inside the repository at `source_root`:
    version files are looked for up to it). Raises ToolError."""
    layer_files = _version_files(layer_dir)
    parents = _parents(layer_dir, source_root)
    kind = effective.kind
    try:
        # Parsing the code costs (python-hcl2): only when no earlier source decides, or a file says latest-allowed.
        own_file = layer_files.get(VERSION_FILES[kind])
        required = None
        if not effective.version and (own_file is None or "latest-allowed" in own_file):
            required = code_required_version(layer_dir, kind)
        request = request_version(kind, effective.version, f"spec.{kind}.version", layer_files, required, parents)
    except VersionChoiceError as exc:
        raise ToolError(str(exc)) from None
    binary, version = _resolve_one(kind, request, mirror)
    terragrunt = terragrunt_version = None
    if effective.terragrunt is not None:
        try:
            tg_request = request_version("terragrunt", effective.terragrunt.version, "spec.terragrunt.version",
                                         layer_files, None, parents)
        except VersionChoiceError as exc:
            raise ToolError(str(exc)) from None
        terragrunt, terragrunt_version = _resolve_one("terragrunt", tg_request, mirror)
    return Tool(kind, binary, version, terragrunt, terragrunt_version)


def tool_for(kind: Literal["terraform", "opentofu"], version: str | None, layer_dir: Path,
             mirror: ToolMirror | None = None) -> Tool:
    """`resolve_tool` without API objects (for tests and tools)."""
    from burrito_py.api.effective import EffectiveTool

    return resolve_tool(EffectiveTool(kind=kind, version=version, terragrunt=None), layer_dir, mirror)
