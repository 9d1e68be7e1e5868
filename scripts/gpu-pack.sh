#!/usr/bin/env bash
# Builds everything a GPU window needs here, so that the window measures instead of building
# (issue 68; GUIDE.md section 6): a portable CUDA build for Hopper, the libraries it needs that a
# GPU machine may lack, a data subset and the torch peer, in the git-ignored folder .gpu/ that
# the device tool carries (64 MiB in all with the tracked tree; the pack stays under 56 MiB).
#   bash scripts/gpu-pack.sh            then, on the device: bash scripts/gpu-window.sh
#   GPU_DRYRUN=1 bash scripts/gpu-window.sh   checks the pack here (no GPU needed)
# What it makes:
#   build-gpu-pack/     -DRN50_CUDA=ON for sm_90 (H100/H200: RN50_CUDA_ARCHS, default 90-real),
#                       -DRN50_NATIVE=OFF (the binary must run on the device's CPU, whatever
#                       this one is), no server; only the targets the window runs:
#                       rn50, the MPI workers, libktrace.so and the GPU tests (PACK_TESTS)
#   .gpu/pack.tar.xz    those binaries stripped (bin/ as the build tree names them) and lib/:
#                       every library ldd resolves for them except glibc's, libstdc++/libgcc_s
#                       (the device's are newer; copies in lib/fallback/, used only if the
#                       binaries do not start with the device's) and the CUDA libraries (cudart,
#                       cuBLAS(Lt), cuDNN, NCCL, CUPTI: the device has them in its PyTorch wheels
#                       and toolkit, found at run time); OpenMPI's in lib/mpi/, used only where
#                       the device has no libmpi.so.40 of its own
#   .gpu/data/imagenette-mini   PACK_TRAIN (100) train and PACK_VAL (20) val images per class of
#                       ../shared/data/imagenette, as they are (JPEGs do not compress)
#   .gpu/peers/torch_reference.py   the PyTorch peer (../shared does not travel)
#   .gpu/MANIFEST       git revision, build options, the binaries, libraries and sizes
# The build records its source and build paths in the tests (RN50_SOURCE_DIR, RN50_BINARY_DIR);
# gpu-window.sh links that source path to the device's copy of the tree when they differ.
set -euo pipefail
cd "$(dirname "$0")/.."
ROOT=$(pwd)
B=${PACK_BUILD_DIR:-build-gpu-pack}
ARCHS=${RN50_CUDA_ARCHS:-90-real}
TRAIN=${PACK_TRAIN:-100}
VAL=${PACK_VAL:-20}
LIMIT_MIB=${PACK_LIMIT_MIB:-56}
SHARED=${SHARED_DIR:-../shared}
TESTS=${PACK_TESTS:-test_ops_conv_bn test_ops_eltwise_pool_linear test_ops_loss test_ops_optimizer
  test_ops_input_memory test_ops_real_shapes test_ops_cuda_choices test_model_parity test_train_overfit test_train_amp
  test_train_pure_fp16 test_train_mixup test_train_qat test_train_loop test_train_config_file
  test_infer_device_engine test_infer_engine test_parallel_train test_parallel_mpi}
BINS="rn50 rn50_parallel_worker rn50_parallel_train_worker libktrace.so"
t0=$SECONDS
say() { echo "gpu-pack: $*"; }

bash scripts/setup.sh > /dev/null
[ -x /usr/local/cuda/bin/nvcc ] || { say "no nvcc at /usr/local/cuda/bin: cannot build the CUDA backend here"; exit 1; }
[ -d "$SHARED/data/imagenette/train" ] || { say "no $SHARED/data/imagenette (SHARED_DIR)"; exit 1; }
[ -f "$SHARED/peers/torch_reference.py" ] || { say "no $SHARED/peers/torch_reference.py"; exit 1; }

# ---- the build ----
mkdir -p "$B"
cmake -S . -B "$B" -G Ninja -DCMAKE_BUILD_TYPE=Release -DRN50_CUDA=ON -DRN50_NATIVE=OFF \
  "-DRN50_CUDA_ARCHS=$ARCHS" -DRN50_SERVE=OFF -DRN50_ONNX=AUTO -DRN50_BUILD_TESTS=ON > "$B/configure.log" 2>&1 ||
  { tail -30 "$B/configure.log"; say "configure failed"; exit 1; }
targets="rn50_cli rn50_parallel_worker rn50_parallel_train_worker rn50_ktrace $TESTS"
say "building $(echo $targets | wc -w) targets in $B (CUDA archs $ARCHS, portable x86-64)"
# shellcheck disable=SC2086
cmake --build "$B" -j "$(nproc)" --target $targets

