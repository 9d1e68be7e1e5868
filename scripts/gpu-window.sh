#!/usr/bin/env bash
# The whole GPU window in one device call (issue 68; GUIDE.md section 6): unpack the prebuilt
# pack (scripts/gpu-pack.sh, carried as .gpu), then stages in priority order, each under a time
# limit and skipped when too little time is left, each writing its summary line at once:
#   setup     unpack .gpu/pack.tar.xz into build-gpu-pack/, find the device's CUDA libraries
#             (toolkit, PyTorch's nvidia-* wheels), smoke-test rn50; if the pack does not start,
#             retry with its libstdc++, then build on the device (needs deps/, scripts/gpu-deps.sh)
#   ops       the CUDA cases of the op harness against the reference backend
#   tests     the GPU tests with RN50_REQUIRE=gpu,torch: torchvision parity (CUDA cases), overfit
#             one batch (fp32, fp16 AMP, bf16), AMP, pure fp16, mixup, QAT, graphs, the device
#             engine, NCCL
#   train     rn50 vs the torch peer, batch 256, fp16 AMP, synthetic 224 px, alternating
#             (bench/train_vs_torch.sh): images/s and the ratio
#   kernels   both again under tools/ktrace (the measured steps only): the top kernels per step
#             of each and the kernel families side by side (kernels.txt)
#   converge  ~100 steps on the imagenette subset, rn50 and the torch peer with the same recipe
#             (batch 64, fp16 AMP): loss at steps 10/50/100 and val top-1 side by side
#   infer     the GPU engine vs torch at batch 1, 64, 256, fp16 (device-resident inputs)
#   extras    bf16 training pair, rn50 with RN50_CUDNN_NONDET=1 (cudnn.benchmark's choice: the
#             A/B against the deterministic default), rn50 with RN50_CUDA_BN_JOIN=fused (the
#             fused BN + residual join), RN50_CUDA_BN_COEFFS=registers (fixed-channel BN
#             apply passes), RN50_CUDA_MAXPOOL_BWD=indices (max-pool backward from saved
#             indices) and RN50_CUDA_BN=cudnn (training BN on cuDNN's fused NHWC kernels),
#             one A/B row each, once their op cases passed (right after ops),
#             compute-sanitizer on the conv/BN cases
# Decision rules: if the op harness fails, the speed stages are skipped (correctness only); if
# the training ratio is below 0.3, the convergence run is shortened and the kernel tables get
# the time. Every rn50 run shares RN50_CUDNN_CACHE (the search is paid once) and logs its
# convolution choices (RN50_CUDNN_LOG, cudnn_choices.jsonl).
# The device call (timeout_s 570; carry [".gpu"], and "deps" if it was prepared):
#   OUT=$OUT bash scripts/gpu-window.sh
# Logs go to LOGDIR (first argument, default /tmp/gpu-window); at exit an EXIT trap copies into
# $OUT at most 8 files: summary.txt, kernels.txt, convergence.txt, tests.txt and logs.tgz (every
# log). Commit them under bench/results/gpu/<date>/.
# GPU_DRYRUN=1 runs here, without a GPU: unpacks into a scratch folder, checks that every
# library the binaries need resolves to the pack, the C runtime or the CUDA libraries (ldd with
# the pack's lib/ first), runs rn50 --version, a 2-step CPU training on the pack's images and a
# host-logic test binary.
# Time: DEADLINE_S (default 560) bounds the call; per-stage limits OPS_S (70), TESTS_S (170),
# TRAIN_S (110), KERNELS_S (70), CONVERGE_S (110), INFER_S (70), EXTRAS_S (rest). Knobs: REPEATS
# (2), STEPS (30), WARMUP (10), CONV_EPOCHS (7), PYTHON (the first python3 that imports torch).
set -uo pipefail
cd "$(dirname "$0")/.."
ROOT=$(pwd)
LOG=${1:-/tmp/gpu-window}
mkdir -p "$LOG"
LOG=$(cd "$LOG" && pwd)
START=$(date +%s)
DEADLINE_S=${DEADLINE_S:-560}
DRY=${GPU_DRYRUN:-0}
PACK=${PACK_DIR:-.gpu}
REPEATS=${REPEATS:-2}
STEPS=${STEPS:-30}
WARMUP=${WARMUP:-10}
summary=$LOG/summary.txt
: > "$summary"
failed=0

