# A module that needs no provider download: terraform_data is built into Terraform.
variable "name" {
  type = string
}

variable "greeting" {
  type    = string
  default = "Hello"
}

resource "terraform_data" "message" {
  input = "${var.greeting}, ${var.name}!"
}

output "message" {
  value = terraform_data.message.output
}
