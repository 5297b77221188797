#!/usr/bin/env bash
# The tests' npm packages, each folder pinned by its committed
# package-lock.json, into that folder's node_modules:
#   tests/browser   playwright-core (the dashboard in Debian's chromium)
#   tests/jsbundle  esbuild (a TypeScript service bundled and minified for
#                   the source map tests)
#
#   scripts/npm-deps.sh [FOLDER...]   (default: both)
#
# Idempotent: `npm ci` runs only when node_modules is missing or older than
# the lockfile. The browser itself is Debian's chromium (scripts/deps.sh);
# nothing here downloads a browser build.
set -euo pipefail
cd "$(dirname "$0")/.."

if ! command -v npm >/dev/null 2>&1; then
  echo "npm-deps: npm not found (scripts/deps.sh installs Node.js)" >&2
  exit 1
fi
# playwright-core and esbuild need Node.js 20 or newer.
major=$(node -p 'process.versions.node.split(".")[0]')
if [ "$major" -lt 20 ]; then
  echo "npm-deps: Node.js $(node --version) is too old (needs 20+)" >&2
  exit 1
fi

[ $# -gt 0 ] || set -- tests/browser tests/jsbundle
for dir in "$@"; do
  stamp=$dir/node_modules/.package-lock.json # npm ci writes it last
  if [ -f "$stamp" ] && [ "$stamp" -nt "$dir/package-lock.json" ]; then
    echo "npm-deps: $dir/node_modules is up to date" >&2
    continue
  fi
  echo "npm-deps: npm ci in $dir" >&2
  # PLAYWRIGHT_SKIP_BROWSER_DOWNLOAD: playwright-core downloads nothing, but
  # say so in case a future version's install step tries.
  (cd "$dir" && PLAYWRIGHT_SKIP_BROWSER_DOWNLOAD=1 npm ci --no-audit --no-fund --loglevel=error </dev/null)
done
