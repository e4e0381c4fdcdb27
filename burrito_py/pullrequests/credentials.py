"""Credentials for the pull request APIs, read from the repository's Secret, and the client they open.

Keys of the Secret named in `spec.repository.secretName`:

- `apiToken`, else `token` (the key git's HTTPS fetches use too): a static token sent to the provider's API;
- for a provider that takes them (its module's `github_app`: GitHub): `githubAppId`, `githubAppInstallationId` and
  `githubAppPrivateKey` (PEM), all three or none: a GitHub App installation token, exchanged for a JWT the App
  signs (RS256) and renewed before it expires. App keys win over a token when a Secret holds both.
- `allowedHosts`: the hosts these may be sent to (git/allowed_hosts.py); the API URL's host must be among them
  (`api.github.com` for github.com), else nothing is built and nothing is sent.

Also here, asking the provider's module (`burrito_py/gitproviders/`): its default API URL and its client; and the
project path (`owner/repo`, `group/subgroup/repo`) from the repository URL. No message ever holds a token, a JWT
or key material: errors name the Secret and the key.
"""

from __future__ import annotations

import base64
import json
import threading
import time
from collections.abc import Callable, Mapping
from datetime import UTC, datetime
from typing import Any, Protocol
from urllib.parse import SplitResult, quote, urlsplit

import httpx
from cryptography.exceptions import UnsupportedAlgorithm
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import padding, rsa

from burrito_py.git.allowed_hosts import check_destination
from burrito_py.git.credentials import CredentialsError as GitCredentialsError
from burrito_py.git.credentials import decode_secret_data
from burrito_py.git.urls import is_file_url, normalize_url
from burrito_py.gitproviders import registry
from burrito_py.gitproviders.client import ProviderClient, ProviderError, connection_failure
from burrito_py.outbound import GuardedTransport, OutboundPolicy

__all__ = [
    "APP_KEYS",
    "KEY_API_TOKEN",
    "KEY_APP_ID",
    "KEY_APP_INSTALLATION_ID",
    "KEY_APP_PRIVATE_KEY",
    "KEY_TOKEN",
    "CredentialsError",
    "GitHubAppTokens",
    "StaticToken",
    "TokenSource",
    "client_for",
    "default_api_url",
    "project_of",
    "provider_token_source",
]

KEY_API_TOKEN = "apiToken"  # noqa: S105 - the name of a Secret key
KEY_TOKEN = "token"  # noqa: S105 - the name of a Secret key (the same one git's HTTPS fetches read)
KEY_APP_ID = "githubAppId"
KEY_APP_INSTALLATION_ID = "githubAppInstallationId"
KEY_APP_PRIVATE_KEY = "githubAppPrivateKey"
APP_KEYS = (KEY_APP_ID, KEY_APP_INSTALLATION_ID, KEY_APP_PRIVATE_KEY)

# GitHub refuses an App JWT whose lifetime exceeds 10 minutes; issuing it 60 s in the past allows for clock drift.
_JWT_BACKDATE = 60
_JWT_LIFETIME = 540
# An installation token lives an hour; renewing with 5 minutes left means no call ever carries an expired one.
RENEW_BEFORE = 300.0


class CredentialsError(ValueError):
    """The Secret gives no usable pull request API credentials. The message names the Secret and key, never a
    value."""


class TokenSource(Protocol):
    """Where a client's token comes from, asked once per client (a client lives for one update)."""

    def token(self) -> str: ...


class StaticToken:
    """A token as the Secret holds it."""

    def __init__(self, value: str) -> None:
        self._value = value

    def __repr__(self) -> str:
        return "StaticToken(***)"

    def token(self) -> str:
        return self._value


