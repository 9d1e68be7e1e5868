#!/usr/bin/env bash
# Prepares what scripts/gpu-check.sh needs on a GPU machine that has no internet, in the
# git-ignored folder deps/ that the device tool carries (64 MiB in all with the working tree,
# GUIDE.md section 6):
#   deps/debs/*.deb             the Debian 12 packages the build needs that a GPU image may lack
#                               (apt-get download: oneDNN and the OpenCL pieces its CMake config
#                               asks for, libjpeg-turbo, libpng, zlib, fmt, CLI11, nlohmann-json,
#                               GoogleTest); gpu-check.sh unpacks them with dpkg -x, never into /
#   deps/data/imagenette-mini   an ImageFolder subset of ../shared/data/imagenette (JPEGs as they are)
#   deps/peers/torch_reference.py  the PyTorch peer (../shared does not travel)
# Usage: scripts/gpu-deps.sh [TRAIN_PER_CLASS] [VAL_PER_CLASS]     (defaults 320 60: ~45 MB)
# Fails when deps/ and the tracked files together exceed 62 MiB (the carry limit is 64).
set -euo pipefail
cd "$(dirname "$0")/.."
TRAIN=${1:-320}; VAL=${2:-60}
pkgs=(libdnnl2 libdnnl-dev ocl-icd-libopencl1 ocl-icd-opencl-dev opencl-c-headers
      opencl-clhpp-headers libturbojpeg0 libturbojpeg0-dev libjpeg62-turbo libjpeg62-turbo-dev
      libpng16-16 libpng-dev zlib1g-dev nlohmann-json3-dev libcli11-dev libfmt9 libfmt-dev
      libgtest-dev libgmock-dev googletest)
rm -rf deps/debs deps/peers
mkdir -p deps/debs deps/data deps/peers
(cd deps/debs && apt-get download "${pkgs[@]}" > /dev/null) ||
  { echo "gpu-deps: apt-get download failed (run apt-get update first?)" >&2; exit 1; }
cp ../shared/peers/torch_reference.py deps/peers/
src=../shared/data/imagenette
dst=deps/data/imagenette-mini
rm -rf "$dst"
for split in train val; do
  n=$TRAIN; [ "$split" = val ] && n=$VAL
  for cls in "$src/$split"/*/; do
    c=$(basename "$cls")
    mkdir -p "$dst/$split/$c"
    mapfile -t files < <(find "$cls" -maxdepth 1 -type f | sort)
    cp -t "$dst/$split/$c/" "${files[@]:0:n}"
  done
done
du -sh deps/debs deps/data deps/peers
tracked=$(git ls-files -z | du -cb --files0-from=- | tail -1 | cut -f1)
total=$(( $(du -sb deps | cut -f1) + tracked ))
echo "gpu-deps: $(ls deps/debs | wc -l) .deb files, $(find "$dst/train" -type f | wc -l) train and" \
  "$(find "$dst/val" -type f | wc -l) val images; with the tracked files $((total / 1048576)) MiB"
[ "$total" -le $((62 * 1048576)) ] || { echo "gpu-deps: over 62 MiB: use fewer images" >&2; exit 1; }
