"""The controllers read and parse at most one plan JSON limit's worth of plans at once (issue 24, finding 6)."""

from __future__ import annotations

import asyncio

from burrito_py.controllers.plan_budget import ParseBudget


def test_small_plans_share_the_budget_and_a_large_one_waits_then_goes_alone() -> None:
    budget = ParseBudget(100)
    peak: list[int] = []

    async def parse(size: int, order: list[int]) -> None:
        async with budget.hold(size):
            peak.append(budget.in_use)
            await asyncio.sleep(0.01)
            order.append(size)

    async def scenario() -> list[int]:
        order: list[int] = []
        await asyncio.gather(parse(40, order), parse(50, order), parse(300, order), parse(10, order))
        return order

    order = asyncio.run(scenario())
    assert sorted(order) == [10, 40, 50, 300]
    assert max(p for p in peak if p != 300) <= 100  # together, never more than one plan's limit
    assert 300 in peak  # a plan above the budget (an older one) goes alone, never deadlocks
    assert budget.in_use == 0