say() {
  echo "$*" | tee -a "$summary"
  [ -n "${OUT:-}" ] && [ "$DRY" != 1 ] && echo "$*" >> "$OUT/summary.txt"
  return 0
}
# The logs into $OUT (at most 8 files; the device tool brings back no more).
pack_logs() {
  [ -n "${OUT:-}" ] || return 0
  say "window: done in $(($(date +%s) - START))s, failed=$failed"
  for f in kernels.txt convergence.txt tests.txt; do
    [ -f "$LOG/$f" ] && cp "$LOG/$f" "$OUT/$f"
  done
  cp "$summary" "$OUT/summary.txt"
  tar -C "$LOG" --exclude='*.safetensors' --exclude='ck' --exclude='*.bin' -czf "$OUT/logs.tgz" . \
    2> /dev/null
}
trap pack_logs EXIT
left() { echo $((DEADLINE_S - ($(date +%s) - START))); }
# step NAME LIMIT_S CMD...: CMD's output into LOG/NAME.log under a timeout of min(LIMIT_S, time
# left); returns CMD's status (124 on timeout, 125 when skipped for lack of time).
step() {
  local name=$1 limit=$2 l
  shift 2
  l=$(left)
  [ "$l" -lt "$limit" ] && limit=$l
  if [ "$limit" -lt 15 ]; then
    say "$name: skipped, ${l}s left of DEADLINE_S=$DEADLINE_S"
    return 125
  fi
  if [ "$(type -t "$1")" = function ]; then
    timeout --kill-after=10 "$limit" bash -c "$*" > "$LOG/$name.log" 2>&1
  else
    timeout --kill-after=10 "$limit" "$@" > "$LOG/$name.log" 2>&1
  fi
  local rc=$?
  [ $rc = 124 ] && say "$name: timed out after ${limit}s"
  return $rc
}

# ---- the interpreter with torch (the peer, the parity goldens, the nvidia-* wheels) ----
PY=${PYTHON:-}
if [ -z "$PY" ]; then
  for p in python3 /usr/bin/python3 /opt/torch/.venv/bin/python3 /opt/conda/bin/python3; do
    command -v "$p" > /dev/null && "$p" -c "import torch" 2> /dev/null && { PY=$(command -v "$p"); break; }
  done
fi
PY=${PY:-python3}
PEER=$PACK/peers/torch_reference.py
DATA=$PACK/data/imagenette-mini

# ---- setup: the pack into build-gpu-pack/ (a scratch copy in a dry run) ----
[ -f "$PACK/pack.tar.xz" ] || { say "setup: no $PACK/pack.tar.xz (run scripts/gpu-pack.sh first)"; exit 1; }
manifest_get() { awk -v k="$1" '$1 == k {print $2}' "$PACK/MANIFEST"; }
SRC_BAKED=$(manifest_get source_dir)
BUILD_BAKED=$(manifest_get build_dir)
if [ "$DRY" = 1 ]; then
  BUILD=$(mktemp -d)/build-gpu-pack
else
  # The tests look for the tree and the build where the pack was built (RN50_SOURCE_DIR,
  # RN50_BINARY_DIR, RN50_CLI): link that path to this copy of the tree.
  if [ -n "$SRC_BAKED" ] && [ "$SRC_BAKED" != "$ROOT" ]; then
    if [ ! -e "$SRC_BAKED" ]; then
      mkdir -p "$(dirname "$SRC_BAKED")" && ln -s "$ROOT" "$SRC_BAKED"
    else
      say "setup: $SRC_BAKED exists and is not this tree ($ROOT): tests that read the tree may fail"
    fi
  fi
  BUILD=$ROOT/$(basename "${BUILD_BAKED:-build-gpu-pack}")
