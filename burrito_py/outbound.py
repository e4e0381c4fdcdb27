"""The outbound address guard (docs/architecture.md §8, "Outbound calls"): calls the controllers make on behalf of
tenants — git fetches of repository URLs, pull request provider APIs, notifier deliveries — never reach loopback,
link-local (cloud metadata at 169.254.169.254 included), private or cluster-internal addresses unless the operator
allows them (`outbound_allowed_networks`, `outbound_allowed_hosts`).

- `OutboundPolicy` decides, purely, about one name (`name_problem`) or one address (`address_problem`).
- `resolve_checked` resolves a host once and checks every address it resolves to; callers connect to those
  addresses and nothing else, so a name that resolves elsewhere the second time (DNS rebinding) cannot move the
  connection: httpx through `GuardedTransport`/`AsyncGuardedTransport` (an httpcore network backend: TLS still
  verifies the certificate against the name), git by pinning (git/mirror.py).
- A refusal is `OutboundRefused`: its message names the host, what kind of address it is and the settings that
  would allow it. It never says whether anything listens there: nothing is ever sent to a refused address.

A proxy would resolve names itself, out of the guard's reach, so these calls never use one (`HTTP(S)_PROXY` is
ignored for them).
"""

from __future__ import annotations

import functools
import ipaddress
import re
import socket
import ssl
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from typing import Annotated, Any

import anyio.to_thread
import httpcore
import httpx
from pydantic import StringConstraints

__all__ = [
    "LOOPBACK_NETWORKS",
    "SETTINGS_HINT",
    "AsyncGuardedTransport",
    "GuardedTransport",
    "OutboundPolicy",
    "OutboundRefused",
    "Unresolvable",
    "resolve_checked",
]

# The shapes of the two allow-list settings' entries (the chart's schema checks them; `OutboundPolicy.of` fully).
NetworkEntry = Annotated[str, StringConstraints(strip_whitespace=True, pattern=r"^[0-9A-Fa-f:.]+(/[0-9]{1,3})?$")]
HostEntry = Annotated[str, StringConstraints(strip_whitespace=True, pattern=r"^(\*\.)?[A-Za-z0-9_.-]+$")]

IPAddress = ipaddress.IPv4Address | ipaddress.IPv6Address
IPNetwork = ipaddress.IPv4Network | ipaddress.IPv6Network
Resolver = Callable[[str, int], list[str]]

# What `burrito-py dev` and the test harnesses allow, explicitly: their git servers, fake providers and webhook
# receivers listen on loopback. Never a default.
LOOPBACK_NETWORKS = ("127.0.0.0/8", "::1/128")

SETTINGS_HINT = (
    "the controllers' outboundAllowedNetworks or outboundAllowedHosts setting (BURRITO_PY_OUTBOUND_ALLOWED_NETWORKS, "
    "BURRITO_PY_OUTBOUND_ALLOWED_HOSTS) can allow it"
)

# Names that are internal by nature (RFC 6761 localhost, mDNS, cluster DNS, GCP's metadata.google.internal and the
# `.internal` TLD reserved for private use).
_INTERNAL_SUFFIXES = (".localhost", ".local", ".internal", ".svc", ".cluster.local")
# What a host name may be made of once lower-cased: git and curl percent-decode a URL's host and convert a
# non-ASCII one (IDNA 2008) themselves, so such a host would not be the name checked and pinned here.
_PLAIN_NAME = re.compile(r"^[a-z0-9_.-]+$")
_NAT64 = ipaddress.IPv6Network("64:ff9b::/96")
_IPV4_COMPATIBLE = ipaddress.IPv6Network("::/96")
# What each kind of non-public address is called in a refusal, most specific first.
_KINDS: tuple[tuple[str, tuple[str, ...]], ...] = (
    ("an unspecified address", ("0.0.0.0/8", "::/128")),
    ("a loopback address", ("127.0.0.0/8", "::1/128")),
    ("a link-local address (cloud metadata services live there)", ("169.254.0.0/16", "fe80::/10")),
    ("a private address", ("10.0.0.0/8", "172.16.0.0/12", "192.168.0.0/16", "fc00::/7", "fec0::/10")),
    ("a shared (carrier-grade NAT) address", ("100.64.0.0/10",)),
    ("a multicast address", ("224.0.0.0/4", "ff00::/8")),
)
_KIND_NETWORKS = tuple((kind, tuple(ipaddress.ip_network(n) for n in networks)) for kind, networks in _KINDS)


