"""Credentials from a Secret's keys (pure), and the per-fetch environment that hands them to git."""

from __future__ import annotations

import base64
import shlex
import stat
import subprocess
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from burrito_py.git.credentials import (
    TOKEN_USERNAME,
    CredentialsError,
    HttpsCredentials,
    SshCredentials,
    credentials_from_data,
    credentials_from_secret,
    git_environment,
    scrub,
    transport,
)
from burrito_py.git.pinning import Pin

SOURCE = "Secret team/git"
HTTPS = "https://git.example.com/org/infra.git"
SSH = "ssh://git@git.example.com:2222/org/infra.git"
SCP = "git@git.example.com:org/infra.git"
KEY = (
    "-----BEGIN OPENSSH PRIVATE KEY-----\n"
    "b3BlbnNzaC1rZXktdjEAAAAABG5vbmUAAAAEbm9uZQ\n"
    "-----END OPENSSH PRIVATE KEY-----\n"
)


def secret(data: dict[str, str]) -> dict[str, object]:
    encoded = {k: base64.b64encode(v.encode()).decode() for k, v in data.items()}
    return {"apiVersion": "v1", "kind": "Secret", "metadata": {"name": "git", "namespace": "team"}, "data": encoded}


@pytest.mark.parametrize(
    ("url", "expected"),
    [(HTTPS, "https"), ("http://h/x", "https"), (SSH, "ssh"), (SCP, "ssh"), ("file:///srv/x", "other"),
     ("git://h/x", "other")],
)
def test_transport(url: str, expected: str) -> None:
    assert transport(url) == expected


ALLOWED = {"allowedHosts": "git.example.com"}  # every Secret with credentials names where they may go


def test_username_and_password() -> None:
    creds = credentials_from_secret(secret({"username": "alice", "password": "pa55\n", **ALLOWED}), HTTPS)
    assert creds == HttpsCredentials("alice", "pa55", SOURCE, "username/password")


def test_token_uses_the_conventional_user_name_unless_one_is_given() -> None:
    assert credentials_from_data({"token": "tok", **ALLOWED}, HTTPS, SOURCE) == HttpsCredentials(
        TOKEN_USERNAME, "tok", SOURCE, "token"
    )
    assert credentials_from_data({"token": "tok", "username": "ci", **ALLOWED}, HTTPS, SOURCE) == HttpsCredentials(
        "ci", "tok", SOURCE, "token"
    )


def test_ssh_key_with_and_without_known_hosts() -> None:
    creds = credentials_from_data({"sshPrivateKey": KEY, "knownHosts": "h ssh-ed25519 AAAA\n", **ALLOWED}, SCP,
                                  SOURCE)
    assert creds == SshCredentials(KEY, "h ssh-ed25519 AAAA\n", SOURCE)
    assert credentials_from_data({"sshPrivateKey": KEY, **ALLOWED}, SSH, SOURCE) == SshCredentials(KEY, None, SOURCE)


def test_a_secret_without_git_keys_or_a_local_url_means_anonymous() -> None:
    assert credentials_from_data({"webhookSecret": "hook"}, HTTPS, SOURCE) is None
    assert credentials_from_data({"token": "tok"}, "file:///srv/repo", SOURCE) is None


@pytest.mark.parametrize(
    ("data", "url", "names"),
    [
        ({"username": "alice"}, HTTPS, ['"username" but no "password"']),
        ({"password": "hunter2-secret"}, HTTPS, ['"password" but no "username"']),
        ({"sshPrivateKey": KEY}, HTTPS, ['no "token" or "username"/"password"', "sshPrivateKey"]),
        ({"token": "tok-secret-value"}, SSH, ['no "sshPrivateKey"', "token"]),
        ({"knownHosts": "h ssh-ed25519 AAAA"}, SCP, ['no "sshPrivateKey"', "knownHosts"]),
        ({"sshPrivateKey": "not-a-key-secret-text"}, SSH, ['"sshPrivateKey" is not a PEM or OpenSSH private key']),
        ({"username": "alice-user", "password": "line1\nline2-secret"}, HTTPS, ['"password" contains a line break']),
    ],
)
def test_unusable_secrets_name_the_secret_and_key_never_a_value(data: dict[str, str], url: str,
                                                                 names: list[str]) -> None:
    with pytest.raises(CredentialsError) as raised:
        credentials_from_data(data, url, SOURCE)
    message = str(raised.value)
    assert SOURCE in message
    for name in names:
        assert name in message
    for value in data.values():
        assert value not in message


def test_data_that_is_not_base64_names_the_key() -> None:
    body = {"metadata": {"name": "git", "namespace": "team"}, "data": {"password": "%%%not base64"}}
    with pytest.raises(CredentialsError, match='Secret team/git: key "password" is not base64'):
        credentials_from_secret(body, HTTPS)