class GitHubAppTokens:
    """A GitHub App's installation tokens: a JWT signed with the App's key, exchanged for an installation token
    that is cached until 5 minutes before it expires. Thread-safe: concurrent callers share one exchange."""

    def __init__(self, api_url: str, app_id: str, installation_id: str, private_key: str, *, source: str = "",
                 http_timeout: float = 30.0, now: Callable[[], float] = time.time,
                 outbound: OutboundPolicy = OutboundPolicy()) -> None:  # noqa: B008 - frozen: nothing internal
        self.api_url = api_url.rstrip("/")
        self._outbound = outbound
        self.app_id = app_id
        self.installation_id = installation_id
        self._key = _rsa_key(private_key, source)
        self._timeout = http_timeout
        self._now = now
        self._lock = threading.Lock()
        self._token: str | None = None
        self._expires_at = 0.0
        self.exchanges = 0  # how many tokens were asked for (tests and metrics)

    def __repr__(self) -> str:
        return f"GitHubAppTokens(app={self.app_id}, installation={self.installation_id})"

    def token(self) -> str:
        # One lock around the exchange too: callers arriving while it runs wait and then find the fresh token.
        with self._lock:
            if self._token is None or self._expires_at - self._now() < RENEW_BEFORE:
                self._token, self._expires_at = self._exchange()
            return self._token

    def jwt(self) -> str:
        """The App's JWT (RS256): `iat` 60 s ago, `exp` in 9 minutes, `iss` the App id."""
        now = int(self._now())
        header = _b64url(json.dumps({"alg": "RS256", "typ": "JWT"}, separators=(",", ":")).encode())
        claims = {"iat": now - _JWT_BACKDATE, "exp": now + _JWT_LIFETIME, "iss": str(self.app_id)}
        payload = _b64url(json.dumps(claims, separators=(",", ":")).encode())
        signing_input = f"{header}.{payload}".encode()
        signature = self._key.sign(signing_input, padding.PKCS1v15(), hashes.SHA256())
        return f"{header}.{payload}.{_b64url(signature)}"

    def _exchange(self) -> tuple[str, float]:
        what = f"GitHub App installation {self.installation_id} access token"
        jwt = self.jwt()
        url = f"{self.api_url}/app/installations/{quote(self.installation_id, safe='')}/access_tokens"
        headers = {"Authorization": f"Bearer {jwt}", "Accept": "application/vnd.github+json",
                   "X-GitHub-Api-Version": "2022-11-28"}
        self.exchanges += 1
        try:
            with httpx.Client(transport=GuardedTransport(self._outbound), timeout=self._timeout) as http:
                response = http.post(url, headers=headers)
        except httpx.HTTPError as exc:
            raise ProviderError(f"{what}: {connection_failure(exc)}") from None
        if response.status_code >= 400:
            # GitHub's message says why ("Integration not found", "'Expiration time' claim is too far…"); the
            # JWT is scrubbed from it all the same, in case something echoes the request.
            message = _message(response).replace(jwt, "***")
            raise ProviderError(f"{what}: HTTP {response.status_code} {message}".rstrip())
        try:
            data = response.json()
            token, expires_at = str(data["token"]), _rfc3339(str(data["expires_at"]))
        except (ValueError, KeyError, TypeError):
            raise ProviderError(f"{what}: the answer has no token and expires_at") from None
        if not token:
            raise ProviderError(f"{what}: the answer has an empty token")
        return token, expires_at


def provider_token_source(secret: Mapping[str, Any] | None, provider: str, api_url: str, secret_name: str, *,
                          field: str = "spec.pullRequests.apiUrl", http_timeout: float = 30.0,
                          outbound: OutboundPolicy = OutboundPolicy()) -> TokenSource:  # noqa: B008 - frozen
    """The token source the repository's Secret (a v1 Secret body, None when the repository names none) gives
    for `provider`'s API at `api_url`. `secret_name` is what `spec.repository.secretName` says, for messages.

    HostNotAllowed when the Secret's `allowedHosts` does not name `api_url`'s host (`field` says where the URL
    comes from): checked before anything is built, so neither a token nor an App's JWT ever goes there."""
    if secret is None:
        raise CredentialsError(
            f"the repository names no Secret (spec.repository.secretName) holding a token for the {provider} pull "
            "request API"
        )
    meta = secret.get("metadata") or {}
    source = f"Secret {meta.get('namespace', '')}/{meta.get('name') or secret_name}"
    try:
        data = decode_secret_data(secret, source)
    except GitCredentialsError as exc:
        raise CredentialsError(str(exc)) from None
    present_keys = [key for key in (*APP_KEYS, KEY_API_TOKEN, KEY_TOKEN) if data.get(key, "").strip()]
    if present_keys:
        check_destination(data, source, api_url, field)
    found = registry.find(provider)
    app_keys = found is not None and found.github_app
    if app_keys:
        present = [key for key in APP_KEYS if data.get(key, "").strip()]
        if present:
            missing = [key for key in APP_KEYS if key not in present]
            if missing:
                raise CredentialsError(
                    f'{source} has {", ".join(present)} but no "{missing[0]}": a GitHub App needs '
                    f"{', '.join(APP_KEYS)}"
                )
            return GitHubAppTokens(api_url, _single_line(data, KEY_APP_ID, source),
                                   _single_line(data, KEY_APP_INSTALLATION_ID, source), data[KEY_APP_PRIVATE_KEY],
                                   source=source, http_timeout=http_timeout, outbound=outbound)
    for key in (KEY_API_TOKEN, KEY_TOKEN):
        value = _single_line(data, key, source)
        if value:
            return StaticToken(value)
    app = " (or GitHub App keys)" if app_keys else ""
    raise CredentialsError(
        f"{source} (spec.repository.secretName) has no {KEY_API_TOKEN} or {KEY_TOKEN} key{app} for the pull "
        "request API"
    )


