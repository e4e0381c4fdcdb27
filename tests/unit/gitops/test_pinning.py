"""Where one git fetch may connect (the outbound guard's pin for git), with a resolver the test controls."""

from __future__ import annotations

import socket

import pytest

from burrito_py.git.mirror import GitError, GitMirror
from burrito_py.git.pinning import Pin, pin_for
from burrito_py.outbound import OutboundPolicy, OutboundRefused

PUBLIC = OutboundPolicy()


def answers(*addresses: str):  # a resolver answering `addresses` for every name
    return lambda host, port: list(addresses)


def test_https_is_pinned_to_every_checked_address_and_follows_no_redirect() -> None:
    pin = pin_for("https://github.com/org/repo.git", PUBLIC, answers("140.82.112.3", "2606:50c0::1"))
    assert pin == Pin("https", "https://github.com", (
        ("http.followRedirects", "false"), ("http.curloptResolve", "github.com:443:140.82.112.3,[2606:50c0::1]")))


def test_an_explicit_port_is_part_of_the_origin_and_a_literal_address_needs_no_resolving() -> None:
    pin = pin_for("http://127.0.0.1:8080/infra.git", OutboundPolicy.of(["127.0.0.0/8"]), answers())
    assert pin == Pin("https", "http://127.0.0.1:8080", (("http.followRedirects", "false"),))


def test_ssh_connects_to_the_checked_address_and_looks_the_host_key_up_by_name() -> None:
    assert pin_for("git@github.com:org/repo.git", PUBLIC, answers("140.82.112.4")).ssh_options == (
        "-o", "HostName=140.82.112.4", "-o", "HostKeyAlias=github.com")
    assert pin_for("ssh://git@git.example.com:2222/r.git", PUBLIC, answers("93.184.215.14")).ssh_options == (
        "-o", "HostName=93.184.215.14", "-o", "HostKeyAlias=[git.example.com]:2222")


def test_git_protocol_is_rewritten_to_the_checked_address_and_file_urls_leave_nothing() -> None:
    assert pin_for("git://git.example.com/r.git", PUBLIC, answers("93.184.215.14")) == Pin(
        "git", config=(("url.git://93.184.215.14:9418/r.git.insteadOf", "git://git.example.com/r.git"),))
    assert pin_for("git://Git.Example.com.:7000/a/r", PUBLIC, answers("2606:2800:21f:cb07:6820:80da:af6b:8b2c")) == Pin(
        "git", config=(("url.git://[2606:2800:21f:cb07:6820:80da:af6b:8b2c]:7000/a/r.insteadOf",
                        "git://Git.Example.com.:7000/a/r"),))
    assert pin_for("git://93.184.215.14/r.git", PUBLIC, answers("10.0.0.7")) == Pin("git")  # an address: no lookup
    with pytest.raises(OutboundRefused):
        pin_for("git://git.example.com/r.git", PUBLIC, answers("10.0.0.7"))
    assert pin_for("file:///srv/repo", PUBLIC, answers("10.0.0.7")) == Pin("other")