def test_repr_never_shows_a_secret() -> None:
    assert "pa55word" not in repr(HttpsCredentials("alice", "pa55word"))
    assert "b3BlbnNzaC1rZXkt" not in repr(SshCredentials(KEY, None))


@given(st.text(alphabet="abcdefXYZ0123456789-_.~!$%&*+,;=:@/", min_size=4, max_size=40))
def test_scrub_removes_the_secret_wherever_it_appears(password: str) -> None:
    creds = HttpsCredentials("alice", password)
    text = f"fatal: could not use {password} for https://alice:{password}@host/x ({password})"
    assert password not in scrub(text, creds)


def test_https_environment_drops_machine_helpers_and_answers_get_only(tmp_path: Path) -> None:
    creds = HttpsCredentials("alice", "pa55 'quoted' $HOME `x`")
    with git_environment(creds, Pin("https", "https://git.example.com")) as env:
        assert env["GIT_CONFIG_KEY_0"] == "credential.helper" and env["GIT_CONFIG_VALUE_0"] == ""
        # Our helper answers for the URL's origin only: git never asks it about another host.
        assert env["GIT_CONFIG_KEY_1"] == "credential.https://git.example.com.helper"
        assert env["NO_PROXY"] == "*"
        helper = env["GIT_CONFIG_VALUE_1"]
        assert creds.password not in helper  # the value travels in the environment only
        # Run the helper the way git does: `sh -c '<helper without !> <action>'`.
        def ask(action: str) -> str:
            result = subprocess.run(["sh", "-c", f"{helper[1:]} {action}"], env=env, input="protocol=https\n\n",
                                    capture_output=True, text=True, check=True)
            return result.stdout
        assert ask("get") == f"username=alice\npassword={creds.password}\n"
        assert ask("store") == ""
        assert ask("erase") == ""


def test_pin_config_travels_with_the_helper_and_an_anonymous_fetch_drops_machine_helpers_too() -> None:
    pin = Pin("https", "http://h:8080", (("http.followRedirects", "false"), ("http.curloptResolve", "h:8080:1.2.3.4")))
    with git_environment(None, pin) as env:
        count = int(env["GIT_CONFIG_COUNT"])
        pairs = [(env[f"GIT_CONFIG_KEY_{i}"], env[f"GIT_CONFIG_VALUE_{i}"]) for i in range(count)]
    assert pairs == [("credential.helper", ""), *pin.config]


def ssh_options(command: list[str]) -> dict[str, str]:
    return {command[i + 1].split("=", 1)[0]: command[i + 1].split("=", 1)[1]
            for i, word in enumerate(command) if word == "-o"}


SSH_PIN = Pin("ssh", ssh_options=("-o", "HostName=192.0.2.7", "-o", "HostKeyAlias=[git.example.com]:2222"))


def test_ssh_environment_writes_private_files_and_removes_them() -> None:
    creds = SshCredentials(KEY.replace("\n", "\r\n").rstrip(), "[127.0.0.1]:2222 ssh-ed25519 AAAA")
    with git_environment(creds, SSH_PIN) as env:
        command = shlex.split(env["GIT_SSH_COMMAND"])
        key = Path(command[command.index("-i") + 1])
        options = ssh_options(command)
        known_hosts = Path(options["UserKnownHostsFile"])
        assert options["StrictHostKeyChecking"] == "yes" and options["IdentitiesOnly"] == "yes"
        assert options["BatchMode"] == "yes" and options["GlobalKnownHostsFile"] == "/dev/null"
        assert options["HostName"] == "192.0.2.7" and options["HostKeyAlias"] == "[git.example.com]:2222"
        assert key.read_text() == KEY  # CRLF and a missing final newline are what ssh refuses
        assert known_hosts.read_text() == "[127.0.0.1]:2222 ssh-ed25519 AAAA\n"
        assert stat.S_IMODE(key.stat().st_mode) == 0o600
        assert stat.S_IMODE(known_hosts.stat().st_mode) == 0o600
        assert stat.S_IMODE(key.parent.stat().st_mode) == 0o700
        directory = key.parent
    assert not directory.exists()


def test_ssh_environment_without_known_hosts_keeps_strict_checking() -> None:
    with git_environment(SshCredentials(KEY, None), SSH_PIN) as env:
        command = env["GIT_SSH_COMMAND"]
        assert "StrictHostKeyChecking=yes" in command
        assert "UserKnownHostsFile" not in command


def test_anonymous_ssh_is_pinned_and_ignores_the_machine_ssh_config() -> None:
    with git_environment(None, SSH_PIN) as env:
        command = shlex.split(env["GIT_SSH_COMMAND"])
    assert command[:3] == ["ssh", "-F", "/dev/null"] and "-i" not in command
    assert ssh_options(command)["HostName"] == "192.0.2.7"
