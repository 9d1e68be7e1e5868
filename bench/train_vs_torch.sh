#!/usr/bin/env bash
# Training throughput, rn50 vs the PyTorch peer, in the same run on the same machine.
#   bench/train_vs_torch.sh [BATCH] [CROP] [STEPS] [WARMUP]      (defaults 32 224 10 2)
# Runs `rn50 train --benchmark --data synthetic` and `torch_reference.py --bench train
# --channels-last` (fp32) alternately REPEATS times (default 3) and prints the median images/s of
# each and the ratio. Needs a build in ${BUILD_DIR:-build} and ../shared/peers beside the repo.
set -euo pipefail
cd "$(dirname "$0")/.."
B=${1:-32}; C=${2:-224}; S=${3:-10}; W=${4:-2}; R=${REPEATS:-3}
RN50=${BUILD_DIR:-build}/rn50
PEER=${PEER:-../shared/peers/torch_reference.py}
PY=${PYTHON:-/usr/bin/python3}
out=$(mktemp -d)
for i in $(seq "$R"); do
  "$RN50" train --benchmark --data synthetic --batch-size "$B" --crop-size "$C" \
    --benchmark-steps "$S" --benchmark-warmup-steps "$W" --report-file "$out/rn50_$i.jsonl" > "$out/rn50_$i.log"
  "$PY" "$PEER" --bench train --batch-size "$B" --crop-size "$C" --channels-last \
    --steps "$S" --warmup-steps "$W" > "$out/torch_$i.jsonl"
done
"$PY" - "$out" "$R" "$B" "$C" <<'PY'
import json, statistics, sys, glob
out, r, b, c = sys.argv[1], int(sys.argv[2]), sys.argv[3], sys.argv[4]
def ips(path, key):
    for line in open(path):
        d = json.loads(line)
        if key in d and d.get("type", "benchmark") == "benchmark":
            return d[key]
    raise SystemExit(f"no {key} in {path}")
ours = [ips(f"{out}/rn50_{i}.jsonl", "train.ips") for i in range(1, r + 1)]
peer = [ips(f"{out}/torch_{i}.jsonl", "ips") for i in range(1, r + 1)]
mo, mp = statistics.median(ours), statistics.median(peer)
print(f"train fp32 batch {b} crop {c}: rn50 {mo:.2f} img/s (runs {', '.join(f'{x:.2f}' for x in ours)}), "
      f"torch channels_last {mp:.2f} img/s (runs {', '.join(f'{x:.2f}' for x in peer)}), ratio {mo / mp:.2f}x")
PY