def test_attack_git_protocol_cannot_resolve_the_host_itself(tmp_path) -> None:
    """A `git://` URL was checked (the guard resolved it) but git then resolved the name again itself: a name that
    answers the check with a public address and git with an internal one (DNS rebinding) reached an internal git
    daemon, or any internal host and port with git-protocol bytes. `pinned.invalid` never resolves in DNS (RFC
    6761): only the guard's answer (127.0.0.1, where a real `git daemon` serves) can make git reach it."""
    import subprocess
    import time

    served = tmp_path / "served"
    subprocess.run(["git", "init", "-q", "--bare", str(served / "r.git")], check=True)
    work = tmp_path / "work"
    subprocess.run(["git", "init", "-q", "-b", "main", str(work)], check=True)
    (work / "main.tf").write_text("# pinned\n")
    subprocess.run(["git", "-C", str(work), "add", "."], check=True)
    subprocess.run(["git", "-C", str(work), "-c", "user.name=t", "-c", "user.email=t@e", "commit", "-qm", "c"],
                   check=True)
    subprocess.run(["git", "-C", str(work), "push", "-q", str(served / "r.git"), "main"], check=True)
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    daemon = subprocess.Popen(["git", "daemon", "--reuseaddr", "--export-all", "--listen=127.0.0.1",
                               f"--port={port}", f"--base-path={served}", str(served)],
                              stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        deadline = time.monotonic() + 10
        while socket.socket().connect_ex(("127.0.0.1", port)) != 0:
            assert time.monotonic() < deadline, "git daemon did not start"
            time.sleep(0.05)
        mirror = GitMirror(tmp_path / "mirror", f"git://pinned.invalid:{port}/r.git",
                           outbound=OutboundPolicy.of(["127.0.0.0/8"]), resolver=answers("127.0.0.1"),
                           fetch_timeout=20)
        mirror.fetch()  # unpinned: "unable to look up pinned.invalid"
        assert mirror.has_commit("main")
    finally:
        daemon.terminate()
        daemon.wait(10)


@pytest.mark.parametrize("url", ["https://127.0.0.1/r.git", "ssh://git@[::1]:22/r.git",
                                 "https://git.example.com/r.git", "git@kubernetes.default.svc:r.git"])
def test_internal_destinations_are_refused_before_git_runs(url: str) -> None:
    with pytest.raises(OutboundRefused, match="refused by the outbound address guard"):
        pin_for(url, PUBLIC, answers("169.254.169.254"))


@pytest.mark.parametrize("url", [
    "https://8.8.8.8%2eevil.example/org/repo.git",  # git's curl decodes it to 8.8.8.8.evil.example
    "git://8.8.8.8%2eevil.example/org/repo.git",
    "ssh://git@8.8.8.8%2eevil.example/org/repo.git",
    "https://stra\u00dfe.example/org/repo.git",  # IDNA 2003 and 2008 name two different hosts
])
def test_a_host_git_would_decode_into_another_name_is_refused(url: str) -> None:
    with pytest.raises(OutboundRefused, match="not a plain host name"):
        pin_for(url, PUBLIC, answers("8.8.8.8"))


def test_a_percent_encoded_host_never_reaches_loopback(tmp_path) -> None:
    # The attack end to end: the guard once took `8.8.8.8%2elocalhost` for the public 8.8.8.8, pinned that, and
    # curl decoded the host and connected to `8.8.8.8.localhost`, i.e. loopback.
    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    listener.listen()
    listener.settimeout(0.5)
    port = listener.getsockname()[1]
    mirror = GitMirror(tmp_path, f"http://8.8.8.8%2elocalhost:{port}/r.git", outbound=PUBLIC, fetch_timeout=10)
    try:
        with pytest.raises(OutboundRefused):
            mirror.fetch()
        with pytest.raises(TimeoutError):
            listener.accept()
    finally:
        listener.close()


def test_a_host_written_with_a_trailing_dot_is_pinned_as_curl_looks_it_up() -> None:
    pin = pin_for("https://GitHub.com./org/repo.git", PUBLIC, answers("140.82.112.3"))
    assert ("http.curloptResolve", "github.com:443:140.82.112.3") in pin.config
    assert ("http.curloptResolve", "github.com.:443:140.82.112.3") in pin.config


def test_a_trailing_dot_does_not_let_curl_resolve_the_host_itself(tmp_path) -> None:
    # `pinned.invalid` never resolves in DNS (RFC 6761): only the guard's answer (127.0.0.3, where nothing
    # listens) can make git connect. Unpinned, curl looked `pinned.invalid.` up itself: a DNS rebinding window.
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    mirror = GitMirror(tmp_path, f"http://pinned.invalid.:{port}/r.git", outbound=OutboundPolicy.of(["127.0.0.0/8"]),
                       resolver=answers("127.0.0.3"), fetch_timeout=10)
    with pytest.raises(GitError, match="could not connect"):
        mirror.fetch()
