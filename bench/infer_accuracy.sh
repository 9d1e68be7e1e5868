#!/usr/bin/env bash
# Issue 13's accuracy gates on a model rn50 trained itself (bench/train_accuracy_model.sh):
#   bash bench/infer_accuracy.sh [RUN_DIR] [IMAGE_ROOT] [CALIB_IMAGES]
#       (defaults runs/accuracy-model ../shared/data/imagenette 500)
# Over the whole IMAGE_ROOT/val, rn50's engines with the decode of the training run's eval (its
# config line's exact_decode), so they see the training graph's pixels:
#   training graph   val top-1 of the last epoch in RUN_DIR/report.jsonl (eval mode, BN unfolded)
#   engine fp32      the exported model (BN folded, fused post-ops)     gate: equal top-1
#   engine bf16                                                          gate: within 0.5 points
#   engine int8      calibrated (max, percentile) on CALIB_IMAGES train images
#                                                  gate: within 1.0 point, >= 97% same top-1 as fp32
#   OpenCV DNN       the exported model.onnx on torchvision-preprocessed images: agreement with
#                    the fp32 engine on the same (PIL, --exact-decode) pixels
# Prints one line per engine and PASS/FAIL per gate; exits non-zero when a gate fails.
set -euo pipefail
cd "$(dirname "$0")/.."
RUN=${1:-runs/accuracy-model}; ROOT=${2:-../shared/data/imagenette}; CAL=${3:-500}
RN50=${BUILD_DIR:-build}/rn50
PY=${PYTHON:-/usr/bin/python3}
out="$RUN/gates"; mkdir -p "$out"
ck="$RUN/checkpoints/$(ls "$RUN/checkpoints" | head -1)"
# The eval sizes of the training run (its config line).
read -r RS CROP EXACT < <("$PY" -c "import json,sys
for l in open(sys.argv[1]):
    j = json.loads(l)
    if j.get('type') == 'config': print(j['resize_short'], j['crop_size'], int(j['exact_decode'])); break" "$RUN/report.jsonl")
DEC=""; [ "$EXACT" = 1 ] && DEC=--exact-decode
train_top1=$("$PY" -c "import json,sys
e=[json.loads(l) for l in open(sys.argv[1])]
e=[x for x in e if x.get('type')=='epoch' and 'val.top1' in x]
print(e[-1]['val.top1'])" "$RUN/report.jsonl")
"$RN50" export --from-checkpoint "$ck" --output "$out/fp32" --crop-size "$CROP" --resize-short "$RS"
for m in max percentile; do
  "$RN50" export --from-checkpoint "$ck" --output "$out/int8-$m" --crop-size "$CROP" \
    --resize-short "$RS" --precision int8 --image-root "$ROOT" --calib-images "$CAL" --calib-method "$m"
done
run() {  # model precision name [decode flag]
  "$RN50" bench infer --model "$out/$1" --precision "$2" --crop-size "$CROP" --batch-sizes 64 \
    --benchmark-steps 1 --benchmark-warmup-steps 0 --image-root "$ROOT" ${4:-} \
    --predictions-file "$out/pred-$3.tsv" | grep '^accuracy' | sed 's/.*top1 \([0-9.]*\)%.*/\1/'
}
fp32=$(run fp32 fp32 fp32 $DEC); bf16=$(run fp32 bf16 bf16 $DEC)
i8max=$(run int8-max int8 int8-max $DEC); i8pct=$(run int8-percentile int8 int8-percentile $DEC)
fp32x=$(run fp32 fp32 fp32-exact --exact-decode)
"$PY" bench/opencv_dnn_accuracy.py "$out/fp32/model.onnx" "$ROOT" "$out/pred-opencv.tsv" | tee "$out/opencv.log"
"$PY" - "$out" "$train_top1" "$fp32" "$bf16" "$i8max" "$i8pct" "$fp32x" <<'PY'
import sys
out, train, fp32, bf16, i8max, i8pct = sys.argv[1], *map(float, sys.argv[2:7])
def preds(name):
    return [l.rstrip("\n").split("\t") for l in open(f"{out}/pred-{name}.tsv")]
def agree(a, b):
    pa, pb = preds(a), preds(b)
    assert [x[0] for x in pa] == [x[0] for x in pb], f"{a} and {b} list other files"
    return 100.0 * sum(x[2] == y[2] for x, y in zip(pa, pb)) / len(pa)
n = len(preds("fp32"))
ok = True
def gate(name, cond):
    global ok
    ok &= cond
    return "PASS" if cond else "FAIL"
print(f"val images: {n}")
print(f"training graph (last epoch, eval mode)  top1 {train:.2f}%")
print(f"engine fp32 (BN folded)                 top1 {fp32:.2f}%   {gate('fp32', abs(fp32 - train) < 0.005)} (equal to the training graph's)")
print(f"engine bf16                             top1 {bf16:.2f}%   {gate('bf16', abs(bf16 - fp32) <= 0.5)} (within 0.5 of fp32)  same top-1 as fp32: {agree('bf16', 'fp32'):.2f}%")
for name, v in (("int8-max", i8max), ("int8-percentile", i8pct)):
    a = agree(name, "fp32")
    print(f"engine {name:<33}top1 {v:.2f}%   {gate(name, abs(v - fp32) <= 1.0 and a >= 97.0)} (within 1.0 of fp32, >= 97% same top-1)  same top-1 as fp32: {a:.2f}%")
print(f"opencv dnn on model.onnx (PIL pixels)   same top-1 as the rn50 fp32 engine on PIL pixels (top1 {float(sys.argv[7]):.2f}%): {agree('opencv', 'fp32-exact'):.2f}%")
sys.exit(0 if ok else 1)
PY
