"""UI sessions: who the browser is, kept server-side verifiable, and CSRF tokens bound to the session.

A token login keeps the bearer token in a cookie, encrypted and authenticated (Fernet) with a key derived from the
server setting `ui_session_key`: the browser cannot read or forge it, and every request reviews the token again
(through the cached TokenReview), so a revoked or expired token ends the session. Behind an authenticating proxy
(`ui_trusted_headers`), the user and groups come from `X-Forwarded-User` / `X-Forwarded-Groups` instead.

CSRF: every browser gets a random session id cookie (HttpOnly, SameSite=Strict); a POST must carry
HMAC(key, session id) in the form field `csrf` or the header `X-CSRF-Token`.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import secrets

from cryptography.fernet import Fernet, InvalidToken
from fastapi import Request, Response

SESSION_COOKIE = "burrito_py_session"
SID_COOKIE = "burrito_py_sid"
CSRF_FIELD = "csrf"
CSRF_HEADER = "X-CSRF-Token"
USER_HEADER = "X-Forwarded-User"
GROUPS_HEADER = "X-Forwarded-Groups"


class Sessions:
    def __init__(self, key: str | None, ttl_seconds: int, secure: bool | None) -> None:
        # One setting, two purposes: derive a separate key for each so neither use weakens the other.
        seed = key.encode() if key else secrets.token_bytes(32)
        self._fernet = Fernet(base64.urlsafe_b64encode(hashlib.sha256(b"burrito-py-ui-session:" + seed).digest()))
        self._csrf_key = hashlib.sha256(b"burrito-py-ui-csrf:" + seed).digest()
        self.ttl, self._secure = ttl_seconds, secure

    def seal(self, token: str) -> str:
        return self._fernet.encrypt(token.encode()).decode()

    def token(self, request: Request) -> str | None:
        """The token of the session cookie; None when absent, tampered with or older than the TTL."""
        sealed = request.cookies.get(SESSION_COOKIE)
        if not sealed:
            return None
        try:
            return self._fernet.decrypt(sealed.encode(), ttl=self.ttl).decode()
        except (InvalidToken, UnicodeDecodeError):
            return None

    def session_id(self, request: Request) -> str | None:
        sid = request.cookies.get(SID_COOKIE)
        return sid if sid and 20 <= len(sid) <= 100 else None

    def csrf_token(self, sid: str) -> str:
        return hmac.new(self._csrf_key, sid.encode(), hashlib.sha256).hexdigest()

    def csrf_valid(self, request: Request, given: str | None) -> bool:
        sid = self.session_id(request)
        return bool(sid and given) and hmac.compare_digest(self.csrf_token(sid or ""), given or "")

    def secure(self, request: Request) -> bool:
        return self._secure if self._secure is not None else request.url.scheme == "https"

    def _cookie(self, response: Response, request: Request, name: str, value: str, max_age: int | None) -> None:
        response.set_cookie(name, value, max_age=max_age, path="/ui", httponly=True, samesite="strict",
                            secure=self.secure(request))

    def ensure_session_id(self, request: Request, response: Response) -> str:
        """The browser's session id, set on `response` when it has none yet."""
        sid = self.session_id(request)
        if sid is None:
            sid = secrets.token_urlsafe(32)
            self._cookie(response, request, SID_COOKIE, sid, None)
        return sid

    def log_in(self, request: Request, response: Response, token: str) -> None:
        self._cookie(response, request, SESSION_COOKIE, self.seal(token), self.ttl)
        # A new session id at login: a CSRF token obtained before logging in is worth nothing after.
        self._cookie(response, request, SID_COOKIE, secrets.token_urlsafe(32), None)

    def log_out(self, response: Response) -> None:
        response.delete_cookie(SESSION_COOKIE, path="/ui")
        response.delete_cookie(SID_COOKIE, path="/ui")


def forwarded_identity(request: Request) -> tuple[str, tuple[str, ...]] | None:
    """(user, groups) from the proxy's headers; None when it sent no user."""
    user = request.headers.get(USER_HEADER, "").strip()
    if not user:
        return None
    groups = tuple(g.strip() for g in request.headers.get(GROUPS_HEADER, "").split(",") if g.strip())
    return user, groups
