terraform {
  required_version = ">= 1.7.0"
  backend "local" {}

  # OpenTofu's state and plan encryption (https://opentofu.org/docs/language/state/encryption/): the state
  # file and the saved plan burrito-py stores are both encrypted with a key derived from the passphrase. A
  # real layer takes the passphrase from a variable fed by spec.varsFrom (a Secret), never from the code.
  encryption {
    key_provider "pbkdf2" "main" {
      passphrase = var.passphrase
    }
    method "aes_gcm" "main" {
      keys = key_provider.pbkdf2.main
    }
    state {
      method = method.aes_gcm.main
    }
    plan {
      method = method.aes_gcm.main
    }
  }
}

variable "passphrase" {
  type      = string
  sensitive = true
  # Example only: at least 16 characters.
  default = "burrito-py-example-passphrase"
}

resource "terraform_data" "secret" {
  input = "kept encrypted at rest"
}

output "stored" {
  value = terraform_data.secret.output
}
