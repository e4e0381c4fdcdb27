variable "vpc_id" {
  type = string
}

resource "terraform_data" "app" {
  input = "app in ${var.vpc_id}"
}

output "where" {
  value = terraform_data.app.output
}
