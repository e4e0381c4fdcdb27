"""Pull request API credentials from a repository's Secret, against a fake GitHub on loopback that checks the
App's JWT (RS256 signature, issuer, lifetime) before handing out installation tokens: the token reaches the
client's calls, is cached until 5 minutes before it expires, one exchange serves concurrent callers, and no
message ever holds a token, a JWT or key material. Also the default API URLs and project paths."""

from __future__ import annotations

import base64
import json
import re
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from datetime import UTC, datetime
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import pytest
from cryptography.exceptions import InvalidSignature
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec, padding, rsa

from burrito_py.git.allowed_hosts import HostNotAllowed
from burrito_py.gitproviders.bitbucket import BitbucketCloud
from burrito_py.gitproviders.client import CommitStatus, ProviderError
from burrito_py.gitproviders.gitea import Gitea
from burrito_py.gitproviders.github import GitHub
from burrito_py.gitproviders.gitlab import GitLab
from burrito_py.outbound import LOOPBACK_NETWORKS, OutboundPolicy, OutboundRefused
from burrito_py.pullrequests.credentials import (
    CredentialsError,
    GitHubAppTokens,
    StaticToken,
    client_for,
    default_api_url,
    project_of,
    provider_token_source,
)

APP_ID = "424242"
INSTALLATION_ID = "9876543"
SHA = "0123456789abcdef0123456789abcdef01234567"
START = 1_700_000_000.0


@pytest.fixture(scope="module")
def app_key() -> rsa.RSAPrivateKey:
    return rsa.generate_private_key(public_exponent=65537, key_size=2048)


def pem_of(key: rsa.RSAPrivateKey) -> str:
    # What GitHub hands out when an App's private key is generated: PKCS#1 ("BEGIN RSA PRIVATE KEY").
    return key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.TraditionalOpenSSL,
                             serialization.NoEncryption()).decode()


# Where the Secrets of these tests allow their credentials to go: the hosts the tests name, and the fakes.
ALLOWED_HOSTS = "x api.github.com gitea.example gitlab.com http://127.0.0.1"
LOOPBACK = OutboundPolicy.of(LOOPBACK_NETWORKS)  # the fakes listen on loopback: allowed explicitly


def secret(**data: str) -> dict[str, Any]:
    data = {"allowedHosts": ALLOWED_HOSTS, **data}
    return {"apiVersion": "v1", "kind": "Secret", "metadata": {"namespace": "team-a", "name": "infra-git"},
            "data": {key: base64.b64encode(value.encode()).decode() for key, value in data.items()}}


def app_secret(key: rsa.RSAPrivateKey, **more: str) -> dict[str, Any]:
    return secret(githubAppId=APP_ID, githubAppInstallationId=INSTALLATION_ID, githubAppPrivateKey=pem_of(key),
                  **more)


@dataclass
class FakeGitHub:
    """The App exchange and the issue comment and status routes. `clock` dates the tokens it hands out."""

    public_key: rsa.RSAPublicKey
    clock: list[float]
    exchanges: list[str] = field(default_factory=list)  # the JWT of each exchange asked
    issued: list[str] = field(default_factory=list)
    auth: list[tuple[str, str]] = field(default_factory=list)  # (path, Authorization) of the repository calls
    refuse: bool = False
    delay: float = 0.0
    lock: threading.Lock = field(default_factory=threading.Lock)

    def check_jwt(self, jwt: str) -> str | None:
        """Why GitHub would refuse `jwt`, or None."""
        parts = jwt.split(".")
        if len(parts) != 3 or any("=" in part for part in parts):
            return "not three base64url parts without padding"
        header, claims = (json.loads(base64.urlsafe_b64decode(p + "=" * (-len(p) % 4))) for p in parts[:2])
        signature = base64.urlsafe_b64decode(parts[2] + "=" * (-len(parts[2]) % 4))
        try:
            self.public_key.verify(signature, f"{parts[0]}.{parts[1]}".encode(), padding.PKCS1v15(), hashes.SHA256())
        except InvalidSignature:
            return "bad signature"
        if header != {"alg": "RS256", "typ": "JWT"}:
            return f"header {header}"
        if claims.get("iss") != APP_ID or not isinstance(claims.get("iat"), int):
            return f"claims {claims}"
        if not 0 < claims["exp"] - claims["iat"] <= 600:
            return "'Expiration time' claim ('exp') is too far in the future"
        return None


