"""Plan policies evaluated by the controllers (docs/architecture.md §5.9): built-in rules, CEL and Rego over the
plan model, and the verdict they add up to."""
