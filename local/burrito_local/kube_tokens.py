"""Service-account tokens: TokenRequest issues Ed25519-signed JWTs, TokenReview validates them
(signature, expiry, audiences, the service account and the bound pod still existing)."""

from __future__ import annotations

import base64
import json
import time
import uuid
from collections.abc import Callable
from datetime import UTC, datetime
from typing import Any

from cryptography.exceptions import InvalidSignature
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

Obj = dict[str, Any]
ISSUER = "https://kubernetes.default.svc.cluster.local"
API_AUDIENCES = ("https://kubernetes.default.svc.cluster.local",)
# (plural, namespace, name) → uid of the live object, or None.
UidLookup = Callable[[str, str, str], "str | None"]


def _b64(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode()


def _unb64(text: str) -> bytes:
    return base64.urlsafe_b64decode(text + "=" * (-len(text) % 4))


def _rfc3339(seconds: float) -> str:
    return datetime.fromtimestamp(seconds, UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


class TokenIssuer:
    def __init__(self, lookup: UidLookup, clock: Callable[[], float] = time.time) -> None:
        self._key = Ed25519PrivateKey.generate()
        self._public = self._key.public_key()
        self._lookup = lookup
        self.clock = clock
        # Signature checks of tokens already seen: every API request of a pod carries the same token, and
        # an Ed25519 verification costs more than the rest of an authorization.
        self._verified: dict[str, Obj] = {}

    def sign(self, claims: Obj) -> str:
        head = _b64(json.dumps({"alg": "EdDSA", "typ": "JWT"}).encode())
        body = _b64(json.dumps(claims, separators=(",", ":")).encode())
        return f"{head}.{body}.{_b64(self._key.sign(f'{head}.{body}'.encode()))}"

    def verify(self, token: str) -> Obj | None:
        """The claims when the signature is ours, else None (expiry is checked by `review`)."""
        known = self._verified.get(token)
        if known is not None:
            return known
        try:
            head, body, signature = token.split(".")
            self._public.verify(_unb64(signature), f"{head}.{body}".encode())
            claims = json.loads(_unb64(body))
        except (ValueError, InvalidSignature, UnicodeDecodeError):
            return None
        if not isinstance(claims, dict):
            return None
        if len(self._verified) >= 4096:
            self._verified.clear()
        self._verified[token] = claims
        return claims

    def issue(
        self,
        namespace: str,
        account: str,
        account_uid: str,
        audiences: list[str],
        expiration_seconds: int,
        pod: tuple[str, str] | None = None,
    ) -> tuple[str, float]:
        """(token, expiry as epoch seconds)."""
        now = self.clock()
        expires = now + expiration_seconds
        info: Obj = {"namespace": namespace, "serviceaccount": {"name": account, "uid": account_uid}}
        if pod is not None:
            info["pod"] = {"name": pod[0], "uid": pod[1]}
        claims: Obj = {
            "iss": ISSUER,
            "sub": f"system:serviceaccount:{namespace}:{account}",
            "aud": list(audiences),
            "iat": int(now),
            "nbf": int(now),
            "exp": int(expires),
            "jti": str(uuid.uuid4()),
            "kubernetes.io": info,
        }
        return self.sign(claims), expires

    def token_request_status(self, token: str, expires: float) -> Obj:
        return {"token": token, "expirationTimestamp": _rfc3339(expires)}

    def review(self, spec: Obj) -> Obj:
        """TokenReview status for `spec` ({token, audiences})."""
        claims = self.verify(str(spec.get("token") or ""))
        if claims is None:
            return {"authenticated": False, "error": "invalid bearer token"}
        now = self.clock()
        if float(claims.get("exp", 0)) <= now or float(claims.get("nbf", 0)) > now + 60:
            return {"authenticated": False, "error": "invalid bearer token, token has expired"}
        token_audiences = [str(a) for a in claims.get("aud") or ()]
        wanted = [str(a) for a in spec.get("audiences") or API_AUDIENCES]
        common = [a for a in wanted if a in token_audiences]
        if not common:
            return {"authenticated": False, "error": "invalid bearer token, token audiences is invalid"}
        info = claims.get("kubernetes.io") or {}
        namespace = str(info.get("namespace", ""))
        account = info.get("serviceaccount") or {}
        if self._lookup("serviceaccounts", namespace, str(account.get("name", ""))) != account.get("uid"):
            return {"authenticated": False, "error": "service account has been deleted or recreated"}
        extra: dict[str, list[str]] = {"authentication.kubernetes.io/credential-id": [f"JTI={claims.get('jti')}"]}
        pod = info.get("pod")
        if pod:
            if self._lookup("pods", namespace, str(pod.get("name", ""))) != pod.get("uid"):
                return {"authenticated": False, "error": "the pod the token is bound to no longer exists"}
            extra["authentication.kubernetes.io/pod-name"] = [str(pod["name"])]
            extra["authentication.kubernetes.io/pod-uid"] = [str(pod["uid"])]
        return {
            "authenticated": True,
            "audiences": common,
            "user": {
                "username": str(claims.get("sub")),
                "uid": str(account.get("uid")),
                "groups": ["system:serviceaccounts", f"system:serviceaccounts:{namespace}", "system:authenticated"],
                "extra": extra,
            },
        }
