# On the cluster: deployed to the endpoint the cluster layer outputs.
variable "cluster_endpoint" {
  type = string
}

resource "terraform_data" "app" {
  input = "app on ${var.cluster_endpoint}"
}
