"""How much plan JSON the controllers hold and parse at once (issue 24, finding 6).

Parsing a plan JSON costs several times its size in memory (about 6 times for `terraform show -json` of 1,000
changing resources, measured; 23 times for the worst shape the review measured), and the controllers have a
512 MiB limit. Each plan is at most `max_plan_json_bytes` (the datastore refuses a larger one, and the review
never reads one), and this budget keeps the plans being read and parsed together within that same size: small
plans go in parallel, a large one waits until the others are done (and goes alone when it is the largest).
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator


class ParseBudget:
    def __init__(self, budget: int) -> None:
        self.budget = budget
        self.in_use = 0
        self._condition: asyncio.Condition | None = None  # made in the controllers' own event loop

    @contextlib.asynccontextmanager
    async def hold(self, size: int) -> AsyncIterator[None]:
        if self._condition is None:
            self._condition = asyncio.Condition()
        condition = self._condition
        async with condition:
            await condition.wait_for(lambda: self.in_use == 0 or self.in_use + size <= self.budget)
            self.in_use += size
        try:
            yield
        finally:
            async with condition:
                self.in_use -= size
                condition.notify_all()
