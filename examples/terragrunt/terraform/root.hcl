# Included by every unit: one local backend per unit, under the directory the runner is given. Units that read
# each other's outputs need a backend they can all read (docs/architecture.md §9.1).
remote_state {
  backend = "local"
  generate = {
    path      = "backend.tf"
    if_exists = "overwrite"
  }
  config = {
    path = "${get_env("BURRITO_EXAMPLE_STATE")}/${path_relative_to_include()}/terraform.tfstate"
  }
}
