#!/usr/bin/env bash
# Issue 16's QAT table: FP32 vs post-training-quantized (PTQ) INT8 vs quantization-aware-trained
# (QAT) INT8 top-1 on IMAGE_ROOT/val, all from one float checkpoint rn50 trained itself
# (bench/train_accuracy_model.sh), and the training throughput of both fine-tunes.
#
#   bash bench/qat_accuracy.sh [MODEL_FILE] [IMAGE_ROOT] [OUT] [EPOCHS] [LR]
#
# Two fine-tunes from MODEL_FILE with the same schedule (EPOCHS epochs, cosine from LR, no
# warmup), so that the lr annealing helps both alike:
#   float   rn50 train            -> FP32 engine top-1, and PTQ INT8 (max calibration, 500 images)
#   qat     rn50 train --qat      -> the fake-quantized graph's val top-1 (training report) and
#                                    the INT8 engine with the learnt ranges (no calibration)
# Prints one line per model, the QAT INT8 - FP32 difference (acceptance: within 0.5 points) and
# the INT8 engine's agreement with the fake-quantized graph (test_infer_qat's gate: >= 99.5%).
set -euo pipefail
cd "$(dirname "$0")/.."
W=${1:-runs/accuracy-model/checkpoints/resnet18/3/model.safetensors}
ROOT=${2:-../shared/data/imagenette}; OUT=${3:-runs/qat}; EPOCHS=${4:-1}; LR=${5:-0.004}
RN50=${BUILD_DIR:-build}/rn50
mkdir -p "$OUT"
common=(--image-root "$ROOT" --arch resnet18 --num-of-class 10 --epochs "$EPOCHS" --warmup-epochs 0
        --lr "$LR" --batch-size 64 --crop-size 128 --resize-short 146 --seed 1
        --from-pretrained-params "$W")
for kind in float qat; do
  flags=(); [ "$kind" = qat ] && flags=(--qat)
  [ -f "$OUT/$kind/report.jsonl" ] || "$RN50" train "${common[@]}" "${flags[@]}" \
    --checkpoint-dir "$OUT/$kind/checkpoints" --inference-dir "$OUT/$kind/inference" \
    --report-file "$OUT/$kind/report.jsonl" | tee "$OUT/$kind.log"
done
"$RN50" export --from-pretrained-params "$OUT/float/checkpoints/resnet18/$((EPOCHS - 1))/model.safetensors" \
  --output "$OUT/ptq" --crop-size 128 --resize-short 146 --precision int8 --image-root "$ROOT" \
  --calib-images 500 --calib-method max --format rn50
"$RN50" export --from-pretrained-params "$OUT/qat/checkpoints/resnet18/$((EPOCHS - 1))/model.safetensors" \
  --output "$OUT/qat-int8" --crop-size 128 --resize-short 146 --precision int8 --format rn50
top1() {  # model precision name
  "$RN50" bench infer --model "$OUT/$1" --precision "$2" --crop-size 128 --batch-sizes 64 \
    --benchmark-steps 1 --benchmark-warmup-steps 0 --image-root "$ROOT" \
    --predictions-file "$OUT/pred-$3.tsv" | grep '^accuracy' | sed 's/.*top1 \([0-9.]*\)%.*/\1/'
}
fp32=$(top1 float/inference fp32 fp32); ptq=$(top1 ptq int8 ptq); qat=$(top1 qat-int8 int8 qat)
# The gate of test_infer_qat: the INT8 engine against the fake-quantized graph, every val image.
RN50_QAT_WEIGHTS="$OUT/qat/checkpoints/resnet18/$((EPOCHS - 1))/model.safetensors" \
  RN50_QAT_IMAGES="$ROOT" "${BUILD_DIR:-build}/test_infer_qat" \
  --gtest_filter='*Int8EngineAgreesWithTheFakeQuantGraph*' | grep -E '^\[qat\]|OK|FAILED' || true
/usr/bin/python3 - "$OUT" "$fp32" "$ptq" "$qat" <<'PY'
import json, sys
out, fp32, ptq, qat = sys.argv[1], *map(float, sys.argv[2:5])
def last(kind, key):
    e = [json.loads(l) for l in open(f"{out}/{kind}/report.jsonl")]
    return [x for x in e if x.get("type") == "epoch"][-1][key]
def agree(a, b):
    pa = [l.split("\t") for l in open(f"{out}/pred-{a}.tsv")]
    pb = [l.split("\t") for l in open(f"{out}/pred-{b}.tsv")]
    return 100.0 * sum(x[2] == y[2] for x, y in zip(pa, pb)) / len(pa)
print(f"float fine-tune   training graph val top-1 {last('float', 'val.top1'):.2f}%  "
      f"train {last('float', 'train.ips'):.1f} img/s")
print(f"qat fine-tune     fake-quant graph val top-1 {last('qat', 'val.top1'):.2f}%  "
      f"train {last('qat', 'train.ips'):.1f} img/s "
      f"(QAT overhead {100 * (last('float', 'train.ips') / last('qat', 'train.ips') - 1):.0f}%)")
print(f"FP32 engine       {fp32:.2f}%")
print(f"PTQ INT8 engine   {ptq:.2f}%  ({ptq - fp32:+.2f} vs FP32, same top-1 as FP32 on {agree('ptq', 'fp32'):.1f}%)")
print(f"QAT INT8 engine   {qat:.2f}%  ({qat - fp32:+.2f} vs FP32; "
      f"{'PASS' if qat >= fp32 - 0.5 else 'FAIL'}: within 0.5 points)")
PY
