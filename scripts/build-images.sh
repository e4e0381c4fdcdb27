#!/usr/bin/env bash
# Build the three container images with docker buildx (needs a Docker engine: none exists on the development
# machines, where tests/unit/images checks the Dockerfiles statically instead).
#
#   scripts/build-images.sh                      # build all three for this machine's platform, load them locally
#   PUSH=1 REGISTRY=ghcr.io/acme scripts/build-images.sh   # build for PLATFORMS and push
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
