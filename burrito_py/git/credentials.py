"""Git credentials from a repository's Secret, and the environment that hands them to one `git fetch`.

Keys of the Secret named in `spec.repository.secretName` (docs/architecture.md §8):

- HTTPS: `username` + `password`, or `token`. A token is sent as HTTP basic auth with the user name
  `x-access-token` (what GitHub documents for app and fine-grained tokens; GitLab, Gitea/Forgejo and
  Bitbucket accept any non-empty user name with a token). A Secret holding both `username` and `token`
  sends that user name with the token.
- SSH (`ssh://` and scp-style URLs): `sshPrivateKey` (unencrypted, OpenSSH or PEM) and optionally
  `knownHosts` (lines in `known_hosts` format). Host keys are always verified
  (`StrictHostKeyChecking=yes`): with `knownHosts` only those lines are trusted; without it, the
  controller's own known-hosts files (`~/.ssh/known_hosts`, `/etc/ssh/ssh_known_hosts`).
- A Secret with none of these keys (say only `webhookSecret`) means anonymous access. A Secret with some of
  them but not a usable set for the URL's transport is an error naming the Secret and the missing key.
- `allowedHosts`: the hosts the credentials may be sent to (git/allowed_hosts.py); without it they are sent
  nowhere (HostNotAllowed).
- `file://` and `git://` URLs take no credentials; any in the Secret are ignored.

How secrets reach git: never on a command line (world-readable in /proc), never in a URL or the mirror's
config. HTTPS uses a credential helper given through `GIT_CONFIG_COUNT`/`GIT_CONFIG_KEY_n` environment
variables (a shell function printing two environment variables), after an empty `credential.helper` that
drops any helper of the machine's config, so nothing is ever stored by a helper and no executable file is
written (temp directories may be `noexec` in pods); the helper is configured for the URL's origin only, so git
never hands the credentials to another host (a redirect, were one followed). SSH uses `GIT_SSH_COMMAND` with the
key and the known hosts written 0600 in a private (0700) temporary directory that is removed when the fetch ends. Every
message derived from git's stderr goes through `scrub`, which removes the secret values themselves.
"""

from __future__ import annotations

import base64
import binascii
import contextlib
import os
import shlex
import shutil
import tempfile
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

from burrito_py.git.allowed_hosts import check_destination
from burrito_py.git.errors import CredentialsError as CredentialsError  # raised here, caught by callers
from burrito_py.git.pinning import Pin
from burrito_py.git.urls import is_scp_like, redact

TOKEN_USERNAME = "x-access-token"  # noqa: S105 - a user name, not a secret
KEY_USERNAME = "username"
KEY_PASSWORD = "password"  # noqa: S105 - the name of a Secret key
KEY_TOKEN = "token"  # noqa: S105 - the name of a Secret key
KEY_SSH_PRIVATE_KEY = "sshPrivateKey"
KEY_KNOWN_HOSTS = "knownHosts"
GIT_CREDENTIAL_KEYS = (KEY_USERNAME, KEY_PASSWORD, KEY_TOKEN, KEY_SSH_PRIVATE_KEY, KEY_KNOWN_HOSTS)

# Environment variables the credential helper reads; they exist only in the fetching git's environment.
_ENV_USERNAME = "BURRITO_PY_GIT_USERNAME"
_ENV_PASSWORD = "BURRITO_PY_GIT_PASSWORD"  # noqa: S105 - a variable name
# Answers `get` only: `store` and `erase` must do nothing. Values are printed with printf, never expanded.
_HELPER = (
    '!f() { test "$1" = get || return 0; '
    f'printf "username=%s\\npassword=%s\\n" "${_ENV_USERNAME}" "${_ENV_PASSWORD}"; }}; f'
)


@dataclass(frozen=True)
class HttpsCredentials:
    """HTTP basic auth: a user name and a password or token."""

    username: str
    password: str = field(repr=False)
    source: str = ""  # e.g. `Secret default/git`, for messages
    kind: str = "username/password"  # or `token`, for messages

    def secret_values(self) -> tuple[str, ...]:
        return (self.password,)



