#!/usr/bin/env bash
# Build the three container images with docker buildx where a Docker engine runs, or with buildah from a base made
# of Debian packages where no registry can be pulled (--local; docs/architecture.md §18).
#
#   scripts/build-images.sh                      # build all three for this machine's platform, load them locally
#   PUSH=1 REGISTRY=ghcr.io/acme scripts/build-images.sh   # build for PLATFORMS and push
#   scripts/build-images.sh --local [IMAGE ...]  # buildah, as root: localhost/<image>:<version> in podman's storage
#
# --local builds all three FROM scripts/build-base-image.sh's trixie base (--build-arg PYTHON_IMAGE=...; Python 3.13;
# LOCAL_BASE_SUITE=bookworm to override, where pip refuses the wheel), as bookworm's Python 3.11.2 is older than
# burrito-py's requires-python (3.11.4: tarfile's extraction filters). The apt packages the Dockerfiles pin with
# bookworm's versions (ARG <PACKAGE>_VERSION defaults) get the base suite's current versions instead, read from its
# archive with apt-cache policy in a container from the base, once a run (§18). It runs every step with runc,
# cgroupfs and nofile/nproc limits of 1024 (crun and podman's default ulimits fail on the development machines,
# §18), the host's network (pip reaches PyPI, apt Debian's mirror), and layer caching: nothing changed costs a few
# seconds an image. The runner image gets its tools from build/image-tools/ (TOOLS_FROM=local) instead of GitHub:
# the terraform on PATH, and, with LOCAL_TOOLS_ROOT=<a tenv root> (e.g. the tenv/ of scripts/build-engines.sh's
# output), every tool in it and the tenv built beside it. IMAGE: burrito-py, burrito-py-runner, burrito-py-datastore (all three by default).
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
  # The runner's tools in tenv's layout: build/image-tools/tools/<Folder>/<version>/<binary>, and in bin/ the tenv
  # built beside that root (scripts/build-engines.sh's bin/tenv), if any.
  staged=build/image-tools
  rm -rf "$staged"
  mkdir -p "$staged/bin" "$staged/tools"
  if [ -n "${LOCAL_TOOLS_ROOT:-}" ]; then
    [ -d "$LOCAL_TOOLS_ROOT" ] || fail "LOCAL_TOOLS_ROOT=$LOCAL_TOOLS_ROOT is not a directory"
    cp -a "$LOCAL_TOOLS_ROOT/." "$staged/tools/"
    find "$staged/tools" -name last-use.txt -delete
    if [ -x "$LOCAL_TOOLS_ROOT/../bin/tenv" ]; then cp "$LOCAL_TOOLS_ROOT/../bin/tenv" "$staged/bin/tenv"; fi
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
  buildah_opts=(--cgroup-manager=cgroupfs)
  run_opts=(--runtime runc --network host)
  # The apt packages a Dockerfile pins, one `<package>="${<ARG>}"` a line: "<package> <ARG>" lines.
  apt_pins() { sed -n 's/^ *\([a-z0-9][a-z0-9.+-]*\)="\${\([A-Z0-9_]*_VERSION\)}".*/\1 \2/p' "$1"; }
  # versions[<package>]: its candidate version in the base's suite (its archive today, after apt-get update),
  # read in a throwaway container of the base, never a layer of an image.
  declare -A versions=()
  read_versions() {  # <base> <package> ...
    local base=$1 container out log; shift
    log="build/build-images-apt-versions.log"
    container=$(buildah "${buildah_opts[@]}" from --pull=never "$base") || fail "buildah from $base failed"
    if ! out=$(nice -n 19 buildah "${buildah_opts[@]}" run "${run_opts[@]}" "${ca[@]}" "$container" -- sh -c \
        'apt-get update -qq >/dev/null && for p in "$@"; do
           printf "%s %s\n" "$p" "$(apt-cache policy "$p" | sed -n "s/^ *Candidate: //p")"; done' \
        sh "$@" 2>"$log"); then
      buildah rm "$container" >/dev/null 2>&1 || true
      fail "apt-cache policy in $base failed (log: $log): $(tail -n 2 "$log" | tr '\n' ' ')"
    fi
    buildah rm "$container" >/dev/null 2>&1 || true
    local package version
    while read -r package version; do
      case "$version" in ''|'(none)') fail "$package: no candidate version in $base's archive" ;; esac
      versions[$package]=$version
    done <<<"$out"
  }
  suite=${LOCAL_BASE_SUITE:-trixie}
  base=$(bash scripts/build-base-image.sh "$suite") || exit 1
  dockerfile_of() {  # <image>
    case "$1" in
      burrito-py) echo images/burrito-py/Dockerfile ;;
      burrito-py-runner) echo runner/Dockerfile ;;
      burrito-py-datastore) echo datastore/Dockerfile ;;
      *) return 1 ;;
    esac
  }
  wanted=("$@")
  [ "${#wanted[@]}" -gt 0 ] || wanted=(burrito-py burrito-py-runner burrito-py-datastore)
  for image in "${wanted[@]}"; do
    dockerfile_of "$image" >/dev/null \
      || fail "unknown image $image (burrito-py, burrito-py-runner, burrito-py-datastore)"
  done
  # Every package the wanted images pin, looked up in one container (none for the runner alone).
  packages=$(for image in "${wanted[@]}"; do apt_pins "$(dockerfile_of "$image")"; done \
    | cut -d' ' -f1 | sort -u | tr '\n' ' ')
  if [ -n "$packages" ]; then
    started=$(date +%s)
    # shellcheck disable=SC2086 # one word per package
    read_versions "$base" $packages
    found=$(for p in "${!versions[@]}"; do printf ' %s=%s' "$p" "${versions[$p]}"; done)
    say "$suite's versions ($(($(date +%s) - started)) s):$found"
  fi
  for image in "${wanted[@]}"; do
    file=$(dockerfile_of "$image")
    pins=()
    while read -r package arg; do
      pins+=(--build-arg "$arg=${versions[$package]}")
    done < <(apt_pins "$file")
    tag="localhost/$image:$VERSION"
    say "building $tag from $file on $base"
    started=$(date +%s)
    # No revision label here: buildah 1.28 puts command-line labels in every step's cache key, so a new commit
    # rebuilt every step (3 minutes) even with nothing changed under burrito_py/.
    log="build/build-images-$image.log"
    previous=$(podman image inspect --format '{{.Id}}' "$tag" 2>/dev/null || true)
    if ! nice -n 19 buildah "${buildah_opts[@]}" bud "${run_opts[@]}" \
        --ulimit nofile=1024:1024 --ulimit nproc=1024:1024 --layers --force-rm \
        --build-arg "PYTHON_IMAGE=$base" --build-arg TOOLS_FROM=local "${pins[@]}" "${ca[@]}" \
        --label "org.opencontainers.image.version=$VERSION" \
        --file "$file" --tag "$tag" . >"$log" 2>&1; then
      fail "buildah bud $file failed (log: $log): $(grep -E 'error|Error|E:' "$log" | tail -n 2 | tr '\n' ' ')"
    fi
    say "built $tag in $(($(date +%s) - started)) s, $(podman image inspect --format '{{.Size}}' "$tag") bytes"
    # The image the tag named before is nobody's now: removing it removes the steps only it used (the final stage's
    # copy of the venv, about 700 MB a build). Left alone, each commit's build stayed, and the disk filled after
    # about 50 (CI failed installing the venv: no space left). The new build's cache stays: it is the new image's.
    current=$(podman image inspect --format '{{.Id}}' "$tag")
    if [ -n "$previous" ] && [ "$previous" != "$current" ]; then
      podman rmi "$previous" >/dev/null 2>&1 || say "kept the previous $tag ($previous): still in use"
    fi
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