def client_for(provider: str, api_url: str, project: str, number: int, tokens: TokenSource,
               sleep: Callable[[float], None] = time.sleep, *,
               outbound: OutboundPolicy = OutboundPolicy()) -> ProviderClient:  # noqa: B008 - frozen
    """The client of `provider`'s API for pull request `number` of `project` (`owner/repo` on GitHub and Gitea,
    the path or numeric id on GitLab), with a token from `tokens`, reaching only what `outbound` allows."""
    return registry.provider_named(provider).client(api_url, project, number, tokens.token, sleep=sleep,
                                                    outbound=outbound)


def default_api_url(provider: str, repository_url: str) -> str:
    """The API of the provider serving `repository_url`: api.github.com for github.com, `/api/v3` on a GitHub
    Enterprise host, `/api/v4` on GitLab, `/api/v1` on Gitea. An http(s) repository URL keeps its scheme and
    port (the API is served where the repository is); ssh and scp-style ones mean https on the default port."""
    found = registry.provider_named(provider)
    parts = _parts(repository_url)
    host = parts.hostname or ""
    scheme = parts.scheme if parts.scheme in ("http", "https") else "https"
    port = f":{parts.port}" if scheme == parts.scheme and parts.port is not None else ""
    base = f"{scheme}://{host}{port}"
    return found.default_api_url(base, host)


def project_of(repository_url: str) -> str:
    """`owner/repo` (`group/subgroup/repo` on GitLab) of `repository_url`, without `.git`, its case kept."""
    path = _parts(repository_url).path.strip("/")
    if not path:
        raise ValueError(f"repository URL {repository_url!r} names no project")
    return path


def _parts(repository_url: str) -> SplitResult:
    # normalize_url validates, drops any password, strips `.git` and turns scp-style into ssh://, keeping the
    # path's case (repository_identity lower-cases it, and GitLab paths are shown as written).
    if is_file_url(repository_url):
        raise ValueError("a file:// repository has no pull request API")
    parts = urlsplit(normalize_url(repository_url))
    if not parts.hostname:
        raise ValueError(f"repository URL {repository_url!r} names no host")
    return parts


def _rsa_key(pem: str, source: str) -> rsa.RSAPrivateKey:
    problem = f'{source}: "{KEY_APP_PRIVATE_KEY}" is not an unencrypted RSA private key in PEM'
    try:
        key = serialization.load_pem_private_key(pem.strip().encode(), password=None)
    except (ValueError, TypeError, UnsupportedAlgorithm):
        raise CredentialsError(problem) from None
    if not isinstance(key, rsa.RSAPrivateKey):
        raise CredentialsError(problem)  # RS256 is what GitHub signs with; an EC or Ed25519 key cannot be used
    return key


def _single_line(data: Mapping[str, str], key: str, source: str) -> str:
    # `kubectl create secret --from-file` keeps the file's final newline; it is never part of a token or an id.
    value = data.get(key, "").strip()
    if "\n" in value or "\r" in value or "\x00" in value:
        raise CredentialsError(f'{source}: "{key}" contains a line break or NUL character')
    return value


def _b64url(raw: bytes) -> str:
    return base64.urlsafe_b64encode(raw).rstrip(b"=").decode("ascii")


def _rfc3339(text: str) -> float:
    moment = datetime.fromisoformat(text.replace("Z", "+00:00"))
    return (moment if moment.tzinfo else moment.replace(tzinfo=UTC)).timestamp()


def _message(response: httpx.Response) -> str:
    try:
        data = response.json()
    except ValueError:
        return ""
    return str(data.get("message") or "")[:200] if isinstance(data, dict) else ""