@dataclass(frozen=True)
class SshCredentials:
    """An SSH private key, and the known-hosts lines that say which host keys to trust (None: ssh's own)."""

    private_key: str = field(repr=False)
    known_hosts: str | None = None
    source: str = ""
    kind: str = "ssh key"

    def secret_values(self) -> tuple[str, ...]:
        # ssh never prints key material, but a line of it must not survive if something ever did.
        lines = (line.strip() for line in self.private_key.splitlines())
        return tuple(line for line in lines if len(line) >= 16 and not line.startswith("-----"))

    @contextlib.contextmanager
    def ssh_options(self) -> Iterator[list[str]]:
        """`ssh` options naming the key and the known hosts, written 0600 in a private directory that is removed
        when the context ends."""
        directory = Path(tempfile.mkdtemp(prefix="burrito-py-ssh-"))  # mode 0700
        try:
            key = directory / "id"
            _write_private(key, _normalize_key(self.private_key))
            options = ["-i", str(key)]
            if self.known_hosts is not None:
                known_hosts = directory / "known_hosts"
                _write_private(known_hosts, self.known_hosts.replace("\r\n", "\n").rstrip("\n") + "\n")
                options += ["-o", f"UserKnownHostsFile={known_hosts}", "-o", "GlobalKnownHostsFile=/dev/null"]
            yield options
        finally:
            shutil.rmtree(directory, ignore_errors=True)


GitCredentials = HttpsCredentials | SshCredentials


# Every ssh git runs for a fetch: the machine's ssh config must not add keys, agents, proxies or host-key policies;
# never prompt; host keys always verified.
_SSH_BASE = ("ssh", "-F", "/dev/null", "-o", "IdentitiesOnly=yes", "-o", "IdentityAgent=none", "-o", "BatchMode=yes",
             "-o", "StrictHostKeyChecking=yes", "-o", "ConnectTimeout=30")


@contextlib.contextmanager
def git_environment(credentials: GitCredentials | None, pin: Pin) -> Iterator[dict[str, str]]:
    """The environment of one `git fetch`: the credentials (if any) and the pin (git/pinning.py).

    The machine's credential helpers are dropped (an empty `credential.helper` first), so none answers for a
    tenant's URL; ours is configured for the URL's origin only (`credential.<scheme>://<host>:<port>.helper`), so
    git never asks it for another host. Git config travels as `GIT_CONFIG_COUNT`/`GIT_CONFIG_KEY_n` variables."""
    config: list[tuple[str, str]] = [("credential.helper", ""), *pin.config]
    env: dict[str, str] = {}
    if pin.transport != "other":
        env.update({"NO_PROXY": "*", "no_proxy": "*"})  # a proxy would connect where the guard never looked
    with contextlib.ExitStack() as stack:
        if isinstance(credentials, HttpsCredentials) and pin.transport == "https":
            config.append((f"credential.{pin.origin}.helper", _HELPER))
            env.update({_ENV_USERNAME: credentials.username, _ENV_PASSWORD: credentials.password})
        if pin.transport == "ssh":
            options = list(_SSH_BASE)
            if isinstance(credentials, SshCredentials):
                options += stack.enter_context(credentials.ssh_options())
            options += pin.ssh_options
            env.update({"GIT_SSH_COMMAND": shlex.join(options), "GIT_SSH_VARIANT": "ssh"})
        env["GIT_CONFIG_COUNT"] = str(len(config))
        for index, (key, value) in enumerate(config):
            env[f"GIT_CONFIG_KEY_{index}"], env[f"GIT_CONFIG_VALUE_{index}"] = key, value
        yield env


def transport(url: str) -> str:
    """`https` (http and https), `ssh` (ssh:// and scp-style) or `other` (file, git): what credentials fit."""
    if is_scp_like(url):
        return "ssh"
    scheme = urlsplit(url).scheme.lower()
    if scheme in ("http", "https"):
        return "https"
    if scheme == "ssh":
        return "ssh"
    return "other"


