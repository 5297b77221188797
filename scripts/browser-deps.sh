#!/usr/bin/env bash
# The browser tests' npm packages (tests/browser: playwright-core, pinned by
# its committed package-lock.json) into tests/browser/node_modules.
# Idempotent: `npm ci` runs only when node_modules is missing or older than
# the lockfile. The browser itself is Debian's chromium (scripts/deps.sh);
# nothing here downloads a browser build.
set -euo pipefail
cd "$(dirname "$0")/../tests/browser"

if ! command -v npm >/dev/null 2>&1; then
  echo "browser-deps: npm not found (scripts/deps.sh installs Node.js)" >&2
  exit 1
fi
# playwright-core needs Node.js 20 or newer.
major=$(node -p 'process.versions.node.split(".")[0]')
if [ "$major" -lt 20 ]; then
  echo "browser-deps: Node.js $(node --version) is too old for playwright-core (needs 20+)" >&2
  exit 1
fi

stamp=node_modules/.package-lock.json # npm ci writes it last
if [ -f "$stamp" ] && [ "$stamp" -nt package-lock.json ] && [ -d node_modules/playwright-core ]; then
  echo "browser-deps: tests/browser/node_modules is up to date" >&2
  exit 0
fi
echo "browser-deps: npm ci in tests/browser" >&2
# PLAYWRIGHT_SKIP_BROWSER_DOWNLOAD: playwright-core downloads nothing, but
# say so in case a future version's install step tries.
PLAYWRIGHT_SKIP_BROWSER_DOWNLOAD=1 npm ci --no-audit --no-fund --loglevel=error </dev/null
