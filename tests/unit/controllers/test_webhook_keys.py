"""Which webhook keys the controllers publish for the server (controllers/repository/webhook_keys.py, pure part)."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from burrito_py.controllers.repository.webhook_keys import decide_entries
from burrito_py.server.webhook_keys import decode_entries, encode_entry, entry_name

LIVE = {("team-a", "infra"): "uid-a", ("team-a", "apps"): "uid-b", ("team-b", "infra"): "uid-c"}


def test_an_entry_is_set_replaced_and_withdrawn() -> None:
    first = decide_entries({}, LIVE, ("team-a", "infra"), encode_entry("uid-a", b"one"), per_namespace=10)
    assert decode_entries({"data": first.data})[("team-a", "infra")].key == b"one"
    second = decide_entries(first.data, LIVE, ("team-a", "infra"), encode_entry("uid-a", b"two"), per_namespace=10)
    assert decode_entries({"data": second.data})[("team-a", "infra")].key == b"two"
    assert decide_entries(second.data, LIVE, ("team-a", "infra"), None, per_namespace=10).data == {}


def test_entries_of_repositories_gone_or_recreated_are_dropped() -> None:
    current = {entry_name("team-a", "apps"): encode_entry("uid-old", b"x"),  # deleted and created again
               entry_name("team-z", "gone"): encode_entry("uid-z", b"x"),  # deleted while no controller ran
               entry_name("team-b", "infra"): encode_entry("uid-c", b"x"),
               "not-an-entry": encode_entry("uid", b"x")}
    decision = decide_entries(current, LIVE, ("team-a", "infra"), encode_entry("uid-a", b"k"), per_namespace=10)
    assert set(decision.data) == {entry_name("team-a", "infra"), entry_name("team-b", "infra")}


def test_a_namespace_holds_at_most_its_share_and_keeps_what_it_has() -> None:
    full = decide_entries({}, LIVE, ("team-a", "infra"), encode_entry("uid-a", b"k"), per_namespace=1)
    refused = decide_entries(full.data, LIVE, ("team-a", "apps"), encode_entry("uid-b", b"k"), per_namespace=1)
    assert refused.refused and refused.data == full.data
    other = decide_entries(full.data, LIVE, ("team-b", "infra"), encode_entry("uid-c", b"k"), per_namespace=1)
    assert not other.refused and len(other.data) == 2  # another namespace is not held back
    again = decide_entries(full.data, LIVE, ("team-a", "infra"), encode_entry("uid-a", b"new"), per_namespace=1)
    assert not again.refused  # an entry already published may change


@given(st.binary(min_size=1, max_size=1 << 16))
def test_whatever_a_tenant_puts_in_its_secret_the_entry_stays_small(secret: bytes) -> None:
    """A tenant user chooses the Secret a repository names: its entry is still at most ~130 bytes (the 64-byte key,
    a uid), so no namespace can fill the shared Secret with one huge value."""
    entry = encode_entry("0d5e8a8c-1f3e-4b55-9a4f-7f0c4b7e2a11", secret)
    assert len(entry) <= 172
