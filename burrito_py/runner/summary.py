"""The one-line summary of a plan, from `terraform show -json` (pure).

Counts as Terraform's own `Plan:` line does: a replace (`["delete", "create"]` or `["create", "delete"]`)
is one to add and one to destroy; `read` and `no-op` count for nothing; imports and forgets are named only
when there are some (`Plan: 1 to import, 0 to add, ...`, `..., 1 to forget`). No trailing period, as in
docs/architecture.md §3.

A plan whose only changes are to root outputs is *not* "No changes.": applying it records the new outputs in
the state (the AGL reads them), so it reads `Plan: 0 to add, 0 to change, 0 to destroy` and the layer
controller applies it.
"""

from __future__ import annotations

from burrito_py.plans.model import NO_CHANGES, plan_summary

# The plan model's summary (burrito_py/plans/model.py), counted without building the model: one implementation for
# the runner and the rest.
__all__ = ["NO_CHANGES", "plan_summary"]
