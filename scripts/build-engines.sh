#!/usr/bin/env bash
# Build the engines the runner runs from their Go modules, each once per version of its wrapper module
# (engines/<tool>-<version>/, docs/architecture.md §23), check each one's version, then assemble from them a
# tenv root and a tool mirror. Prints on stdout the directory that holds both (tenv/, mirror/, engines.json).
#
#   scripts/build-engines.sh [TOOL-VERSION ...]           build what is not cached (all wrappers by default)
#   scripts/build-engines.sh --cached [TOOL-VERSION ...]  print the directory only if everything is cached, else exit 3
#   scripts/build-engines.sh --check TOOL VERSION BINARY  only the version check of one binary
#
# Each binary is cached under ${XDG_CACHE_HOME:-~/.cache}/burrito-py/engines/<tool>-<version>/<hash>/, the hash
# covering the wrapper's go.mod and go.sum, the Go version and the link flags: a later run with the same wrappers
# costs a hash per tool. Go's module and build caches stay where the machine keeps them. Every Go step runs under
# `nice -n 19` with at most 2 parallel compilations (2 shared cores). A tool that fails (a module the proxy
# refuses, a compile error, a wrong version string) gets one line naming it, module@version and the error; the
# others are still built, and the script exits 1 at the end.
set -euo pipefail
# All in one function: bash parses it whole before running it, so a checkout that changes this file during
# a build (many minutes) cannot change what the running script does.
main() {
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
src="${BURRITO_ENGINES_SRC:-$root/engines}"  # another wrapper tree (the script's own tests)
cache="${XDG_CACHE_HOME:-$HOME/.cache}/burrito-py/engines"

say() { echo "build-engines: $*" >&2; }
fail() { say "$*"; exit 1; }

# What links each tool and what its version output must say. The version strings are read back by the runner
# (and by version constraints), so they are set at link time: tofu reports "<v>-dev" without version.dev=no,
# terragrunt "latest" without internal/version.Version.
recipe() {  # tool version -> sets $binary_name and $ldflags
  case "$1" in
    tofu) binary_name=tofu; ldflags="-X github.com/opentofu/opentofu/version.dev=no" ;;
    terraform) binary_name=terraform; ldflags="" ;;
    terragrunt) binary_name=terragrunt; ldflags="-X github.com/gruntwork-io/terragrunt/internal/version.Version=v$2" ;;
    tenv) binary_name=tenv; ldflags="-X main.version=v$2" ;;
    *) return 1 ;;
  esac
}

# Prints nothing when BINARY reports VERSION on stdout, else why not (one line), quoting its stderr if any.
check_version() {  # tool version binary
  local tool=$1 version=$2 binary=$3 out err got want args
  case "$tool" in
    tofu | terraform) want=$version; args=(version -json) ;;
    terragrunt | tenv) want="$tool version v$version"; args=(--version) ;;
    *) echo "no version check for $tool"; return ;;
  esac
  err=$(mktemp)
  # CHECKPOINT_DISABLE: terraform would otherwise ask HashiCorp whether a newer version exists. No CLI
  # configuration: a TF_CLI_CONFIG_FILE naming a missing file makes tofu 1.12 print a warning on stdout, before
  # the JSON.
  if ! out=$(env -u TF_CLI_CONFIG_FILE -u TOFU_CLI_CONFIG_FILE CHECKPOINT_DISABLE=1 \
      "$binary" "${args[@]}" 2>"$err"); then
    echo "'$tool ${args[*]}' failed: $(tr '\n' ' ' <"$err")"; rm -f "$err"; return
  fi
  if [ "$want" = "$version" ]; then
    got=$(python3 -c 'import json, sys; print(json.load(sys.stdin)["terraform_version"])' <<<"$out" 2>/dev/null) \
      || got="no JSON with terraform_version: ${out//$'\n'/ }"
  else
    got=$(head -1 <<<"$out")
  fi
  if [ "$got" != "$want" ]; then
    out=$(tr -s '\n ' ' ' <"$err")
    echo "version check failed: expected '$want', the binary reports '$got'${out:+ (its stderr: ${out% })}"
  fi
  rm -f "$err"
}

mode=build
case "${1:-}" in
  --cached) mode=cached; shift ;;
  --check)
    [ $# -eq 4 ] || { echo "usage: $0 --check TOOL VERSION BINARY" >&2; exit 2; }
    why=$(check_version "$2" "$3" "$4")
    [ -z "$why" ] || fail "$2 $3 ($4): $why"
    exit 0 ;;
  -*) echo "usage: $0 [--cached] [TOOL-VERSION ...] | --check TOOL VERSION BINARY" >&2; exit 2 ;;
esac

command -v go >/dev/null || fail "no Go toolchain on PATH: the engines are built from their Go modules with Go 1.26"
export GOTOOLCHAIN=local CGO_ENABLED=0 GOFLAGS=-mod=readonly
{ read -r goversion; read -r goos; read -r goarch; } < <(go env GOVERSION GOOS GOARCH)

