#!/usr/bin/env bash
# Training overhead of 2:4 sparse training (--asp) and of quantization-aware training (--qat)
# against dense FP32 training, same run (issue 16): rn50 train --benchmark on synthetic data,
# the three configurations taking turns REPEATS times (so that machine noise hits them alike),
# medians and ratios.
#
#   REPEATS=5 bash bench/train_overhead.sh [ARCH] [BATCH] [CROP] [STEPS]
set -euo pipefail
cd "$(dirname "$0")/.."
ARCH=${1:-resnet50}; BATCH=${2:-32}; CROP=${3:-224}; STEPS=${4:-6}; REPEATS=${REPEATS:-3}
RN50=${BUILD_DIR:-build}/rn50
tmp=$(mktemp -d); trap 'rm -rf "$tmp"' EXIT
# Starting weights for --prune-model (any weights: the masks' cost does not depend on them).
"$RN50" train --data synthetic --synthetic-samples 2 --arch "$ARCH" --num-of-class 1000 \
  --crop-size 32 --batch-size 2 --epochs 1 --run-scope train_only \
  --checkpoint-dir "$tmp/w" > /dev/null
W=$(ls "$tmp"/w/*/0/model.safetensors)
common=(--data synthetic --arch "$ARCH" --batch-size "$BATCH" --crop-size "$CROP" --benchmark
        --benchmark-steps "$STEPS" --benchmark-warmup-steps 2)
declare -A runs
for r in $(seq "$REPEATS"); do
  for kind in dense asp qat; do
    flags=()
    [ "$kind" = asp ] && flags=(--asp --prune-model --from-pretrained-params "$W")
    [ "$kind" = qat ] && flags=(--qat --from-pretrained-params "$W")
    ips=$("$RN50" train "${common[@]}" "${flags[@]}" | sed -n 's/^benchmark: train.ips \([0-9.]*\).*/\1/p')
    runs[$kind]="${runs[$kind]:-} $ips"
  done
done
/usr/bin/python3 - "${runs[dense]}" "${runs[asp]}" "${runs[qat]}" "$ARCH" "$BATCH" "$CROP" <<'PY'
import statistics, sys
d, a, q = ([float(v) for v in s.split()] for s in sys.argv[1:4])
arch, batch, crop = sys.argv[4:7]
md, ma, mq = map(statistics.median, (d, a, q))
print(f"train {arch} batch {batch} crop {crop} fp32, median img/s (runs):")
print(f"  dense {md:.2f} ({', '.join(map(str, d))})")
print(f"  --asp {ma:.2f} ({', '.join(map(str, a))})  overhead {100 * (md / ma - 1):+.1f}%")
print(f"  --qat {mq:.2f} ({', '.join(map(str, q))})  overhead {100 * (md / mq - 1):+.1f}%")
PY
