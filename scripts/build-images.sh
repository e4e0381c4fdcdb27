#!/usr/bin/env bash
# Build the three container images with docker buildx where a Docker engine runs, or with buildah from a base made
# of Debian packages where no registry can be pulled (--local; docs/architecture.md §18).
#
#   scripts/build-images.sh                      # build all three for this machine's platform, load them locally
#   PUSH=1 REGISTRY=ghcr.io/acme scripts/build-images.sh   # build for PLATFORMS and push
#   scripts/build-images.sh --local [IMAGE ...]  # buildah, as root: localhost/<image>:<version> in podman's storage
#
# --local builds FROM scripts/build-base-image.sh's bases (--build-arg PYTHON_IMAGE=...): the runner's on trixie
# (Python 3.13; RUNNER_BASE_SUITE=bookworm to override), as bookworm's Python 3.11.2 is older than burrito-py's
# requires-python (3.11.4: tarfile's extraction filters), the two others on bookworm, whose package versions their
# Dockerfiles pin (so their local builds stop at pip's requires-python check: §18). It runs every step with runc,
# cgroupfs and nofile/nproc limits of 1024 (crun and podman's default ulimits fail on the development machines,
# §18), the host's network (pip reaches PyPI, apt Debian's mirror), and layer caching: nothing changed costs a few
# seconds an image. The runner image gets its tools from build/image-tools/ (TOOLS_FROM=local) instead of GitHub:
# the terraform on PATH, and, with LOCAL_TOOLS_ROOT=<a tenv root> (e.g. the tenv/ of scripts/build-engines.sh's
# output), every tool in it. IMAGE: burrito-py, burrito-py-runner, burrito-py-datastore (all three by default).
#
# Tags: <REGISTRY>/burrito-py:<version>, <REGISTRY>/burrito-py-runner:<version> and
# <REGISTRY>/burrito-py-datastore:<version>, <version> from pyproject.toml.
# PLATFORMS (push only): linux/amd64 by default; linux/arm64 needs TOFU_SHA256_ARM64 in runner/Dockerfile.
set -euo pipefail
cd "$(dirname "$0")/.."

REGISTRY="${REGISTRY:-ghcr.io/burrito-py}"
PLATFORMS="${PLATFORMS:-linux/amd64}"
VERSION="$(sed -n 's/^version = "\(.*\)"$/\1/p' pyproject.toml | head -n 1)"
[ -n "$VERSION" ] || { echo "no version in pyproject.toml" >&2; exit 1; }

if [ "${1:-}" = "--local" ]; then
  shift
  say() { echo "build-images: $*" >&2; }
  fail() { say "$*"; exit 1; }
  # The runner's tools in tenv's layout: build/image-tools/tools/<Folder>/<version>/<binary>, bin/ empty (no tenv).
  staged=build/image-tools
  rm -rf "$staged"
  mkdir -p "$staged/bin" "$staged/tools"
  if [ -n "${LOCAL_TOOLS_ROOT:-}" ]; then
    [ -d "$LOCAL_TOOLS_ROOT" ] || fail "LOCAL_TOOLS_ROOT=$LOCAL_TOOLS_ROOT is not a directory"
    cp -a "$LOCAL_TOOLS_ROOT/." "$staged/tools/"
    find "$staged/tools" -name last-use.txt -delete
  fi
  terraform=$(command -v terraform) || fail "no terraform on PATH for the runner image (or set LOCAL_TOOLS_ROOT)"
  tf_version=$(CHECKPOINT_DISABLE=1 "$terraform" version -json \
    | python3 -c 'import json, sys; print(json.load(sys.stdin)["terraform_version"])') \
    || fail "'$terraform version -json' failed"
  mkdir -p "$staged/tools/Terraform/$tf_version"
  cp "$terraform" "$staged/tools/Terraform/$tf_version/terraform"
  say "runner tools: $(cd "$staged/tools" && find . -mindepth 2 -maxdepth 2 -type d | sed 's|^\./||' | sort | tr '\n' ' ')"
  # The host's CA bundle, mounted over the base's for the build steps only (never in a layer): where outbound TLS is
  # re-signed by a proxy (the development machines), pip must trust what the host trusts.
  ca=()
  [ -f /etc/ssl/certs/ca-certificates.crt ] \
    && ca=(--volume /etc/ssl/certs/ca-certificates.crt:/etc/ssl/certs/ca-certificates.crt:ro)
  wanted=("$@")
  [ "${#wanted[@]}" -gt 0 ] || wanted=(burrito-py burrito-py-runner burrito-py-datastore)
  for image in "${wanted[@]}"; do
    case "$image" in
      burrito-py) file=images/burrito-py/Dockerfile; suite=bookworm ;;
      burrito-py-runner) file=runner/Dockerfile; suite=${RUNNER_BASE_SUITE:-trixie} ;;
      burrito-py-datastore) file=datastore/Dockerfile; suite=bookworm ;;
      *) fail "unknown image $image (burrito-py, burrito-py-runner, burrito-py-datastore)" ;;
    esac
    base=$(bash scripts/build-base-image.sh "$suite") || exit 1
    tag="localhost/$image:$VERSION"
    say "building $tag from $file on $base"
    started=$(date +%s)
    # No revision label here: buildah 1.28 puts command-line labels in every step's cache key, so a new commit
    # rebuilt every step (3 minutes) even with nothing changed under burrito_py/.
    log="build/build-images-$image.log"
    if ! nice -n 19 buildah --cgroup-manager=cgroupfs bud --runtime runc \
        --ulimit nofile=1024:1024 --ulimit nproc=1024:1024 --network host --layers --force-rm \
        --build-arg "PYTHON_IMAGE=$base" --build-arg TOOLS_FROM=local "${ca[@]}" \
        --label "org.opencontainers.image.version=$VERSION" \
        --file "$file" --tag "$tag" . >"$log" 2>&1; then
      fail "buildah bud $file failed (log: $log): $(grep -E 'error|Error|E:' "$log" | tail -n 2 | tr '\n' ' ')"
    fi
    say "built $tag in $(($(date +%s) - started)) s, $(podman image inspect --format '{{.Size}}' "$tag") bytes"
    echo "$tag"
  done
  exit 0
fi

command -v docker >/dev/null || { echo "docker is required" >&2; exit 1; }
docker buildx version >/dev/null || { echo "docker buildx is required" >&2; exit 1; }

if [ "${PUSH:-0}" = "1" ]; then
  output=(--platform "$PLATFORMS" --push --sbom=true --provenance=mode=max)
else
  output=(--load)
fi

build() {  # <Dockerfile> <image name>
  echo "building $REGISTRY/$2:$VERSION from $1" >&2
  docker buildx build --file "$1" --tag "$REGISTRY/$2:$VERSION" \
    --label "org.opencontainers.image.version=$VERSION" \
    --label "org.opencontainers.image.revision=$(git rev-parse HEAD 2>/dev/null || echo unknown)" \
    "${output[@]}" .
}

build images/burrito-py/Dockerfile burrito-py
build runner/Dockerfile burrito-py-runner
build datastore/Dockerfile burrito-py-datastore
