#!/usr/bin/env bash
# Install burrito-py and run the whole product locally on the bundled quickstart example:
# API emulator, local kubelet, datastore, controllers, real git and real terraform. Ctrl-C stops it.
set -euo pipefail
cd "$(dirname "$0")/.."

command -v terraform >/dev/null || { echo "terraform is required on PATH" >&2; exit 1; }
command -v git >/dev/null || { echo "git is required on PATH" >&2; exit 1; }

. scripts/venv.sh
exec burrito-py dev --example quickstart --data-dir .burrito-py --kubeconfig .burrito-py/kubeconfig "$@"