def decode_secret_data(secret: Mapping[str, Any], source: str) -> dict[str, str]:
    """A Secret's `data` (base64) merged with any `stringData`, as text. Errors name the key only."""
    result: dict[str, str] = {}
    for key, value in (secret.get("data") or {}).items():
        try:
            result[key] = base64.b64decode(str(value), validate=True).decode("utf-8")
        except (binascii.Error, UnicodeDecodeError):
            raise CredentialsError(f'{source}: key "{key}" is not base64-encoded UTF-8 text') from None
    for key, value in (secret.get("stringData") or {}).items():
        result[key] = str(value)
    return result


def credentials_from_secret(secret: Mapping[str, Any], url: str) -> GitCredentials | None:
    """The credentials `secret` (a v1 Secret body) gives for fetching `url`; None for anonymous access."""
    meta = secret.get("metadata") or {}
    source = f"Secret {meta.get('namespace', '')}/{meta.get('name', '')}"
    data = decode_secret_data(secret, source)
    return credentials_from_data(data, url, source)


def credentials_from_data(data: Mapping[str, str], url: str, source: str) -> GitCredentials | None:
    """Like `credentials_from_secret`, from decoded key/values. `source` names the Secret in messages.

    HostNotAllowed (a CredentialsError) when the Secret's `allowedHosts` does not name the URL's host: the
    credentials are then never handed to git (git/allowed_hosts.py)."""
    present = [key for key in GIT_CREDENTIAL_KEYS if data.get(key, "").strip()]
    kind = transport(url)
    if not present or kind == "other":
        return None
    credentials: GitCredentials = _https(data, source, present) if kind == "https" else _ssh(data, source, present)
    check_destination(data, source, url, "spec.repository.url")
    return credentials


def _https(data: Mapping[str, str], source: str, present: list[str]) -> HttpsCredentials:
    username = _value(data, KEY_USERNAME, source)
    token = _value(data, KEY_TOKEN, source)
    password = _value(data, KEY_PASSWORD, source)
    if token:
        return HttpsCredentials(username or TOKEN_USERNAME, token, source, "token")
    if username and password:
        return HttpsCredentials(username, password, source, "username/password")
    if username:
        raise CredentialsError(f'{source} has "{KEY_USERNAME}" but no "{KEY_PASSWORD}" for an HTTPS repository')
    if password:
        raise CredentialsError(f'{source} has "{KEY_PASSWORD}" but no "{KEY_USERNAME}" for an HTTPS repository')
    raise CredentialsError(
        f'{source} has no "{KEY_TOKEN}" or "{KEY_USERNAME}"/"{KEY_PASSWORD}" for an HTTPS repository '
        f"(it has {', '.join(present)})"
    )


def _ssh(data: Mapping[str, str], source: str, present: list[str]) -> SshCredentials:
    key = data.get(KEY_SSH_PRIVATE_KEY, "")
    if not key.strip():
        raise CredentialsError(
            f'{source} has no "{KEY_SSH_PRIVATE_KEY}" for an SSH repository (it has {", ".join(present)})'
        )
    if "PRIVATE KEY-----" not in key:
        raise CredentialsError(f'{source}: "{KEY_SSH_PRIVATE_KEY}" is not a PEM or OpenSSH private key')
    known_hosts = data.get(KEY_KNOWN_HOSTS)
    return SshCredentials(key, known_hosts if known_hosts and known_hosts.strip() else None, source)


def _value(data: Mapping[str, str], key: str, source: str) -> str:
    # `kubectl create secret --from-file` keeps the file's final newline: it is never part of a password.
    value = data.get(key, "").rstrip("\r\n")
    if "\n" in value or "\r" in value or "\x00" in value:
        raise CredentialsError(f'{source}: "{key}" contains a line break or NUL character')
    return value


def scrub(text: str, credentials: GitCredentials | None) -> str:
    """`text` without URL userinfo and without any secret value of `credentials`."""
    text = redact(text)
    if credentials is not None:
        for value in sorted(credentials.secret_values(), key=len, reverse=True):
            if value:
                text = text.replace(value, "***")
    return text


def _normalize_key(key: str) -> str:
    # OpenSSH refuses a key without its final newline or with CRLF line ends ("invalid format").
    return key.replace("\r\n", "\n").strip() + "\n"


def _write_private(path: Path, content: str) -> None:
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    with os.fdopen(fd, "w") as handle:
        handle.write(content)
