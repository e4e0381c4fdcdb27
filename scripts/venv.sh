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
python -m pip install --quiet --disable-pip-version-check --upgrade pip
# burrito-py, and burrito-py-local (local/: the emulator, the local kubelet and `burrito-py dev`; never in the images).
python -m pip install --quiet --disable-pip-version-check -e "$root${1:+[$1]}" -e "$root/local"
