terraform {
  required_version = ">= 1.5.0"
  # No backend: the state lives in the burrito-py datastore (spec.state.managed).
}

variable "names" {
  type    = list(string)
  default = ["platform team", "new colleague"]
}

resource "terraform_data" "greeting" {
  for_each = toset(var.names)
  input    = "Welcome, ${each.value}"
}

output "greetings" {
  value = [for g in terraform_data.greeting : g.output]
}
