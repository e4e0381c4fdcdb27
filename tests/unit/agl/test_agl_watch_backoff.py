"""Issue 25 item 5: a kind's watch the API refuses backs off and says so (agl/watch.py)."""

from __future__ import annotations

import asyncio
from typing import Any

from burrito_py.agl.watch import KindWatches, retry_delay


def test_a_refused_listing_is_tried_again_later_and_later_up_to_five_minutes():
    assert [retry_delay(n) for n in range(1, 11)] == [1, 2, 4, 8, 16, 32, 64, 128, 256, 300]


def test_the_watches_remember_a_refusal_until_a_listing_succeeds_and_tell_each_change():
    changes: list[str] = []
    watches = KindWatches(kube=None, changed=changes.append)  # type: ignore[arg-type]

    async def scenario() -> list[Any]:
        seen = []
        watches._access("/apis/example.org/v1alpha1/gadgets", "gadgets.example.org is forbidden: …")
        watches._access("/apis/example.org/v1alpha1/gadgets", "gadgets.example.org is forbidden: …")  # the same
        seen.append(watches.refusal(["/apis/example.org/v1alpha1/gadgets"]))
        await watches.answered(["/apis/example.org/v1alpha1/gadgets"])  # answered: returns at once
        watches._access("/apis/example.org/v1alpha1/gadgets", None)
        seen.append(watches.refusal(["/apis/example.org/v1alpha1/gadgets"]))
        return seen

    assert asyncio.run(scenario()) == ["gadgets.example.org is forbidden: …", None]
    assert changes == ["/apis/example.org/v1alpha1/gadgets"] * 2, "told when it is refused, and when it is allowed"
