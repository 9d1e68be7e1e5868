#!/usr/bin/env bash
# Input-pipeline throughput, rn50's loader vs torchvision's DataLoader, in the same run on the
# same files with the same transforms and the same number of workers.
#   bench/loader_vs_torch.sh [IMAGE_ROOT] [WORKERS] [BATCH] [BATCHES]
#     defaults: ../shared/data/imagenette 2 64 40
# Environment: SPLIT train (default: RandomResizedCrop(224) + flip) | val (Resize(256) +
# CenterCrop(224)), REPEATS (default 3), BUILD_DIR (build), WARMUP (2 batches), EXACT=1 to time
# rn50's PIL-exact decoding instead of the default fast one, PYTHON (/usr/bin/python3).
# Runs `rn50 bench loader` and bench/torch_loader.py alternately REPEATS times (each times BATCHES
# batches after WARMUP) and prints the medians: images/s (wall), images/s per worker, images/s
# per CPU-second (user + system time of all the loader's threads / processes, robust on a busy
# machine) and the ratios rn50 / torchvision.
set -euo pipefail
cd "$(dirname "$0")/.."
ROOT=${1:-../shared/data/imagenette}; N=${2:-2}; B=${3:-64}; K=${4:-40}
R=${REPEATS:-3}; W=${WARMUP:-2}; SPLIT=${SPLIT:-train}
RN50=${BUILD_DIR:-build}/rn50
PY=${PYTHON:-/usr/bin/python3}
EXACT_FLAG=()
[ "${EXACT:-0}" = 1 ] && EXACT_FLAG=(--exact-decode)
[ -x "$RN50" ] || { echo "no rn50 binary at $RN50 (set BUILD_DIR)" >&2; exit 2; }
[ -d "$ROOT/$SPLIT" ] || { echo "no $ROOT/$SPLIT folder" >&2; exit 2; }
out=$(mktemp -d)
trap 'rm -rf "$out"' EXIT
for i in $(seq "$R"); do
  "$RN50" bench loader --image-root "$ROOT" --split "$SPLIT" --workers "$N" --batch-size "$B" \
    --batches "$K" --warmup-batches "$W" "${EXACT_FLAG[@]}" --report-file "$out/rn50_$i.jsonl" \
    > /dev/null
  "$PY" bench/torch_loader.py --image-root "$ROOT" --split "$SPLIT" --workers "$N" \
    --batch-size "$B" --batches "$K" --warmup-batches "$W" > "$out/torch_$i.jsonl"
done
"$PY" - "$out" "$R" "$ROOT" "$SPLIT" "$N" "$B" "${EXACT:-0}" <<'PY'
import json, statistics, sys
out, r, root, split, n, b, exact = sys.argv[1:8]
r, n = int(r), int(n)
load = lambda p: json.loads(open(p).readline())
ours = [load(f"{out}/rn50_{i}.jsonl") for i in range(1, r + 1)]
peer = [load(f"{out}/torch_{i}.jsonl") for i in range(1, r + 1)]
med = lambda runs, k: statistics.median(d[k] for d in runs)
oi, pi = med(ours, "loader.ips"), med(peer, "loader.ips")
oc, pc = med(ours, "loader.ips_per_cpu_second"), med(peer, "loader.ips_per_cpu_second")
runs = lambda runs, k: ", ".join(f"{d[k]:.0f}" for d in runs)
mode = "exact" if exact == "1" else "fast"
print(f"loader {split} on {root}, {n} workers, batch {b}, {r} runs (median):")
print(f"  rn50 ({mode} decode): {oi:8.0f} img/s ({runs(ours, 'loader.ips')}), {oi / n:7.0f} img/s "
      f"per worker, {oc:7.0f} img/s per CPU-second ({runs(ours, 'loader.ips_per_cpu_second')})")
print(f"  torchvision:        {pi:8.0f} img/s ({runs(peer, 'loader.ips')}), {pi / n:7.0f} img/s "
      f"per worker, {pc:7.0f} img/s per CPU-second ({runs(peer, 'loader.ips_per_cpu_second')})")
print(f"  ratio rn50 / torchvision: {oi / pi:.2f}x images/s, {oc / pc:.2f}x per CPU-second")
PY
