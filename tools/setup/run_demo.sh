#!/usr/bin/env bash
# The README's main job: sets up (packages, build), then shows what ferry
# finds on this machine and runs its backend smoke test.
set -euo pipefail
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
bash "$root/tools/setup/setup.sh"
cd "$root"
build=${FERRY_BUILD_DIR:-build}
"$build/tools/info/ferry-info"
