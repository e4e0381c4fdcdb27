"""The outbound address guard's decisions (pure): which names and addresses tenants' outbound calls may reach."""

from __future__ import annotations

import ipaddress

import pytest
from hypothesis import given
from hypothesis import strategies as st

from burrito_py.controllers.settings import ControllerSettings
from burrito_py.outbound import OutboundPolicy, OutboundRefused, Unresolvable, resolve_checked

STRICT = OutboundPolicy()


def fixed(*addresses: str):  # a resolver that answers `addresses` for any name
    def resolve(host: str, port: int) -> list[str]:
        resolve.calls.append(host)  # type: ignore[attr-defined]
        return list(addresses)

    resolve.calls = []  # type: ignore[attr-defined]
    return resolve


@pytest.mark.parametrize(("address", "kind"), [
    ("127.0.0.1", "a loopback address"),
    ("127.8.9.10", "a loopback address"),
    ("::1", "a loopback address"),
    ("0.0.0.0", "an unspecified address"),  # noqa: S104 - an address refused, not bound
    ("::", "an unspecified address"),
    ("169.254.169.254", "a link-local address"),
    ("fe80::1", "a link-local address"),
    ("10.1.2.3", "a private address"),
    ("172.16.0.1", "a private address"),
    ("172.31.255.255", "a private address"),
    ("192.168.1.1", "a private address"),
    ("fd00::1", "a private address"),
    ("100.64.0.1", "a shared (carrier-grade NAT) address"),
    ("224.0.0.1", "a multicast address"),
    ("ff02::1", "a multicast address"),
    ("255.255.255.255", "a reserved or non-public address"),
    ("240.0.0.1", "a reserved or non-public address"),
    ("198.18.0.1", "a reserved or non-public address"),
    ("192.0.2.1", "a reserved or non-public address"),
    ("2001:db8::1", "a reserved or non-public address"),
    # IPv4 carried in IPv6: judged by the IPv4 address it carries.
    ("::ffff:127.0.0.1", "a loopback address"),
    ("::ffff:169.254.169.254", "a link-local address"),
    ("64:ff9b::a9fe:a9fe", "a link-local address"),
    ("2002:7f00:1::", "a loopback address"),
    ("::10.0.0.1", "a private address"),
])
def test_internal_addresses_are_refused_naming_what_they_are(address: str, kind: str) -> None:
    problem = STRICT.address_problem(ipaddress.ip_address(address))
    assert problem is not None and kind in problem
    with pytest.raises(OutboundRefused) as refused:
        resolve_checked(STRICT, address, 443, fixed())
    assert kind in str(refused.value) and "BURRITO_PY_OUTBOUND_ALLOWED_NETWORKS" in str(refused.value)


@pytest.mark.parametrize("address", ["8.8.8.8", "140.82.112.3", "2606:4700::1111", "::ffff:8.8.8.8"])
def test_public_addresses_pass(address: str) -> None:
    assert STRICT.address_problem(ipaddress.ip_address(address)) is None


@pytest.mark.parametrize("name", ["localhost", "LOCALHOST.", "a.localhost", "kubernetes", "burrito-py-datastore",
                                  "kubernetes.default.svc", "x.team.svc.cluster.local", "printer.local",
                                  "metadata.google.internal"])
def test_cluster_and_local_names_are_refused_before_any_lookup(name: str) -> None:
    resolver = fixed("8.8.8.8")
    with pytest.raises(OutboundRefused, match="refused by the outbound address guard"):
        resolve_checked(STRICT, name, 443, resolver)
    assert resolver.calls == []  # type: ignore[attr-defined]


def test_every_address_a_name_resolves_to_is_checked() -> None:
    with pytest.raises(OutboundRefused) as refused:
        resolve_checked(STRICT, "rebind.example.com", 443, fixed("8.8.8.8", "127.0.0.1"))
    # A refused name says what kind of address it points to, not the address.
    assert str(refused.value).startswith("rebind.example.com is refused by the outbound address guard: it resolves "
                                         "to a loopback address;")
    assert resolve_checked(STRICT, "git.example.com", 443, fixed("8.8.8.8", "2606:4700::1111")) == [
        "8.8.8.8", "2606:4700::1111"]


def test_an_allow_list_names_networks_or_hosts() -> None:
    policy = OutboundPolicy.of(["10.20.0.0/16", "::1"], ["gitea.tools.svc.cluster.local", "*.corp.example"])
    assert resolve_checked(policy, "git.lab", 443, fixed("10.20.3.4")) == ["10.20.3.4"]
    assert resolve_checked(policy, "::1", 443, fixed()) == ["::1"]
    assert resolve_checked(policy, "::ffff:10.20.0.9", 443, fixed()) == [str(ipaddress.ip_address("::ffff:10.20.0.9"))]
    with pytest.raises(OutboundRefused):
        resolve_checked(policy, "git.lab", 443, fixed("10.21.0.1"))
    # A named host may resolve to anything, cluster names included.
    assert resolve_checked(policy, "gitea.tools.svc.cluster.local", 3000, fixed("10.96.0.12")) == ["10.96.0.12"]
    assert resolve_checked(policy, "git.corp.example", 443, fixed("192.168.4.4")) == ["192.168.4.4"]
    # A cluster name resolving only into allowed networks passes; one resolving anywhere else does not.
    assert resolve_checked(policy, "git.team.svc.cluster.local", 80, fixed("10.20.0.5")) == ["10.20.0.5"]
    with pytest.raises(OutboundRefused, match="cluster-internal or local name"):
        resolve_checked(policy, "api.team.svc.cluster.local", 80, fixed("8.8.8.8"))


def test_a_name_that_does_not_resolve_is_said_so() -> None:
    with pytest.raises(Unresolvable, match=r"could not connect to git\.example\.com: its name does not resolve"):
        resolve_checked(STRICT, "git.example.com", 443, fixed())


def test_the_controllers_default_allows_nothing_internal_and_bad_entries_are_named() -> None:
    assert ControllerSettings().outbound_policy() == OutboundPolicy()
    settings = ControllerSettings(outbound_allowed_networks=["127.0.0.0/8"], outbound_allowed_hosts=["git.lab"])
    assert settings.outbound_policy() == OutboundPolicy((ipaddress.ip_network("127.0.0.0/8"),), ("git.lab",))
    with pytest.raises(ValueError, match=r"'10\.0\.0\.300/8' is not a CIDR network"):
        ControllerSettings(outbound_allowed_networks=["10.0.0.300/8"])
    with pytest.raises(ValueError, match="outbound_allowed_hosts"):
        ControllerSettings(outbound_allowed_hosts=["git lab"])
    with pytest.raises(ValueError, match=r"'a\.\.b' is not a host name"):
        ControllerSettings(outbound_allowed_hosts=["a..b"])


@given(st.ip_addresses())
def test_an_address_passes_exactly_when_it_is_public_or_allowed(address: ipaddress.IPv4Address
                                                                 | ipaddress.IPv6Address) -> None:
    everything = OutboundPolicy.of(["0.0.0.0/0", "::/0"])
    assert everything.address_problem(address) is None
    problem = STRICT.address_problem(address)
    inner = address.ipv4_mapped if isinstance(address, ipaddress.IPv6Address) and address.ipv4_mapped else address
    if inner.is_loopback or inner.is_link_local or inner.is_private or inner.is_multicast:
        assert problem is not None