class OutboundRefused(Exception):
    """The guard refused a destination; nothing was sent to it. The message names the host and the settings."""

    def __init__(self, host: str, why: str) -> None:
        super().__init__(f"{host} is refused by the outbound address guard: {why}; {SETTINGS_HINT}")
        self.host = host


class Unresolvable(Exception):
    """The host's name does not resolve (nothing was sent anywhere)."""

    def __init__(self, host: str) -> None:
        super().__init__(f"could not connect to {host}: its name does not resolve")
        self.host = host


def parse_network(text: str) -> IPNetwork:
    """A CIDR (`10.0.0.0/8`) or a single address (`127.0.0.1`), as a network; ValueError naming it otherwise."""
    try:
        return ipaddress.ip_network(text.strip(), strict=False)
    except ValueError:
        raise ValueError(f"{text!r} is not a CIDR network or an IP address") from None


def host_pattern_problem(pattern: str) -> str | None:
    """Why `pattern` is not a host name or a `*.suffix` pattern, else None."""
    name = pattern.strip().lower().rstrip(".")
    bare = name[2:] if name.startswith("*.") else name
    labels = bare.split(".")
    if not bare or any(not label or len(label) > 63 for label in labels) or any(
            not all(c.isalnum() or c in "-_" for c in label) for label in labels):
        return f"{pattern!r} is not a host name or a *.suffix pattern"
    return None


def _matches(host: str, patterns: Iterable[str]) -> bool:
    for pattern in patterns:
        if pattern.startswith("*."):
            if host.endswith(pattern[1:]) and len(host) > len(pattern) - 1:
                return True
        elif host == pattern:
            return True
    return False


def unwrap(address: IPAddress) -> IPAddress:
    """The IPv4 address an IPv6 one carries (IPv4-mapped, NAT64, 6to4, Teredo, IPv4-compatible), else itself:
    `::ffff:127.0.0.1` is loopback whatever its spelling."""
    if isinstance(address, ipaddress.IPv6Address):
        if address.ipv4_mapped is not None:
            return address.ipv4_mapped
        if address in _NAT64 or (address in _IPV4_COMPATIBLE and int(address) > 1):
            return ipaddress.IPv4Address(address.packed[-4:])
        if address.sixtofour is not None:
            return address.sixtofour
        if address.teredo is not None:
            return address.teredo[1]
    return address


def _kind(address: IPAddress) -> str | None:
    """What kind of non-public address this is; None for a public (globally reachable unicast) one."""
    inner = unwrap(address)
    for kind, networks in _KIND_NETWORKS:
        if any(inner.version == n.version and inner in n for n in networks):
            return kind
    if not inner.is_global or inner.is_multicast or inner.is_reserved:
        return "a reserved or non-public address"
    return None


