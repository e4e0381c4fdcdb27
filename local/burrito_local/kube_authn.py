"""Who is calling the API emulator: a bearer token → the user kube-apiserver would see.

As kube-apiserver with anonymous auth on: no credentials (or a non-Bearer Authorization header, which no
configured authenticator handles) → `system:anonymous`; a Bearer token no authenticator accepts → 401.
Two token authenticators: the static token of the emulator's kubeconfig (the bootstrap cluster admin, in
`system:masters`, like kubeadm's admin.conf) and service-account JWTs the emulator issued for an API
audience (checked by TokenIssuer.review: signature, expiry, audience, account and bound pod still alive).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

from burrito_local.kube_tokens import API_AUDIENCES, TokenIssuer

ADMIN_TOKEN = "burrito-py-local-admin"  # noqa: S105 - the emulator's well-known local admin credential
ADMIN_USERNAME = "burrito-py-local-admin"
MASTERS = "system:masters"
AUTHENTICATED = "system:authenticated"
UNAUTHENTICATED = "system:unauthenticated"
ANONYMOUS_USERNAME = "system:anonymous"


@dataclass(frozen=True)
class UserInfo:
    username: str
    uid: str = ""
    groups: tuple[str, ...] = ()
    extra: Mapping[str, tuple[str, ...]] = field(default_factory=dict)

    def as_review_user(self) -> dict[str, object]:
        """The `user` of a TokenReview status / the subject fields of a SubjectAccessReview."""
        return {"username": self.username, "uid": self.uid, "groups": list(self.groups),
                "extra": {k: list(v) for k, v in self.extra.items()}}


ANONYMOUS = UserInfo(ANONYMOUS_USERNAME, groups=(UNAUTHENTICATED,))
ADMIN = UserInfo(ADMIN_USERNAME, groups=(MASTERS, AUTHENTICATED))


class Unauthorized(Exception):
    """A credential was presented and refused (kube-apiserver answers 401)."""


def bearer_token(header: str | None) -> str | None:
    """The token of an `Authorization: Bearer <token>` header; None when there is none (as kube's
    bearer authenticator: another scheme, or an empty token, is not a bearer credential)."""
    if not header:
        return None
    parts = header.split(" ", 2)
    if len(parts) < 2 or parts[0].lower() != "bearer" or not parts[1]:
        return None
    return parts[1]


class Authenticator:
    def __init__(self, tokens: TokenIssuer, static: Mapping[str, UserInfo] | None = None) -> None:
        self._tokens = tokens
        self._static = dict(static if static is not None else {ADMIN_TOKEN: ADMIN})

    def authenticate(self, authorization: str | None) -> UserInfo:
        """The caller of a request with this Authorization header; raises Unauthorized for a bad token."""
        token = bearer_token(authorization)
        if token is None:
            return ANONYMOUS
        static = self._static.get(token)
        if static is not None:
            return static
        status = self._tokens.review({"token": token, "audiences": list(API_AUDIENCES)})
        if not status.get("authenticated"):
            raise Unauthorized(str(status.get("error") or "invalid bearer token"))
        user = status["user"]
        extra = {str(k): tuple(str(x) for x in v) for k, v in (user.get("extra") or {}).items()}
        return UserInfo(str(user["username"]), str(user.get("uid") or ""), tuple(user.get("groups") or ()), extra)
