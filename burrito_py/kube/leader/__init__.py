"""Leader election over a coordination.k8s.io Lease: `decide` (pure) and `election` (the executor)."""
