#!/usr/bin/env bash
# Build the images' base from Debian packages, for machines that can pull no registry image (docs/architecture.md
# §18): a Debian bookworm root filesystem made by mmdebstrap with what python:3.11-slim-bookworm gives the
# Dockerfiles (python3 3.11 with venv and pip, apt to install their own packages, ca-certificates), imported into
# podman's storage as localhost/burrito-py-base:bookworm-<hash>. Prints that reference on stdout.
#
#   scripts/build-base-image.sh [SUITE]           build it unless an image with the same inputs is in podman's storage
#   scripts/build-base-image.sh --cached [SUITE]  print the reference only if it is built, else exit 3
#
# SUITE: bookworm (default: Python 3.11.2, the python image's Debian) or trixie (Python 3.13). The runner needs
# Python >= 3.11.4 (tarfile's extraction filters, PEP 706: burrito_py/runner/sources.py), which bookworm's
# 3.11.2 lacks (§18).
# The tag's hash covers this script and the suite (the variant, the package list, the image's settings): the same
# script finds its image again and costs a `podman image exists`. Debian packages it needs (mmdebstrap, podman,
# buildah, runc, uidmap) are installed with apt-get when missing. Progress goes to stderr; a failed step is one
# line naming the command and why.
set -euo pipefail
main() {
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cached=0
[ "${1:-}" = "--cached" ] && { cached=1; shift; }
suite=${1:-bookworm}
case "$suite" in bookworm | trixie) ;; *) echo "build-base-image: unknown suite $suite (bookworm, trixie)" >&2; exit 1 ;; esac
variant=apt  # Essential: yes packages and apt: the Dockerfiles install their own packages (git, gpgv) with apt-get
packages=(python3 python3-venv ca-certificates)
name=localhost/burrito-py-base

say() { echo "build-base-image: $*" >&2; }
fail() { say "$*"; exit 1; }

hash=$( (cat "$root/scripts/build-base-image.sh"; echo "$suite") | sha256sum | cut -c1-16)
image="$name:$suite-$hash"

tools_missing() {
  local missing=() pair
  for pair in mmdebstrap:mmdebstrap podman:podman buildah:buildah runc:runc newuidmap:uidmap; do
    command -v "${pair%%:*}" >/dev/null || missing+=("${pair#*:}")
  done
  echo "${missing[@]}"
}

if [ "$cached" = 1 ]; then
  [ -z "$(tools_missing)" ] && podman image exists "$image" && { echo "$image"; exit 0; }
  exit 3
fi

missing=$(tools_missing)
if [ -n "$missing" ]; then
  say "installing Debian packages: $missing"
  sudo=""; [ "$(id -u)" -eq 0 ] || sudo="sudo"
  log=$(mktemp)
  # shellcheck disable=SC2086 # one word per package
  { $sudo apt-get update -qq && $sudo env DEBIAN_FRONTEND=noninteractive \
      apt-get install -y -qq --no-install-recommends $missing; } >"$log" 2>&1 \
    || fail "apt-get install $missing failed: $(tail -n 3 "$log" | tr '\n' ' ')"
  rm -f "$log"
fi

if podman image exists "$image"; then
  say "cached: $image"
  echo "$image"
  exit 0
fi

work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
started=$(date +%s)
say "mmdebstrap --variant=$variant $suite with ${packages[*]} (about 90 s from Debian's mirror)"
include=$(IFS=,; echo "${packages[*]}")
# The suite's updates and security pockets as well, as the python image's Debian has them: the Dockerfiles pin
# current package versions.
if ! nice -n 19 mmdebstrap --variant="$variant" --include="$include" \
    --dpkgopt='path-exclude=/usr/share/man/*' --dpkgopt='path-exclude=/usr/share/doc/*' \
    --dpkgopt='path-include=/usr/share/doc/*/copyright' \
    "$suite" "$work/rootfs.tar" \
    "deb http://deb.debian.org/debian $suite main" \
    "deb http://deb.debian.org/debian $suite-updates main" \
    "deb http://deb.debian.org/debian-security $suite-security main" >"$work/mmdebstrap.log" 2>&1; then
  fail "mmdebstrap $suite failed: $(grep -E '^E:' "$work/mmdebstrap.log" | head -n 2 | tr '\n' ' ')$(tail -n 1 "$work/mmdebstrap.log")"
fi
say "rootfs $(du -h "$work/rootfs.tar" | cut -f1) in $(($(date +%s) - started)) s; importing as $image"
# What the python image's config gives a Dockerfile: PATH (its ENV PATH=...:$PATH extends it), a UTF-8 locale.
if ! podman import \
    --change 'ENV PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin' \
    --change 'ENV LANG=C.UTF-8' \
    --change 'CMD ["python3"]' \
    --change "LABEL org.opencontainers.image.description=burrito-py base: Debian $suite, ${packages[*]}" \
    "$work/rootfs.tar" "$image" >"$work/import.log" 2>&1; then
  fail "podman import $image failed: $(tail -n 2 "$work/import.log" | tr '\n' ' ')"
fi
say "built $image in $(($(date +%s) - started)) s ($(podman image inspect --format '{{.Size}}' "$image") bytes)"
echo "$image"
}
main "$@"
