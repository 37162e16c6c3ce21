#!/usr/bin/env bash
# The README's test command: sets up (packages, build) and runs the whole
# test suite. GPU tests skip where no GPU is present. Extra arguments go to
# `meson test` (e.g. --suite optim).
set -euo pipefail
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
bash "$root/tools/setup/setup.sh"
cd "$root"
meson test -C "${FERRY_BUILD_DIR:-build}" --print-errorlogs --num-processes 2 "$@"
