"""The datastore's provider and tool mirrors, from the runner's side (docs/architecture.md §9, issue 16).

Environment (set by the run controller, docs/architecture.md §6.3):

- `BURRITO_PROVIDER_MIRROR_URL`: base URL of Terraform's Provider Network Mirror Protocol on the datastore
  (`https://<datastore>:8443/providers/v1/`); empty: providers are installed as the code says;
- `BURRITO_PROVIDER_MIRROR_FAIL_CLOSED`: `true` fails the attempt when that mirror is down, instead of
  installing providers directly;
- `BURRITO_TOOL_MIRROR_URL`: base URL of the datastore's terraform/tofu binaries (`runner/tools.py`);
- `BURRITO_MIRROR_CA_PEM`: the PEM of the CA that signs the datastore's HTTPS certificate.

Before `init`, with a provider mirror: the CA bundle (the pod's trusted CAs plus the mirror's CA) is written to
`$HOME` and given to every step as `SSL_CERT_FILE` (Go reads it on Linux), so terraform trusts the mirror and,
on fallback, the public registries; `GET <url>healthz` is probed (5 s, 2 tries); then a CLI configuration
(`$HOME/burrito-py.tfrc`, mode 0600, `TF_CLI_CONFIG_FILE`) holds a `network_mirror` block and a `credentials`
block for the mirror's `host:port` carrying the runner's datastore token (terraform 1.11.4 accepts a
credentials host with a port and sends `Authorization: Bearer` to the mirror's JSON routes; a
`TF_TOKEN_<host>` variable cannot name a port). When the probe fails, the attempt fails if failClosed, else
one line starting with `FALLBACK_PREFIX` is printed (the run controller counts them) and the configuration
has no `provider_installation`: terraform installs directly. No `TF_PLUGIN_CACHE_DIR`: pods share no
writable plugin cache.

Then, with the mirror in use and a lock file (`start_prefetch`, in a thread while the runner resolves its tool, then
`finish_prefetch` before `init`, within `PREFETCH_DEADLINE`): the locked providers' archives for the pod's
platform are fetched in parallel from the datastore's token route over `BURRITO_DATASTORE_URL` (the listener of
every other datastore call, with the runner's token; no signed URL) into a filesystem mirror in `$HOME`,
and the configuration lists it first, `include`-ing exactly those providers, which the `network_mirror`
`exclude`s. Terraform checks each against the lock file's hashes as it would a downloaded one. An archive whose
`h1:` the lock file lists is unpacked there as it arrives (`unpack`: the unpacked layout, which terraform links
into `.terraform` after checking the directory's h1, instead of unpacking the archive again in its own single
thread); one listed by its `zh:` only (a lock file written on another platform) stays packed, as terraform can
check only the archive against a `zh:`. No lock file,
`-upgrade` or `-plugin-dir` in the init arguments, terragrunt, a provider the mirror does not serve, an archive
none of whose hashes the lock file lists (a platform it lacks) or any failure of the prefetch: the configuration
stays as above (docs/architecture.md §10.5).
"""

from __future__ import annotations

import os
import re
import shutil
import ssl
import stat
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from types import MappingProxyType
from typing import TYPE_CHECKING, Any, NamedTuple
from urllib.parse import urlsplit

if TYPE_CHECKING:
    import zipfile

__all__ = [
    "CA_BUNDLE_NAME",
    "CLI_CONFIG_NAME",
    "FALLBACK_PREFIX",
    "LockedProvider",
    "MirrorConfig",
    "MirrorError",
    "MirrorSetup",
    "PendingPrefetch",
    "base_ca_file",
    "cli_config",
    "count_fallbacks",
    "credentials_host",
    "fallback_lines",
    "finish_prefetch",
    "locked_providers",
    "prefetch",
    "prefetch_candidates",
    "prepare",
    "probe",
    "ssl_context",
    "start_prefetch",
    "unpack",
    "write_ca_bundle",
]

