from __future__ import annotations

import re
import time

import pytest
from hypothesis import given
from hypothesis import strategies as st

from burrito_py.git.urls import MAX_URL_LENGTH, mirror_dir_name, normalize_url, redact, validate_url


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("https://user:secret@host/org/repo.git", "https://***@host/org/repo.git"),
        ("https://token@host/x", "https://***@host/x"),
        ("https://user:p@ss@host/x", "https://***@host/x"),
        ("fatal: unable to access 'https://u:s@h/x/': 403", "fatal: unable to access 'https://***@h/x/': 403"),
        ("ssh://git@host:22/org/repo", "ssh://***@host:22/org/repo"),
        ("https://host/x and mail@example.com", "https://host/x and mail@example.com"),
        ("file:///srv/repo", "file:///srv/repo"),
    ],
)
def test_redact(text: str, expected: str) -> None:
    assert redact(text) == expected


@given(st.text(alphabet="abcXYZ019-_.~!$%&*+,;=:", min_size=1, max_size=20))
def test_redact_never_leaks_a_password(password: str) -> None:
    marker = f"S3cr{password}"
    assert marker not in redact(f"error for https://user:{marker}@example.com/org/repo.git: boom")


@pytest.mark.parametrize(
    "url",
    [
        "https://github.com/org/repo.git",
        "http://localhost:3000/org/repo",
        "ssh://git@github.com/org/repo.git",
        "git@github.com:org/repo.git",
        "git://host/repo",
        "file:///srv/git/repo",
    ],
)
def test_validate_accepts(url: str) -> None:
    assert validate_url(f"  {url} ") == url


@pytest.mark.parametrize(
    ("url", "reason"),
    [
        ("", "empty"),
        ("--upload-pack=touch /tmp/x", "must not start with '-'"),
        ("ext::sh -c touch% /tmp/pwned", "whitespace"),
        ("ext::sh", "must use one of"),
        ("/srv/git/repo", "must use one of"),
        ("ftp://host/repo", "must use one of"),
    ],
)
def test_validate_rejects_with_reason(url: str, reason: str) -> None:
    with pytest.raises(ValueError, match=re.escape(reason)):
        validate_url(url)


def test_validate_error_is_redacted() -> None:
    with pytest.raises(ValueError) as info:
        validate_url("ftp://user:secret@host/repo")
    assert "secret" not in str(info.value)


def test_spellings_of_one_repository_share_a_mirror() -> None:
    names = {
        mirror_dir_name(u)
        for u in (
            "https://GitHub.com/org/repo.git",
            "https://github.com/org/repo",
            "https://github.com/org/repo/",
            "https://user:token@github.com/org/repo.git",
        )
    }
    assert len(names) == 1
    (name,) = names
    assert name.startswith("github.com-org-repo-") and name.endswith(".git")


def test_different_repositories_get_different_mirrors() -> None:
    assert mirror_dir_name("https://github.com/org/a") != mirror_dir_name("https://github.com/org/b")
    # The ssh user can select a different view of the host; keep it apart.
    assert normalize_url("git@host:org/r.git") == "ssh://git@host/org/r"
    assert mirror_dir_name("git@host:org/r") != mirror_dir_name("deploy@host:org/r")


@given(st.text(alphabet="abcdefXYZ0123456789-_.", min_size=1, max_size=30))
def test_mirror_dir_name_is_one_safe_segment_and_never_holds_the_password(password: str) -> None:
    name = mirror_dir_name(f"https://user:{password}Q@example.com/org/repo-name/../x.git")
    assert "/" not in name and name not in (".", "..") and not name.startswith(".")
    assert re.fullmatch(r"[A-Za-z0-9._-]+", name)
    assert f"{password}Q" not in name


def test_attack_a_long_text_is_redacted_and_refused_in_linear_time() -> None:
    """Attack test: the redaction pattern's scheme had no bound, so each letter of a long word without `://`
    started a scan to its end: quadratic. An outsider's webhook naming a 200,000-character `clone_url` (read, and
    its error redacted, before any signature can be checked) held the server's event loop for about 100 s. Now the
    scheme is bounded (a longer one's tail still matches), and a URL over MAX_URL_LENGTH is refused unread."""
    long_scheme = "x" * 100 + "://user:secret@host/x"
    assert redact(long_scheme) == "x" * 100 + "://***@host/x"
    for text in ("a" * 200_000, "https://h/" + "a" * 200_000, "https://" + "a" * 200_000, "a+" * 100_000):
        started = time.process_time()
        redact(text)
        with pytest.raises(ValueError) as refused:
            validate_url(text)
        assert time.process_time() - started < 2.0  # CPU time: ~0.05 s; the quadratic pattern took minutes
        assert f"over the limit of {MAX_URL_LENGTH}" in str(refused.value) and len(str(refused.value)) < 200
