#!/usr/bin/env bash
# the test phase of scripts/sanitize.sh against an existing build-asan; $1 = label
cd /tmp/ci6
B=build-asan
supp="$PWD/tests/sanitizers/lsan.supp"
export RN50_REQUIRE=data,torch,mpi,onnx,plot,serve,browser,mount,qemu
export ASAN_OPTIONS="abort_on_error=1:detect_leaks=1:strict_string_checks=1:check_initialization_order=1"
export LSAN_OPTIONS="suppressions=$supp:print_suppressions=0"
export UBSAN_OPTIONS="halt_on_error=1:print_stacktrace=1"
MPI_TESTS='^test_parallel_(mpi|train)$'
LEFT_OUT='^(test_model_parity|test_cli_portable)$'
t0=$SECONDS
ctest --test-dir "$B" --output-on-failure -j 2 -E "$MPI_TESTS|$LEFT_OUT"; rc1=$?
LSAN_OPTIONS="$LSAN_OPTIONS:fast_unwind_on_malloc=0" ctest --test-dir "$B" --output-on-failure -R "$MPI_TESTS"; rc2=$?
echo "san_ctest $1: rc $rc1/$rc2 wall $((SECONDS-t0)) s"
