#!/usr/bin/env bash
# Install what Ember needs, build it, and run `ember up` on this machine.
# Arguments go to `ember up` (e.g. --config FILE, key=value).
set -euo pipefail
cd "$(dirname "$0")/.."
./scripts/deps.sh
cmake -S . -B build -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo >/dev/null
cmake --build build -j "$(nproc)" --target ember_cli
exec ./build/cli/ember up "$@"
