"""Plans as data: the plan model read from `show -json` (model.py) and what it says about drift (drift.py)."""
