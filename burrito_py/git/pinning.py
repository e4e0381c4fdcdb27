"""Where one `git fetch` may connect: the outbound address guard (burrito_py/outbound.py) for git, which runs as a
subprocess and resolves names itself. The controllers resolve the URL's host once, check every address, and pin
git to them:

- http(s): `http.curloptResolve host:port:addresses` (curl connects to those addresses, TLS still checks the
  certificate against the name), `http.followRedirects=false` (a redirect would reach a host nobody checked, and
  git would ask for credentials there), and no proxy (`NO_PROXY=*`: a proxy would resolve the name itself);
- ssh: `-o HostName=<address>` with `-o HostKeyAlias=<host>` (or `[host]:port`), so the host key is still looked
  up under the name the repository uses;
- `git://`: the URL rewritten to the checked address (`url.<pinned>.insteadOf <url>`): git's own lookup would
  otherwise reopen DNS rebinding towards an internal git daemon or any internal host and port. The daemon then
  sees the address in its `host=` field, which only a daemon serving virtual hosts (`--interpolated-path`) reads;
- `file://`: nothing leaves the machine (`allow_file_repositories` governs it).
"""

from __future__ import annotations

from dataclasses import dataclass
from urllib.parse import urlsplit

from burrito_py.git.allowed_hosts import destination_of
from burrito_py.outbound import OutboundPolicy, Resolver, resolve_checked, system_resolver

__all__ = ["Pin", "pin_for"]


@dataclass(frozen=True, slots=True)
class Pin:
    """What one fetch's environment says about where git may connect."""

    transport: str  # https (http too) | ssh | git | other
    origin: str = ""  # scheme://host[:port], to scope the credential helper to this URL's origin
    config: tuple[tuple[str, str], ...] = ()
    ssh_options: tuple[str, ...] = ()


def pin_for(url: str, policy: OutboundPolicy, resolver: Resolver = system_resolver) -> Pin:
    """The pin for fetching `url` now; OutboundRefused (nothing sent) or Unresolvable from the guard."""
    destination = destination_of(url)
    if destination is None:
        return Pin("other")
    addresses = resolve_checked(policy, destination.host, destination.port, resolver)
    host = f"[{destination.host}]" if ":" in destination.host else destination.host
    if destination.scheme in ("http", "https"):
        explicit = f":{destination.port}" if destination.explicit_port else ""
        origin = f"{destination.scheme}://{host}{explicit}"
        config = [("http.followRedirects", "false")]
        if addresses != [destination.host]:  # a literal address needs no resolving
            shown = ",".join(f"[{a}]" if ":" in a else a for a in addresses)
            config.append(("http.curloptResolve", f"{host}:{destination.port}:{shown}"))
            if destination.host == _dotless(url):
                # curl looks `name.` up as written: without its own entry it would resolve it itself, unpinned.
                config.append(("http.curloptResolve", f"{host}.:{destination.port}:{shown}"))
        return Pin("https", origin, tuple(config))
    if destination.scheme == "ssh":
        alias = destination.host if destination.port == 22 else f"[{destination.host}]:{destination.port}"
        return Pin("ssh", ssh_options=("-o", f"HostName={addresses[0]}", "-o", f"HostKeyAlias={alias}"))
    if destination.scheme == "git":
        if addresses == [destination.host]:
            return Pin("git")
        # This very URL, as written, to the same path on the checked address (git matches the prefix literally).
        written = url  # exactly what git is given
        rest = written.partition("://")[2]
        netloc = rest.split("/", 1)[0]
        address = f"[{addresses[0]}]" if ":" in addresses[0] else addresses[0]
        pinned = f"git://{address}:{destination.port}{rest[len(netloc):]}"
        return Pin("git", config=((f"url.{pinned}.insteadOf", written),))
    return Pin("other")


def _dotless(url: str) -> str:
    """The host of an http(s) `url` when it is written with a trailing dot (`github.com.`), without it; else ""."""
    hostname = urlsplit(url.strip()).hostname or ""
    return hostname.rstrip(".") if hostname.endswith(".") else ""