def handler(fake: FakeGitHub) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        def log_message(self, *_: Any) -> None:
            pass

        def _answer(self, status: int, body: Any) -> None:
            data = json.dumps(body).encode()
            self.send_response(status)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

        def do_POST(self) -> None:
            length = int(self.headers.get("Content-Length") or 0)
            body = json.loads(self.rfile.read(length)) if length else {}
            authorization = self.headers.get("Authorization") or ""
            if self.path == f"/app/installations/{INSTALLATION_ID}/access_tokens":
                jwt = authorization.removeprefix("Bearer ")
                with fake.lock:
                    fake.exchanges.append(jwt)
                time.sleep(fake.delay)  # lets concurrent callers pile up behind the first exchange
                if self.headers.get("Accept") != "application/vnd.github+json" or \
                        self.headers.get("X-GitHub-Api-Version") != "2022-11-28":
                    return self._answer(415, {"message": "unexpected headers"})
                if fake.refuse:  # echoes what it got, as a careless proxy might: the client must scrub it
                    return self._answer(401, {"message": f"Bad credentials: {authorization}"})
                problem = fake.check_jwt(jwt)
                if problem:
                    return self._answer(401, {"message": problem})
                with fake.lock:
                    token = f"ghs_installation{len(fake.issued) + 1:04d}"
                    fake.issued.append(token)
                expires = datetime.fromtimestamp(fake.clock[0] + 3600, UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
                return self._answer(201, {"token": token, "expires_at": expires, "permissions": {}})
            fake.auth.append((self.path, authorization))
            if self.path == "/repos/o/r/issues/1/comments":
                return self._answer(201, {"id": 7, "body": body["body"]})
            if re.fullmatch(r"/repos/o/r/statuses/[0-9a-f]+", self.path):
                return self._answer(201, {"id": 1, **body})
            return self._answer(404, {"message": "Not Found"})

    return Handler


@pytest.fixture
def github(app_key: rsa.RSAPrivateKey) -> Iterator[tuple[FakeGitHub, str]]:
    fake = FakeGitHub(app_key.public_key(), [START])
    server = ThreadingHTTPServer(("127.0.0.1", 0), handler(fake))
    threading.Thread(target=server.serve_forever, daemon=True).start()
    yield fake, f"http://127.0.0.1:{server.server_address[1]}"
    server.shutdown()
    server.server_close()


def app_tokens(fake: FakeGitHub, url: str, key: rsa.RSAPrivateKey) -> GitHubAppTokens:
    return GitHubAppTokens(url, APP_ID, INSTALLATION_ID, pem_of(key), now=lambda: fake.clock[0], outbound=LOOPBACK)


def test_the_installation_token_authorizes_the_clients_calls(github: tuple[FakeGitHub, str],
                                                             app_key: rsa.RSAPrivateKey) -> None:
    fake, url = github
    tokens = provider_token_source(app_secret(app_key), "github", url, "infra-git", outbound=LOOPBACK)
    assert isinstance(tokens, GitHubAppTokens)
    client = client_for("github", url, "o/r", 1, tokens, outbound=LOOPBACK)
    assert isinstance(client, GitHub)
    assert client.create_comment("hello") == "7"
    client.set_status(SHA, CommitStatus("burrito-py", "success", "1 layers planned"), None)
    # The exchange's JWT passed the fake's checks (a refused one would have raised), and its token was used.
    assert len(fake.exchanges) == 1 and fake.issued == ["ghs_installation0001"]
    assert fake.auth == [("/repos/o/r/issues/1/comments", "Bearer ghs_installation0001"),
                         (f"/repos/o/r/statuses/{SHA}", "Bearer ghs_installation0001")]


def test_the_token_is_cached_until_five_minutes_before_it_expires(github: tuple[FakeGitHub, str],
                                                                  app_key: rsa.RSAPrivateKey) -> None:
    fake, url = github
    tokens = app_tokens(fake, url, app_key)
    first = tokens.token()
    fake.clock[0] += 1800
    assert tokens.token() == first and len(fake.exchanges) == 1
    fake.clock[0] = START + 3600 - 301  # 5 minutes and a second left
    assert tokens.token() == first and len(fake.exchanges) == 1
    fake.clock[0] = START + 3600 - 299  # less than 5 minutes left: a new one
    second = tokens.token()
    assert second != first and len(fake.exchanges) == 2
    assert tokens.token() == second and len(fake.exchanges) == 2
    # Each exchange signs a JWT of its own moment.
    claims = [json.loads(base64.urlsafe_b64decode(jwt.split(".")[1] + "==")) for jwt in fake.exchanges]
    assert [c["iat"] for c in claims] == [int(START) - 60, int(START + 3600 - 299) - 60]
    assert all(c["exp"] - c["iat"] == 600 and c["iss"] == APP_ID for c in claims)


def test_concurrent_callers_share_one_exchange(github: tuple[FakeGitHub, str], app_key: rsa.RSAPrivateKey) -> None:
    fake, url = github
    fake.delay = 0.3
    tokens = app_tokens(fake, url, app_key)
    barrier = threading.Barrier(8)
    got: list[str] = []

    def ask() -> None:
        barrier.wait()
        got.append(tokens.token())

    threads = [threading.Thread(target=ask) for _ in range(8)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(10)
    assert got == ["ghs_installation0001"] * 8 and len(fake.exchanges) == 1


def test_a_refused_exchange_names_the_call_and_status_but_no_secret(github: tuple[FakeGitHub, str],
                                                                    app_key: rsa.RSAPrivateKey) -> None:
    fake, url = github
    fake.refuse = True
    tokens = provider_token_source(app_secret(app_key), "github", url, "infra-git", outbound=LOOPBACK)
    with pytest.raises(ProviderError) as refused:
        client_for("github", url, "o/r", 1, tokens, outbound=LOOPBACK)
    message = str(refused.value)
    assert "401" in message and f"installation {INSTALLATION_ID} access token" in message
    jwt = fake.exchanges[0]
    assert jwt not in message and jwt.split(".")[2] not in message and "PRIVATE KEY" not in message
    assert not any(line in message for line in pem_of(app_key).splitlines()[1:-1])
    assert fake.auth == []  # nothing was called without a token


def test_an_unreachable_api_is_a_provider_error(app_key: rsa.RSAPrivateKey) -> None:
    server = ThreadingHTTPServer(("127.0.0.1", 0), BaseHTTPRequestHandler)
    port = server.server_address[1]
    server.server_close()  # nothing listens there any more
    tokens = GitHubAppTokens(f"http://127.0.0.1:{port}", APP_ID, INSTALLATION_ID, pem_of(app_key), http_timeout=5,
                             outbound=LOOPBACK)
    with pytest.raises(ProviderError, match=r"access token: could not connect$"):
        tokens.token()


def test_an_api_url_the_secret_does_not_name_gets_neither_a_token_nor_a_jwt(github: tuple[FakeGitHub, str],
                                                                           app_key: rsa.RSAPrivateKey) -> None:
    """A tenant points `pullRequests.apiUrl` at a host they run: nothing is built for it, so nothing is sent."""
    fake, url = github
    attacker = url.replace("127.0.0.1", "127.0.0.2")  # another host, as far as the Secret is concerned
    for data in (app_secret(app_key), secret(apiToken="api-token-value")):
        with pytest.raises(HostNotAllowed) as refused:
            provider_token_source(data, "github", attacker, "infra-git", outbound=LOOPBACK)
        assert str(refused.value).startswith(
            'Secret team-a/infra-git does not allow its credentials to go to http://127.0.0.2:')
        assert '"allowedHosts"' in str(refused.value) and "api-token-value" not in str(refused.value)
    assert fake.exchanges == [] and fake.auth == []


def test_the_guard_refuses_an_internal_api_before_any_call(app_key: rsa.RSAPrivateKey) -> None:
    tokens = GitHubAppTokens("http://169.254.169.254/api/v3", APP_ID, INSTALLATION_ID, pem_of(app_key))
    with pytest.raises(OutboundRefused, match=r"169\.254\.169\.254 is a link-local address"):
        tokens.token()
    with pytest.raises(OutboundRefused, match=r"127\.0\.0\.1 is a loopback address"):
        client_for("gitea", "http://127.0.0.1:3000/api/v1", "o/r", 1, StaticToken("t")).list_comments()


def test_api_token_beats_token_and_app_keys_beat_both(app_key: rsa.RSAPrivateKey) -> None:
    both = secret(apiToken="api-token-value", token="git-token-value\n")
    for provider in ("github", "gitlab", "gitea"):
        assert provider_token_source(both, provider, "https://x", "infra-git").token() == "api-token-value"
    only_git = provider_token_source(secret(token="git-token-value\n"), "gitea", "https://x", "infra-git")
    assert isinstance(only_git, StaticToken) and only_git.token() == "git-token-value"
    assert "git-token-value" not in repr(only_git)
    with_app = app_secret(app_key, apiToken="api-token-value")
    assert isinstance(provider_token_source(with_app, "github", "https://x", "infra-git"), GitHubAppTokens)
    # GitHub App keys mean nothing to GitLab: its token is used.
    assert provider_token_source(with_app, "gitlab", "https://x", "infra-git").token() == "api-token-value"


def test_client_for_builds_each_providers_client() -> None:
    tokens = StaticToken("tok")
    github = client_for("github", "https://api.github.com", "org/sub/repo", 3, tokens)
    assert isinstance(github, GitHub) and (github.owner, github.repo, github.number) == ("org/sub", "repo", 3)
    gitea = client_for("gitea", "https://gitea.example/api/v1", "team/infra", 4, tokens)
    assert isinstance(gitea, Gitea) and gitea.http._client.headers["Authorization"] == "token tok"
    gitlab = client_for("gitlab", "https://gitlab.com/api/v4", "group/sub/infra", 5, tokens)
    assert isinstance(gitlab, GitLab) and gitlab.project == "group/sub/infra"
    bitbucket = client_for("bitbucket", "https://api.bitbucket.org/2.0", "team/infra", 6, tokens)
    assert isinstance(bitbucket, BitbucketCloud) and (bitbucket.workspace, bitbucket.repo) == ("team", "infra")
    assert bitbucket.http._client.headers["Authorization"] == "Bearer tok"
    with pytest.raises(ValueError, match="bitbucket project 'team/sub/infra' is not workspace/repository"):
        client_for("bitbucket", "https://api.bitbucket.org/2.0", "team/sub/infra", 1, tokens)
    with pytest.raises(ValueError, match="'sourcehut'"):
        client_for("sourcehut", "https://git.sr.ht", "o/r", 1, tokens)
    with pytest.raises(ValueError, match="owner/repo"):
        client_for("github", "https://api.github.com", "repo", 1, tokens)


def test_no_usable_key_names_the_secret_and_the_keys() -> None:
    with pytest.raises(CredentialsError) as missing:
        provider_token_source(secret(webhookSecret="hook-secret-value", username="bot"), "github", "https://x",
                              "infra-git")
    message = str(missing.value)
    assert message == ("Secret team-a/infra-git (spec.repository.secretName) has no apiToken or token key "
                       "(or GitHub App keys) for the pull request API")
    with pytest.raises(CredentialsError, match="no apiToken or token key for") as gitlab:
        provider_token_source(secret(apiToken="  \n"), "gitlab", "https://x", "infra-git")
    assert "hook-secret-value" not in str(gitlab.value)
    with pytest.raises(CredentialsError, match="names no Secret"):
        provider_token_source(None, "github", "https://x", "")
    with pytest.raises(CredentialsError, match='"apiToken" is not base64'):
        provider_token_source({"metadata": {"namespace": "n", "name": "s"}, "data": {"apiToken": "%%%"}}, "github",
                              "https://x", "s")


@pytest.mark.parametrize("missing", ["githubAppId", "githubAppInstallationId", "githubAppPrivateKey"])
def test_partial_app_keys_name_the_missing_key(missing: str, app_key: rsa.RSAPrivateKey) -> None:
    partial = app_secret(app_key, token="git-token-value")
    del partial["data"][missing]
    with pytest.raises(CredentialsError) as refused:
        provider_token_source(partial, "github", "https://x", "infra-git")
    message = str(refused.value)
    assert f'no "{missing}"' in message and "team-a/infra-git" in message
    values = [APP_ID, INSTALLATION_ID, "git-token-value", "PRIVATE KEY", *pem_of(app_key).splitlines()[1:-1]]
    assert not any(value in message for value in values)


@pytest.mark.parametrize("pem", [
    "not a key at all",
    "-----BEGIN RSA PRIVATE KEY-----\nMIIEowIBAAKCAQEAtruncated\n-----END RSA PRIVATE KEY-----\n",
    ec.generate_private_key(ec.SECP256R1()).private_bytes(
        serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()).decode(),
], ids=["text", "truncated", "ec-key"])
def test_an_invalid_private_key_names_the_key(pem: str) -> None:
    with pytest.raises(CredentialsError) as refused:
        provider_token_source(secret(githubAppId=APP_ID, githubAppInstallationId=INSTALLATION_ID,
                                     githubAppPrivateKey=pem), "github", "https://x", "infra-git")
    message = str(refused.value)
    assert '"githubAppPrivateKey"' in message and "team-a/infra-git" in message
    assert not any(line in message for line in pem.splitlines() if line.strip())


@pytest.mark.parametrize(("provider", "url", "api"), [
    ("github", "https://github.com/o/r.git", "https://api.github.com"),
    ("github", "https://GitHub.com/o/r", "https://api.github.com"),
    ("github", "ssh://git@github.com/o/r.git", "https://api.github.com"),
    ("github", "git@github.com:o/r.git", "https://api.github.com"),
    ("github", "https://ghe.example.com/o/r.git", "https://ghe.example.com/api/v3"),
    ("github", "git@ghe.example.com:o/r.git", "https://ghe.example.com/api/v3"),
    ("gitlab", "https://gitlab.com/group/sub/r.git", "https://gitlab.com/api/v4"),
    ("gitlab", "ssh://git@gitlab.example.com:2222/group/r.git", "https://gitlab.example.com/api/v4"),
    ("gitlab", "git@gitlab.example.com:group/sub/r.git", "https://gitlab.example.com/api/v4"),
    ("gitea", "https://gitea.example.com/o/r.git", "https://gitea.example.com/api/v1"),
    ("gitea", "http://localhost:3000/o/r.git", "http://localhost:3000/api/v1"),
    ("gitea", "git@gitea.example.com:o/r.git", "https://gitea.example.com/api/v1"),
    ("gitea", "https://user:secret@gitea.example.com/o/r.git", "https://gitea.example.com/api/v1"),
    ("bitbucket", "https://bitbucket.org/team/r.git", "https://api.bitbucket.org/2.0"),
    ("bitbucket", "git@bitbucket.org:team/r.git", "https://api.bitbucket.org/2.0"),
    ("bitbucket-datacenter", "ssh://git@bitbucket.example:7999/team/r.git", "https://bitbucket.example/rest"),
    ("bitbucket-datacenter", "https://bitbucket.example:8443/scm/team/r.git", "https://bitbucket.example:8443/rest"),
])
def test_default_api_url(provider: str, url: str, api: str) -> None:
    assert default_api_url(provider, url) == api


@pytest.mark.parametrize(("url", "project"), [
    ("https://github.com/o/r.git", "o/r"),
    ("https://github.com/Org/Repo/", "Org/Repo"),
    ("ssh://git@github.com/o/r.git", "o/r"),
    ("git@github.com:o/r.git", "o/r"),
    ("https://gitlab.com/group/subgroup/repo.git", "group/subgroup/repo"),
    ("git@gitlab.example.com:group/subgroup/repo.git", "group/subgroup/repo"),
    ("ssh://git@gitlab.example.com:2222/group/repo", "group/repo"),
])
def test_project_of(url: str, project: str) -> None:
    assert project_of(url) == project


@pytest.mark.parametrize("url", ["file:///srv/repo.git", "https://github.com/", "not a url", "-oProxy=x:y"])
def test_urls_without_a_project_are_refused(url: str) -> None:
    with pytest.raises(ValueError):
        project_of(url)


@pytest.mark.parametrize(("provider", "url"), [
    ("github", "file:///srv/repo.git"), ("gitlab", "not a url"), ("gitea", "-oProxy=x:y"),
    ("sourcehut", "https://git.sr.ht/~o/r"),
])
def test_urls_or_providers_without_an_api_are_refused(provider: str, url: str) -> None:
    with pytest.raises(ValueError, match=r"file://|sourcehut|repository URL"):
        default_api_url(provider, url)
