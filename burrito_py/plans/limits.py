"""The plan JSON limit, shared by the datastore (it refuses a larger upload) and the controllers (they never
parse a larger one): docs/architecture.md §10.

`terraform show -json` of 1,000 changing resources (terraform_data with a few attributes) is 1.0 MiB and parses
in about a second, growing the process by about 6 times its size (measured); the review of issue 24 measured
23 times for a worse shape (finding 6). 8 MiB leaves room for big states (the JSON holds the prior state: a few
thousand resources) and keeps even the worst shape under 200 MiB of the controllers' 512 MiB; the controllers
also parse at most that much plan JSON at once (controllers/plan_budget.py).
"""

from __future__ import annotations

PLAN_JSON_LIMIT = 8 * 1024 * 1024
