#!/usr/bin/env bash
# Builds rn50 and runs every test (the README's test command; CI runs it through .ci/run).
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/build.sh
ctest --test-dir "${BUILD_DIR:-build}" --output-on-failure
