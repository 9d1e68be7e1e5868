#!/usr/bin/env bash
# Configures and builds rn50 (Release) into ${BUILD_DIR:-build}.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
cmake -S . -B "${BUILD_DIR:-build}" -G Ninja -DCMAKE_BUILD_TYPE=Release -DRN50_SERVE=ON
cmake --build "${BUILD_DIR:-build}" -j "$(nproc)"
