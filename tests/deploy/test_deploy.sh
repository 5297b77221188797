#!/usr/bin/env bash
# test_deploy: the files of deploy/ are read the way the tools that run
# them read them, and broken copies of them are refused (so each check is
# shown to be real, not a pass by default).
#
#   test_deploy.sh SOURCE_DIR OUT_DIR EMBER_AGENT EMBER_COLLECTOR EMBER GO
#
# 1. tests/deploy/validate (Go, built here from its go.mod/go.sum with the
#    module proxy): every document of deploy/kubernetes decoded strictly
#    into the Kubernetes API types (k8s.io/api), plus rules of ours
#    (selectors, probe ports, mounts, the StatefulSet's headless Service,
#    resources, security contexts); deploy/compose/compose.yaml loaded
#    with compose-go (the Compose spec's schema and consistency checks);
#    the Dockerfile's base images. No image names a registry host.
# 2. Every Ember config file in deploy/ (and in the ConfigMaps) is read by
#    the real ember-agent or ember-collector, which refuses unknown keys.
# 3. systemd-analyze verify on the units (their ExecStart pointed at the
#    binaries of this build tree), and systemd-analyze security as a floor
#    on their hardening.
# 4. The libraries the built binaries link come from packages the image's
#    run stage installs (deploy/docker/runtime-packages.txt).
# 5. The negative self-tests: each check above refuses a broken copy.
#
# Prints one line per check and "N passed, N failed" at the end; exits 1
# when anything failed.
set -euo pipefail

