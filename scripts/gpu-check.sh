#!/usr/bin/env bash
# Everything a GPU machine should check (issues 11 and 28, GUIDE.md section 6), in stages run in
# one device call (at most 600 s; a session has 15 minutes of device time, start included):
#   scripts/gpu-check.sh LOGDIR [STAGES]
# STAGES, comma-separated, run in the order given (default: all of them in this order):
#   probe  the machine: GPU, driver, nvcc, cmake, python/torch, where cuDNN, NCCL, cuBLAS and
#          cuSPARSELt are (toolkit, system or Python packages), MPI, glibc, cores, disk
#   build  -DRN50_CUDA=ON into build-gpu, for this GPU's architecture only (nvidia-smi's
#          compute capability: 9.0 -> 90-real), Release
#   test   the whole ctest suite with RN50_REQUIRE=gpu,torch (a test that would skip for want of
#          a GPU, or of PyTorch when $PYTHON has it, fails instead; RN50_TEST_PYTHON points the
#          tests at $PYTHON when /usr/bin/python3 has no torch), then the CUDA op harness alone
#   bench  rn50 vs torch_reference.py --bench train (channels_last) at batch 256, same run, same
#          GPU: fp16 AMP, bf16 AMP, fp32 (TF32); images/s, ratio, GPU memory of each
#   train  real JPEGs (deps/data/imagenette-mini), --amp, 224 px, as many epochs as fit in
#          TRAIN_S seconds: loss, top-1 per epoch, images/s, data time per step
#   infer  the GPU inference engine vs torch on the GPU (bench/infer_vs_peers.sh DEVICE=cuda,
#          batch 1, 64, 256; latency percentiles)
#   comm   the NCCL tests, then --dist-backend single vs nccl at world size 1 (the overhead),
#          COMM_REPEATS alternating pairs
#   sanitize  compute-sanitizer memcheck and racecheck on the op harness's conv and BatchNorm
#          cases
# The device call (prepare first: bash scripts/gpu-deps.sh; carry ["deps"]):
#   OUT=$OUT bash scripts/gpu-check.sh /tmp/g
# with the default DEADLINE_S, the stages in priority order; a later call that starts a fresh
# machine rebuilds (`build` first), one on a warm machine finds build-gpu done.
# Unpack $OUT/logs-*.tgz into bench/results/gpu/ and commit the text logs.
# Every step logs to LOGDIR/<step>.log and one line to LOGDIR/summary.txt. With OUT set (the
# device tool's folder), the summary is also appended to $OUT/summary.txt as it goes, and at exit
# LOGDIR is packed into $OUT/logs-<stages>.tgz (the tool brings back at most 8 files).
# Time: DEADLINE_S (default 540) bounds the whole call: each step's timeout is cut to what is
# left, and a step with less than 20 s left is skipped (and says so). Per-step limits: BUILD_S
# (300), TEST_S (200), BENCH_S (70 per precision), TRAIN_S (90), INFER_S (80; INFER_PRECISIONS,
# default fp16), SAN_S (60 per tool). Other knobs: REPEATS (1), BENCH_STEPS (50), BENCH_WARMUP
# (10), COMM_REPEATS (1), PEER (deps/peers/torch_reference.py), PYTHON (default: the first of
# python3, /usr/bin/python3, /opt/conda/bin/python3, /usr/local/bin/python3 that imports torch).
# Dependencies the image lacks come from deps/debs (scripts/gpu-deps.sh, run beforehand on a
# machine with apt): unpacked once with dpkg -x into build-gpu-deps/ (never into /), their
# pkg-config files pointed there. NVIDIA libraries that live only in Python packages
# (site-packages/nvidia/*/lib) go on LD_LIBRARY_PATH, and their nvidia/ folders (as $PYTHON sees
# them) to CMake as RN50_NVIDIA_PYTHON_ROOTS.
# Exit status: non-zero if a stage failed (build, tests, a benchmark that produced no figure).
set -uo pipefail
cd "$(dirname "$0")/.."
LOG=${1:?usage: scripts/gpu-check.sh LOGDIR [probe,build,test,bench,train,infer,comm,sanitize]}
STAGES=${2:-probe,build,test,bench,train,infer,comm,sanitize}
mkdir -p "$LOG"
LOG=$(cd "$LOG" && pwd)
ROOT=$(pwd)
summary="$LOG/summary.txt"
START=$(date +%s)
DEADLINE_S=${DEADLINE_S:-540}
# The interpreter that has PyTorch (the peer, the parity tests, and the nvidia-* packages whose
# cuDNN/NCCL/cuBLAS the build may use): $PYTHON, else the first of these that imports torch.
PY=${PYTHON:-}
if [ -z "$PY" ]; then
  for p in python3 /usr/bin/python3 /opt/conda/bin/python3 /usr/local/bin/python3; do
    command -v "$p" > /dev/null && "$p" -c "import torch" 2> /dev/null && { PY=$p; break; }
  done
