"""May this user act on layers of that namespace? Asked of the Kubernetes API with a SubjectAccessReview, so the
UI's buttons follow the cluster's RBAC: the same `patch terraformlayers` a user needs for
`kubectl annotate tfl … sync-now=…` or `approve-plan=…`. The server then writes with its own rights."""

from __future__ import annotations

import asyncio
import time
from dataclasses import dataclass

from burrito_py.api import annotations as ann
from burrito_py.controllers.kube import Kube

REVIEWS = "/apis/authorization.k8s.io/v1/subjectaccessreviews"
# Short: a RoleBinding removed takes effect in the UI within this long (the action endpoints ask again).
CACHE_SECONDS = 10.0


@dataclass(frozen=True, slots=True)
class User:
    username: str
    groups: tuple[str, ...]


class AccessReviewer:
    def __init__(self, kube: Kube, cache_seconds: float = CACHE_SECONDS) -> None:
        self.kube, self.cache_seconds = kube, cache_seconds
        self._cache: dict[tuple[User, str], tuple[float, bool]] = {}

    async def may_patch_layers(self, user: User, namespace: str, *, fresh: bool = False) -> bool:
        """`fresh`: ask the API even when a recent answer is cached (before acting, not for drawing buttons)."""
        key, now = (user, namespace), time.monotonic()
        cached = self._cache.get(key)
        if cached is not None and not fresh and now - cached[0] < self.cache_seconds:
            return cached[1]
        review = {
            "apiVersion": "authorization.k8s.io/v1", "kind": "SubjectAccessReview",
            "spec": {"user": user.username, "groups": list(user.groups),
                     "resourceAttributes": {"namespace": namespace, "verb": "patch", "group": ann.GROUP,
                                            "resource": "terraformlayers"}},
        }
        answer = await self.kube.create(REVIEWS, review)
        allowed = bool((answer.get("status") or {}).get("allowed"))
        if len(self._cache) > 10_000:  # bounded: many users times namespaces
            self._cache.clear()
        self._cache[key] = (now, allowed)
        return allowed

    async def namespaces_allowed(self, user: User, namespaces: set[str]) -> set[str]:
        ordered = sorted(namespaces)
        answers = await asyncio.gather(*(self.may_patch_layers(user, ns) for ns in ordered))
        return {ns for ns, ok in zip(ordered, answers, strict=True) if ok}
