#!/usr/bin/env bash
# ThreadSanitizer over the threaded parts of rn50 (issue 32): the data loader (worker threads,
# batch ring, prefetch), the communicators (watchdog thread, abort paths; the MPI tests start
# their TSan-built workers through mpirun) and the server (cpp-httplib's thread pool, the
# dynamic batcher, metrics, drain). Builds those tests with -DRN50_SANITIZE=thread into
# ${BUILD_DIR:-build-tsan} and runs them; any data race, lock-order inversion or use of a
# destroyed mutex fails its test (halt_on_error).
#
# OpenMP runs with one thread here (OMP_NUM_THREADS=1): Debian's libgomp is not built with TSan,
# so its barriers are invisible to it and every parallel loop would be reported as a race. The
# threads rn50 itself starts (std::thread, the server's pool) are all still there. Not in CI
# (the TSan build of these tests takes about as long as a normal build of the whole project);
# run before resolving reliability work.
#   bash scripts/tsan.sh [ctest args...]      e.g. -R test_serve
set -euo pipefail
cd "$(dirname "$0")/.."
B=${BUILD_DIR:-build-tsan}
TESTS=(test_data_loader test_data_pipeline test_data_formats test_parallel_local
       test_parallel_mpi test_serve_protocol test_serve_http test_serve_robustness)
cmake -S . -B "$B" -G Ninja -DCMAKE_BUILD_TYPE=Release -DCMAKE_CXX_FLAGS_RELEASE="-O1 -g" \
  -DRN50_SANITIZE=thread -DRN50_CUDA=OFF -DRN50_SERVE=ON >/dev/null
# The CLI is started by the server's process tests (test_parallel_* depend on their workers).
cmake --build "$B" -j "$(nproc)" --target "${TESTS[@]}" rn50_cli
supp="$PWD/tests/sanitizers/tsan.supp"
export OMP_NUM_THREADS=1
export TSAN_OPTIONS="halt_on_error=1:second_deadlock_stack=1:suppressions=$supp${TSAN_OPTIONS:+:$TSAN_OPTIONS}"
regex="^($(IFS='|'; echo "${TESTS[*]}"))\$"
ctest --test-dir "$B" --output-on-failure -R "$regex" "$@"