fi
PY=${PY:-python3}
PEER=${PEER:-deps/peers/torch_reference.py}
REPEATS=${REPEATS:-1}
STEPS=${BENCH_STEPS:-50}
WARM=${BENCH_WARMUP:-10}
failed=0

say() {
  echo "$*" | tee -a "$summary"
  [ -n "${OUT:-}" ] && echo "$*" >> "$OUT/summary.txt"
  return 0
}
pack() {
  [ -n "${OUT:-}" ] || return 0
  tar -C "$LOG" --exclude='*.safetensors' --exclude=ckpt -czf "$OUT/logs-${STAGES//,/-}.tgz" . \
    2> /dev/null
}
trap pack EXIT
left() { echo $((DEADLINE_S - ($(date +%s) - START))); }
# step NAME LIMIT_S CMD...: runs CMD with its output in LOG/NAME.log under a timeout of
# min(LIMIT_S, time left); returns CMD's status (124 on timeout, 125 when skipped).
step() {
  local name=$1 limit=$2 l
  shift 2
  l=$(left)
  [ "$l" -lt "$limit" ] && limit=$l
  if [ "$limit" -lt 20 ]; then
    say "$name: skipped, ${l}s left of DEADLINE_S=$DEADLINE_S"
    return 125
  fi
  if [ "$(type -t "$1")" = function ]; then  # timeout runs programs: give it a bash that has it
    timeout --kill-after=10 "$limit" bash -c "$*" > "$LOG/$name.log" 2>&1
  else
    timeout --kill-after=10 "$limit" "$@" > "$LOG/$name.log" 2>&1
  fi
  local rc=$?
  [ $rc = 124 ] && say "$name: timed out after ${limit}s"
  return $rc
}