# ---- stage: bin/ (the build tree's names), lib/, lib/fallback/, lib/mpi/ ----
stage=$(mktemp -d)
trap 'rm -rf "$stage"' EXIT
mkdir -p "$stage/bin" "$stage/lib/fallback" "$stage/lib/mpi"
for f in $BINS $TESTS; do
  [ -e "$B/$f" ] || { say "missing $B/$f after the build"; exit 1; }
  strip --strip-unneeded -o "$stage/bin/$f" "$B/$f"
done
# The libraries: system ones stay (glibc), CUDA ones come from the device, the C++ runtime goes
# to fallback/, MPI to mpi/, everything else to lib/.
libs=$(for f in "$stage"/bin/*; do ldd "$f" | awk '/=> \//{print $1" "$3}'; done | sort -u)
while read -r name path; do
  [ -n "$name" ] || continue
  case "$name" in
    linux-vdso*|ld-linux*|libc.so*|libm.so*|libpthread.so*|libdl.so*|librt.so*|libresolv.so*|libutil.so*) ;;
    libcuda.so*|libcudart.so*|libcublas*|libcudnn*|libnccl*|libcupti*|libnvrtc*|libnvJitLink*) ;;
    libstdc++.so*|libgcc_s.so*) cp -L "$path" "$stage/lib/fallback/$name" ;;
    libmpi*|libopen-*|libhwloc*|libevent*|libpmix*|libudev*|libucp*|libucs*|libuct*|libfabric*)
      cp -L "$path" "$stage/lib/mpi/$name" ;;
    *) cp -L "$path" "$stage/lib/$name" ;;
  esac
done <<< "$libs"
strip --strip-unneeded "$stage"/lib/*.so* 2> /dev/null || true
rev=$(git rev-parse --short HEAD)$(git diff --quiet HEAD -- src include tests tools CMakeLists.txt || echo "+dirty")
{
  echo "rn50 GPU pack, made $(date -u +%Y-%m-%dT%H:%M:%SZ) at $rev on $(uname -m)"
  echo "source_dir $ROOT"
  echo "build_dir $ROOT/$B"
  echo "cmake -DRN50_CUDA=ON -DRN50_NATIVE=OFF -DRN50_CUDA_ARCHS=$ARCHS -DRN50_SERVE=OFF"
  echo "nvcc $(/usr/local/cuda/bin/nvcc --version | tail -1)"
  grep -E 'rn50: (CUDA|MPI)' "$B/configure.log" || true
  echo "binaries: $BINS $(echo $TESTS)"
  echo "lib: $(cd "$stage/lib" && ls *.so* 2> /dev/null | tr '\n' ' ')"
  echo "lib/fallback: $(ls "$stage/lib/fallback" | tr '\n' ' ')"
  echo "lib/mpi: $(ls "$stage/lib/mpi" | tr '\n' ' ')"
  echo "needed from the device: $(echo "$libs" | awk '{print $1}' |
    grep -E '^lib(cuda|cudart|cublas|cudnn|nccl|cupti)' | sort -u | tr '\n' ' ')"
} > "$stage/MANIFEST"

# ---- .gpu/ ----
rm -rf .gpu
mkdir -p .gpu/peers .gpu/data
cp "$stage/MANIFEST" .gpu/MANIFEST
say "compressing $(du -sh "$stage" | cut -f1) of binaries and libraries"
tar -C "$stage" -cf - bin lib MANIFEST | xz -T0 -6 > .gpu/pack.tar.xz
cp "$SHARED/peers/torch_reference.py" .gpu/peers/
dst=.gpu/data/imagenette-mini
for split in train val; do
  n=$TRAIN; [ "$split" = val ] && n=$VAL
  for cls in "$SHARED/data/imagenette/$split"/*/; do
    c=$(basename "$cls")
    mkdir -p "$dst/$split/$c"
    mapfile -t files < <(find "$cls" -maxdepth 1 -type f | sort | head -n "$n")
    cp -t "$dst/$split/$c/" "${files[@]}"
  done
done
pack=$(du -sb .gpu | cut -f1)
tracked=$(git ls-files -z | du -cb --files0-from=- | tail -1 | cut -f1)
say "$(du -h .gpu/pack.tar.xz | cut -f1) pack.tar.xz, $(find "$dst" -type f | wc -l) images" \
  "($(du -sh "$dst" | cut -f1)); .gpu/ $((pack / 1048576)) MiB, with the tracked tree" \
  "$(((pack + tracked) / 1048576)) MiB (the device carries 64); $((SECONDS - t0)) s"
[ "$pack" -le $((LIMIT_MIB * 1048576)) ] ||
  { say "over $LIMIT_MIB MiB: set PACK_TRAIN/PACK_VAL lower or pack fewer tests (PACK_TESTS)"; exit 1; }
echo "gpu-pack: ok"
