"""Private repositories (issue 4, item 1): SSH-only and HTTPS-with-token repositories reach Idle; wrong,
missing or incomplete credentials fail the repository's sync with a condition naming the cause — and no secret
ever shows in status, events or logs. Real git servers on loopback, real terraform."""

from __future__ import annotations

import base64
import json
import logging
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from kubernetes.client.exceptions import ApiException

from burrito_py.api import annotations as ann
from burrito_py.api.notifier import NOTIFIER_SECRET
from burrito_py.api.runner_secrets import RUNNER_SECRET
from burrito_py.git.credentials import TOKEN_USERNAME
from tests.support.git_repos import TestRepo, make_bare
from tests.support.git_servers import (
    HttpGitServer,
    SshGitServer,
    generate_ssh_key,
    running_http_git_server,
    running_ssh_git_server,
)

from .conftest import Platform, wait_for

TOKEN = "glpat-e2e-Token-0123456789"
PASSWORD = "e2e-Pa55word-$(whoami)"
WRONG_PASSWORD = "e2e-Wr0ng-password-77"


@pytest.fixture(autouse=True)
def _debug_logs(caplog: pytest.LogCaptureFixture) -> None:
    # Everything the controllers log, debug included, is checked for secrets.
    caplog.set_level(logging.DEBUG)


@pytest.fixture
def sshd(tmp_path: Path) -> Iterator[SshGitServer]:
    with running_ssh_git_server(tmp_path / "sshd") as server:
        yield server


@pytest.fixture
def token_server(tmp_path: Path, repo: TestRepo) -> Iterator[HttpGitServer]:
    repo.push(make_bare(tmp_path / "http-token" / "infra.git"))
    with running_http_git_server(tmp_path / "http-token", TOKEN_USERNAME, TOKEN) as server:
        yield server


@pytest.fixture
def password_server(tmp_path: Path, repo: TestRepo) -> Iterator[HttpGitServer]:
    repo.push(make_bare(tmp_path / "http-password" / "infra.git"))
    with running_http_git_server(tmp_path / "http-password", "alice", PASSWORD) as server:
        yield server


def ssh_upstream(tmp_path: Path, repo: TestRepo, sshd: SshGitServer) -> str:
    bare = tmp_path / "ssh-only" / "infra.git"
    repo.push(make_bare(bare))
    return sshd.url_for(bare)


# Where the tests' Secrets allow their credentials to go: the git servers on loopback (plain http and ssh).
LOOPBACK_HOSTS = {"allowedHosts": "127.0.0.1 http://127.0.0.1"}


def put_secret(platform: Platform, name: str, data: dict[str, str], namespace: str | None = None,
               open_to_runners: bool = False, open_to_notifiers: bool = False) -> None:
    """`open_to_runners`: a Secret meant for Terraform (varsFrom, runner env), annotated so (api/runner_secrets.py);
    `open_to_notifiers`: one a TerraformNotifier reads (api/notifier.py)."""
    namespace = namespace or platform.namespace
    body = {"apiVersion": "v1", "kind": "Secret", "metadata": {"name": name, "namespace": namespace},
            "type": "Opaque", "stringData": data}
    opened = {RUNNER_SECRET: "true"} if open_to_runners else {}
    if open_to_notifiers:
        opened[NOTIFIER_SECRET] = "true"
    if opened:
        body["metadata"]["annotations"] = opened
    try:
        platform.core.create_namespaced_secret(namespace, body)
    except ApiException as exc:
        if exc.status != 409:
            raise
        platform.core.replace_namespaced_secret(name, namespace, body)


def create_private_repository(platform: Platform, name: str, url: str, secret: str) -> None:
    platform.create_repository(name, url, repository={"url": url, "secretName": secret})


def repository(platform: Platform, name: str) -> dict[str, Any]:
    return platform.custom.get_namespaced_custom_object(ann.GROUP, ann.VERSION, platform.namespace,
                                                        "terraformrepositories", name)


def synced(platform: Platform, name: str) -> dict[str, Any] | None:
    for condition in (repository(platform, name).get("status") or {}).get("conditions") or ():
        if condition["type"] == "Synced":
            return dict(condition)
    return None