# ---- environment (every call: nothing here survives between device calls but files) ----
command -v nvcc > /dev/null || export PATH=/usr/local/cuda/bin:$PATH
if ! pkg-config --exists libturbojpeg 2> /dev/null || [ ! -e /usr/include/oneapi/dnnl/dnnl.hpp ]; then
  D=$ROOT/build-gpu-deps/root
  if [ ! -e "$D/.unpacked" ] && ls deps/debs/*.deb > /dev/null 2>&1; then
    mkdir -p "$D"
    for f in deps/debs/*.deb; do dpkg -x "$f" "$D"; done
    # Debian's .pc files say prefix=/usr: point them at the unpacked tree.
    find "$D" -name '*.pc' -exec sed -i "s|=/usr|=$D/usr|g" {} +
    touch "$D/.unpacked"
  fi
  if [ -e "$D/.unpacked" ]; then
    export CMAKE_PREFIX_PATH=$D/usr${CMAKE_PREFIX_PATH:+:$CMAKE_PREFIX_PATH}
    export PKG_CONFIG_PATH=$D/usr/lib/x86_64-linux-gnu/pkgconfig:$D/usr/share/pkgconfig
    export LD_LIBRARY_PATH=$D/usr/lib/x86_64-linux-gnu${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
    export LIBRARY_PATH=$D/usr/lib/x86_64-linux-gnu${LIBRARY_PATH:+:$LIBRARY_PATH}
    # (the multiarch folder is on the compiler's own path only under /usr: jconfig.h lives there)
    export CPATH=$D/usr/include:$D/usr/include/x86_64-linux-gnu${CPATH:+:$CPATH}
  fi
fi
nv_roots=$("$PY" -c "import nvidia; print(' '.join(sorted(set(nvidia.__path__))))" 2> /dev/null)
for r in $nv_roots; do
  for l in "$r"/*/lib; do
    [ -d "$l" ] && export LD_LIBRARY_PATH=$l${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
  done
done
MPIRUN=$(command -v mpirun || true)
# compute-sanitizer ships in the toolkit but is not always on PATH.
SANITIZER=$(command -v compute-sanitizer ||
  ls /usr/local/cuda/bin/compute-sanitizer /usr/local/cuda/compute-sanitizer/compute-sanitizer \
    2> /dev/null | head -1 || true)
# The tests run their PyTorch scripts with RN50_TEST_PYTHON (default /usr/bin/python3): point it
# at the interpreter that has torch, and then require the torch tests (no silent skip).
REQUIRE=gpu
if "$PY" -c "import torch, torchvision" 2> /dev/null; then
  /usr/bin/python3 -c "import torch, torchvision" 2> /dev/null ||
    export RN50_TEST_PYTHON=$(command -v "$PY")
  REQUIRE=gpu,torch
fi
export REQUIRE

# ---- stages ----
probe() {
  {
    echo "== nvidia-smi"; nvidia-smi
    echo "== compute capability"; nvidia-smi --query-gpu=name,compute_cap,driver_version,memory.total --format=csv
    echo "== nvcc"; nvcc --version
    echo "== cmake / ninja / g++"; cmake --version | head -1; ninja --version; g++ --version | head -1
    echo "== os / glibc"; head -2 /etc/os-release; ldd --version | head -1
    echo "== cores / memory / disk"; nproc; free -g | head -2; df -h . | tail -1
    echo "== python / torch"
    "$PY" -c "import sys, torch, torchvision; print(sys.version.split()[0], torch.__version__, torchvision.__version__, 'cuda', torch.version.cuda, 'cudnn', torch.backends.cudnn.version(), 'gpu', torch.cuda.is_available())"
    echo "== nvidia Python packages: $nv_roots"
    for r in $nv_roots; do ls -d "$r"/*/ "$r"/*/lib/* 2> /dev/null; done
    echo "== headers and libraries outside Python"
    for n in cudnn.h nccl.h cublasLt.h cusparseLt.h; do
      find /usr/local/cuda*/ /usr/include /opt -name "$n" 2> /dev/null | head -3 | sed "s|^|$n: |"
    done
    ldconfig -p | grep -E 'libcudnn\.|libnccl\.|libcublasLt\.|libcusparseLt\.' || echo "ldconfig: none"
    ls /usr/local/cuda/lib64/ 2> /dev/null | grep -E 'cudnn|nccl|cublasLt|cusparseLt' || echo "toolkit: none of them"
    echo "== mpi: ${MPIRUN:-absent}"; [ -n "$MPIRUN" ] && "$MPIRUN" --version | head -1
    echo "== oneDNN / turbojpeg: $(ls /usr/include/oneapi/dnnl/dnnl.hpp ${D:+$D/usr/include/oneapi/dnnl/dnnl.hpp} 2> /dev/null | head -1) turbojpeg $(pkg-config --modversion libturbojpeg 2>&1)"
    echo "== compute-sanitizer: ${SANITIZER:-absent}"
    echo "== LD_LIBRARY_PATH=${LD_LIBRARY_PATH:-}"
    echo "== tests: RN50_REQUIRE=$REQUIRE RN50_TEST_PYTHON=${RN50_TEST_PYTHON:-/usr/bin/python3}"
  } 2>&1
}

cap=$(nvidia-smi --query-gpu=compute_cap --format=csv,noheader 2> /dev/null | head -1 | tr -d ' .')
ARCHS=${RN50_CUDA_ARCHS:-${cap:-90}-real}

build() {
  cmake -S . -B build-gpu -G Ninja -DCMAKE_BUILD_TYPE=Release -DRN50_CUDA=ON -DRN50_NATIVE=OFF \
    "-DRN50_CUDA_ARCHS=$ARCHS" "-DRN50_NVIDIA_PYTHON_ROOTS=${nv_roots// /;}" &&
    cmake --build build-gpu -j "$(nproc)"
}

run_tests() {
  # Two OpenMP threads per test, as many tests as cores: the CPU tests share the machine.
  cd build-gpu && OMP_NUM_THREADS=2 RN50_REQUIRE=$REQUIRE ctest -j "$(nproc)" \
    --output-on-failure --timeout 300
}

# The CUDA cases of the op harness (tests/test_ops_*.cpp on op_backend_fixture.h) alone.
cuda_ops() {
  local t rc=0
  for t in conv_bn eltwise_pool_linear loss optimizer input_memory; do
    ./build-gpu/test_ops_$t --gtest_filter='*cuda*:*Cuda*' || rc=1
  done
  return $rc
}

sanitize() {
  [ -n "$SANITIZER" ] || { echo "compute-sanitizer: absent"; return 0; }
  local f='*Conv2d*/cuda_*:*BatchNorm*/cuda_*'
  timeout "${SAN_S:-60}" "$SANITIZER" --tool memcheck --error-exitcode 3 \
    ./build-gpu/test_ops_conv_bn --gtest_filter="$f"
  local a=$?
  timeout "${SAN_S:-60}" "$SANITIZER" --tool racecheck --error-exitcode 3 \
    ./build-gpu/test_ops_conv_bn --gtest_filter="$f"
  local b=$?
  echo "memcheck rc=$a racecheck rc=$b"
  [ $a = 0 ] && [ $b = 0 ]
}

bench() {
  for p in fp16 bf16 fp32; do
    if [ -f "$PEER" ]; then
      PRECISION=$p DEVICE=cuda REPEATS=$REPEATS PEER=$PEER BUILD_DIR=build-gpu PYTHON=$PY \
        step "bench_$p" "${BENCH_S:-70}" bench/train_vs_torch.sh 256 224 "$STEPS" "$WARM"
    else
      local a=()
      case $p in fp16) a=(--amp) ;; bf16) a=(--amp --amp-dtype bf16) ;; esac
      step "bench_$p" "${BENCH_S:-70}" ./build-gpu/rn50 train --benchmark --data synthetic --device cuda \
        "${a[@]}" --batch-size 256 --benchmark-steps "$STEPS" --benchmark-warmup-steps "$WARM"
    fi
    local line
    line=$(grep -E '^train |train.ips' "$LOG/bench_$p.log" | tail -1)
    [ -n "$line" ] || { failed=1; line="FAILED: $(tail -3 "$LOG/bench_$p.log" | tr '\n' ' ')"; }
    say "bench $p: $line"
  done
}