if [ $# -gt 0 ]; then
  wrappers=("$@")
else
  wrappers=()
  for d in "$src"/*/; do [ -f "$d/go.mod" ] && wrappers+=("$(basename "$d")"); done
fi
[ "${#wrappers[@]}" -gt 0 ] || fail "no wrapper modules under $src"

# Read one wrapper: sets $tool $version $package $module $module_version $hash $binary, or $why (one line).
describe() {  # name
  local name=$1 dir="$src/$1" edit
  why=""
  tool=${name%%-*}; version=${name#*-}
  [ -f "$dir/go.mod" ] || { why="no wrapper module $dir"; return; }
  [ -f "$dir/go.sum" ] || { why="$dir has no go.sum (run 'go mod tidy' there once and commit it)"; return; }
  recipe "$tool" "$version" \
    || { why="unknown tool '$tool' (the directory must be named tofu|terraform|terragrunt|tenv-<version>)"; return; }
  # The wrapper names one tool package; its module is the required one whose path is the longest prefix of it
  # (go mod tidy marks it "// indirect": no package of the wrapper imports it).
  edit=$(cd "$dir" && go mod edit -json 2>&1) || { why="go.mod does not parse: $(tail -1 <<<"$edit")"; return; }
  read -r package module module_version < <(python3 -c '
import json, sys
m = json.load(sys.stdin)
tools = [t["Path"] for t in m.get("Tool") or []]
owners = sorted((r for r in m.get("Require") or [] for t in tools[:1]
                 if t == r["Path"] or t.startswith(r["Path"] + "/")), key=lambda r: len(r["Path"]))
print(*(tools + [owners[-1]["Path"], owners[-1]["Version"]] if len(tools) == 1 and owners else "---"))' <<<"$edit")
  [ "$package" != - ] || { why="go.mod must have one tool directive and require the module that provides it"; return; }
  [ "$module_version" = "v$version" ] \
    || { why="the directory says $version but go.mod requires $module $module_version"; return; }
  hash=$({ printf '%s\n%s\n%s\n' "$goversion" "$tool" "$ldflags"; cat "$dir/go.mod" "$dir/go.sum"; } \
    | sha256sum | cut -c1-16)
  binary="$cache/$name/$hash/$binary_name"
}

# `go build -v` names each package as it compiles it (cached ones are not named): a line every 100 packages or
# 30 seconds shows progress without flooding the output.
progress() {  # label total began
  local label=$1 total=$2 began=$3 n=0 last now line
  printf -v last '%(%s)T' -1
  while IFS= read -r line; do
    case "$line" in
      "#"* | *": "* | go:*) echo "$line" >&2 ;;  # compiler errors and go's own messages
      *) n=$((n + 1)); printf -v now '%(%s)T' -1
         if (( n % 100 == 0 || now - last >= 30 )); then
           last=$now; say "$label: compiled $n packages (of up to $total) after $(elapsed "$began")"; fi ;;
    esac
  done
}
elapsed() { local s=$(( $(date +%s) - $1 )); printf '%dm%02ds' $((s / 60)) $((s % 60)); }
# CPU seconds (user + system) used so far by this shell's finished children: the compilers' work, which on an
# idle machine is what sets the wall time (about half of it with -p 2 on 2 cores).
# Sets $cpu_now; `times` runs in this shell itself (in a pipe or $(…) it would report a subshell's children).
children_cpu() {
  local f; f=$(mktemp); times >"$f"
  cpu_now=$(awk 'NR == 2 { n = 0; for (i = 1; i <= 2; i++) { split($i, t, "m"); n += t[1] * 60 + t[2] }
                           print int(n) }' "$f")
  rm -f "$f"
}
# The first line that names a module@version with go's error, with the proxy's reason when it gave one.
refused() {  # log
  awk '!found && /@v[^ ]*: / { sub(/^go: /, ""); line = $0; found = 1; next }
       found && /server response:/ { sub(/^[ \t]*server response: */, ""); line = line " (" $0 ")"; exit }
       found { exit }
       END { print line }' "$1"
}

failures=()
built=()    # "tool version binary" of each tool ready
missing=()
for name in "${wrappers[@]}"; do
  describe "$name"
  if [ -n "$why" ]; then failures+=("$name: $why"); say "FAILED $name: $why"; continue; fi
  if [ -x "$binary" ]; then
    [ "$mode" = build ] && say "$tool $version: cached ($binary)"
    built+=("$tool $version $binary")
  elif [ "$mode" = cached ]; then
    missing+=("$name")
  else
    built+=("$tool $version -")  # built below, under the lock
  fi
done

if [ "$mode" = cached ]; then
  [ "${#failures[@]}" -eq 0 ] || exit 1
  if [ "${#missing[@]}" -gt 0 ]; then
    say "not built for these wrappers: ${missing[*]}: run scripts/build-engines.sh"; exit 3
  fi
