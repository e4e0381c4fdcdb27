#!/usr/bin/env bash
# Build the control-plane binary (controlplane/: etcd + kube-apiserver + kube-controller-manager +
# kube-scheduler in one process) once per version of its sources, and print its path on stdout.
#
#   scripts/build-controlplane.sh          build if needed (progress on stderr), print the binary's path
#   scripts/build-controlplane.sh --cached print the path only if that build is already cached, else exit 3
#
# The binary is cached under ${XDG_CACHE_HOME:-~/.cache}/burrito-py/controlplane/<hash>/, the hash covering
# controlplane/go.mod, go.sum, every *.go file, the Go version and this script: a later run with the same
# sources costs a hash. Go's own module and build caches (GOMODCACHE, GOCACHE) are kept where the machine
# keeps them, so a rebuild after a small change recompiles only that change. Every Go step runs under
# `nice -n 19` with at most 2 parallel compilations: the machines have 2 cores that tests share.
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
src="$root/controlplane"
self="$root/scripts/build-controlplane.sh"
mode=build
case "${1:-}" in
  "") ;;
  --cached) mode=cached ;;
  *) echo "usage: $0 [--cached]" >&2; exit 2 ;;
esac

say() { echo "build-controlplane: $*" >&2; }
fail() { say "$*"; exit 1; }

command -v go >/dev/null || fail "no Go toolchain on PATH: the control plane is built from source with Go 1.26"
export GOTOOLCHAIN=local CGO_ENABLED=0 GOFLAGS=-mod=readonly
goversion=$(go env GOVERSION)

hash=$(
  cd "$src"
  { printf '%s\n' "$goversion"; cat "$self";
    find . -name '*.go' -o -name go.mod -o -name go.sum | LC_ALL=C sort | while read -r f; do
      printf '%s\n' "$f"; cat "$f"; done; } | sha256sum | cut -c1-16
)
cache="${XDG_CACHE_HOME:-$HOME/.cache}/burrito-py/controlplane"
binary="$cache/$hash/burrito-controlplane"
if [ -x "$binary" ]; then
  echo "$binary"
  exit 0
fi
[ "$mode" = cached ] && { say "not built for these sources (hash $hash): run scripts/build-controlplane.sh"; exit 3; }
# One build at a time on this machine (two test workers may ask at once); the second finds it cached.
mkdir -p "$cache"
exec 9>"$cache/.lock"
flock 9
if [ -x "$binary" ]; then
  echo "$binary"
  exit 0
fi

k8s=$(sed -n 's#^[[:space:]]*k8s\.io/kubernetes \(v[0-9.]*\).*#\1#p' "$src/go.mod" | head -1)
[ -n "$k8s" ] || fail "controlplane/go.mod requires no k8s.io/kubernetes version"
minor=${k8s#v1.}; minor=${minor%%.*}
began=$(date +%s)
elapsed() { local s=$(( $(date +%s) - began )); printf '%dm%02ds' $((s / 60)) $((s % 60)); }

say "building the control plane (Kubernetes $k8s, $goversion) into $binary"
say "the first build downloads ~700 MB of modules and compiles for 20-40 minutes on 2 cores; later ones reuse it"
cd "$src"
if ! out=$(nice -n 19 go mod download 2>&1); then
  # Name the module@version the proxy refused, with its error, in one line.
  refused=$(grep -m1 -E '[^ ]+@v[^ :]+' <<<"$out" || true)
  fail "the Go module proxy refused a module: ${refused:-$(tail -1 <<<"$out")}"
fi
say "modules ready after $(elapsed)"

total=$(nice -n 19 go list -deps . 2>/dev/null | wc -l)
ldflags="-s -w -X main.sourceHash=$hash"
for pkg in k8s.io/component-base/version k8s.io/client-go/pkg/version; do
  ldflags+=" -X $pkg.gitVersion=$k8s -X $pkg.gitMajor=1 -X $pkg.gitMinor=$minor -X $pkg.gitTreeState=clean"
  ldflags+=" -X $pkg.buildDate=$(date -u +%Y-%m-%dT%H:%M:%SZ)"
done
mkdir -p "$cache/$hash"
tmp="$cache/$hash/.building.$$"
trap 'rm -f "$tmp"' EXIT
log="$cache/$hash/build.log"
# `go build -v` names each package as it compiles it (cached ones are not named): a line every 100
# packages or 30 seconds shows progress without flooding the log.
set +e
progress() {
  local n=0 last now line
  printf -v last '%(%s)T' -1
  while IFS= read -r line; do
    case "$line" in
      "#"* | *": "* | go:*) echo "$line" >&2 ;;  # compiler errors and go's own messages
      *) n=$((n + 1)); printf -v now '%(%s)T' -1
         if (( n % 100 == 0 || now - last >= 30 )); then
           last=$now; say "compiled $n packages (of up to $total) after $(elapsed)"; fi ;;
    esac
  done
}
nice -n 19 go build -p 2 -v -trimpath -buildvcs=false -ldflags "$ldflags" -o "$tmp" . 2>&1 | tee "$log" | progress
status=${PIPESTATUS[0]}
set -e
if [ "$status" -ne 0 ]; then
  refused=$(grep -m1 -E 'reading .*@v|@v[^ :]+: (reading|verifying|invalid)' "$log" || true)
  [ -n "$refused" ] && fail "the Go module proxy refused a module: $refused"
  fail "go build failed (exit $status) after $(elapsed); the compiler's output is in $log"
fi
mv "$tmp" "$binary"
trap - EXIT
# Keep this build and the one before it (a branch switch back costs nothing); older ones go.
ls -1dt "$cache"/*/ 2>/dev/null | tail -n +3 | xargs -r rm -rf --
say "built in $(elapsed): $binary ($(du -m "$binary" | cut -f1) MB)"
echo "$binary"
