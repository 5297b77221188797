#!/bin/sh
# Flamegraph rendering benchmark (web/flame.js vs d3-flame-graph) in
# Debian's headless chromium, driven by playwright-core.
#   bench/bench_flame.sh [runs]
# Needs node >= 18 and /usr/bin/chromium (apt-get install chromium; or set
# CHROMIUM=/path). The drivers are pinned in bench/browser/package-lock.json.
set -eu
here=$(cd "$(dirname "$0")" && pwd)
if [ ! -x "${CHROMIUM:-/usr/bin/chromium}" ]; then
    echo "bench_flame: no chromium at ${CHROMIUM:-/usr/bin/chromium} (apt-get install -y --no-install-recommends chromium)" >&2
    exit 2
fi
if [ ! -d "$here/browser/node_modules/playwright-core" ]; then
    (cd "$here/browser" && npm ci --no-audit --no-fund)
fi
exec node "$here/bench_flame.mjs" "$@"