comm() {
  RN50_REQUIRE=gpu step nccl_tests 60 ./build-gpu/test_parallel_mpi --gtest_filter='DistNccl*'
  say "nccl tests: $(grep -E '^\[  (PASSED|FAILED|SKIPPED) ' "$LOG/nccl_tests.log" | tr '\n' ' ')"
  grep -q '^\[  PASSED  \]' "$LOG/nccl_tests.log" && ! grep -q FAILED "$LOG/nccl_tests.log" ||
    failed=1
  # Alternating runs; the medians and their ratio.
  for i in $(seq "${COMM_REPEATS:-1}"); do
    for kind in single nccl; do
      step "comm_${kind}_$i" 60 ./build-gpu/rn50 train --benchmark --data synthetic \
        --device cuda --amp --batch-size 256 --benchmark-steps "$STEPS" \
        --benchmark-warmup-steps "$WARM" --dist-backend $kind --report-file "$LOG/comm_${kind}_$i.jsonl"
    done
  done
  say "world size 1: $("$PY" - "$LOG" << 'EOF'
import json, statistics, sys, glob
def ips(kind):
    v = []
    for f in sorted(glob.glob(f"{sys.argv[1]}/comm_{kind}_*.jsonl")):
        for line in open(f):
            d = json.loads(line)
            if "train.ips" in d and d.get("type", "benchmark") == "benchmark":
                v.append(d["train.ips"])
    return v
s, n = ips("single"), ips("nccl")
if not s or not n:
    print(f"FAILED (single {s}, nccl {n}); see comm_*.log")
else:
    ms, mn = statistics.median(s), statistics.median(n)
    print(f"single {ms:.1f} img/s {s}, nccl {mn:.1f} img/s {n}, overhead {100 * (1 - mn / ms):.2f}%")
EOF
)"
}