PROVIDER_MIRROR_URL_ENV = "BURRITO_PROVIDER_MIRROR_URL"
PROVIDER_MIRROR_FAIL_CLOSED_ENV = "BURRITO_PROVIDER_MIRROR_FAIL_CLOSED"
TOOL_MIRROR_URL_ENV = "BURRITO_TOOL_MIRROR_URL"
MIRROR_CA_PEM_ENV = "BURRITO_MIRROR_CA_PEM"
PROVIDER_MIRROR_REGISTRIES_ENV = "BURRITO_PROVIDER_MIRROR_REGISTRIES"
# The run controller counts the lines that start so (controllers/run/reconcile.py): keep both sides on this constant.
FALLBACK_PREFIX = "burrito-py: provider mirror unavailable:"
CLI_CONFIG_NAME = "burrito-py.tfrc"
CA_BUNDLE_NAME = "burrito-py-ca-bundle.pem"
PROBE_TIMEOUT = 5.0
PROBE_TRIES = 2
PROBE_PAUSE = 1.0
_TRUE, _FALSE = ("true", "1", "yes", "on"), ("false", "0", "no", "off", "")
_PROVIDER_INSTALLATION = r"(?m)^\s*provider_installation\b"
PREFETCH_DIR_NAME = "burrito-py-providers"
PREFETCH_TIMEOUT = 60.0  # each request's
PREFETCH_DEADLINE = 120.0  # the whole prefetch's, from its start to the join before `init`
PREFETCH_THREADS = 8
LOCK_FILE = ".terraform.lock.hcl"
# Patterns as text, compiled by `re` (and cached there) on first use: a runner that reads no lock file never
# compiles them (~3 ms of every attempt's start-up).
# What a lock file's provider block may hold to be prefetched: these name a path in the prefetch directory, so
# nothing but DNS labels (an optional port), and a version as the registry protocol has them.
_LABEL = r"[a-z0-9](?:[a-z0-9-]*[a-z0-9])?"
_ADDRESS = rf"(?P<host>{_LABEL}(?:\.{_LABEL})*(?::[0-9]{{1,5}})?)/(?P<ns>{_LABEL})/(?P<type>[a-z0-9_-]+)"
_VERSION = r"[0-9]+\.[0-9]+\.[0-9]+(?:-[0-9A-Za-z.-]+)?"
_LOCK_BLOCK = r'(?ms)^provider\s+"(?P<address>[^"\n]*)"\s*\{(?P<body>.*?)^\}'
_LOCK_VERSION = r'(?m)^\s*version\s*=\s*"(?P<version>[^"\n]*)"\s*$'
_LOCK_HASHES = r"(?m)^\s*hashes\s*=\s*\[(?P<list>[^\]]*)\]"
_LOCK_HASH = r'"((?:h1|zh):[A-Za-z0-9+/=]+)"'
# A provider archive's member names `unpack` accepts: relative paths of plain names (terraform's own have one, the
# provider's executable, sometimes a licence or a changelog beside it).
_MEMBER = r"[A-Za-z0-9_][A-Za-z0-9_.+-]*(?:/[A-Za-z0-9_][A-Za-z0-9_.+-]*)*/?"
_UNPACK_BLOCK = 1024 * 1024


class MirrorError(Exception):
    """A mirror setting is unusable, or the provider mirror is down under failClosed; the message says which."""


def _base_url(text: str, name: str, schemes: tuple[str, ...]) -> str:
    url = text.strip()
    if not url:
        return ""
    parts = urlsplit(url)
    if parts.scheme not in schemes or not parts.hostname:
        raise MirrorError(f"{name}: {url!r} is not a {' or '.join(s + '://' for s in schemes)} URL")
    if parts.username or parts.password or parts.query or parts.fragment:
        raise MirrorError(f"{name}: {url!r} must hold no credentials, query or fragment")
    # Routes are appended to the base (`<base>healthz`); terraform wants the mirror URL to end in a slash.
    return url if url.endswith("/") else url + "/"