if [ $# -ne 6 ]; then
  echo "usage: $0 SOURCE_DIR OUT_DIR EMBER_AGENT EMBER_COLLECTOR EMBER GO" >&2
  exit 2
fi
src=$1 out=$2 agent=$3 collector=$4 cli=$5 go=$6
deploy=$src/deploy
start=$(date +%s)
passed=0
failed=0
ok() {
  passed=$((passed + 1))
  echo "ok: $*"
}
fail() {
  failed=$((failed + 1))
  echo "FAIL: $*"
}

mkdir -p "$out"
tmp=$(mktemp -d "$out/run.XXXXXX")
trap 'rm -rf "$tmp"' EXIT

# ---- 1. the validator ----------------------------------------------------

# Go's caches: the user's (the module cache and build cache are shared by
# both build trees); under OUT_DIR when there is no home to keep them in.
if [ -z "${HOME:-}" ] && [ -z "${GOCACHE:-}" ]; then
  export GOCACHE=$out/go-build GOPATH=$out/go
fi
# -mod=mod: modules come from the proxy as go.sum pins them, nothing is
# vendored. go.mod and go.sum must already be complete: a build that had
# to change them fails here instead of editing the source tree quietly.
export GOFLAGS="-mod=mod -buildvcs=false"
validator=$out/validate
mods=$src/tests/deploy/validate
sums_before=$(cat "$mods/go.mod" "$mods/go.sum" | cksum)
# nice: the first build compiles k8s.io/api; other tests may be timing
# something beside it.
if ! (cd "$mods" && nice -n 10 "$go" build -o "$validator" .) >"$tmp/go-build.log" 2>&1; then
  cat "$tmp/go-build.log"
  fail "building tests/deploy/validate (Go $("$go" env GOVERSION 2>/dev/null || echo '?'); it needs the go.mod version)"
  echo "$passed passed, $failed failed"
  exit 1
fi
if [ "$(cat "$mods/go.mod" "$mods/go.sum" | cksum)" != "$sums_before" ]; then
  fail "go build changed tests/deploy/validate/go.mod or go.sum: run go mod tidy there and commit them"
else
  ok "built tests/deploy/validate ($(($(date +%s) - start)) s)"
fi

services=kafka,keygen,collector-1,collector-2,agent
if "$validator" -k8s "$deploy/kubernetes" -configs "$tmp/configs" \
  -compose "$deploy/compose/compose.yaml" -services "$services" \
  -dockerfile "$deploy/docker/Dockerfile" >"$tmp/validate.log" 2>&1; then
  ok "$(tail -1 "$tmp/validate.log")"
else
  cat "$tmp/validate.log"
  fail "validate deploy/kubernetes, deploy/compose, deploy/docker"
fi

# ---- 2. config files, read by the real binaries ---------------------------

# The daemons read the whole config and refuse unknown keys before they
# look at log_level; an impossible log_level then stops them right there
# (exit 2) without starting anything. So "log_level 'deploy-check'" in the
# answer means every key was known. (The negative test below shows an
# unknown key is still reported first.)
conf_binary() {
  case $(basename "$1") in
    agent.conf) echo "$agent" ;;
    collector.conf) echo "$collector" ;;
    *) return 1 ;;
  esac
}
check_conf() { # FILE -> 0 when every key is known
  local bin rc=0
  bin=$(conf_binary "$1") || return 1
  "$bin" --config "$1" log_level=deploy-check >"$tmp/conf.out" 2>&1 || rc=$?
  [ "$rc" -eq 2 ] && grep -q "log_level 'deploy-check'" "$tmp/conf.out"
}
confs=("$deploy"/systemd/*.conf "$deploy"/compose/*.conf "$tmp"/configs/*/*.conf)
if [ ${#confs[@]} -ne 6 ]; then
  fail "expected 6 config files (systemd, compose, ConfigMaps: agent and collector each), found ${#confs[@]}: ${confs[*]}"
fi
for f in "${confs[@]}"; do
  name=${f#"$deploy"/}
  name=${name#"$tmp"/configs/}
  if check_conf "$f"; then
    ok "config $name: every key known to $(basename "$(conf_binary "$f")")"
  else
    cat "$tmp/conf.out"
    fail "config $name"
  fi
done

# ---- 3. systemd -----------------------------------------------------------

units=$tmp/units
mkdir -p "$units"
# ExecStart's binary must exist for verify: point it at this build's.
for u in ember-agent ember-collector; do
  sed -e "s#^ExecStart=/usr/local/bin/ember-agent #ExecStart=$agent #" \
    -e "s#^ExecStart=/usr/local/bin/ember-collector #ExecStart=$collector #" \
    "$deploy/systemd/$u.service" >"$units/$u.service"
  if cmp -s "$units/$u.service" "$deploy/systemd/$u.service"; then
    fail "$u.service: no ExecStart=/usr/local/bin/$u to point at the build tree"
  fi
done
# verify exits 0 on an unknown key (it only warns), so any line it prints
# about our unit fails the check. Lines about other units (the host's own,
# loaded as dependencies) are shown, not counted.
verify_unit() { # FILE -> 0 when systemd-analyze has nothing to say about it
  local rc=0
  (cd "$(dirname "$1")" && systemd-analyze verify --man=no "./$(basename "$1")") \
    >"$tmp/verify.out" 2>&1 || rc=$?
  cat "$tmp/verify.out"
  [ "$rc" -eq 0 ] && ! grep -q "$(basename "$1")" "$tmp/verify.out"
}
security_unit() { # FILE THRESHOLD -> 0 when the exposure is at most THRESHOLD/100
  (cd "$(dirname "$1")" && systemd-analyze security --offline=yes --threshold="$2" \
    "./$(basename "$1")")
}
# The exposure score of `systemd-analyze security` (0 = locked down, 10 =
# nothing restricted) must stay at most this: the agent needs root and
# host access (3.4 when written), the collector almost nothing (1.7).
declare -A exposure=([ember-agent]=40 [ember-collector]=20)
for u in ember-agent ember-collector; do
  if verify_unit "$units/$u.service" >/dev/null; then
    ok "systemd-analyze verify $u.service"
  else
    cat "$tmp/verify.out"
    fail "systemd-analyze verify $u.service"
  fi
  grep -v "$u.service" "$tmp/verify.out" | sed 's/^/  (another unit) /' || true
  if security_unit "$units/$u.service" "${exposure[$u]}" >"$tmp/security.out" 2>&1; then
    ok "systemd-analyze security $u.service: $(grep -o 'exposure level[^:]*: [0-9.]*' "$tmp/security.out")"
  else
    tail -3 "$tmp/security.out"
    fail "systemd-analyze security $u.service: exposure over ${exposure[$u]}/100"
  fi
done

# The heap drop-in (docs/heap.md): a service with it must verify, and the
# environment it sets must name the library a build installs.
heap_dropin=$deploy/systemd/service.d/ember-heap.conf
{
  printf '[Unit]\nDescription=a service profiled with the heap drop-in\n'
  printf '[Service]\nExecStart=%s\n' "$agent"
  grep -v '^\[Service\]' "$heap_dropin"
} >"$units/heapdemo.service"
if verify_unit "$units/heapdemo.service" >/dev/null; then
  ok "systemd-analyze verify a service with service.d/ember-heap.conf"
else
  cat "$tmp/verify.out"
  fail "systemd-analyze verify a service with service.d/ember-heap.conf"
fi
if grep -qx 'Environment=LD_PRELOAD=/usr/local/lib/libember_alloc.so' "$heap_dropin" &&
  grep -q "DESTINATION lib" "$src/preload/CMakeLists.txt"; then
  ok "service.d/ember-heap.conf preloads the library where the install puts it"
else
  fail "service.d/ember-heap.conf: no Environment=LD_PRELOAD=/usr/local/lib/libember_alloc.so"
fi

# ---- 4. the image's run-time packages ---------------------------------------

# Each library a binary links directly, by the package that ships it here;
# the sanitizers' runtimes are there only in the ASan tree.
pkgs=$(grep -v '^#' "$deploy/docker/runtime-packages.txt" | tr -s ' \n' '\n')
missing=()
for bin in "$agent" "$collector" "$cli"; do
  for so in $(readelf -d "$bin" | sed -n 's/.*(NEEDED).*\[\(.*\)\]/\1/p'); do
    case $so in libasan.so.* | libubsan.so.* | liblsan.so.*) continue ;; esac
    path=$(ldd "$bin" | awk -v so="$so" '$1 == so { print $3 }')
    pkg=""
    for p in "$path" "$(realpath -e "$path" 2>/dev/null)" "/usr${path#/usr}" "${path#/usr}"; do
      [ -n "$p" ] && pkg=$(dpkg -S "$p" 2>/dev/null | head -1 | cut -d: -f1) && [ -n "$pkg" ] && break
    done
    if [ -z "$pkg" ]; then
      missing+=("$so (of $(basename "$bin"): no package found for '$path')")
    elif ! grep -qx "$pkg" <<<"$pkgs"; then
      missing+=("$pkg (for $so of $(basename "$bin"))")
    fi
  done
done
if [ ${#missing[@]} -eq 0 ]; then
  ok "deploy/docker/runtime-packages.txt has the package of every library the binaries link"
else
  fail "deploy/docker/runtime-packages.txt lacks: ${missing[*]}"
fi

# ---- 5. broken copies must be refused ---------------------------------------

# mutate FILE SED-SCRIPT: edit a copy in place; the edit must change it (a
# manifest that no longer has what the script breaks fails here, rather
# than making the negative test pass on an intact file).
mutate() {
  local before
  before=$(cksum <"$1")
  sed -i -e "$2" "$1"
  [ "$(cksum <"$1")" != "$before" ] || {
    fail "negative test: '$2' changed nothing in ${1#"$tmp"/} (the file no longer has what it breaks)"
    return 1
  }
}
# refused NAME PATTERN COMMAND...: the command must fail and say PATTERN.
refused() {
  local name=$1 pattern=$2 rc=0
  shift 2
  "$@" >"$tmp/neg.out" 2>&1 || rc=$?
  if [ "$rc" -ne 0 ] && grep -qF -- "$pattern" "$tmp/neg.out"; then
    ok "refused: $name"
  else
    sed 's/^/  | /' "$tmp/neg.out"
    fail "not refused (exit $rc, want one saying '$pattern'): $name"
  fi
}
fresh() { # a copy of deploy/DIR, printed
  local d
  d=$(mktemp -d "$tmp/neg.XXXXXX")
  cp -r "$deploy/$1/." "$d/"
  echo "$d"
}
neg_k8s() { # NAME PATTERN FILE SED-SCRIPT
  local d
  d=$(fresh kubernetes)
  if mutate "$d/$3" "$4"; then
    refused "$1" "$2" "$validator" -k8s "$d"
  fi
}
neg_compose() { # NAME PATTERN SED-SCRIPT
  local d
  d=$(fresh compose)
  if mutate "$d/compose.yaml" "$3"; then
    refused "$1" "$2" "$validator" -compose "$d/compose.yaml" -services "$services"
  fi
}

neg_k8s "Kubernetes: a misspelt field" \
  'unknown field "spec.template.spec.containers[0].readinesProbe"' \
  collector.yaml 's/readinessProbe:/readinesProbe:/'
neg_k8s "Kubernetes: a field with the wrong case" \
  'unknown field "spec.template.spec.containers[0].volumeMounts[0].mountpath"' \
  agent.yaml '0,/mountPath:/s//mountpath:/'
neg_k8s "Kubernetes: a value of the wrong type" 'cannot unmarshal string' \
  collector.yaml 's/^  replicas: 3$/  replicas: "three"/'
neg_k8s "Kubernetes: a selector that misses its pods" "does not match the template's labels" \
  agent.yaml '/matchLabels:/{n;s/ember-agent/ember-agnet/}'
neg_k8s "Kubernetes: a probe on a port the container lacks" \
  'startupProbe port 7373 is not a port of the container' \
  collector.yaml '/startupProbe:/,/port:/s/port: api/port: 7373/'
neg_k8s "Kubernetes: a mount of a volume that does not exist" 'volumeMount "spoo1" names no volume' \
  agent.yaml '0,/- name: spool/s//- name: spoo1/'
neg_k8s "Kubernetes: the StatefulSet's Service not headless" 'is not a headless Service' \
  collector.yaml '/clusterIP: None/d'
neg_k8s "Kubernetes: an image with a registry host" 'names the registry host "registry.example:5000"' \
  agent.yaml 's#image: ember:0.1#image: registry.example:5000/ember:0.1#'
neg_k8s "Kubernetes: a container without limits" 'no resources.limits.memory' \
  collector.yaml '/^              memory: 4Gi$/d'
neg_compose "compose: a misspelt key" 'services.collector-1.readonly' \
  '0,/read_only: true/s//readonly: true/'
neg_compose "compose: a volume that is not defined" 'refers to undefined volume collector-3-data' \
  's/- collector-2-data:/- collector-3-data:/'
# Collector 2 reading a config with another group_id (made in the copy).
d=$(fresh compose)
sed 's/^group_id = .*/group_id = other/' "$d/collector.conf" >"$d/other.conf"
if mutate "$d/compose.yaml" '/^  collector-2:/,/^  agent:/s#- ./collector.conf:#- ./other.conf:#'; then
  refused "compose: collectors in two groups" 'in group "other"' \
    "$validator" -compose "$d/compose.yaml" -services "$services"
fi
d=$(fresh docker)
mutate "$d/Dockerfile" 's#^FROM debian:12 AS build#FROM registry.example/debian:12 AS build#' &&
  refused "Dockerfile: a base image with a registry host" 'names the registry host "registry.example"' \
    "$validator" -dockerfile "$d/Dockerfile"

cp "$units/ember-agent.service" "$tmp/bad-key.service"
mutate "$tmp/bad-key.service" 's/^NoNewPrivileges=/NoNewPrivilegs=/' &&
  refused "systemd: a misspelt key" "Unknown key 'NoNewPrivilegs'" verify_unit "$tmp/bad-key.service"
cp "$units/ember-collector.service" "$tmp/bad-exec.service"
mutate "$tmp/bad-exec.service" "s#^ExecStart=$collector #ExecStart=/nonexistent/ember-collector #" &&
  refused "systemd: an ExecStart that does not exist" 'is not executable' verify_unit "$tmp/bad-exec.service"
cp "$units/ember-collector.service" "$tmp/weak.service"
mutate "$tmp/weak.service" '/^CapabilityBoundingSet=$/d;/^ProtectSystem=/d;/^DynamicUser=/d;/^SystemCallFilter=/d' &&
  refused "systemd: the collector's unit with its hardening removed" 'exposure level' \
    security_unit "$tmp/weak.service" "${exposure[ember-collector]}"

sed 's/^retention = /retension = /' "$deploy/systemd/collector.conf" >"$tmp/collector.conf"
if cmp -s "$tmp/collector.conf" "$deploy/systemd/collector.conf"; then
  fail "negative config test: no 'retention = ' line in deploy/systemd/collector.conf"
else
  refused "config: an unknown key (the binary names it before log_level)" "unknown key 'retension'" \
    "$collector" --config "$tmp/collector.conf" log_level=deploy-check
fi

echo "test_deploy: $(($(date +%s) - start)) s"
echo "$passed passed, $failed failed"
[ "$failed" -eq 0 ]
