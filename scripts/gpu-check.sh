#!/usr/bin/env bash
# Everything a GPU machine should check, in one call (GUIDE.md section 6):
#   scripts/gpu-check.sh LOGDIR
# 1. unpacks deps/debs/*.deb into /opt/deps when a build dependency is missing (see
#    scripts/gpu-deps.sh, run beforehand on a machine with apt);
# 2. builds with the CUDA backend required (-DRN50_CUDA=ON) into build-gpu;
# 3. runs the whole ctest suite: the op harness then covers the cuda backend in f32/f16/bf16 and
#    NCHW/NHWC against the reference;
# 4. benchmarks rn50 against torch_reference.py (if PEER points at it; ../shared does not travel
#    to the device machine, so copy the peer into deps/peers first) at batch 256 for AMP fp16,
#    bf16 and fp32 (TF32), same run, same GPU: images/s, ratio, GPU memory;
# 5. trains one epoch on real JPEGs (deps/data/imagenette-mini) and reports the share of step
#    time spent waiting for data;
# 6. times the GPU inference engine against torch on the GPU (bench/infer_vs_peers.sh with
#    DEVICE=cuda: fp16 and fp32 at batch 1, 64, 256; latency percentiles).
# Every step logs to LOGDIR/<step>.log; a summary goes to LOGDIR/summary.txt. Exit status:
# non-zero if the build or any test failed.
set -uo pipefail
cd "$(dirname "$0")/.."
LOG=${1:?usage: scripts/gpu-check.sh LOGDIR}
mkdir -p "$LOG"
summary="$LOG/summary.txt"
: > "$summary"
say() { echo "$*" | tee -a "$summary"; }

nvidia-smi > "$LOG/nvidia-smi.log" 2>&1 || say "nvidia-smi failed (no GPU?)"
say "gpu: $(nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader 2>/dev/null)"

# 1. dependencies
if ! pkg-config --exists libturbojpeg 2>/dev/null || [ ! -e /usr/include/oneapi/dnnl/dnnl.hpp ]; then
  if ls deps/debs/*.deb > /dev/null 2>&1; then
    mkdir -p /opt/deps
    for f in deps/debs/*.deb; do dpkg -x "$f" /opt/deps; done
    export CMAKE_PREFIX_PATH=/opt/deps/usr${CMAKE_PREFIX_PATH:+:$CMAKE_PREFIX_PATH}
    export PKG_CONFIG_PATH=/opt/deps/usr/lib/x86_64-linux-gnu/pkgconfig:/opt/deps/usr/share/pkgconfig
    export LD_LIBRARY_PATH=/opt/deps/usr/lib/x86_64-linux-gnu${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
    export CPATH=/opt/deps/usr/include${CPATH:+:$CPATH}
    say "deps: unpacked $(ls deps/debs/*.deb | wc -l) .deb files into /opt/deps"
  else
    say "deps: oneDNN/libturbojpeg missing and no deps/debs (run scripts/gpu-deps.sh first)"
  fi
fi

# 2. build
if ! cmake -S . -B build-gpu -G Ninja -DCMAKE_BUILD_TYPE=Release -DRN50_CUDA=ON -DRN50_NATIVE=OFF \
     > "$LOG/configure.log" 2>&1 || ! cmake --build build-gpu -j "$(nproc)" > "$LOG/build.log" 2>&1; then
  say "build: FAILED (see configure.log / build.log)"; tail -30 "$LOG/build.log" "$LOG/configure.log"
  exit 1
fi
say "build: ok"

# 3. tests
(cd build-gpu && ctest -j 4 --output-on-failure --timeout 1800) > "$LOG/ctest.log" 2>&1
rc=$?
say "ctest: $(grep -E 'tests passed|tests failed' "$LOG/ctest.log" | tail -1)"
./build-gpu/test_ops_backends --gtest_filter='*cuda*:*Cuda*' > "$LOG/cuda_ops.log" 2>&1
say "cuda op harness: $(grep -E '^\[  (PASSED|FAILED) ' "$LOG/cuda_ops.log" | tr '\n' ' ')"

# 4. benchmarks against the peer
PEER=${PEER:-deps/peers/torch_reference.py}
if [ -f "$PEER" ]; then
  for p in fp16 bf16 fp32; do
    PRECISION=$p DEVICE=cuda REPEATS=${REPEATS:-3} PEER=$PEER BUILD_DIR=build-gpu PYTHON=${PYTHON:-python3} \
      bench/train_vs_torch.sh 256 224 ${BENCH_STEPS:-100} ${BENCH_WARMUP:-20} > "$LOG/bench_$p.log" 2>&1
    say "bench $p: $(tail -1 "$LOG/bench_$p.log")"
  done
else
  for p in fp16 bf16 fp32; do
    case $p in fp16) a=(--amp);; bf16) a=(--amp --amp-dtype bf16);; *) a=();; esac
    ./build-gpu/rn50 train --benchmark --data synthetic --device cuda "${a[@]}" --batch-size 256 \
      --benchmark-steps 100 --benchmark-warmup-steps 20 > "$LOG/bench_$p.log" 2>&1
    say "bench $p (no peer at $PEER): $(grep 'train.ips' "$LOG/bench_$p.log" | tail -1)"
  done
fi

# 5. NCCL at world size 1: the communicator's tests, then step time with and without it
./build-gpu/test_dist_mpi --gtest_filter='DistNccl*' > "$LOG/nccl_tests.log" 2>&1
say "nccl tests: $(grep -E '^\[  (PASSED|FAILED|SKIPPED) ' "$LOG/nccl_tests.log" | tr '\n' ' ')"
for kind in single nccl; do
  mpirun --allow-run-as-root -np 1 ./build-gpu/rn50 train --benchmark --data synthetic --device cuda \
    --amp --batch-size 256 --benchmark-steps 100 --benchmark-warmup-steps 20 --dist-backend $kind \
    > "$LOG/comm_$kind.log" 2>&1
  say "world size 1, --dist-backend $kind: $(grep 'train.ips' "$LOG/comm_$kind.log" | tail -1)"
done

# 6. real JPEGs
if [ -d deps/data/imagenette-mini/train ]; then
  ./build-gpu/rn50 train --image-root deps/data/imagenette-mini --device cuda --amp --epochs 1 \
    --warmup-epochs 0 --batch-size 256 --checkpoint-dir "$LOG/ckpt" --report-file "$LOG/jpeg.jsonl" \
    > "$LOG/jpeg_train.log" 2>&1
  say "real JPEGs: $(grep 'done:' "$LOG/jpeg_train.log" | tail -1)"
fi

# 7. The GPU inference engine against torch on the GPU (same run): batch 1, 64, 256.
if [ -f "$PEER" ]; then
  DEVICE=cuda BUILD_DIR=build-gpu PEER="$PEER" REPEATS=1 PYTHON=${PYTHON:-python3} \
    bench/infer_vs_peers.sh 1,64,256 224 ${BENCH_STEPS:-100} ${BENCH_WARMUP:-20} \
    > "$LOG/infer.log" 2>&1
  say "infer: $(grep -c rn50 "$LOG/infer.log") rn50 rows (infer.log)"
fi
exit $rc