class MirrorConfig(NamedTuple):
    provider_url: str = ""
    fail_closed: bool = False
    tool_url: str = ""
    ca_pem: str = ""
    registries: tuple[str, ...] = ()  # what the mirror reads through; empty: everything

    @classmethod
    def from_environ(cls, environ: Mapping[str, str]) -> MirrorConfig:
        """Raises MirrorError naming the variable that is wrong."""
        flag = environ.get(PROVIDER_MIRROR_FAIL_CLOSED_ENV, "").strip().lower()
        if flag not in _TRUE + _FALSE:
            raise MirrorError(f"{PROVIDER_MIRROR_FAIL_CLOSED_ENV}: {flag!r} is not true or false")
        return cls(
            # Terraform speaks the network mirror protocol over https only.
            provider_url=_base_url(environ.get(PROVIDER_MIRROR_URL_ENV, ""), PROVIDER_MIRROR_URL_ENV, ("https",)),
            fail_closed=flag in _TRUE,
            tool_url=_base_url(environ.get(TOOL_MIRROR_URL_ENV, ""), TOOL_MIRROR_URL_ENV, ("https", "http")),
            ca_pem=environ.get(MIRROR_CA_PEM_ENV, "").strip(),
            registries=tuple(r.strip().lower() for r in environ.get(PROVIDER_MIRROR_REGISTRIES_ENV, "").split(",")
                             if r.strip()),
        )


# -- pure parts ---------------------------------------------------------------------------------
def credentials_host(url: str) -> str:
    """The host a `credentials` block is keyed by: `host` or `host:port` (the default https port dropped, as
    terraform's svchost normalises it), lower case."""
    parts = urlsplit(url)
    host = (parts.hostname or "").lower()
    if ":" in host:  # an IPv6 literal keeps its brackets
        host = f"[{host}]"
    port = parts.port
    if port is None or (parts.scheme == "https" and port == 443):
        return host
    return f"{host}:{port}"


def _hcl_string(text: str) -> str:
    """A quoted HCL string: JSON escapes plus HCL's own template escapes."""
    escaped = text.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n").replace("\r", "\\r")
    return '"' + escaped.replace("${", "$${").replace("%{", "%%{") + '"'


def cli_config(mirror_url: str | None, host: str, token: str | None, existing: str = "",
               registries: tuple[str, ...] = (), fail_closed: bool = False, prefetch_dir: str | None = None,
               prefetched: Sequence[str] = ()) -> str:
    """The CLI configuration: `existing` (the pod's own configuration, kept), a `network_mirror` for
    `mirror_url` (None: the mirror is down, terraform installs directly), the token for `host`. With
    `registries`, the mirror serves only their providers and the others are installed directly, unless
    `fail_closed` (an air-gapped site installs nothing from elsewhere). With `prefetched` (provider addresses)
    and `prefetch_dir`, those come from that filesystem mirror only and the network mirror is not asked for them
    (asked, terraform would list its versions too and lose the gain)."""
    parts = [existing.rstrip() + "\n"] if existing.strip() else []
    if mirror_url is not None:
        patterns = ", ".join(_hcl_string(f"{registry}/*/*") for registry in registries)
        block = ["provider_installation {"]
        addresses = ", ".join(_hcl_string(address) for address in prefetched)
        if prefetched and prefetch_dir is not None:
            block += ["  filesystem_mirror {", f"    path    = {_hcl_string(prefetch_dir)}",
                      f"    include = [{addresses}]", "  }"]
        block += ["  network_mirror {", f"    url = {_hcl_string(mirror_url)}"]
        if registries:
            block.append(f"    include = [{patterns}]")
        if prefetched and prefetch_dir is not None:
            block.append(f"    exclude = [{addresses}]")
        block.append("  }")
        if registries and not fail_closed:
            block += ["  direct {", f"    exclude = [{patterns}]", "  }"]
        parts.append("\n".join([*block, "}"]) + "\n")
    if token:
        parts.append(f"credentials {_hcl_string(host)} {{\n  token = {_hcl_string(token)}\n}}\n")
    return "\n".join(parts)


