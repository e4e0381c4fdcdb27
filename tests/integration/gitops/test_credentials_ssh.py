"""GitMirror with SSH credentials against a real OpenSSH server (key auth) on loopback."""

from __future__ import annotations

import logging
import tempfile
import traceback
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from burrito_py.git.credentials import SshCredentials, credentials_from_data
from burrito_py.git.mirror import GitError, GitMirror
from burrito_py.outbound import LOOPBACK_NETWORKS, OutboundPolicy
from tests.support.git_repos import TestRepo, make_bare, make_repo, run_git
from tests.support.git_servers import SshGitServer, generate_ssh_key, running_ssh_git_server

SOURCE = "Secret default/git-ssh"
LOOPBACK = OutboundPolicy.of(LOOPBACK_NETWORKS)  # sshd listens on loopback: allowed explicitly
ALLOWED = {"allowedHosts": "127.0.0.1"}


@pytest.fixture(scope="module")
def sshd(tmp_path_factory: pytest.TempPathFactory) -> Iterator[SshGitServer]:
    # One server for the module: starting sshd and generating keys costs more than the tests themselves.
    with running_ssh_git_server(tmp_path_factory.mktemp("sshd")) as server:
        yield server


@pytest.fixture
def work(tmp_path: Path) -> TestRepo:
    repo = make_repo(tmp_path / "work")
    repo.commit({"layers/app/main.tf": "# app\n"}, "add a layer")
    return repo


@pytest.fixture
def url(tmp_path: Path, work: TestRepo, sshd: SshGitServer) -> str:
    bare = tmp_path / "upstream.git"
    work.push(make_bare(bare))
    return sshd.url_for(bare)


def key_lines(key: str) -> list[str]:
    return [line for line in key.splitlines() if line and not line.startswith("-----")]


def test_the_authorized_key_fetches(tmp_path: Path, url: str, sshd: SshGitServer, work: TestRepo,
                                    monkeypatch: pytest.MonkeyPatch) -> None:
    # The key's directory goes under this test's own temporary root, so that a test of another worker writing its
    # key at the same moment is not counted; every directory made there is recorded to know the key was written.
    private_root = tmp_path / "tmp"
    private_root.mkdir()
    monkeypatch.setattr(tempfile, "tempdir", str(private_root))
    made: list[str] = []
    mkdtemp = tempfile.mkdtemp

    def recording_mkdtemp(*args: Any, **kwargs: Any) -> str:
        made.append(mkdtemp(*args, **kwargs))
        return made[-1]

    monkeypatch.setattr(tempfile, "mkdtemp", recording_mkdtemp)
    mirror = GitMirror(tmp_path / "cache", url, outbound=LOOPBACK)
    creds = credentials_from_data({"sshPrivateKey": sshd.client_key, "knownHosts": sshd.known_hosts, **ALLOWED}, url,
                                  SOURCE)
    mirror.fetch(creds)
    assert mirror.branches() == {"main": work.head}
    assert [d for d in made if Path(d).parent == private_root and Path(d).name.startswith("burrito-py-ssh-")], made
    assert list(private_root.iterdir()) == [], "the key's temporary directory is removed after the fetch"
    stored = run_git(mirror.path, "config", "--list")
    assert all(line not in stored for line in key_lines(sshd.client_key))
    assert f"Accepted publickey for {sshd.user}" in sshd.log()


def test_a_key_pasted_with_crlf_and_no_final_newline_still_works(tmp_path: Path, url: str,
                                                                 sshd: SshGitServer) -> None:
    pasted = sshd.client_key.replace("\n", "\r\n").rstrip()
    creds = credentials_from_data({"sshPrivateKey": pasted, "knownHosts": sshd.known_hosts, **ALLOWED}, url, SOURCE)
    mirror = GitMirror(tmp_path / "cache", url, outbound=LOOPBACK)
    mirror.fetch(creds)
    assert mirror.exists()


def test_a_key_the_server_does_not_know_is_refused(tmp_path: Path, url: str, sshd: SshGitServer,
                                                   caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.DEBUG)
    stranger, _ = generate_ssh_key(tmp_path / "stranger")
    mirror = GitMirror(tmp_path / "cache", url, outbound=LOOPBACK)
    with pytest.raises(GitError) as raised:
        mirror.fetch(SshCredentials(stranger, sshd.known_hosts, SOURCE))
    message = str(raised.value)
    assert message.startswith("authentication to ssh://")
    assert message.endswith(f"failed: the server refused the ssh key from {SOURCE}")
    text = "".join(traceback.format_exception(raised.value)) + caplog.text
    assert all(line not in text for line in key_lines(stranger))
    assert not mirror.exists()


def test_an_unknown_host_key_is_refused(tmp_path: Path, url: str, sshd: SshGitServer) -> None:
    _, other_public = generate_ssh_key(tmp_path / "other-host")
    known_elsewhere = f"git.example.com {other_public}\n"
    with pytest.raises(GitError) as raised:
        GitMirror(tmp_path / "cache", url, outbound=LOOPBACK).fetch(SshCredentials(sshd.client_key, known_elsewhere,
                                                                                   SOURCE))
    assert str(raised.value).startswith(f"host key for 127.0.0.1:{sshd.port} is not in knownHosts")


def test_a_changed_host_key_is_refused(tmp_path: Path, url: str, sshd: SshGitServer) -> None:
    _, other_public = generate_ssh_key(tmp_path / "impostor")
    wrong = f"[127.0.0.1]:{sshd.port} {' '.join(other_public.split()[:2])}\n"
    with pytest.raises(GitError) as raised:
        GitMirror(tmp_path / "cache", url, outbound=LOOPBACK).fetch(SshCredentials(sshd.client_key, wrong, SOURCE))
    assert str(raised.value).startswith(f"host key for 127.0.0.1:{sshd.port} does not match knownHosts")


def test_a_broken_private_key_is_named(tmp_path: Path, url: str, sshd: SshGitServer) -> None:
    lines = sshd.client_key.splitlines()
    broken = "\n".join([lines[0], lines[1][::-1], *lines[2:]]) + "\n"  # right armour, garbage inside
    with pytest.raises(GitError) as raised:
        GitMirror(tmp_path / "cache", url, outbound=LOOPBACK).fetch(SshCredentials(broken, sshd.known_hosts,
                                                                                   SOURCE))
    message = str(raised.value)
    assert message.startswith(f"the ssh private key from {SOURCE} is not a valid private key")
    assert all(line not in message for line in key_lines(broken))
