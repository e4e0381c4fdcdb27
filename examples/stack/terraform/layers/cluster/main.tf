# On the network: its vpc_id arrives as a variable (spec.dependsOn[].inputs), never copied by hand.
variable "vpc_id" {
  type = string
}

resource "terraform_data" "cluster" {
  input = "cluster in ${var.vpc_id}"
}

output "endpoint" {
  value = "https://${terraform_data.cluster.id}.cluster.example"
}