class LockedProvider(NamedTuple):
    address: str  # host/namespace/type, as the lock file names it
    version: str
    hashes: frozenset[str]  # h1: and zh: as listed

    @property
    def type(self) -> str:
        return self.address.rsplit("/", 1)[1]


def locked_providers(lock_text: str) -> tuple[LockedProvider, ...]:
    """The providers a lock file pins, with their hashes; a block that does not read as terraform writes it (an
    address or version this cannot name a path with, no hash) is left out, so stays on the network mirror."""
    found = []
    for block in re.finditer(_LOCK_BLOCK, lock_text):
        address, body = block["address"], block["body"]
        versions = re.findall(_LOCK_VERSION, body)
        hashes = re.search(_LOCK_HASHES, body)
        if not re.fullmatch(_ADDRESS, address) or len(versions) != 1 or not re.fullmatch(_VERSION, versions[0]):
            continue
        listed = frozenset(re.findall(_LOCK_HASH, hashes["list"])) if hashes else frozenset()
        if listed:
            found.append(LockedProvider(address, versions[0], listed))
    return tuple(found)


def _upgrades(extra_init_args: Sequence[str]) -> bool:
    """`-upgrade` (any spelling or value: erring towards the network mirror) or `-plugin-dir` (terraform then
    ignores provider_installation) in the init arguments."""
    return any(arg.lstrip("-").split("=", 1)[0] in ("upgrade", "plugin-dir") for arg in extra_init_args
               if arg.startswith("-"))


def prefetch_candidates(lock_text: str | None, extra_init_args: Sequence[str], registries: tuple[str, ...] = ()
                        ) -> tuple[LockedProvider, ...]:
    """The locked providers worth fetching before `init` (pure): none without a lock file or with `-upgrade`
    (terraform may then choose versions the lock does not pin), only those the mirror serves (`registries`)."""
    if lock_text is None or _upgrades(extra_init_args):
        return ()
    return tuple(p for p in locked_providers(lock_text)
                 if not registries or p.address.split("/", 1)[0] in registries)


def fallback_lines(log_text: str) -> list[str]:
    """The runner's fallback lines in a pod log (one per attempt that installed providers directly)."""
    return [line.rstrip("\r") for line in log_text.split("\n") if line.startswith(FALLBACK_PREFIX)]


def count_fallbacks(log_text: str) -> int:
    return len(fallback_lines(log_text))


# -- files --------------------------------------------------------------------------------------
def base_ca_file(environ: Mapping[str, str]) -> Path | None:
    """The CAs the pod trusts already: its own SSL_CERT_FILE, else certifi's bundle, else the system's."""
    own = environ.get("SSL_CERT_FILE", "").strip()
    if own:
        return Path(own)
    try:
        import certifi
    except ImportError:
        cafile = ssl.get_default_verify_paths().cafile
        return Path(cafile) if cafile else None
    return Path(certifi.where())