@dataclass(frozen=True)
class OutboundPolicy:
    """What tenants' outbound calls may reach besides public addresses. The default allows nothing internal."""

    allowed_networks: tuple[IPNetwork, ...] = ()
    allowed_hosts: tuple[str, ...] = ()  # lower-case names, or `*.suffix`

    @classmethod
    def of(cls, networks: Iterable[str] = (), hosts: Iterable[str] = ()) -> OutboundPolicy:
        """From setting values (CIDRs and host names); ValueError naming a bad entry."""
        patterns = []
        for host in hosts:
            problem = host_pattern_problem(host)
            if problem:
                raise ValueError(problem)
            patterns.append(host.strip().lower().rstrip("."))
        return cls(tuple(parse_network(n) for n in networks), tuple(patterns))

    def host_allowed(self, host: str) -> bool:
        return _matches(_normal(host), self.allowed_hosts)

    def _in_allowed_networks(self, address: IPAddress) -> bool:
        inner = unwrap(address)
        return any(a.version == n.version and a in n for a in {address, inner} for n in self.allowed_networks)

    def address_problem(self, address: IPAddress) -> str | None:
        """Why the guard refuses to connect to `address` (`it is a loopback address`), else None."""
        kind = _kind(address)
        if kind is None or self._in_allowed_networks(address):
            return None
        return f"{address} is {kind}" if unwrap(address) == address else f"{address} is {kind} ({unwrap(address)})"

    def name_problem(self, host: str) -> str | None:
        """Why `host` is internal by its name alone (`localhost`, `*.svc.cluster.local`, a single label the
        cluster's search path would complete), else None. Such a name is still allowed when every address it
        resolves to is in an allowed network (`check`)."""
        name = _normal(host)
        if _literal(name) is not None:
            return None
        if name == "localhost" or name.endswith(_INTERNAL_SUFFIXES):
            return "it is a cluster-internal or local name"
        if "." not in name:
            return "it is a single-label name (the cluster's DNS search path would complete it)"
        return None

    def check(self, host: str, addresses: Sequence[str]) -> None:
        """Raise OutboundRefused unless `host`, resolved to `addresses`, may be reached. Pure."""
        if self.host_allowed(host):
            return
        parsed = [ipaddress.ip_address(a.split("%", 1)[0]) for a in addresses]
        by_name = self.name_problem(host)
        if by_name is not None and not (parsed and all(self._in_allowed_networks(a) for a in parsed)):
            raise OutboundRefused(_normal(host), by_name)
        for address in parsed:
            problem = self.address_problem(address)
            if problem is not None:
                literal = _literal(_normal(host)) is not None
                raise OutboundRefused(_normal(host), problem if literal else f"it resolves to {_kind_only(problem)}")


def _kind_only(problem: str) -> str:
    # `10.1.2.3 is a private address` → `a private address`: a refusal of a name does not say where it points.
    return problem.split(" is ", 1)[1]


def _normal(host: str) -> str:
    return host.strip().lower().rstrip(".").removeprefix("[").removesuffix("]")


def _literal(host: str) -> IPAddress | None:
    # Only an IPv6 address carries a zone (`fe80::1%eth0`): `8.8.8.8%2e…` is no address but an encoded name.
    try:
        return ipaddress.ip_address(host)
    except ValueError:
        return None


def system_resolver(host: str, port: int) -> list[str]:
    """Every address `host` resolves to (TCP), in the resolver's order, without duplicates."""
    try:
        infos = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM)
    except (socket.gaierror, UnicodeError):
        raise Unresolvable(host) from None
    seen: dict[str, None] = {}
    for _family, _type, _proto, _name, sockaddr in infos:
        seen.setdefault(str(sockaddr[0]), None)
    return list(seen)


def resolve_checked(policy: OutboundPolicy, host: str, port: int, resolver: Resolver = system_resolver) -> list[str]:
    """The addresses to connect to for `host`: resolved once, every one checked (OutboundRefused when any is
    refused, so a name answering a public and a private address is refused whole). Unresolvable when it does not
    resolve. A refused name is refused before any lookup when its name alone says so and no network is allowed."""
    name = _normal(host)
    literal = _literal(name)
    if literal is not None:
        policy.check(name, [str(literal)])
        return [str(literal)]
    if not _PLAIN_NAME.match(name):
        # `8.8.8.8%2eevil.example`: git's curl would decode it and resolve `8.8.8.8.evil.example` itself.
        raise OutboundRefused(name, "it is not a plain host name (percent-encoded or non-ASCII: git and curl would "
                                    "decode it and resolve another name themselves)")
    if not policy.host_allowed(name) and policy.name_problem(name) and not policy.allowed_networks:
        policy.check(name, [])  # raises: nothing could allow it, so not even a lookup is made
    addresses = resolver(name, port)
    if not addresses:
        raise Unresolvable(name)
    policy.check(name, addresses)
    return addresses


# -- httpx ------------------------------------------------------------------------------------------------------


