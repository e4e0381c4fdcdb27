"""The TerraformRepository controller: `reconcile` (fetch, resolve branches, mark layers), `decide` (pure), and the
webhook keys it publishes for the server."""