def _write(path: Path, text: str, mode: int) -> None:
    """Whole or not at all (temp file + rename), created with `mode` (never readable by others first)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    temp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    fd = os.open(temp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, mode)
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as handle:
            handle.write(text)
        os.replace(temp, path)
    except BaseException:
        temp.unlink(missing_ok=True)
        raise


def write_ca_bundle(dest: Path, ca_pem: str, base: Path | None) -> Path:
    """`base`'s certificates followed by `ca_pem`. Raises MirrorError when `ca_pem` holds no certificate or
    `base` cannot be read."""
    try:
        ssl.create_default_context(cadata=ca_pem)
    except (ssl.SSLError, ValueError) as exc:
        raise MirrorError(f"{MIRROR_CA_PEM_ENV} holds no usable PEM certificate: {exc}") from None
    try:
        system = base.read_text(encoding="utf-8") if base is not None else ""
    except (OSError, UnicodeDecodeError) as exc:
        raise MirrorError(f"cannot read the trusted CAs {base}: {exc}") from None
    _write(dest, f"{system.rstrip()}\n\n# burrito-py datastore mirror CA\n{ca_pem.strip()}\n".lstrip(), 0o644)
    return dest


def ssl_context(bundle: Path | None) -> ssl.SSLContext:
    return ssl.create_default_context(cafile=str(bundle) if bundle is not None else None)


def probe(url: str, context: ssl.SSLContext, timeout: float = PROBE_TIMEOUT, tries: int = PROBE_TRIES,
          pause: float = PROBE_PAUSE) -> str | None:
    """None when `GET <url>healthz` answers 200, else why not (the last try's reason, one line)."""
    import httpx

    reason = "not probed"
    for attempt in range(tries):
        if attempt:
            time.sleep(pause)
        try:
            response = httpx.get(url + "healthz", verify=context, timeout=timeout)
        except httpx.HTTPError as exc:
            reason = f"{type(exc).__name__}: {exc}" if str(exc) else type(exc).__name__
            continue
        if response.status_code == 200:
            return None
        reason = f"GET {url}healthz answered {response.status_code}"
    return " ".join(reason.split())


# -- the attempt --------------------------------------------------------------------------------
class MirrorSetup(NamedTuple):
    """What the mirrors need from the rest of the attempt."""

    env: Mapping[str, str] = MappingProxyType({})  # added to the terraform steps' environment
    ca_bundle: Path | None = None  # trusted CAs for the runner's own calls to the datastore's HTTPS listener
    provider_mirror: bool = False  # whether terraform installs providers through the mirror
    existing: str = ""  # the pod's own CLI configuration, carried into ours: it may hold credentials
    prefetched: tuple[str, ...] = ()  # providers terraform installs from the pod's filesystem mirror

    def __repr__(self) -> str:  # `existing` left out: a credentials block in it must not reach a log
        return (f"MirrorSetup(env={dict(self.env)!r}, ca_bundle={self.ca_bundle!r}, "
                f"provider_mirror={self.provider_mirror!r}, prefetched={self.prefetched!r})")


def _existing_cli_config(environ: Mapping[str, str], home: Path) -> tuple[Path | None, str]:
    """The CLI configuration the pod would have used (TF_CLI_CONFIG_FILE, else ~/.terraformrc): ours
    replaces it as TF_CLI_CONFIG_FILE, so its content is carried over."""
    named = environ.get("TF_CLI_CONFIG_FILE", "").strip()
    path = Path(named) if named else home / ".terraformrc"
    try:
        return path, path.read_text(encoding="utf-8")
    except FileNotFoundError:
        return None, ""
    except (OSError, UnicodeDecodeError) as exc:
        raise MirrorError(f"cannot read the CLI configuration {path}: {exc}") from None


def prepare(
    config: MirrorConfig,
    token: str | None,
    home: Path,
    environ: Mapping[str, str],
    say: Callable[[str], None] = print,
    check: Callable[[str, ssl.SSLContext], str | None] = probe,
) -> MirrorSetup:
    """Write the CA bundle and the CLI configuration for this attempt; raises MirrorError."""
    if not config.provider_url and not config.tool_url:
        return MirrorSetup()
    bundle = write_ca_bundle(home / CA_BUNDLE_NAME, config.ca_pem, base_ca_file(environ)) if config.ca_pem else None
    if not config.provider_url:
        return MirrorSetup(ca_bundle=bundle)
    url = config.provider_url
    env = {"SSL_CERT_FILE": str(bundle)} if bundle is not None else {}
    existing_path, existing = _existing_cli_config(environ, home)
    if re.search(_PROVIDER_INSTALLATION, existing):
        # Terraform allows one provider_installation block: the pod's own choice of sources stands.
        if config.fail_closed:
            raise MirrorError(f"provider mirror {url} cannot be used (failClosed): the CLI configuration "
                              f"{existing_path} has its own provider_installation block")
        say(f"burrito-py: the CLI configuration {existing_path} has its own provider_installation block; "
            f"the provider mirror {url} is not used")
        return MirrorSetup(env, bundle)
    reason = check(url, ssl_context(bundle))
    if reason is not None and config.fail_closed:
        raise MirrorError(f"provider mirror {url} is unavailable (failClosed): {reason}")
    if reason is not None:
        say(f"{FALLBACK_PREFIX} {url}: {reason}; terraform installs providers directly")
    target = home / CLI_CONFIG_NAME
    text = cli_config(None if reason else url, credentials_host(url), token, existing, config.registries,
                      config.fail_closed)
    _write(target, text, 0o600)  # it holds a token
    env["TF_CLI_CONFIG_FILE"] = str(target)
    if reason is None:
        say(f"burrito-py: providers from the mirror {url}")
    return MirrorSetup(env, bundle, provider_mirror=reason is None, existing=existing)


def prefetch(datastore_url: str, token: str | None, providers: Sequence[LockedProvider], platform: str,
             dest: Path, context: ssl.SSLContext | None = None, timeout: float = PREFETCH_TIMEOUT) -> str | None:
    """Fetch each provider's `platform` archive from the datastore's token route into `dest`, a packed filesystem
    mirror (`<host>/<ns>/<type>/terraform-provider-<type>_<version>_<platform>.zip`), in parallel. None when all
    are there, else why not (`dest` is then removed): a refusal, a transport failure, or an archive whose SHA-256
    (`zh:`) and `h1:` the lock file both lack."""
    from burrito_py.httpclient import Http, TransportError

    headers = {"Authorization": f"Bearer {token}"} if token else {}
    client = Http(datastore_url.rstrip("/"), headers, context, timeout)

    def fetch(provider: LockedProvider) -> str | None:
        target = dest / provider.address / f"terraform-provider-{provider.type}_{provider.version}_{platform}.zip"
        target.parent.mkdir(parents=True, exist_ok=True)
        path = f"/providers/v1/packages/{provider.address}/{provider.version}/{platform}"
        try:
            with target.open("wb") as sink:
                answer = client.request("GET", path, sink=sink)
        except TransportError as exc:
            return f"{provider.address} {provider.version}: {exc}"
        if answer.status != 200:
            return f"{provider.address} {provider.version}: {answer.status} {answer.reason}"
        h1 = answer.headers.get("X-Burrito-H1", "")
        if not {f"zh:{answer.headers.get('X-Burrito-Sha256', '')}", h1} & provider.hashes:
            return f"{provider.address} {provider.version}: the lock file lists no hash of its {platform} archive"
        if h1 in provider.hashes:  # terraform can check an unpacked package against the lock file's h1: only
            unpack(target, dest / provider.address / provider.version / platform)
        return None

    # Here, not at the top: a runner that prefetches nothing starts without it (and the logging it imports).
    from concurrent.futures import ThreadPoolExecutor

    try:
        with ThreadPoolExecutor(min(len(providers), PREFETCH_THREADS)) as pool:
            reasons = [reason for reason in pool.map(fetch, providers) if reason]
    except OSError as exc:
        reasons = [f"cannot write in {dest}: {exc}"]
    finally:
        client.close()
    if reasons:
        shutil.rmtree(dest, ignore_errors=True)
        return reasons[0]
    return None


def _member_name(info: zipfile.ZipInfo) -> bool:
    """A member `unpack` writes: a regular file or a directory (no link, device or pipe) named by plain relative
    path segments (no `..`, no absolute path, nothing a shell or another platform reads otherwise)."""
    kind = stat.S_IFMT(info.external_attr >> 16)
    return kind in (0, stat.S_IFREG, stat.S_IFDIR) and bool(re.fullmatch(_MEMBER, info.filename)) and not any(
        part in (".", "..") for part in info.filename.rstrip("/").split("/"))


def unpack(archive: Path, into: Path) -> bool:
    """The packed archive at `archive` unpacked into `into` (the filesystem mirror's unpacked layout,
    `<host>/<ns>/<type>/<version>/<platform>/`), then removed; True when done. Terraform then links the provider
    from there instead of unpacking it again, after checking the directory against the lock file's h1 as it would
    the archive. Anything unexpected (a member that is not a plain file or directory, a bad archive, a failed
    write) leaves the packed archive as it was and `into` absent: terraform unpacks it, or refuses it, itself."""
    import zipfile  # here: a runner that prefetches nothing starts without it (and bz2, lzma)

    try:
        with zipfile.ZipFile(archive) as zipped:
            members = zipped.infolist()
            if not members or not all(_member_name(info) for info in members):
                return False
            into.mkdir(parents=True)
            for info in members:
                target = into.joinpath(*info.filename.rstrip("/").split("/"))
                if info.is_dir():
                    target.mkdir(parents=True, exist_ok=True)
                    continue
                target.parent.mkdir(parents=True, exist_ok=True)
                # "x": a second member of the same name fails rather than overwrite the first.
                with zipped.open(info) as source, target.open("xb") as sink:
                    shutil.copyfileobj(source, sink, _UNPACK_BLOCK)
                # As terraform's own unpacking keeps it: the provider's executable bit.
                target.chmod(0o755 if (info.external_attr >> 16) & 0o111 else 0o644)
    except (OSError, zipfile.BadZipFile, zipfile.LargeZipFile, EOFError, ValueError):
        shutil.rmtree(into, ignore_errors=True)
        return False
    archive.unlink()
    return True


class PendingPrefetch:
    """A prefetch running in a daemon thread while the runner does its other work before `init` (resolving and
    perhaps downloading its tool): `wait` joins it. A thread still running past the deadline is left behind (it
    only writes in its own directory, which no configuration names then) rather than delay the run."""

    def __init__(self, fetch: Callable[[], str | None], providers: Sequence[LockedProvider]) -> None:
        self.started = time.monotonic()
        self.providers = tuple(providers)
        self._reason: str | None = "did not finish"
        self._thread = threading.Thread(target=self._run, args=(fetch,), name="burrito-py-prefetch", daemon=True)
        self._thread.start()

    def _run(self, fetch: Callable[[], str | None]) -> None:
        try:
            self._reason = fetch()
        except Exception as exc:  # a bug or an OSError must not take the run down: the network mirror remains
            self._reason = f"{type(exc).__name__}: {exc}"

    def wait(self, deadline: float) -> str | None:
        """None when every archive is in place, else why not."""
        self._thread.join(max(0.0, self.started + deadline - time.monotonic()))
        if self._thread.is_alive():
            return f"not done after {deadline:.0f} s"
        return self._reason


def start_prefetch(
    config: MirrorConfig,
    setup: MirrorSetup,
    token: str | None,
    datastore_url: str,
    providers: Sequence[LockedProvider],
    platform: str,
    home: Path,
    fetch: Callable[..., str | None] = prefetch,
) -> PendingPrefetch | None:
    """With the provider mirror in use and `providers` (`prefetch_candidates`): their archives being fetched into
    `$HOME`; None when there is nothing to do."""
    if not setup.provider_mirror or not providers or not config.provider_url:
        return None
    dest = home / PREFETCH_DIR_NAME
    shutil.rmtree(dest, ignore_errors=True)  # an earlier attempt's, in a pod that is reused by hand
    return PendingPrefetch(lambda: fetch(datastore_url, token, providers, platform, dest), providers)


def finish_prefetch(
    pending: PendingPrefetch | None,
    config: MirrorConfig,
    setup: MirrorSetup,
    token: str | None,
    home: Path,
    say: Callable[[str], None] = print,
    deadline: float = PREFETCH_DEADLINE,
) -> MirrorSetup:
    """After `start_prefetch`: the CLI configuration written again to install its providers from the filesystem
    mirror. Anything short of all of them: one line saying why, and `setup` unchanged (the network mirror)."""
    if pending is None or not config.provider_url:
        return setup
    reason = pending.wait(deadline)
    addresses = tuple(sorted(p.address for p in pending.providers))
    if reason is None:
        url = config.provider_url
        text = cli_config(url, credentials_host(url), token, setup.existing, config.registries, config.fail_closed,
                          str(home / PREFETCH_DIR_NAME), addresses)
        try:
            _write(home / CLI_CONFIG_NAME, text, 0o600)
        except OSError as exc:  # written whole or not at all (`_write`): the network mirror's stands
            reason = f"cannot write {home / CLI_CONFIG_NAME}: {exc}"
    if reason is not None:
        say(f"burrito-py: locked providers not prefetched ({reason}); terraform installs them from the mirror")
        return setup
    say(f"burrito-py: {len(addresses)} locked provider(s) prefetched from the datastore in "
        f"{time.monotonic() - pending.started:.2f} s")
    return MirrorSetup(setup.env, setup.ca_bundle, True, setup.existing, addresses)


# -- why terraform could not install a provider through the mirror -------------------------------------
# terraform/tofu print `Error while installing <address> v<version>:` then `<host>: bad response code: 502` for an
# archive the mirror refused: the datastore's reason (say, a checksum that did not match) is in the body it
# never shows. The runner asks the mirror again and prints that reason.
_INSTALL_FAILED = (r"Error while installing (?P<address>[A-Za-z0-9.:-]+/[A-Za-z0-9_-]+/[A-Za-z0-9_-]+) "
                   r"v(?P<version>[0-9][0-9A-Za-z.+-]*):")
EXPLAIN_TIMEOUT = 30.0


def failed_installs(lines: Sequence[str]) -> list[tuple[str, str]]:
    """(address, version) of each provider terraform failed to install, in order, once each (pure)."""
    found: list[tuple[str, str]] = []
    for line in lines:
        match = re.search(_INSTALL_FAILED, line)
        if match is not None and (match["address"], match["version"]) not in found:
            found.append((match["address"], match["version"]))
    return found


def mirror_refusal(mirror_url: str, token: str | None, ca_bundle: Path | None, address: str, version: str,
                   platform: str) -> str | None:
    """The mirror's reason for refusing `address` `version` on `platform` (its error document for the version
    document or the archive), or None when it serves both now or cannot be asked."""
    import httpx

    headers = {"Authorization": f"Bearer {token}"} if token else {}
    document_url = f"{mirror_url}{address}/{version}.json"
    try:
        with httpx.Client(verify=ssl_context(ca_bundle), timeout=EXPLAIN_TIMEOUT) as client:
            document = client.get(document_url, headers=headers)
            if document.is_error:
                return _error_of(document)
            archive = ((document.json().get("archives") or {}).get(platform) or {}).get("url")
            if not archive:
                return f"the mirror lists no {platform} archive"
            # Archive URLs are signed and relative to the version document; terraform sends them no token.
            answer = client.get(str(httpx.URL(document_url).join(archive)))
            return _error_of(answer) if answer.is_error else None
    except (httpx.HTTPError, ValueError, AttributeError):
        return None


def _error_of(response: Any) -> str:
    try:
        error = response.json().get("error")
    except (ValueError, AttributeError):
        error = None
    text = " ".join(str(error).split())[:500] if error else ""
    return f"{response.status_code} {response.reason_phrase}" + (f": {text}" if text else "")