fi
unpack() {
  rm -rf "$BUILD" && mkdir -p "$BUILD" || return 1
  if command -v xz > /dev/null; then
    tar -xJf "$PACK/pack.tar.xz" -C "$BUILD" || return 1
  else
    "$PY" -c 'import sys, tarfile; tarfile.open(sys.argv[1]).extractall(sys.argv[2])' \
      "$PACK/pack.tar.xz" "$BUILD" || return 1
  fi
  mv "$BUILD"/bin/* "$BUILD"/ && rmdir "$BUILD/bin"
}
t0=$(date +%s)
unpack || { say "setup: could not unpack $PACK/pack.tar.xz"; exit 1; }
say "window $(sed -n 1p "$PACK/MANIFEST" | sed 's/^rn50 GPU pack, //'); unpacked in $(($(date +%s) - t0))s into $BUILD"

# The libraries: the pack's, the device's CUDA ones (PyTorch's wheels first: their cuDNN is the
# newest), the toolkit's; OpenMPI's from the pack only where the system has none.
nv_roots=$("$PY" -c "import nvidia; print(' '.join(sorted(set(nvidia.__path__))))" 2> /dev/null)
LIBS=$BUILD/lib
for r in $nv_roots; do
  for l in "$r"/*/lib; do [ -d "$l" ] && LIBS=$LIBS:$l; done
done
for l in /usr/local/cuda/lib64 /usr/local/cuda/lib /usr/local/cuda/extras/CUPTI/lib64; do
  [ -d "$l" ] && LIBS=$LIBS:$l
done
if [ "$DRY" = 1 ] || ! ldconfig -p 2> /dev/null | grep -q 'libmpi\.so\.40 '; then
  LIBS=$LIBS:$BUILD/lib/mpi
  mpi_from=pack
else
  mpi_from=system
fi
export LD_LIBRARY_PATH=$LIBS${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
# What the binaries resolve: every library from the pack, the C runtime or the CUDA family.
check_libs() {
  local f bad=""
  for f in "$BUILD"/rn50 "$BUILD"/rn50_parallel_worker "$BUILD"/libktrace.so "$BUILD"/test_*; do
    while read -r name arrow path _; do
      [ "$arrow" = "=>" ] || continue
      case "$name" in
        linux-vdso*|ld-linux*|libc.so*|libm.so*|libpthread.so*|libdl.so*|librt.so*|libresolv.so*|libutil.so*) continue ;;
        libstdc++.so*|libgcc_s.so*) continue ;;
        libcuda.so*|libcudart.so*|libcublas*|libcudnn*|libnccl*|libcupti*|libnvrtc*|libnvJitLink*)
          [ "$path" = "not" ] && bad="$bad $(basename "$f"):$name(not found)"
          continue ;;
      esac
      if [ "$path" = "not" ]; then
        bad="$bad $(basename "$f"):$name(not found)"
      elif [[ "$path" != "$BUILD"/lib/* ]] && { [ "$DRY" = 1 ] || [ "$mpi_from" = pack ] ||
             ! [[ "$name" =~ ^lib(mpi|open-|hwloc|event|pmix|udev) ]]; }; then
        bad="$bad $(basename "$f"):$name($path)"
      fi
    done < <(ldd "$f" 2> /dev/null)
  done
  echo "$bad"
}
bad=$(check_libs)
smoke() { "$BUILD/rn50" --version > "$LOG/smoke.log" 2>&1; }
if ! smoke && grep -q GLIBCXX "$LOG/smoke.log"; then
  export LD_LIBRARY_PATH=$BUILD/lib/fallback:$LD_LIBRARY_PATH  # an older libstdc++ there
  say "setup: the device's libstdc++ is older than the build's; using the pack's"
fi
if [ -n "$bad" ] || ! smoke; then
  say "setup: the pack does not start here: ${bad:-$(tail -2 "$LOG/smoke.log" | tr '\n' ' ')}"
  if [ "$DRY" = 1 ]; then failed=1; exit 1; fi
  # Fallback: build on the device (the old gpu-check.sh way; needs deps/ from gpu-deps.sh).
  if [ -d deps/debs ]; then
    D=$ROOT/build-gpu-deps/root
    mkdir -p "$D"
    for f in deps/debs/*.deb; do dpkg -x "$f" "$D"; done
    find "$D" -name '*.pc' -exec sed -i "s|=/usr|=$D/usr|g" {} +
    export CMAKE_PREFIX_PATH=$D/usr PKG_CONFIG_PATH=$D/usr/lib/x86_64-linux-gnu/pkgconfig:$D/usr/share/pkgconfig
    export LD_LIBRARY_PATH=$D/usr/lib/x86_64-linux-gnu:$LD_LIBRARY_PATH
    export LIBRARY_PATH=$D/usr/lib/x86_64-linux-gnu CPATH=$D/usr/include:$D/usr/include/x86_64-linux-gnu
    cap=$(nvidia-smi --query-gpu=compute_cap --format=csv,noheader | head -1 | tr -d ' .')
    step build_on_device 300 bash -c "cmake -S . -B '$BUILD' -G Ninja -DCMAKE_BUILD_TYPE=Release \
      -DRN50_CUDA=ON -DRN50_NATIVE=OFF -DRN50_CUDA_ARCHS=${cap:-90}-real -DRN50_SERVE=OFF \
      '-DRN50_NVIDIA_PYTHON_ROOTS=${nv_roots// /;}' && cmake --build '$BUILD' -j \$(nproc)" &&
      say "setup: built on the device instead" || { say "setup: the build on the device failed"; failed=1; exit 1; }
  else
    say "setup: no deps/ carried for a build on the device (scripts/gpu-deps.sh); stopping"
    failed=1
    exit 1
  fi
fi
say "setup: $(head -1 "$LOG/smoke.log") starts; libraries from the pack, CUDA from the device, MPI from the $mpi_from"

if [ "$DRY" = 1 ]; then
  # A 2-step CPU training on the pack's images, and a host-logic test binary.
  "$BUILD/rn50" train --benchmark --image-root "$DATA" --device cpu --batch-size 8 --crop-size 64 \
    --benchmark-steps 2 --benchmark-warmup-steps 0 > "$LOG/dry_train.log" 2>&1 ||
    { say "dry run: the 2-step CPU training failed: $(tail -3 "$LOG/dry_train.log" | tr '\n' ' ')"; exit 1; }
  say "dry run: $(grep -o 'train.ips [0-9.]* img/s over [0-9]* steps' "$LOG/dry_train.log")"
  "$BUILD/test_ops_cuda_choices" > "$LOG/dry_test.log" 2>&1 ||
    { say "dry run: test_ops_cuda_choices failed"; exit 1; }
  say "dry run: $(grep -E '^\[  PASSED' "$LOG/dry_test.log") (test_ops_cuda_choices)"
  say "dry run: ok ($(du -sh "$PACK" | cut -f1) carried)"
  rm -rf "$(dirname "$BUILD")"
  exit 0
fi

# ---- the device ----
GPU=$(nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader 2> /dev/null | head -1)
say "probe: ${GPU:-no GPU}; $("$PY" -c 'import torch; print("torch", torch.__version__, "cuda", torch.version.cuda, "cudnn", torch.backends.cudnn.version(), "gpu", torch.cuda.is_available())' 2>&1 | tail -1); $(nproc) cores; mpirun $(command -v mpirun > /dev/null && echo yes || echo no)"
export RN50_CUDNN_CACHE=$LOG/cudnn_cache.jsonl RN50_CUDNN_LOG=$LOG/cudnn_choices.jsonl
export RN50_TEST_PYTHON=$PY RN50_REQUIRE=gpu,torch

# ---- ops: the op harness's CUDA cases ----
ops() {
  local t rc=0
  for t in conv_bn eltwise_pool_linear loss optimizer input_memory; do
    "$BUILD/test_ops_$t" --gtest_filter='*cuda*:*Cuda*' > "$LOG/ops_$t.log" 2>&1 || rc=1
    # No CUDA case at all means no CUDA device was seen: a failure here.
    grep -qE '^\[  PASSED  \] 0 tests' "$LOG/ops_$t.log" && rc=1
    echo "test_ops_$t: $(grep -E '^\[  (PASSED|FAILED) +\] [0-9]+ tests?' "$LOG/ops_$t.log" | tr '\n' ' ')"
  done
  return $rc
}
export -f ops
export BUILD LOG
step ops "${OPS_S:-70}" ops
ops_rc=$?
ops_ok=0; [ $ops_rc = 0 ] && ops_ok=1
[ $ops_ok = 1 ] || failed=1
say "ops: $([ $ops_ok = 1 ] && echo passed || echo "FAILED (rc $ops_rc): speed stages skipped") $(tr '\n' ' ' < "$LOG/ops.log")"
# The A/B switches of the CUDA step (each off by default; issue 70): RN50_CUDA_BN_JOIN=fused
# (the fused BN + residual join), RN50_CUDA_BN_COEFFS=registers (fixed-channel BN apply
# passes), RN50_CUDA_MAXPOOL_BWD=indices (max-pool backward from saved indices),
# RN50_CUDNN_API=graph (convolutions on cuDNN's graph API), RN50_CUDA_BN=cudnn (training BN on
# cuDNN's fused NHWC kernels): the conv, BN and max-pool op cases with all on (60 s: the graph
# API times its engines once per convolution shape); a failure here skips only their A/B rows in
# extras.
SWITCHES="RN50_CUDA_BN_JOIN=fused RN50_CUDA_BN_COEFFS=registers RN50_CUDA_MAXPOOL_BWD=indices RN50_CUDNN_API=graph RN50_CUDA_BN=cudnn"
bnsw_ok=0
switch_ops() {
  local rc=0
  env $SWITCHES "$BUILD/test_ops_conv_bn" --gtest_filter='*Conv2d*cuda*:*BatchNorm*cuda*' || rc=1
  env $SWITCHES "$BUILD/test_ops_eltwise_pool_linear" --gtest_filter='*MaxPool*cuda*' || rc=1
  return $rc
}
export -f switch_ops
export SWITCHES
if [ $ops_ok = 1 ]; then
  step ops_switches 60 switch_ops && bnsw_ok=1
  grep -qE '^\[  PASSED  \] 0 tests' "$LOG/ops_switches.log" && bnsw_ok=0
  say "ops with $SWITCHES: $([ $bnsw_ok = 1 ] && echo passed || echo FAILED)" \
    "$(grep -E '^\[  (PASSED|FAILED) +\] [0-9]+ tests?' "$LOG/ops_switches.log" | tr '\n' ' ')"
fi
# The op harness at ResNet-50's real training shapes (batch 256, f16 NHWC: every stage's
# convolution kinds, BN at 112x112x64, the fused join, pooling, the input), once with the
# defaults and once with every switch on (test_ops_real_shapes.cpp).
real_ops() {
  local rc=0
  echo "== defaults"
  "$BUILD/test_ops_real_shapes" || rc=1
  echo "== with $SWITCHES"
  env $SWITCHES "$BUILD/test_ops_real_shapes" || rc=1
  return $rc
}
export -f real_ops
if [ $ops_ok = 1 ]; then
  step ops_real 120 real_ops
  say "ops at batch 256 (defaults, then switches on): $(grep -E '^\[  (PASSED|FAILED) +\] [0-9]+ tests?' "$LOG/ops_real.log" | tr '\n' ' ')"
fi

# ---- tests: the GPU tests, four at a time ----
# NAME FILTER: the binary and its gtest filter (the CUDA cases of the mixed ones).
TESTS="test_model_parity:*cuda* test_train_overfit:*cuda* test_train_amp:*Cuda*:*DeviceState*
test_train_pure_fp16:*Cuda* test_train_mixup:MixupStep.* test_train_loop:*
test_train_qat:FakeQuant.BackendsBitEqualToReference:FakeQuant.MovingAverageVectors
test_train_config_file:* test_ops_cuda_choices:* test_infer_device_engine:*Cuda*
test_infer_engine:*Device* test_parallel_train:*Nccl* test_parallel_mpi:DistNccl.*"
run_test() {
  local name=${1%%:*} filter=${1#*:}
  timeout "$TEST_S" "$BUILD/$name" --gtest_filter="$filter" > "$LOG/test_$name.log" 2>&1
  local rc=$?
  [ $rc = 124 ] && echo "[  FAILED  ] timed out after ${TEST_S}s" >> "$LOG/test_$name.log"
  printf '%-26s rc %-3s %s\n' "$name" "$rc" \
    "$(grep -E '^\[  (PASSED|FAILED|SKIPPED) +\] ([0-9]+ tests?|timed out)' "$LOG/test_$name.log" | tr '\n' ' ')"
  grep -oE '^\[  FAILED  \] [A-Za-z0-9_/.]+\.[A-Za-z0-9_/.]+' "$LOG/test_$name.log" | sort -u |
    sed 's/^\[  FAILED  \]/    failed:/'
}
export -f run_test
tests() { echo "$TESTS" | tr ' ' '\n' | grep . | xargs -P 4 -I{} bash -c 'run_test "$@"' _ {}; }
export -f tests
# Each binary's own limit keeps the stage's: every line is written before the stage ends.
TEST_S=$(( $(left) < ${TESTS_S:-170} ? $(left) - 10 : ${TESTS_S:-170} - 10 ))
export TESTS TEST_S
step tests "${TESTS_S:-170}" tests
cp "$LOG/tests.log" "$LOG/tests.txt" 2> /dev/null
for t in $TESTS; do  # the binaries the stage's time did not reach
  grep -q "^${t%%:*} " "$LOG/tests.txt" 2> /dev/null ||
    printf '%-26s rc %-3s %s\n' "${t%%:*}" - "not run: the stage's time ran out" >> "$LOG/tests.txt"
done
nfail=$(grep -c ' rc [1-9-]' "$LOG/tests.txt" 2> /dev/null)
[ "${nfail:-0}" = 0 ] || failed=1
say "tests: $(grep -c ' rc ' "$LOG/tests.txt" 2> /dev/null) binaries, ${nfail:-?} failed or not run:$(grep ' rc [1-9-]' "$LOG/tests.txt" | awk '{print " "$1}' | tr -d '\n')"
grep -h 'overfit \|\[parity\].*cuda' "$LOG"/test_*.log 2> /dev/null | sed 's/^/  /' | tee -a "$summary" > /dev/null
[ -n "${OUT:-}" ] && grep -h 'overfit \|\[parity\].*cuda' "$LOG"/test_*.log 2> /dev/null | sed 's/^/  /' >> "$OUT/summary.txt"

# ---- train: the ratio at batch 256, fp16 AMP ----
ratio=""
if [ $ops_ok = 1 ]; then
  PRECISION=fp16 DEVICE=cuda REPEATS=$REPEATS PEER=$PEER BUILD_DIR=$BUILD PYTHON=$PY \
    step train "${TRAIN_S:-110}" bench/train_vs_torch.sh 256 224 "$STEPS" "$WARMUP"
  ratio=$(grep -oE 'ratio [0-9.]+' "$LOG/train.log" | tail -1 | awk '{print $2}')
  say "train fp16 b256: $(grep -E 'rn50|torch|ratio' "$LOG/train.log" | tr '\n' ' ' | tr -s ' ')"
  [ -n "$ratio" ] || failed=1
fi
slow=0
[ -n "$ratio" ] && awk -v r="$ratio" 'BEGIN {exit !(r < 0.3)}' && slow=1

# ---- kernels: the measured steps of both under the tracer ----
kernels() {
  local ks=20
  CUDA_INJECTION64_PATH=$BUILD/libktrace.so KTRACE_RANGE=profiler KTRACE_OUT=$LOG/ktrace_rn50.jsonl \
    "$BUILD/rn50" train --benchmark --data synthetic --device cuda --amp --batch-size 256 \
    --benchmark-steps $ks --benchmark-warmup-steps "$WARMUP" || echo "rn50 traced run failed"
  CUDA_INJECTION64_PATH=$BUILD/libktrace.so KTRACE_OUT=$LOG/ktrace_torch.jsonl \
    "$PY" tools/ktrace/torch_traced.py "$PEER" --bench train --precision fp16 --channels-last \
    --batch-size 256 --steps $ks --warmup-steps "$WARMUP" || echo "torch traced run failed"
  "$PY" tools/ktrace/ktrace_report.py "$LOG/ktrace_rn50.jsonl" "$LOG/ktrace_torch.jsonl" \
    --steps $ks --label rn50 --label torch --top 40 > "$LOG/kernels.txt"
}
export -f kernels
export PY PEER WARMUP
if [ $ops_ok = 1 ]; then
  step kernels "$([ $slow = 1 ] && echo 120 || echo "${KERNELS_S:-70}")" kernels
  say "kernels: $(grep -iE 'kernel time per step|busy' "$LOG/kernels.txt" 2> /dev/null | head -2 | tr '\n' ' ') (kernels.txt)"
fi

# ---- converge: the same recipe on real images, rn50 and torch ----
converge() {
  local e=$1
  rm -rf "$LOG/ck"
  "$BUILD/rn50" train --image-root "$DATA" --device cuda --amp --epochs "$e" --warmup-epochs 1 \
    --batch-size 64 --crop-size 224 --print-interval 10 --checkpoint-dir "$LOG/ck" \
    --report-file "$LOG/conv_rn50.jsonl" > "$LOG/conv_rn50.log" 2>&1 || echo "rn50 run failed"
  # The peer with its per-step training losses recorded (CrossEntropyLoss calls with grad on).
  "$PY" - "$PEER" --data "$DATA" --precision fp16 --channels-last --epochs "$e" --warmup-epochs 1 \
    --batch-size 64 --workers 8 > "$LOG/conv_torch.jsonl" 2> "$LOG/conv_torch.err" <<'PY' || echo "torch run failed"
import json, runpy, sys, torch
losses = []
fwd = torch.nn.CrossEntropyLoss.forward
def rec(self, *a, **k):
    out = fwd(self, *a, **k)
    if torch.is_grad_enabled(): losses.append(out.detach())
    return out
torch.nn.CrossEntropyLoss.forward = rec
sys.argv = sys.argv[1:]
try:
    runpy.run_path(sys.argv[0], run_name="__main__")
finally:
    print(json.dumps({"step_losses": {str(i + 1): float(l) for i, l in enumerate(losses)}}), flush=True)
PY
  "$PY" - "$LOG" <<'PY'
import json, os, sys
d = sys.argv[1]
for f in ("conv_rn50.jsonl", "conv_torch.jsonl"):
    if not os.path.exists(f"{d}/{f}"): open(f"{d}/{f}", "w").close()
ours, vals = {}, []
for line in open(f"{d}/conv_rn50.jsonl"):
    r = json.loads(line)
    if r.get("type") == "step": ours[int(r["step"])] = r.get("train.loss", r.get("loss"))
    if r.get("type") == "epoch": vals.append(r.get("val.top1", r.get("top1")))
theirs, tvals = {}, []
for line in open(f"{d}/conv_torch.jsonl"):
    r = json.loads(line)
    if "step_losses" in r: theirs = {int(k): v for k, v in r["step_losses"].items()}
    if "val_top1" in r: tvals.append(r["val_top1"])
def at(m, s):
    v = m.get(s)
    return "-" if v is None else f"{v:.3f}"
print("step   rn50    torch   (train loss, fp16 AMP, batch 64, 224 px, imagenette subset)")
for s in (1, 10, 20, 50, 100):
    print(f"{s:>4} {at(ours, s):>7} {at(theirs, s):>8}")
print("val top-1 per epoch: rn50", vals, "torch", tvals)
PY
}
export -f converge
export DATA
ce=${CONV_EPOCHS:-7}; [ $slow = 1 ] && ce=2
step converge "${CONVERGE_S:-110}" converge "$ce"
cp "$LOG/converge.log" "$LOG/convergence.txt" 2> /dev/null
say "converge ($ce epochs): $(grep -E '^ *(10|50|100) ' "$LOG/converge.log" | tr -s ' ' | tr '\n' ';') $(grep 'val top-1' "$LOG/converge.log")"

# ---- infer: the GPU engine vs torch ----
if [ $ops_ok = 1 ]; then
  DEVICE=cuda BUILD_DIR=$BUILD PEER=$PEER REPEATS=1 PYTHON=$PY DATA=$DATA PRECISIONS=fp16 \
    step infer "${INFER_S:-70}" bench/infer_vs_peers.sh 1,64,256 224 "$STEPS" "$WARMUP"
  say "infer fp16: $(grep -E 'rn50|torch|ratio' "$LOG/infer.log" | tr -s ' ' | tr '\n' ';')"
fi

# ---- extras, while time is left ----
if [ $ops_ok = 1 ]; then
  PRECISION=bf16 DEVICE=cuda REPEATS=1 PEER=$PEER BUILD_DIR=$BUILD PYTHON=$PY \
    step train_bf16 60 bench/train_vs_torch.sh 256 224 "$STEPS" "$WARMUP" &&
    say "train bf16 b256: $(grep -E 'ratio' "$LOG/train_bf16.log" | tr -s ' ')"
  RN50_CUDNN_NONDET=1 RN50_CUDNN_CACHE=$LOG/cudnn_cache_nondet.jsonl step nondet 60 \
    "$BUILD/rn50" train --benchmark --data synthetic --device cuda --amp --batch-size 256 \
    --benchmark-steps "$STEPS" --benchmark-warmup-steps "$WARMUP" &&
    say "RN50_CUDNN_NONDET=1 fp16 b256: $(grep -o 'train.ips [0-9.]* img/s' "$LOG/nondet.log")" \
      "(deterministic, stage train: $(grep -oE 'rn50 [0-9.]+ img/s' "$LOG/train.log" | head -1))"
fi
# One A/B row per switch, each against the default of the train stage; AB_FLAGS are the
# rn50 train flags compared the same way: --image-shape=4,224,224, the 4-channel stem that
# tensor-core NHWC kernels want (C of 4 or a multiple of 8), candidate default for CUDA AMP.
AB_FLAGS="--image-shape=4,224,224"
ab_switch() {  # NAME ENV=VALUE | NAME --flag=value
  local envs=() flags=()
  case $2 in --*) flags=("$2") ;; *) envs=("$2") ;; esac
  env "${envs[@]}" "$BUILD/rn50" train --benchmark --data synthetic --device cuda --amp \
    --batch-size 256 --benchmark-steps "$STEPS" --benchmark-warmup-steps "$WARMUP" "${flags[@]}"
}
export -f ab_switch
export bnsw_ok STEPS WARMUP
for sw in $SWITCHES $AB_FLAGS; do
  [ $bnsw_ok = 1 ] || break
  name=ab_$(printf '%s' "${sw%%=*}" | tr -c 'A-Za-z0-9_' '_')
  step "$name" 60 ab_switch "$name" "$sw" &&
    say "$sw fp16 b256: $(grep -o 'train.ips [0-9.]* img/s' "$LOG/$name.log")" \
      "(default, stage train: $(grep -oE 'rn50 [0-9.]+ img/s' "$LOG/train.log" | head -1))"
done
SAN=$(command -v compute-sanitizer || ls /usr/local/cuda/bin/compute-sanitizer 2> /dev/null | head -1)
if [ -n "$SAN" ]; then
  step sanitizer 60 "$SAN" --tool memcheck --error-exitcode 3 "$BUILD/test_ops_conv_bn" \
    --gtest_filter='*Conv2d*/cuda_*:*BatchNorm*/cuda_*'
  say "compute-sanitizer memcheck (conv, BN): rc $? $(grep -E 'ERROR SUMMARY' "$LOG/sanitizer.log" | tail -1)"
fi
exit $failed
