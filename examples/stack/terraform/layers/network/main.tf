# The bottom of the stack: a "network" whose id the cluster layer reads (terraform_data: runs offline).
resource "terraform_data" "vpc" {
  input = "vpc-main"
}

output "vpc_id" {
  value = terraform_data.vpc.output
}

output "owner" {
  # Not read by any dependent: changing it plans nothing downstream.
  value = "platform-team"
}