@dataclass
class _Backend(httpcore.NetworkBackend):
    """Connects only to addresses `resolve_checked` gave for the request's host; TLS is started by httpcore with
    the request's host name, so certificates are verified against the name, not the address."""

    policy: OutboundPolicy
    resolver: Resolver = system_resolver
    inner: httpcore.NetworkBackend = field(default_factory=httpcore.SyncBackend)

    def connect_tcp(self, host: str, port: int, timeout: float | None = None, local_address: str | None = None,
                    socket_options: Iterable[Any] | None = None) -> httpcore.NetworkStream:
        addresses = resolve_checked(self.policy, host, port, self.resolver)
        failure: Exception | None = None
        for address in addresses:
            try:
                return self.inner.connect_tcp(address, port, timeout, local_address, socket_options)
            except (httpcore.ConnectError, httpcore.ConnectTimeout) as exc:
                failure = exc
        assert failure is not None
        raise failure

    def connect_unix_socket(self, path: str, timeout: float | None = None,
                            socket_options: Iterable[Any] | None = None) -> httpcore.NetworkStream:
        raise OutboundRefused(path, "unix sockets are never reached")

    def sleep(self, seconds: float) -> None:
        self.inner.sleep(seconds)


@dataclass
class _AsyncBackend(httpcore.AsyncNetworkBackend):
    policy: OutboundPolicy
    resolver: Resolver = system_resolver
    inner: httpcore.AsyncNetworkBackend = field(default_factory=httpcore.AnyIOBackend)

    async def connect_tcp(self, host: str, port: int, timeout: float | None = None,  # noqa: ASYNC109 - httpcore's
                          local_address: str | None = None,
                          socket_options: Iterable[Any] | None = None) -> httpcore.AsyncNetworkStream:
        # getaddrinfo blocks: in a thread, as the default backend does it.
        addresses = await anyio.to_thread.run_sync(resolve_checked, self.policy, host, port, self.resolver)
        failure: Exception | None = None
        for address in addresses:
            try:
                return await self.inner.connect_tcp(address, port, timeout, local_address, socket_options)
            except (httpcore.ConnectError, httpcore.ConnectTimeout) as exc:
                failure = exc
        assert failure is not None
        raise failure

    async def connect_unix_socket(self, path: str, timeout: float | None = None,  # noqa: ASYNC109 - httpcore's
                                  socket_options: Iterable[Any] | None = None) -> httpcore.AsyncNetworkStream:
        raise OutboundRefused(path, "unix sockets are never reached")

    async def sleep(self, seconds: float) -> None:
        await self.inner.sleep(seconds)


@functools.lru_cache(maxsize=8)
def _ssl_context(verify: str | bool) -> ssl.SSLContext:
    # As httpx makes it: SSL_CERT_FILE / SSL_CERT_DIR are honoured (a company CA for an internal git server). Made
    # once per process: loading the CA bundle costs tens of milliseconds, and a context is safe to share.
    return httpx.create_ssl_context(verify=verify, trust_env=True)


def _context(verify: ssl.SSLContext | str | bool) -> ssl.SSLContext:
    return verify if isinstance(verify, ssl.SSLContext) else _ssl_context(verify)


class GuardedTransport(httpx.HTTPTransport):
    """httpx's transport with the guard as its network backend. A client given a transport uses no proxy from the
    environment (a proxy would resolve names itself). Redirects are the client's business: httpx follows none
    unless asked, and the callers never ask."""

    def __init__(self, policy: OutboundPolicy, *, verify: ssl.SSLContext | str | bool = True,
                 resolver: Resolver = system_resolver) -> None:
        # Not HTTPTransport.__init__: it builds a pool from its own arguments (and an SSL context each time) and
        # takes no network backend. Its request handling only needs `_pool`: the same pool, with our backend.
        self._pool = httpcore.ConnectionPool(ssl_context=_context(verify), network_backend=_Backend(policy, resolver))


class AsyncGuardedTransport(httpx.AsyncHTTPTransport):
    """`GuardedTransport` for `httpx.AsyncClient`."""

    def __init__(self, policy: OutboundPolicy, *, verify: ssl.SSLContext | str | bool = True,
                 resolver: Resolver = system_resolver) -> None:
        self._pool = httpcore.AsyncConnectionPool(ssl_context=_context(verify),
                                                  network_backend=_AsyncBackend(policy, resolver))
