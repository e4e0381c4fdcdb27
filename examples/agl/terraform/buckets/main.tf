# The module behind the Bucket kind (examples/agl/manifests.yaml). Each Bucket instance is one
# TerraformLayer applying this module with the instance's spec as variables:
#   spec.size -> var.size, spec.storagePool -> var.storage_pool, spec.labels -> var.labels
# terraform_data stands in for a real provider, so the example runs offline.
terraform {
  required_version = ">= 1.5.0"

  # No backend: each instance's layer keeps its own state in the burrito-py datastore (the repository's
  # spec.state.managed), shared by its plan and apply pods.
}

variable "size" {
  type        = number
  description = "Size of the bucket, in GiB."
}

variable "storage_pool" {
  type        = string
  default     = "standard"
  description = "Storage pool the bucket lives in."
}

variable "labels" {
  type        = map(string)
  default     = {}
  description = "Labels of the bucket."
}

resource "terraform_data" "bucket" {
  input = {
    size   = var.size
    pool   = var.storage_pool
    labels = var.labels
  }
}

output "bucket_id" {
  value = terraform_data.bucket.id
}

output "endpoint" {
  value = "https://${var.storage_pool}.storage.example/${terraform_data.bucket.id}"
}

output "size_gib" {
  value = terraform_data.bucket.output.size
}
