"""Credentials bound to destinations (pure): the Secret's `allowedHosts` names where its credentials may go."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from burrito_py.git.allowed_hosts import (
    Destination,
    HostNotAllowed,
    check_destination,
    destination_of,
    parse_allowed_hosts,
)
from burrito_py.git.credentials import CredentialsError, credentials_from_data

SOURCE = "Secret team/git"
FIELD = "spec.repository.url"


def allowed(hosts: str, url: str) -> bool:
    try:
        check_destination({"allowedHosts": hosts, "token": "t"}, SOURCE, url, FIELD)
    except HostNotAllowed:
        return False
    return True


@pytest.mark.parametrize(("url", "expected"), [
    ("https://GitHub.com/org/repo.git", Destination("https", "github.com", 443)),
    ("https://git.example.com:8443/r", Destination("https", "git.example.com", 8443, True)),
    ("http://127.0.0.1:9000/infra.git", Destination("http", "127.0.0.1", 9000, True)),
    ("ssh://git@git.example.com:2222/org/r.git", Destination("ssh", "git.example.com", 2222, True)),
    ("git@github.com:org/repo.git", Destination("ssh", "github.com", 22)),
    ("https://[2001:db8::1]:8443/r", Destination("https", "2001:db8::1", 8443, True)),
    ("git://git.example.com/r", Destination("git", "git.example.com", 9418)),
    ("https://api.github.com", Destination("https", "api.github.com", 443)),
])
def test_destination_of_a_url(url: str, expected: Destination) -> None:
    assert destination_of(url) == expected


def test_local_urls_have_no_destination() -> None:
    assert destination_of("file:///srv/repo") is None
    assert allowed("", "file:///srv/repo")  # nothing leaves the machine: nothing to allow


@pytest.mark.parametrize(("hosts", "url", "ok"), [
    ("github.com", "https://github.com/org/repo.git", True),
    ("github.com", "git@github.com:org/repo.git", True),
    ("github.com", "https://github.com:8443/org/repo.git", True),  # any port when none is named
    ("github.com", "https://api.github.com", False),  # the API host is another host: it is named on its own
    ("github.com, api.github.com", "https://api.github.com", True),
    ("github.com\napi.github.com", "https://api.github.com", True),
    ("GitHub.com.", "https://github.com/org/repo.git", True),
    ("*.example.com", "https://git.example.com/r", True),
    ("*.example.com", "https://example.com/r", False),
    ("*.example.com", "https://evilexample.com/r", False),
    ("git.example.com:8443", "https://git.example.com:8443/r", True),
    ("git.example.com:8443", "https://git.example.com/r", False),
    ("ssh://git.example.com", "git@git.example.com:r.git", True),
    ("ssh://git.example.com", "https://git.example.com/r", False),
    ("https://git.example.com", "git@git.example.com:r.git", False),
    ("git.example.com", "http://git.example.com/r", False),  # never unencrypted unless an entry says http://
    ("http://127.0.0.1", "http://127.0.0.1:9000/infra.git", True),
    ("http://127.0.0.1", "https://127.0.0.1:9000/infra.git", True),
    ("http://127.0.0.1", "http://127.0.0.2:9000/infra.git", False),
    ("[2001:db8::1]:8443", "https://[2001:db8::1]:8443/r", True),
    ("2001:db8::1", "https://[2001:db8::1]:8443/r", True),
    ("github.com", "https://github.com.evil.example/org/repo.git", False),
    ("github.com", "https://github.com@evil.example/org/repo.git", False),  # userinfo is not the host
])
def test_entries(hosts: str, url: str, ok: bool) -> None:
    assert allowed(hosts, url) is ok


def test_a_secret_without_allowed_hosts_sends_its_credentials_nowhere_and_says_what_to_add() -> None:
    with pytest.raises(HostNotAllowed) as refused:
        credentials_from_data({"token": "s3cret-token"}, "https://git.example.com/org/r.git", SOURCE)
    assert str(refused.value) == (
        'Secret team/git has no "allowedHosts" key, so its credentials go nowhere: add the hosts they may be sent '
        'to (spec.repository.url sends them to git.example.com: "git.example.com")')
    assert refused.value.host == "git.example.com"


def test_a_host_the_secret_does_not_name_is_refused_naming_the_host_and_the_key_never_a_value() -> None:
    data = {"token": "s3cret-token", "allowedHosts": "git.example.com,secret-internal-mirror.example"}
    with pytest.raises(HostNotAllowed) as refused:
        credentials_from_data(data, "https://attacker.example:8443/x.git", SOURCE)
    message = str(refused.value)
    assert message == ('Secret team/git does not allow its credentials to go to attacker.example:8443 '
                       '(spec.repository.url): its "allowedHosts" key has no entry for it (add "attacker.example" if '
                       'they should)')
    assert "s3cret-token" not in message and "secret-internal-mirror" not in message


def test_plain_http_to_an_allowed_host_needs_an_http_entry() -> None:
    with pytest.raises(HostNotAllowed, match=r'an "allowedHosts" entry must say "http://h" to allow plain http'):
        check_destination({"allowedHosts": "h"}, SOURCE, "http://h:9000/r", FIELD)


@pytest.mark.parametrize("entry", ["https://h/path", "user@h", "h:99999", "ftp://h", "h:port", "*", "a..b", "-"])
def test_an_entry_that_is_not_a_host_is_named_by_position_not_by_value(entry: str) -> None:
    with pytest.raises(CredentialsError) as raised:
        parse_allowed_hosts(f"github.com {entry}", SOURCE)
    assert str(raised.value).startswith('Secret team/git: entry 2 of "allowedHosts" is not a host')


def test_anonymous_access_needs_no_allowed_hosts() -> None:
    assert credentials_from_data({"webhookSecret": "hook"}, "https://git.example.com/r", SOURCE) is None


_label = st.text(alphabet="abcdefghijklmnopqrstuvwxyz0123456789", min_size=1, max_size=10)
_host = st.lists(_label, min_size=2, max_size=4).map(".".join)


@given(_host, _host, st.integers(1, 65535))
def test_a_host_is_allowed_exactly_when_an_entry_names_it(allowed_host: str, asked: str, port: int) -> None:
    assert allowed(allowed_host, f"https://{asked}:{port}/r") is (allowed_host == asked)
    assert allowed(f"*.{allowed_host}", f"https://{asked}/r") is asked.endswith("." + allowed_host)
