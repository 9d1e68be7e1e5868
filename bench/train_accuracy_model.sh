#!/usr/bin/env bash
# Trains the model the inference accuracy gates are measured on (issue 13): resnet18 on
# Imagenette at 128 px with the DLE recipe, long enough to pass 70% val top-1 on 10 classes.
# Writes checkpoints and the report under OUT and the folded inference model to OUT/inference.
#
#   bash bench/train_accuracy_model.sh [IMAGE_ROOT] [OUT] [EPOCHS]
#
# About 25-40 minutes on a 2-core AVX-512 machine. Then:
#   ./build/rn50 eval --from-checkpoint OUT/checkpoints --image-root IMAGE_ROOT ...  (training graph)
#   bash bench/infer_accuracy.sh OUT IMAGE_ROOT                               (the gates)
set -euo pipefail
cd "$(dirname "$0")/.."
ROOT=${1:-../shared/data/imagenette}
OUT=${2:-runs/accuracy-model}
EPOCHS=${3:-14}
[ -x build/rn50 ] || bash scripts/build.sh
mkdir -p "$OUT"
# An interrupted run resumes from its last complete epoch.
RESUME=()
[ -d "$OUT/checkpoints/resnet18" ] && RESUME=(--from-checkpoint "$OUT/checkpoints/resnet18")
./build/rn50 train "${RESUME[@]}" --image-root "$ROOT" --arch resnet18 --num-of-class 10 \
  --epochs "$EPOCHS" --warmup-epochs 1 --batch-size 64 --crop-size 128 --resize-short 146 \
  --checkpoint-dir "$OUT/checkpoints" --inference-dir "$OUT/inference" \
  --report-file "$OUT/report.jsonl" --seed 1
