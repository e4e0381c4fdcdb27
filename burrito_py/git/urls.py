"""Git repository URLs: validation, credential redaction and the mirror directory name. Pure."""

from __future__ import annotations

import hashlib
import re
from urllib.parse import urlsplit, urlunsplit

# Transports a TerraformRepository may use (docs/architecture.md §3). Everything else is refused up front, notably
# `ext::` (runs a command) and option-looking strings, because the URL comes from a user's manifest.
ALLOWED_SCHEMES = frozenset({"https", "http", "ssh", "git", "file"})

# `scheme://userinfo@` anywhere in a text (URLs inside git's stderr, too). The userinfo runs to the last
# `@` before the first `/` or whitespace, so `user:secret@host`, `token@host` and a password holding a
# stray `@` are all caught whole. The scheme is at most 32 characters: unbounded, each letter of a long word
# without `://` started a scan to its end (quadratic: an outsider's 200 KB webhook body held the server's
# event loop for minutes); a longer scheme's last 32 characters still match, so nothing goes unredacted.
_URL_USERINFO = re.compile(r"(?P<scheme>[A-Za-z][A-Za-z0-9+.-]{0,31}://)(?P<userinfo>[^/\s]+)@")
# scp-style `user@host:path` (no scheme). Only a bare user name may precede the `@` there.
_SCP_LIKE = re.compile(r"^(?P<user>[A-Za-z0-9._~-]+@)?(?P<host>[A-Za-z0-9.-]+):(?P<path>(?!//)(?!:).+)$")


def redact(text: str) -> str:
    """Replace the userinfo of every `scheme://userinfo@host` in `text` with `***`.

    Used on URLs and on anything git prints, before it reaches an exception, a log line or a status.
    """
    return _URL_USERINFO.sub(lambda m: f"{m.group('scheme')}***@", text)


def is_scp_like(url: str) -> bool:
    """`git@github.com:org/repo.git`: ssh without a scheme (and not a Windows drive or a local path)."""
    return "://" not in url and _SCP_LIKE.match(url) is not None and not url.startswith("-")


def scp_host(url: str) -> str:
    """The host of an scp-style URL (`git@github.com:org/repo.git` → `github.com`)."""
    match = _SCP_LIKE.match(url.strip())
    if match is None:
        raise ValueError(f"{redact(url)!r} is not an scp-style URL")
    return match.group("host")


# Longer is no repository URL a git host gives out; such text (a webhook body's, a manifest's) is refused before
# any pattern reads it, and never echoed in the message.
MAX_URL_LENGTH = 2048


def validate_url(url: str) -> str:
    """Return `url` stripped of surrounding whitespace, or raise ValueError saying why git must not use it."""
    stripped = url.strip()
    if not stripped:
        raise ValueError("repository URL is empty")
    if len(stripped) > MAX_URL_LENGTH:
        raise ValueError(f"repository URL is {len(stripped)} characters long, over the limit of {MAX_URL_LENGTH}")
    if stripped.startswith("-"):
        raise ValueError(f"repository URL {redact(stripped)!r} must not start with '-'")
    if any(ch.isspace() or ord(ch) < 0x20 for ch in stripped):
        raise ValueError(f"repository URL {redact(stripped)!r} contains whitespace or control characters")
    if is_scp_like(stripped):
        return stripped
    scheme = urlsplit(stripped).scheme.lower()
    if "://" not in stripped or scheme not in ALLOWED_SCHEMES:
        allowed = ", ".join(sorted(ALLOWED_SCHEMES))
        raise ValueError(
            f"repository URL {redact(stripped)!r} must use one of {allowed}:// or the scp-like form user@host:path"
        )
    return stripped


def is_file_url(url: str) -> bool:
    """`file://…`: a path on the controllers' own filesystem (any case of the scheme)."""
    return url.strip().lower().startswith("file:")


def url_policy_problem(url: str, allow_file: bool) -> str | None:
    """Why the controllers refuse to fetch `url` (naming the field), else None. `file://` reads the controllers'
    own filesystem, their git cache included, so it is off unless the operator enables it (local development)."""
    try:
        validate_url(url)
    except ValueError as exc:
        return f"spec.repository.url: {exc}"
    if is_file_url(url) and not allow_file:
        return (
            f"spec.repository.url: {redact(url.strip())!r}: file:// repository URLs are disabled on these "
            "controllers (enable them with BURRITO_PY_ALLOW_FILE_REPOSITORIES=true, for local development only)"
        )
    return None


def normalize_url(url: str) -> str:
    """A canonical form used to name mirrors: no password, lower-case scheme and host, no `.git` or `/` tail.

    Two spellings of one repository (`https://Host/org/repo.git/` and `https://host/org/repo`) share a
    mirror. The user name is kept for ssh (`git@` and `deploy@` may see different repositories) but the
    password or token never is, so a directory name can never reveal it.
    """
    url = validate_url(url)
    if is_scp_like(url):
        match = _SCP_LIKE.match(url)
        assert match is not None
        user, host, path = match.group("user") or "", match.group("host").lower(), match.group("path")
        return f"ssh://{user}{host}/{_trim_path(path).lstrip('/')}"
    parts = urlsplit(url)
    netloc = parts.hostname or ""
    if parts.port is not None:
        netloc = f"{netloc}:{parts.port}"
    if parts.username and parts.scheme.lower() in ("ssh", "git"):
        netloc = f"{parts.username}@{netloc}"
    return urlunsplit((parts.scheme.lower(), netloc, _trim_path(parts.path), parts.query, ""))


def mirror_dir_name(url: str) -> str:
    """`<slug>-<hash>.git`: readable, unique per normalized URL, and safe as one path segment."""
    normalized = normalize_url(url)
    digest = hashlib.sha256(normalized.encode()).hexdigest()[:16]
    readable = normalized.split("://", 1)[-1].split("@", 1)[-1]
    # Keep the tail when shortening: the repository name says more than a long host or group prefix.
    slug = re.sub(r"[^A-Za-z0-9._-]+", "-", readable).strip("-._")[-60:].strip("-._") or "repo"
    return f"{slug}-{digest}.git"


def _trim_path(path: str) -> str:
    trimmed = path.rstrip("/")
    if trimmed.endswith(".git"):
        trimmed = trimmed[: -len(".git")]
    return trimmed.rstrip("/") or "/"


def repository_identity(url: str) -> tuple[str, str] | None:
    """`(host, path)` naming a repository whatever the spelling: https, ssh or scp-style, with or without
    `.git` or a user, any case — how a webhook payload's URLs are matched to TerraformRepositories. Ports are
    left out because one repository is served over https on one port and ssh on another. A `file://` URL (a
    local repository, `allowFileRepositories`: a git hook of `burrito-py dev` posts its pushes) is `("file",
    path)`, its case kept (paths are case-sensitive). None for anything invalid."""
    try:
        url = validate_url(url)
    except ValueError:
        return None
    if is_scp_like(url):
        match = _SCP_LIKE.match(url)
        assert match is not None
        host, repo_path = match.group("host"), match.group("path")
    else:
        parts = urlsplit(url)
        if parts.scheme.lower() == "file":
            return ("file", _trim_path("/" + parts.path.lstrip("/"))) if parts.path.strip("/") else None
        if not parts.hostname:
            return None
        host, repo_path = parts.hostname, parts.path
    return host.lower(), _trim_path("/" + repo_path.lstrip("/").lower())
