"""The TerraformRun controller: `reconcile`, `decide` (pure), runner pods, Leases, isolation and results."""
