#!/usr/bin/env bash
# Prepares what scripts/gpu-check.sh needs on a GPU machine that has no internet, in git-ignored
# folders that the device tool carries (64 MiB in all, GUIDE.md section 6):
#   deps/debs/*.deb          the Debian packages the build needs (apt-get download, no install)
#   deps/data/imagenette-mini a small ImageFolder subset of ../shared/data/imagenette
# Usage: scripts/gpu-deps.sh [TRAIN_PER_CLASS] [VAL_PER_CLASS]     (defaults 200 20)
set -euo pipefail
cd "$(dirname "$0")/.."
TRAIN=${1:-200}; VAL=${2:-20}
mkdir -p deps/debs deps/data
(cd deps/debs && apt-get download libdnnl2.6 libdnnl-dev libturbojpeg0 libturbojpeg0-dev \
   libjpeg62-turbo libjpeg62-turbo-dev nlohmann-json3-dev libcli11-dev libfmt9 libfmt-dev \
   libgtest-dev libgmock-dev libpng16-16 libpng-dev)
src=../shared/data/imagenette
dst=deps/data/imagenette-mini
rm -rf "$dst"
for split in train val; do
  n=$TRAIN; [ "$split" = val ] && n=$VAL
  for cls in "$src/$split"/*/; do
    c=$(basename "$cls")
    mkdir -p "$dst/$split/$c"
    ls "$cls" | sort | head -n "$n" | while read -r f; do cp "$cls/$f" "$dst/$split/$c/"; done
  done
done
du -sh deps/debs deps/data
