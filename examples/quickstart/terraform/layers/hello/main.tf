terraform {
  required_version = ">= 1.5.0"

  # The state path is given at init time (overrideRunnerSpec.extraInitArgs), so the plan pod and the
  # apply pod share one state file.
  backend "local" {}
}

module "hello" {
  source = "../../modules/message"
  name   = "burrito-py"
}

output "message" {
  value = module.hello.message
}
