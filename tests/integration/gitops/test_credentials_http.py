"""GitMirror with HTTPS credentials against a real `git http-backend` behind basic auth on loopback."""

from __future__ import annotations

import logging
import traceback
from collections.abc import Iterator
from pathlib import Path

import pytest

from burrito_py.git.credentials import TOKEN_USERNAME, HttpsCredentials, credentials_from_data
from burrito_py.git.mirror import GitError, GitMirror
from burrito_py.outbound import LOOPBACK_NETWORKS, OutboundPolicy
from tests.support.git_repos import TestRepo, make_bare, make_repo, run_git
from tests.support.git_servers import HttpGitServer, running_http_git_server

PASSWORD = "pw-Zq81-'quoted'-$HOME-`x`"  # shell-special characters must reach the server unchanged
TOKEN = "ghp_testtoken0123456789abcdef"
SOURCE = "Secret default/git"
LOOPBACK = OutboundPolicy.of(LOOPBACK_NETWORKS)  # the servers listen on loopback: allowed explicitly
ALLOWED = {"allowedHosts": "http://127.0.0.1"}  # plain http: the test server has no TLS


@pytest.fixture
def work(tmp_path: Path) -> TestRepo:
    repo = make_repo(tmp_path / "work")
    repo.commit({"layers/app/main.tf": "# app\n"}, "add a layer")
    return repo


@pytest.fixture
def server(tmp_path: Path, work: TestRepo) -> Iterator[HttpGitServer]:
    work.push(make_bare(tmp_path / "srv" / "infra.git"))
    with running_http_git_server(tmp_path / "srv", "alice", PASSWORD) as srv:
        yield srv


@pytest.fixture
def token_server(tmp_path: Path, work: TestRepo) -> Iterator[HttpGitServer]:
    work.push(make_bare(tmp_path / "tok" / "infra.git"))
    with running_http_git_server(tmp_path / "tok", TOKEN_USERNAME, TOKEN) as srv:
        yield srv


def test_username_and_password_fetch(tmp_path: Path, server: HttpGitServer, work: TestRepo) -> None:
    mirror = GitMirror(tmp_path / "cache", server.url_for("infra.git"), outbound=LOOPBACK)
    mirror.fetch(credentials_from_data({"username": "alice", "password": PASSWORD + "\n", **ALLOWED}, mirror.url,
                                       SOURCE))
    assert mirror.branches() == {"main": work.head}
    assert any(authorized for _, _, authorized in server.requests)


def test_token_fetch_and_a_second_fetch_picks_up_new_commits(tmp_path: Path, token_server: HttpGitServer,
                                                              work: TestRepo) -> None:
    mirror = GitMirror(tmp_path / "cache", token_server.url_for("infra.git"), outbound=LOOPBACK)
    creds = credentials_from_data({"token": TOKEN, **ALLOWED}, mirror.url, SOURCE)
    mirror.fetch(creds)
    newer = work.commit({"layers/app/main.tf": "# v2\n"}, "change")
    work.push(str(token_server.root / "infra.git"))
    mirror.fetch(creds)
    assert mirror.resolve("main") == newer


def test_nothing_secret_is_stored_in_the_mirror(tmp_path: Path, server: HttpGitServer) -> None:
    mirror = GitMirror(tmp_path / "cache", server.url_for("infra.git"), outbound=LOOPBACK)
    mirror.fetch(HttpsCredentials("alice", PASSWORD, SOURCE))
    for path in mirror.path.rglob("*"):
        if path.is_file():
            assert PASSWORD.encode() not in path.read_bytes(), path
    assert PASSWORD not in run_git(mirror.path, "config", "--list")
    # What git sent over the wire: credentials in the Authorization header only, never in a path.
    assert all(PASSWORD not in request_path for _, request_path, _ in server.requests)


@pytest.mark.parametrize(("username", "password"), [("alice", "wrong-password-4711"), ("mallory", PASSWORD)])
def test_wrong_credentials_say_authentication_failed_without_the_secret(
    tmp_path: Path, server: HttpGitServer, username: str, password: str, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.DEBUG)
    mirror = GitMirror(tmp_path / "cache", server.url_for("infra.git"), outbound=LOOPBACK)
    with pytest.raises(GitError) as raised:
        mirror.fetch(HttpsCredentials(username, password, SOURCE))
    message = str(raised.value)
    assert message == (
        f"authentication to {server.url_for('infra.git')} failed: the server refused the username/password "
        f"from {SOURCE}"
    )
    assert password not in message
    assert password not in "".join(traceback.format_exception(raised.value))  # chained causes included
    assert password not in caplog.text
    assert not mirror.exists(), "a failed first fetch leaves no mirror behind"


def test_wrong_token_names_the_token(tmp_path: Path, token_server: HttpGitServer) -> None:
    mirror = GitMirror(tmp_path / "cache", token_server.url_for("infra.git"), outbound=LOOPBACK)
    with pytest.raises(GitError, match=f"the server refused the token from {SOURCE}$") as raised:
        mirror.fetch(credentials_from_data({"token": "ghp_wrongtoken999", **ALLOWED}, mirror.url, SOURCE))
    assert "ghp_wrongtoken999" not in str(raised.value)


def test_no_credentials_fail_fast_instead_of_prompting(tmp_path: Path, server: HttpGitServer) -> None:
    mirror = GitMirror(tmp_path / "cache", server.url_for("infra.git"), outbound=LOOPBACK, fetch_timeout=30)
    with pytest.raises(GitError, match="failed: no credentials"):
        mirror.fetch()


def test_credentials_in_the_url_are_never_stored_or_shown(tmp_path: Path, server: HttpGitServer) -> None:
    url = server.url_for("infra.git").replace("http://", f"http://alice:{'wrong-in-url-1234'}@")
    mirror = GitMirror(tmp_path / "cache", url, outbound=LOOPBACK)
    with pytest.raises(GitError) as raised:
        mirror.fetch()
    assert "wrong-in-url-1234" not in str(raised.value)
    assert "wrong-in-url-1234" not in repr(mirror) and "wrong-in-url-1234" not in str(mirror.path)
