#!/usr/bin/env bash
# Builds rn50 and runs every test (the README's test command; CI runs it through .ci/run).
# Tests run RN50_TEST_JOBS at a time (default: the cores, at most 4): many are single-threaded
# for much of their time (python helpers, the CLI's start-up, JPEG decoding): on 2 cores two at
# a time ran the suite in 432 s (2026-12-02; one by one it took 605 s on the previous session's
# machine, not timed side by side). Each test keeps its own temporary folders (named by pid)
# and picks a free port, so they do not collide; the few that time themselves or start MPI
# ranks run alone (RUN_SERIAL, CMakeLists.txt). RN50_TEST_JOBS=1 runs them all one by one.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/build.sh
jobs=${RN50_TEST_JOBS:-$(n=$(nproc); echo $(( n < 4 ? n : 4 )))}
ctest --test-dir "${BUILD_DIR:-build}" --output-on-failure -j "$jobs"
