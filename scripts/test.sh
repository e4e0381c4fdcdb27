#!/usr/bin/env bash
# Install everything the test suite needs on a fresh machine, then run lint, types and the whole suite.
set -euo pipefail
cd "$(dirname "$0")/.."

command -v terraform >/dev/null || { echo "terraform is required on PATH" >&2; exit 1; }
command -v kubectl >/dev/null || { echo "kubectl is required on PATH" >&2; exit 1; }
command -v git >/dev/null || { echo "git is required on PATH" >&2; exit 1; }

# The git-credentials tests run a real OpenSSH server on loopback; the UI's browser tests drive Debian's
# Chromium through Playwright (the pip package only: its own browser download is never used).
missing=()
[ -x /usr/sbin/sshd ] || missing+=(openssh-server)
[ -x /usr/bin/chromium ] || missing+=(chromium)
# The runner image's tests (tests/e2e/test_runner_image.py) build it with buildah from a base made by mmdebstrap and
# run its pods with podman and runc (docs/architecture.md §18, §20).
for tool in podman buildah runc mmdebstrap; do
  command -v "$tool" >/dev/null || [ -x "/usr/sbin/$tool" ] || missing+=("$tool")
done
command -v newuidmap >/dev/null || missing+=(uidmap)
if [ "${#missing[@]}" -gt 0 ]; then
  sudo=""; [ "$(id -u)" -eq 0 ] || sudo="sudo"
  $sudo apt-get update -qq
  $sudo env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
fi

# Everything Python goes into the project's own .venv; its bin/ comes first on PATH, so the kubelet's runner
# pods and the tests run this checkout's `burrito-py`.
. scripts/venv.sh test

python -m ruff check .
python -m mypy
# The real control plane (controlplane/, docs/architecture.md §22) is built from source once per version of its
# sources and cached under ~/.cache/burrito-py; the first build takes 20-40 minutes on 2 cores. So are the
# engines (engines/: OpenTofu, Terragrunt, Terraform 1.5.7; §23), about 14 minutes for all four the first time.
# Without Go the tests that need them fail, naming the cause (never a skip).
if command -v go >/dev/null; then
  bash scripts/build-controlplane.sh >/dev/null
  bash scripts/build-engines.sh >/dev/null
else
  echo "test.sh: no Go toolchain on PATH: the real control plane's and the engines' tests will fail" >&2
fi
# The runner image, once before the suite (its test would build it too, but a cold build, about 8.5 minutes with its
# Debian trixie base, is better not counted against one test): the base is cached by its inputs, the image's steps
# (its locked dependencies, runner/requirements.lock, a step of their own) by buildah's layer cache: about 20 s warm. A failure here is reported, and the image's tests then fail naming it.
# Its tag goes to the image's tests, which then build nothing again.
if image=$(bash scripts/build-images.sh --local burrito-py-runner | tail -n 1); then
  export BURRITO_PY_TEST_RUNNER_IMAGE="$image"
else
  echo "test.sh: the runner image could not be built: tests/e2e/test_runner_image.py will fail" >&2
fi
# Three workers on the machines' 2 cores: the suite mostly waits (terraform, git, drift periods, control planes),
# 26 CPU-minutes in 18 wall-minutes with three, so a third worker cut pytest from 20.5 to 15.3 min (2026-11-28,
# docs/architecture.md §15 "Running"). Each test file stays on one worker.
# The slowest tests are printed after the summary: where the suite's time goes, on the machine that ran it.
python -m pytest -n 3 --dist loadfile --durations=30 "$@"
