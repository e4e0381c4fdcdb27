#!/usr/bin/env bash
# Install burrito-py and run the whole product locally on the bundled quickstart example: a Kubernetes control
# plane built from the official Go modules (the first run builds it: minutes, with progress), the local kubelet
# as its node, the Helm chart, real git and real terraform. Ctrl-C stops it. `--cluster emulator`: no build.
set -euo pipefail
cd "$(dirname "$0")/.."

command -v terraform >/dev/null || { echo "terraform is required on PATH" >&2; exit 1; }
command -v git >/dev/null || { echo "git is required on PATH" >&2; exit 1; }
case " $* " in
  *" --cluster emulator "*|*" --cluster=emulator "*) ;;
  *) command -v go >/dev/null || { echo "go (1.26) is required on PATH to build the control plane; or pass --cluster emulator" >&2; exit 1; } ;;
esac

. scripts/venv.sh
exec burrito-py dev --example quickstart --data-dir .burrito-py --kubeconfig .burrito-py/kubeconfig "$@"