def wait_failed_sync(platform: Platform, name: str, reason: str, fragment: str) -> dict[str, Any]:
    def failed() -> dict[str, Any] | None:
        condition = synced(platform, name)
        if condition and condition["status"] == "False" and condition["reason"] == reason and \
                fragment in condition["message"]:
            return condition
        return None

    try:
        return wait_for(failed, 60, interval=0.2, what=f"{name}: failed sync {reason} mentioning {fragment!r}")
    except AssertionError:
        raise AssertionError(f"repository {name} status: {repository(platform, name).get('status')}") from None


def everything_people_can_read(platform: Platform, caplog: pytest.LogCaptureFixture) -> str:
    """Status of every repository and layer, every event, and every log record of this test."""
    repositories = platform.custom.list_namespaced_custom_object(ann.GROUP, ann.VERSION, platform.namespace,
                                                                 "terraformrepositories")["items"]
    layers = platform.custom.list_namespaced_custom_object(ann.GROUP, ann.VERSION, platform.namespace,
                                                           "terraformlayers")["items"]
    events = platform.core.list_namespaced_event(platform.namespace).items
    return "\n".join([
        json.dumps([{"status": o.get("status"), "annotations": o["metadata"].get("annotations")}
                    for o in repositories + layers]),
        "\n".join(f"{e.reason}: {e.message}" for e in events),
        caplog.text,
    ])


def assert_never_shown(text: str, secrets: list[str]) -> None:
    for secret in secrets:
        for form in (secret, base64.b64encode(secret.encode()).decode()):
            assert form not in text, "a secret (or its base64) is visible"


def key_lines(key: str) -> list[str]:
    return [line for line in key.splitlines() if line and not line.startswith("-----")]


def test_ssh_only_and_https_token_repositories_reach_idle(
    tmp_path: Path, platform: Platform, repo: TestRepo, sshd: SshGitServer, token_server: HttpGitServer,
    caplog: pytest.LogCaptureFixture,
) -> None:
    put_secret(platform, "ssh-creds", {**LOOPBACK_HOSTS, "sshPrivateKey": sshd.client_key,
                                       "knownHosts": sshd.known_hosts})
    put_secret(platform, "token-creds", {**LOOPBACK_HOSTS, "token": TOKEN, "webhookSecret": "unused-here"})
    create_private_repository(platform, "over-ssh", ssh_upstream(tmp_path, repo, sshd), "ssh-creds")
    create_private_repository(platform, "over-https", token_server.url_for("infra.git"), "token-creds")
    platform.create_layer("via-ssh", "over-ssh", "layers/app", auto_apply=True)
    platform.create_layer("via-https", "over-https", "layers/app", auto_apply=True)

    for layer in ("via-ssh", "via-https"):
        body = platform.wait_state(layer, "Idle", timeout=120)
        assert body["metadata"]["annotations"][ann.APPLY_COMMIT] == repo.head
    for name in ("over-ssh", "over-https"):
        assert (synced(platform, name) or {}).get("status") == "True"
    assert f"Accepted publickey for {sshd.user}" in sshd.log()
    assert any(authorized for _, _, authorized in token_server.requests)
    assert_never_shown(everything_people_can_read(platform, caplog), [TOKEN, *key_lines(sshd.client_key)])


