#!/usr/bin/env bash
# Builds the libFuzzer harnesses (fuzz/, build folder build-fuzz, clang-14 with ASan + UBSan) and
# runs each for SECONDS (default 30) on a scratch copy of its seed corpus (fuzz/corpus/<name>),
# printing per harness the executions run, the corpus size and any crash. Exits non-zero when a
# harness finds something (a crash, leak, timeout, sanitizer report, or an exception other than
# rn50::Error escaping); the input is saved under build-fuzz/fuzz-artifacts/<name>/ and the log
# beside it.
#   scripts/fuzz.sh [SECONDS] [HARNESS...]     e.g. scripts/fuzz.sh 60 fuzz_tar fuzz_safetensors
# Environment: RN50_FUZZ_BUILD (build folder), RN50_FUZZ_JOBS (build jobs, default 2),
# RN50_FUZZ_NO_BUILD=1 (run the harnesses as built), RN50_FUZZ_PARALLEL (harnesses at once,
# default one per core),
# CC / CXX (default clang-14 / clang++-14). Needs clang-14 and libclang-rt-14-dev.
# The harnesses' tree is built at -O1 with line tables only (what a sanitizer report needs): it
# rebuilds every component for CI, where -O2 -g cost more time than the fuzzing itself; and as a
# unity build (each component's files in batches), as scripts/sanitize.sh's tree.
set -euo pipefail

SECS=${1:-30}
shift || true
ROOT=$(cd "$(dirname "$0")/.." && pwd)
BUILD=${RN50_FUZZ_BUILD:-$ROOT/build-fuzz}
JOBS=${RN50_FUZZ_JOBS:-2}
ALL=(fuzz_decode_image fuzz_decode_region fuzz_validate_image fuzz_tfrecord fuzz_example
     fuzz_dali_index fuzz_tar fuzz_file_list fuzz_safetensors fuzz_model_io fuzz_checkpoint_state
     fuzz_config fuzz_report)

if [ ! -f "$BUILD/build.ninja" ]; then
  CC=${CC:-clang-14} CXX=${CXX:-clang++-14} cmake -S "$ROOT" -B "$BUILD" -G Ninja \
    -DCMAKE_BUILD_TYPE=RelWithDebInfo -DCMAKE_CXX_FLAGS_RELWITHDEBINFO="-O1 -gline-tables-only -DNDEBUG" \
    -DRN50_FUZZ=ON -DRN50_CUDA=OFF -DRN50_BUILD_TESTS=OFF -DCMAKE_UNITY_BUILD=ON \
    > "$BUILD.configure.log" 2>&1 || { cat "$BUILD.configure.log"; exit 2; }
fi
# The server's harness exists when cpp-httplib was found (rn50 serve is built).
[ -n "${RN50_FUZZ_NO_BUILD:-}" ] || ninja -C "$BUILD" build.ninja > /dev/null
# (The target list is read whole first: `ninja | grep -q` under pipefail fails when grep stops
# reading early and ninja gets SIGPIPE, which dropped this harness at random.)
targets=$(ninja -C "$BUILD" -t targets all 2>/dev/null || true)
if grep -q '^fuzz_serve_protocol:' <<< "$targets"; then
  ALL+=(fuzz_serve_protocol)
fi
if [ $# -gt 0 ]; then HARNESSES=("$@"); else HARNESSES=("${ALL[@]}"); fi
[ -n "${RN50_FUZZ_NO_BUILD:-}" ] || ninja -C "$BUILD" -j"$JOBS" "${HARNESSES[@]}"

dict_of() {
  case "$1" in
    fuzz_decode_image|fuzz_decode_region|fuzz_validate_image) echo "$ROOT/fuzz/dict/image.dict" ;;
    fuzz_safetensors|fuzz_model_io|fuzz_checkpoint_state|fuzz_config|fuzz_report|\
    fuzz_serve_protocol)
      echo "$ROOT/fuzz/dict/json.dict" ;;
    *) echo "" ;;
  esac
}

export ASAN_OPTIONS=${ASAN_OPTIONS:-detect_leaks=1:allocator_may_return_null=1}
export UBSAN_OPTIONS=${UBSAN_OPTIONS:-halt_on_error=1:print_stacktrace=1}
WORK=$(mktemp -d "${TMPDIR:-/tmp}/rn50-fuzz.XXXXXX")
trap 'rm -rf "$WORK"' EXIT
# One harness: runs it and writes its table row to $WORK/row.<name> (status in $WORK/rc.<name>).
run_one() {
  local h=$1 name=${1#fuzz_}
  local seeds="$ROOT/fuzz/corpus/$name" art="$BUILD/fuzz-artifacts/$name"
  rm -rf "$art" && mkdir -p "$art" "$WORK/$name"
  [ -d "$seeds" ] && cp -r "$seeds/." "$WORK/$name/"
  local args=(-max_total_time="$SECS" -timeout=10 -rss_limit_mb=2048 -malloc_limit_mb=2048
              -print_final_stats=1 -artifact_prefix="$art/")
  local d; d=$(dict_of "$h")
  [ -n "$d" ] && args+=(-dict="$d")
  local rc=0
  "$BUILD/fuzz/$h" "${args[@]}" "$WORK/$name" > "$art/log.txt" 2>&1 || rc=$?
  local execs nseeds ncorpus crashes result
  execs=$(grep -o 'stat::number_of_executed_units: *[0-9]*' "$art/log.txt" | grep -o '[0-9]*$' || true)
  nseeds=$( [ -d "$seeds" ] && find "$seeds" -type f | wc -l || echo 0)
  ncorpus=$(find "$WORK/$name" -type f | wc -l)
  crashes=$(find "$art" -type f ! -name log.txt | sort)
  if [ "$rc" -ne 0 ] || [ -n "$crashes" ]; then
    result="FOUND (exit $rc): ${crashes:-see $art/log.txt}"
    echo 1 > "$WORK/rc.$name"
  else
    result=ok
    echo 0 > "$WORK/rc.$name"
  fi
  printf '%-24s %12s %8s %8s  %s\n' "$h" "${execs:-?}" "$nseeds" "$ncorpus" "$result" \
    > "$WORK/row.$name"
}

# Harnesses run RN50_FUZZ_PARALLEL at a time (default: one per core); each is single-threaded.
PAR=${RN50_FUZZ_PARALLEL:-$(nproc)}
for h in "${HARNESSES[@]}"; do
  while [ "$(jobs -rp | wc -l)" -ge "$PAR" ]; do wait -n || true; done
  run_one "$h" &
done
wait
found=0
printf '%-24s %12s %8s %8s  %s\n' harness executions seeds corpus result
for h in "${HARNESSES[@]}"; do
  name=${h#fuzz_}
  cat "$WORK/row.$name" 2>/dev/null || { echo "$h: no result"; found=1; continue; }
  [ "$(cat "$WORK/rc.$name")" = 0 ] || found=1
done
exit $found
