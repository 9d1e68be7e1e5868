#!/usr/bin/env bash
# The fallback of a GPU window whose prebuilt pack does not start on the device
# (scripts/gpu-window.sh builds on the device then): the Debian 12 packages the build needs that
# a GPU image may lack, in the git-ignored folder deps/debs/ that the device tool carries beside
# .gpu/ (64 MiB in all with the working tree, GUIDE.md section 6): oneDNN and the OpenCL pieces
# its CMake config asks for, libjpeg-turbo, libpng, zlib, fmt, CLI11, nlohmann-json, GoogleTest
# (apt-get download; gpu-window.sh unpacks them with dpkg -x, never into /). The data subset and
# the torch peer travel in .gpu/ (scripts/gpu-pack.sh).
# Usage: scripts/gpu-deps.sh     Fails when deps/, .gpu/ and the tracked files exceed 62 MiB.
set -euo pipefail
cd "$(dirname "$0")/.."
pkgs=(libdnnl2 libdnnl-dev ocl-icd-libopencl1 ocl-icd-opencl-dev opencl-c-headers
      opencl-clhpp-headers libturbojpeg0 libturbojpeg0-dev libjpeg62-turbo libjpeg62-turbo-dev
      libpng16-16 libpng-dev zlib1g-dev nlohmann-json3-dev libcli11-dev libfmt9 libfmt-dev
      libgtest-dev libgmock-dev googletest)
rm -rf deps/debs
mkdir -p deps/debs
(cd deps/debs && apt-get download "${pkgs[@]}" > /dev/null) ||
  { echo "gpu-deps: apt-get download failed (run apt-get update first?)" >&2; exit 1; }
tracked=$(git ls-files -z | du -cb --files0-from=- | tail -1 | cut -f1)
total=$(( $(du -sb deps | cut -f1) + $(du -sb .gpu 2> /dev/null | cut -f1 || echo 0) + tracked ))
echo "gpu-deps: $(ls deps/debs | wc -l) .deb files ($(du -sh deps/debs | cut -f1)); with .gpu/ and" \
  "the tracked files $((total / 1048576)) MiB"
[ "$total" -le $((62 * 1048576)) ] ||
  { echo "gpu-deps: over 62 MiB with .gpu/: carry deps only if the pack failed to start" >&2; exit 1; }
