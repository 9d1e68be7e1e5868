#!/usr/bin/env bash
# Builds rn50 and runs every test (the README's test command; CI runs it through .ci/run), then
# checks README.md against the built rn50 (scripts/check-docs.sh: every command and flag in its
# code blocks is one rn50 takes, every path it names exists, no line about rounds or sessions),
# after the check's own self-test (a README with planted problems must fail naming each).
# Tests run RN50_TEST_JOBS at a time (default: the cores, at most 4): many are single-threaded
# for much of their time (python helpers, the CLI's start-up, JPEG decoding): on 2 cores two at
# a time ran the suite in 432 s (2026-12-02; one by one it took 605 s on another machine, not
# timed side by side). Each test keeps its own temporary folders (named by pid)
# and picks a free port, so they do not collide; the few that time themselves or start MPI
# ranks run alone (RUN_SERIAL, CMakeLists.txt). RN50_TEST_JOBS=1 runs them all one by one.
# Two tests at a time on 2 cores are 4 OpenMP threads on 2 cores: OpenMP's default spins at each
# barrier for a while before it sleeps, and a spinning thread holds the core its neighbour's
# threads wait for. OMP_WAIT_POLICY=passive (the OpenMP spec's: threads wait without spinning)
# runs the suite a third faster that way (bench/results/cpu/2026-12-07-zen5-epyc/ci_stages.md).
# An OMP_WAIT_POLICY already set is kept.
set -euo pipefail
export OMP_WAIT_POLICY=${OMP_WAIT_POLICY:-passive}
cd "$(dirname "$0")/.."
bash scripts/build.sh
jobs=${RN50_TEST_JOBS:-$(n=$(nproc); echo $(( n < 4 ? n : 4 )))}
ctest --test-dir "${BUILD_DIR:-build}" --output-on-failure -j "$jobs"
bash scripts/check-docs.sh --self-test --rn50 "${BUILD_DIR:-build}/rn50"
bash scripts/check-docs.sh README.md --rn50 "${BUILD_DIR:-build}/rn50"
