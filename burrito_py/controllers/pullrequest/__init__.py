"""The TerraformPullRequest controller: `reconcile` (gather, decide, act) and `decide` (pure)."""
