#!/usr/bin/env bash
# Input-pipeline throughput by data format: the same images read as an ImageFolder, as WebDataset
# tar shards and as TFRecord shards (+ DALI index), with the same transforms and workers.
#   bench/loader_formats.sh [IMAGE_ROOT] [WORKERS] [BATCH] [BATCHES]
#     defaults: ../shared/data/imagenette 2 64 40
# Environment: SPLIT train (default: RandomResizedCrop(224) + flip) | val, REPEATS (3),
# SHARD_SIZE (1024), BUILD_DIR (build), WORK (a temp folder for the shards, removed after).
# First converts IMAGE_ROOT with `rn50 convert-data` to both shard formats (printing its
# images/s), then runs `rn50 bench loader` on the three formats in turn REPEATS times and prints
# the medians: images/s (wall) and images/s per CPU-second (user + system time of all the
# loader's threads: robust on a busy machine), and each format's ratio to ImageFolder.
set -euo pipefail
cd "$(dirname "$0")/.."
ROOT=${1:-../shared/data/imagenette}; N=${2:-2}; B=${3:-64}; K=${4:-40}
R=${REPEATS:-3}; SPLIT=${SPLIT:-train}; SS=${SHARD_SIZE:-1024}
RN50=${BUILD_DIR:-build}/rn50
[ -x "$RN50" ] || { echo "no rn50 binary at $RN50 (set BUILD_DIR)" >&2; exit 2; }
[ -d "$ROOT/$SPLIT" ] || { echo "no $ROOT/$SPLIT folder" >&2; exit 2; }
WORK=${WORK:-$(mktemp -d)}
trap 'rm -rf "$WORK"' EXIT
for f in webdataset tfrecord; do
  rm -rf "${WORK:?}/$f"
  "$RN50" convert-data --image-root "$ROOT" --output "$WORK/$f" --format "$f" --shard-size "$SS" \
    2>/dev/null
done
declare -A ARGS=([imagefolder]="--image-root $ROOT" [webdataset]="--image-root $WORK/webdataset"
                 [tfrecord]="--image-root $WORK/tfrecord --data-idx-dir $WORK/tfrecord/idx")
for i in $(seq "$R"); do
  for f in imagefolder webdataset tfrecord; do
    # shellcheck disable=SC2086
    "$RN50" bench loader ${ARGS[$f]} --split "$SPLIT" --workers "$N" --batch-size "$B" \
      --batches "$K" --warmup-batches 2 --report-file "$WORK/${f}_$i.jsonl" > /dev/null
  done
done
/usr/bin/env python3 - "$WORK" "$R" "$ROOT" "$SPLIT" "$N" "$B" <<'PY'
import json, statistics, sys
work, r, root, split, n, b = sys.argv[1:7]
r = int(r)
load = lambda p: json.loads(open(p).readline())
print(f"loader {split} on {root}, {n} workers, batch {b}, {r} runs each, interleaved (median):")
base = None
for f in ("imagefolder", "webdataset", "tfrecord"):
    runs = [load(f"{work}/{f}_{i}.jsonl") for i in range(1, r + 1)]
    ips = statistics.median(d["loader.ips"] for d in runs)
    cpu = statistics.median(d["loader.ips_per_cpu_second"] for d in runs)
    each = ", ".join(f"{d['loader.ips_per_cpu_second']:.0f}" for d in runs)
    base = base or (ips, cpu)
    print(f"  {f:12s} {ips:7.0f} img/s {cpu:7.0f} img/s per CPU-second ({each})  "
          f"ratio to imagefolder {ips / base[0]:.2f}x, {cpu / base[1]:.2f}x per CPU-second")
PY
