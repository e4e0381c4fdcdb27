terraform {
  required_version = ">= 1.5.0"

  # No backend: the state lives in the burrito-py datastore (the repository's spec.state.managed), which
  # the plan pod and the apply pod share; the runner configures it, with no address or secret here.
}

module "hello" {
  source = "../../modules/message"
  name   = "burrito-py"
}

output "message" {
  value = module.hello.message
}