else
  # One build at a time on this machine (two test workers may ask at once); the second finds it cached.
  mkdir -p "$cache"
  exec 9>"$cache/.lock"
  flock 9
  for i in "${!built[@]}"; do
    read -r tool version binary <<<"${built[$i]}"
    [ "$binary" = - ] || continue
    name="$tool-$version"
    describe "$name"
    if [ -x "$binary" ]; then built[i]="$tool $version $binary"; continue; fi  # built by the other worker meanwhile
    dir="$src/$name"
    label="$tool $version"
    began=$(date +%s)
    children_cpu; cpu_before=$cpu_now
    mkdir -p "$cache/$name/$hash"
    log="$cache/$name/$hash/build.log"
    say "$label: building $package from $module@$module_version ($goversion) into $binary"
    if ! (cd "$dir" && nice -n 19 go mod download) >"$log" 2>&1; then
      why=$(refused "$log"); why=${why:-$(tail -1 "$log")}
      failures+=("$name: the Go module proxy refused a module: $why")
      say "FAILED $label ($module@$module_version): the Go module proxy refused a module: $why"
      unset 'built[i]'; continue
    fi
    say "$label: modules ready after $(elapsed "$began")"
    total=$(cd "$dir" && nice -n 19 go list -deps "$package" 2>/dev/null | wc -l)
    tmp="$cache/$name/$hash/.building.$$"
    set +e
    (cd "$dir" && nice -n 19 go build -p 2 -v -trimpath -buildvcs=false -ldflags "-s -w $ldflags" \
       -o "$tmp" "$package") 2>&1 | tee -a "$log" | progress "$label" "$total" "$began"
    status=${PIPESTATUS[0]}
    set -e
    if [ "$status" -ne 0 ]; then
      rm -f "$tmp"
      why=$(refused "$log")
      if [ -n "$why" ]; then why="the Go module proxy refused a module: $why"
      else why="go build failed (exit $status) after $(elapsed "$began"); the compiler's output is in $log"; fi
      failures+=("$name: $why"); say "FAILED $label ($module@$module_version): $why"
      unset 'built[i]'; continue
    fi
    why=$(check_version "$tool" "$version" "$tmp")
    if [ -n "$why" ]; then
      rm -f "$tmp"
      failures+=("$name: $why"); say "FAILED $label ($module@$module_version): $why"
      unset 'built[i]'; continue
    fi
    mv "$tmp" "$binary"
    built[i]="$tool $version $binary"
    # Keep this build and the one before it (a branch switch back costs nothing); older ones go.
    ls -1dt "$cache/$name"/*/ 2>/dev/null | tail -n +3 | xargs -r rm -rf --
    children_cpu; cpu=$((cpu_now - cpu_before))
    say "$label: built in $(elapsed "$began"), $((cpu / 60))m$(printf '%02d' $((cpu % 60)))s of CPU" \
        "($(du -m "$binary" | cut -f1) MB), version checked"
  done
fi

# The machine's own terraform (BUSL, never built here) joins the root when it is a version not built here, so
# tenv finds every Terraform this machine has. Checked like the built ones.
engines=()
for entry in "${built[@]}"; do engines+=(--engine "${entry// /=}"); done
host=$(command -v terraform || true)
if [ -n "$host" ]; then
  hv=$(env -u TF_CLI_CONFIG_FILE CHECKPOINT_DISABLE=1 "$host" version -json 2>/dev/null \
       | python3 -c 'import json, sys; print(json.load(sys.stdin)["terraform_version"])' 2>/dev/null || true)
  if [ -n "$hv" ] && ! printf '%s\n' "${built[@]}" | grep -qx "terraform $hv .*"; then
    engines+=(--engine "terraform=$hv=$host")
  fi
fi

if [ "${#built[@]}" -gt 0 ]; then
  # The assembled directory is named by what it holds, so one already assembled is reused as it is.
  key=$(printf '%s\n' "$goos/$goarch" "${engines[@]}" | sha256sum | cut -c1-16)
  out="$cache/root-$key"
  if [ ! -d "$out" ]; then
    if [ "$mode" = cached ]; then
      say "the tenv root for these engines is not assembled: run scripts/build-engines.sh"; exit 3
    fi
    began=$(date +%s)
    tmp="$cache/.root-$key.$$"
    rm -rf "$tmp"
    python3 "$root/scripts/engines-layout.py" --out "$tmp" --platform "${goos}_$goarch" "${engines[@]}" >&2
    mv -T "$tmp" "$out" 2>/dev/null || rm -rf "$tmp"  # another run may have assembled it first
    ls -1dt "$cache"/root-*/ 2>/dev/null | tail -n +3 | xargs -r rm -rf --
    say "tenv root and tool mirror assembled in $(elapsed "$began"): $out"
  fi
fi

if [ "${#failures[@]}" -gt 0 ]; then
  say "${#failures[@]} of ${#wrappers[@]} engines failed:"
  for f in "${failures[@]}"; do say "  $f"; done
  exit 1
fi
echo "${out:?}"
}

main "$@"; exit  # on one line: bash has read it whole before main runs
