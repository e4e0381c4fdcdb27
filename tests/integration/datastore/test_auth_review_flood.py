"""Attack: tenant code in a runner pod sends the datastore made-up bearer tokens, each new. Each was one TokenReview on
the Kubernetes API (300 tokens, 300 reviews: the cache knows no new token), so one pod could load the API server and,
once its flow control throttles the datastore's reviews, make every runner's token uncheckable (503). Now the reviews
of tokens that are then refused are throttled per client address (`AUTH_REVIEW_BURST`, `AUTH_REVIEWS_PER_MINUTE`):
beyond them a 429 with Retry-After and no review; accepted and cached tokens cost nothing (docs/architecture.md
§10.2, §24)."""

from __future__ import annotations

import asyncio
import secrets
from pathlib import Path

import httpx

from tests.integration.datastore.auth_platform import NS, running_auth_platform, token_reviews

LOGS = f"/api/v1/layers/{NS}/app/runs/app-plan-1/attempts/1/logs"


def test_attack_made_up_tokens_cost_at_most_the_addresss_allowance_of_reviews(tmp_path: Path) -> None:
    with running_auth_platform(tmp_path, auth_review_burst=10, auth_reviews_per_minute=1) as platform:
        admin = {"Authorization": f"Bearer {platform.admin_token}"}
        assert httpx.get(platform.url + LOGS, headers=admin, timeout=30).status_code == 200  # cached from now on
        before = token_reviews(platform.api)

        async def flood(n: int) -> list[httpx.Response]:
            async with httpx.AsyncClient(base_url=platform.url, timeout=60.0) as http:
                return list(await asyncio.gather(*(
                    http.get(LOGS, headers={"Authorization": f"Bearer {secrets.token_hex(16)}"}) for _ in range(n))))

        answers = asyncio.run(flood(300))
        reviews = token_reviews(platform.api) - before
        assert reviews <= 11, f"{reviews} TokenReviews for 300 made-up tokens"
        codes = [a.status_code for a in answers]
        assert set(codes) == {401, 429} and codes.count(401) == reviews
        throttled = next(a for a in answers if a.status_code == 429)
        assert int(throttled.headers["Retry-After"]) >= 1 and "too many token reviews" in throttled.json()["error"]
        # A token the datastore knows is answered from its cache, throttle or not.
        assert httpx.get(platform.url + LOGS, headers=admin, timeout=30).status_code == 200
