#!/usr/bin/env bash
# Sourced by dev.sh and test.sh: create (once) and activate the project-local virtual environment, then
# install burrito-py (with the extras named in $1) and burrito-py-local into it (never into the system Python).
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
if [ ! -x "$root/.venv/bin/python" ]; then
  python3 -m venv "$root/.venv"
fi
# shellcheck disable=SC1091
. "$root/.venv/bin/activate"
# A fresh machine downloads every wheel, and a dropped connection must not fail the set-up: pip retries each
# request (PIP_RETRIES) and resumes a cut download (PIP_RESUME_RETRIES, pip >= 25.1; older pips ignore it), and
# the whole install is tried three times (what is already installed is not downloaded again).
export PIP_DISABLE_PIP_VERSION_CHECK=1 PIP_RETRIES="${PIP_RETRIES:-10}" PIP_RESUME_RETRIES="${PIP_RESUME_RETRIES:-30}"
pip_install() {
  local attempt
  for attempt in 1 2 3; do
    python -m pip install --quiet "$@" && return 0
    echo "venv.sh: pip install failed (attempt $attempt of 3)" >&2
    [ "$attempt" -eq 3 ] || sleep $((attempt * 10))
  done
  return 1
}
pip_install --upgrade pip
# burrito-py, and burrito-py-local (local/: the emulator, the local kubelet and `burrito-py dev`; never in the images).
pip_install -e "$root${1:+[$1]}" -e "$root/local"
