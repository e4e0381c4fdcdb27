"""Credentials bound to destinations (docs/architecture.md §8): the Secret that holds a repository's credentials
names, in its `allowedHosts` key, the hosts they may be sent to. Whoever edits a TerraformRepository (its `url`,
its `pullRequests.apiUrl`) or creates one naming the Secret cannot send them anywhere else: the key lives in the
Secret, which only those who may write the Secret control. Pure.

`allowedHosts` holds entries separated by commas, spaces or new lines:

- `github.com`: that host on any port, over https or ssh (the encrypted transports);
- `*.example.com`: any host below example.com (not example.com itself);
- `host:8443`, `[2001:db8::1]:8443`: that port only;
- `https://host`, `ssh://host`: that transport only; `http://host`: plain http too (unencrypted: a lab, a test).

A Secret with credentials and no `allowedHosts` sends them nowhere: the refusal names the key and the host to
add. Messages never contain a value of the Secret beyond the destination the repository itself names.
"""

from __future__ import annotations

import ipaddress
import re
from collections.abc import Mapping
from dataclasses import dataclass
from urllib.parse import urlsplit

from burrito_py.git.errors import CredentialsError
from burrito_py.git.urls import is_scp_like, scp_host

__all__ = ["KEY_ALLOWED_HOSTS", "Destination", "HostEntry", "HostNotAllowed", "check_destination", "destination_of",
           "parse_allowed_hosts"]

KEY_ALLOWED_HOSTS = "allowedHosts"
DEFAULT_PORTS = {"https": 443, "http": 80, "ssh": 22, "git": 9418}
_ENCRYPTED = frozenset({"https", "ssh"})
_SCHEMES = {"https": frozenset({"https"}), "http": frozenset({"http", "https"}), "ssh": frozenset({"ssh"})}
_ENTRY = re.compile(r"^(?:(?P<scheme>[a-z]+)://)?(?P<host>\[[0-9a-f:.%]+\]|[^:/\[\]]+)(?::(?P<port>[0-9]{1,5}))?/?$")
_NAME = re.compile(r"^(\*\.)?[a-z0-9_]([a-z0-9_-]*[a-z0-9_])?(\.[a-z0-9_]([a-z0-9_-]*[a-z0-9_])?)*$")


class HostNotAllowed(CredentialsError):
    """The Secret does not allow its credentials to go to the destination; nothing was sent."""

    def __init__(self, message: str, host: str) -> None:
        super().__init__(message)
        self.host = host


@dataclass(frozen=True, slots=True)
class Destination:
    """Where a URL sends what it sends: transport, host (lower case, no brackets) and port (explicit or default)."""

    scheme: str  # https | http | ssh | git
    host: str
    port: int
    explicit_port: bool = False

    def __str__(self) -> str:
        host = f"[{self.host}]" if ":" in self.host else self.host
        shown = f"{host}:{self.port}" if self.explicit_port else host
        return f"http://{shown}" if self.scheme == "http" else shown


@dataclass(frozen=True, slots=True)
class HostEntry:
    schemes: frozenset[str]
    host: str  # a name, an address, or `*.suffix`
    port: int | None

    def allows(self, destination: Destination) -> bool:
        if destination.scheme not in self.schemes or (self.port is not None and self.port != destination.port):
            return False
        if self.host.startswith("*."):
            return destination.host.endswith(self.host[1:]) and len(destination.host) > len(self.host) - 1
        return destination.host == self.host


def destination_of(url: str) -> Destination | None:
    """The destination of a repository or API URL; None for `file://` (nothing leaves the machine) or a URL
    naming no host."""
    url = url.strip()
    if is_scp_like(url):
        return Destination("ssh", _host(scp_host(url)), 22)
    parts = urlsplit(url)
    scheme = parts.scheme.lower()
    if scheme not in DEFAULT_PORTS or not parts.hostname:
        return None
    try:
        port = parts.port
    except ValueError:
        return None
    return Destination(scheme, _host(parts.hostname), port or DEFAULT_PORTS[scheme], port is not None)


def _host(host: str) -> str:
    return host.strip().lower().rstrip(".").removeprefix("[").removesuffix("]")


def parse_allowed_hosts(text: str, source: str) -> list[HostEntry]:
    """The entries of an `allowedHosts` value; CredentialsError naming the key and the entry's position (its text
    is a value of the Secret) when one is not a host."""
    entries = []
    for index, raw in enumerate(re.split(r"[\s,]+", text.strip()), start=1):
        if not raw:
            continue
        entry = _entry(raw.lower())
        if entry is None:
            raise CredentialsError(
                f'{source}: entry {index} of "{KEY_ALLOWED_HOSTS}" is not a host, *.suffix, host:port or '
                "https://, http://, ssh:// followed by one"
            )
        entries.append(entry)
    return entries


def _entry(raw: str) -> HostEntry | None:
    if raw.count(":") > 1 and "[" not in raw and "://" not in raw:
        raw = f"[{raw}]"  # a bare IPv6 address
    match = _ENTRY.match(raw)
    if match is None:
        return None
    scheme, host, port = match.group("scheme"), _host(match.group("host")), match.group("port")
    if scheme is not None and scheme not in _SCHEMES:
        return None
    try:
        ipaddress.ip_address(host.split("%", 1)[0])
    except ValueError:
        if not _NAME.match(host) or any(len(label) > 63 for label in host.split(".")):
            return None
    if port is not None and not 0 < int(port) < 65536:
        return None
    return HostEntry(_SCHEMES[scheme] if scheme else _ENCRYPTED, host, int(port) if port else None)


def check_destination(data: Mapping[str, str], source: str, url: str, field: str) -> None:
    """Raise HostNotAllowed unless the Secret (`data`, decoded) allows its credentials to go where `url` (the
    repository's `field`) sends them. `source` names the Secret (`Secret ns/name`) in messages."""
    destination = destination_of(url)
    if destination is None:
        return
    text = data.get(KEY_ALLOWED_HOSTS, "")
    suggestion = f'"http://{_suggested(destination)}"' if destination.scheme == "http" else \
        f'"{_suggested(destination)}"'
    if not text.strip():
        raise HostNotAllowed(
            f'{source} has no "{KEY_ALLOWED_HOSTS}" key, so its credentials go nowhere: add the hosts they may be '
            f"sent to ({field} sends them to {destination}: {suggestion})", destination.host)
    entries = parse_allowed_hosts(text, source)
    if any(entry.allows(destination) for entry in entries):
        return
    if destination.scheme == "http" and any(
            entry.allows(Destination("https", destination.host, destination.port)) for entry in entries):
        raise HostNotAllowed(
            f"{source} does not allow its credentials to go to {destination} ({field}) unencrypted: an "
            f'"{KEY_ALLOWED_HOSTS}" entry must say {suggestion} to allow plain http', destination.host)
    raise HostNotAllowed(
        f"{source} does not allow its credentials to go to {destination} ({field}): its \"{KEY_ALLOWED_HOSTS}\" "
        f"key has no entry for it (add {suggestion} if they should)", destination.host)


def _suggested(destination: Destination) -> str:
    return f"[{destination.host}]" if ":" in destination.host else destination.host
