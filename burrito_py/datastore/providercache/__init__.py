"""Read-through caches served by the datastore (docs/architecture.md §10.5): Terraform providers through the
Provider Network Mirror Protocol, and Terraform/OpenTofu release archives for runners."""