train_jpeg() {
  [ -d deps/data/imagenette-mini/train ] || { say "train: no deps/data/imagenette-mini"; return 1; }
  rm -rf build-gpu/ckpt
  step train_jpeg "${TRAIN_S:-90}" ./build-gpu/rn50 train --image-root deps/data/imagenette-mini \
    --device cuda --amp --epochs "${TRAIN_EPOCHS:-40}" --warmup-epochs 2 --batch-size 256 \
    --crop-size 224 --checkpoint-dir build-gpu/ckpt --report-file "$LOG/train_jpeg.jsonl"
  local rc=$?
  grep 'done:' "$LOG/train_jpeg.log" | sed 's/^/  /' | tee -a "$summary"
  [ -n "${OUT:-}" ] && grep 'done:' "$LOG/train_jpeg.log" | sed 's/^/  /' >> "$OUT/summary.txt"
  local why="" n
  n=$(grep -c 'done:' "$LOG/train_jpeg.log")
  [ $rc = 124 ] && why=" (cut at TRAIN_S=${TRAIN_S:-90}s, as planned)"
  [ $rc != 0 ] && [ $rc != 124 ] && why=": $(grep -iE 'error|what\(\)' "$LOG/train_jpeg.log" | tail -1)"
  say "train: rc $rc$why, $n epochs"
  grep -q 'done:' "$LOG/train_jpeg.log"
}

infer() {
  [ -f "$PEER" ] || { say "infer: no peer at $PEER"; return 1; }
  DEVICE=cuda BUILD_DIR=build-gpu PEER="$PEER" REPEATS=1 PYTHON=$PY DATA=deps/data/imagenette-mini \
    PRECISIONS=${INFER_PRECISIONS:-fp16} \
    step infer "${INFER_S:-80}" bench/infer_vs_peers.sh 1,64,256 224 "$STEPS" "$WARM"
  local rc=$?
  grep -E 'rn50|torch|ratio' "$LOG/infer.log" | sed 's/^/  /' | tee -a "$summary"
  [ -n "${OUT:-}" ] && grep -E 'rn50|torch|ratio' "$LOG/infer.log" | sed 's/^/  /' >> "$OUT/summary.txt"
  return $rc
}

export -f build run_tests cuda_ops sanitize
export ARCHS SANITIZER nv_roots
say "gpu-check $(git rev-parse --short HEAD 2> /dev/null) stages $STAGES on $(nvidia-smi --query-gpu=name,driver_version --format=csv,noheader 2> /dev/null || echo 'no GPU')"
for s in ${STAGES//,/ }; do
  case $s in
    probe) (probe) > "$LOG/probe.log" 2>&1; say "probe: $(sed -n '/^== python/,/^== nvidia/p' "$LOG/probe.log" | grep -v '^==' | tail -1)" ;;
    build)
      t0=$(date +%s)
      if step build "${BUILD_S:-300}" build; then
        say "build: ok in $(($(date +%s) - t0))s ($ARCHS, $(grep -E 'rn50: (CUDA|MPI)' "$LOG/build.log" | tr '\n' ' '))"
      else
        failed=1; say "build: FAILED"; tail -30 "$LOG/build.log"
        break
      fi ;;
    test)
      t0=$(date +%s)
      step ctest "${TEST_S:-200}" run_tests
      rc=$?; [ $rc = 0 ] || failed=1
      say "ctest: rc $rc in $(($(date +%s) - t0))s, $(grep -E 'tests passed|tests failed' "$LOG/ctest.log" | tail -1)"
      grep -E '^\s+[0-9]+ - .*\((Failed|Timeout|SEGFAULT|Subprocess)' "$LOG/ctest.log" | sed 's/^/  /' | tee -a "$summary"
      step cuda_ops 60 cuda_ops || failed=1
      say "cuda op harness: $(grep -E '^\[  (PASSED|FAILED) ' "$LOG/cuda_ops.log" | tr '\n' ' ')" ;;
    sanitize)
      step sanitizer $((2 * ${SAN_S:-60} + 10)) sanitize
      say "compute-sanitizer: $(tail -1 "$LOG/sanitizer.log")" ;;
    bench) bench ;;
    comm) comm ;;
    train) train_jpeg || failed=1 ;;
    infer) infer || failed=1 ;;
    *) say "unknown stage '$s' (known: probe,build,test,bench,train,infer,comm,sanitize)"; failed=1 ;;
  esac
done
say "gpu-check: done in $(($(date +%s) - START))s, failed=$failed"
exit $failed
