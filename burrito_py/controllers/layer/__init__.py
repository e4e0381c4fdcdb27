"""The TerraformLayer controller: `reconcile` (gather, decide, execute), `decide` (its state machine, pure), and
the layer's pieces (validation, plan review and gate, drift, destroy, outputs, dependencies, notifications)."""