def test_wrong_password_or_key_fails_the_sync_naming_the_cause_and_a_fixed_secret_recovers(
    tmp_path: Path, platform: Platform, repo: TestRepo, sshd: SshGitServer, password_server: HttpGitServer,
    caplog: pytest.LogCaptureFixture,
) -> None:
    stranger, _ = generate_ssh_key(tmp_path / "stranger")
    put_secret(platform, "https-creds", {**LOOPBACK_HOSTS, "username": "alice", "password": WRONG_PASSWORD})
    put_secret(platform, "ssh-creds", {**LOOPBACK_HOSTS, "sshPrivateKey": stranger,
                                       "knownHosts": sshd.known_hosts})
    https_url = password_server.url_for("infra.git")
    create_private_repository(platform, "over-https", https_url, "https-creds")
    create_private_repository(platform, "over-ssh", ssh_upstream(tmp_path, repo, sshd), "ssh-creds")
    platform.create_layer("via-https", "over-https", "layers/app")
    platform.create_layer("via-ssh", "over-ssh", "layers/app")

    https = wait_failed_sync(platform, "over-https", "FetchFailed", "authentication")
    assert https["message"] == (
        f"authentication to {https_url} failed: the server refused the username/password from Secret "
        f"{platform.namespace}/https-creds"
    )
    ssh = wait_failed_sync(platform, "over-ssh", "FetchFailed", "authentication")
    assert ssh["message"].endswith(f"failed: the server refused the ssh key from Secret {platform.namespace}/ssh-creds")
    assert repository(platform, "over-https")["status"]["state"] == "SyncNeeded"
    wait_for(lambda: "refused the username/password" in everything_people_can_read(platform, caplog), 10,
             what="a Warning event about the refused password")
    assert platform.runs() == []
    assert ann.BRANCH_COMMIT not in platform.annotations("via-https")
    assert_never_shown(everything_people_can_read(platform, caplog), [WRONG_PASSWORD, *key_lines(stranger)])

    put_secret(platform, "https-creds", {**LOOPBACK_HOSTS, "username": "alice", "password": PASSWORD})
    put_secret(platform, "ssh-creds", {**LOOPBACK_HOSTS, "sshPrivateKey": sshd.client_key,
                                       "knownHosts": sshd.known_hosts})
    for layer in ("via-https", "via-ssh"):
        platform.wait_state(layer, "ApplyNeeded", timeout=120)
    assert (synced(platform, "over-https") or {}).get("status") == "True"
    assert_never_shown(everything_people_can_read(platform, caplog),
                       [PASSWORD, WRONG_PASSWORD, *key_lines(stranger), *key_lines(sshd.client_key)])


def test_missing_secret_missing_key_and_unknown_host_are_named(
    tmp_path: Path, platform: Platform, repo: TestRepo, sshd: SshGitServer, password_server: HttpGitServer,
    caplog: pytest.LogCaptureFixture,
) -> None:
    https_url = password_server.url_for("infra.git")
    ssh_url = ssh_upstream(tmp_path, repo, sshd)
    put_secret(platform, "half", {**LOOPBACK_HOSTS, "username": "alice"})
    _, elsewhere = generate_ssh_key(tmp_path / "elsewhere")
    put_secret(platform, "no-host", {**LOOPBACK_HOSTS, "sshPrivateKey": sshd.client_key,
                                     "knownHosts": f"git.example.com {elsewhere}"})
    create_private_repository(platform, "absent-secret", https_url, "absent")
    create_private_repository(platform, "half-secret", https_url, "half")
    create_private_repository(platform, "unknown-host", ssh_url, "no-host")
    for name in ("absent-secret", "half-secret", "unknown-host"):
        platform.create_layer(f"{name}-layer", name, "layers/app")

    ns = platform.namespace
    condition = wait_failed_sync(platform, "absent-secret", "CredentialsInvalid", f"Secret {ns}/absent")
    assert condition["message"] == f"Secret {ns}/absent (spec.repository.secretName) does not exist"
    condition = wait_failed_sync(platform, "half-secret", "CredentialsInvalid", f"Secret {ns}/half")
    assert condition["message"] == f'Secret {ns}/half has "username" but no "password" for an HTTPS repository'
    condition = wait_failed_sync(platform, "unknown-host", "FetchFailed", "host key")
    assert condition["message"].startswith(f"host key for 127.0.0.1:{sshd.port} is not in knownHosts")
    assert platform.runs() == []
    assert_never_shown(everything_people_can_read(platform, caplog), key_lines(sshd.client_key))

    put_secret(platform, "absent", {**LOOPBACK_HOSTS, "username": "alice", "password": PASSWORD})
    platform.wait_state("absent-secret-layer", "ApplyNeeded", timeout=120)
    assert_never_shown(everything_people_can_read(platform, caplog), [PASSWORD])
