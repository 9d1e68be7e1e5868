#!/usr/bin/env bash
# Inference throughput and latency, rn50's CPU engine vs PyTorch and OpenCV DNN, in the same run
# on the same machine (issue 13's table).
#   bench/infer_vs_peers.sh [BATCH_SIZES] [CROP] [STEPS] [WARMUP]     (defaults 1,32 224 20 3)
# Environment: DEVICE (cpu; cuda: the GPU engine against torch on the GPU, no OpenCV, no int8;
# PRECISIONS then default fp16,fp32, tf32 and bf16 also possible),
# PRECISIONS (default fp32,int8; bf16 also possible), REPEATS (default 3), ARCH
# (resnet50), DATA (calibration images for int8: ../shared/data/imagenette), BUILD_DIR (build),
# PEER, PYTHON (/usr/bin/python3: torch, onnx, cv2).
# First it makes one model: Kaiming weights and BatchNorm statistics of one synthetic step at lr 0
# and 64 px (timing needs weights, not accuracy), written with --inference-dir (model.json/.safetensors and
# model.onnx) and exported again with --precision int8 calibrated on 64 images of DATA/train.
# Then for each batch size, REPEATS times in turn, every engine: rn50 (bench infer --model) at
# each precision; torch eager (channels_last) and frozen TorchScript (--jit) at fp32/bf16; torch's
# own INT8 (FX post-training quantization, onednn engine) for int8; OpenCV DNN on model.onnx
# (fp32). Prints the median images/s and p99 latency of each, and rn50's ratios.
set -euo pipefail
cd "$(dirname "$0")/.."
BS=${1:-1,32}; C=${2:-224}; S=${3:-20}; W=${4:-3}; R=${REPEATS:-3}; A=${ARCH:-resnet50}
DEV=${DEVICE:-cpu}
if [ "$DEV" = cpu ]; then PRECS=${PRECISIONS:-fp32,int8}; else PRECS=${PRECISIONS:-fp16,fp32}; fi
DATA=${DATA:-../shared/data/imagenette}
RN50=${BUILD_DIR:-build}/rn50
PEER=${PEER:-../shared/peers/torch_reference.py}
PY=${PYTHON:-/usr/bin/python3}
out=$(mktemp -d)
trap 'rm -rf "$out"' EXIT
"$RN50" train --data synthetic --synthetic-samples 4 --batch-size 4 --epochs 1 --warmup-epochs 0 \
  --lr 0 --crop-size 64 --arch "$A" --checkpoint-dir "$out/ck" --inference-dir "$out/m" > "$out/train.log" 2>&1
[[ ",$PRECS," == *",int8,"* ]] && "$RN50" export --from-checkpoint "$out/ck/$A" --output "$out/m8" \
  --precision int8 --image-root "$DATA" --calib-images 64 --crop-size "$C" \
  --resize-short $((C * 256 / 224)) > "$out/export.log"
for b in ${BS//,/ }; do
  for i in $(seq "$R"); do
    for p in ${PRECS//,/ }; do
      m="$out/m"; [ "$p" = int8 ] && m="$out/m8"
      "$RN50" bench infer --model "$m" --device "$DEV" --precision "$p" --batch-sizes "$b" --crop-size "$C" \
        --benchmark-steps "$S" --benchmark-warmup-steps "$W" --report-file "$out/rn50_${p}_${b}_$i.jsonl" > /dev/null
      if [ "$p" = int8 ]; then
        "$PY" "$PEER" --bench infer --device cpu --precision int8 --arch "$A" --batch-size "$b" \
          --crop-size "$C" --steps "$S" --warmup-steps "$W" 2>/dev/null | tail -1 > "$out/tint8_${p}_${b}_$i.json"
      else
        tp=$p; [ "$p" = tf32 ] && tp=fp32  # torch's cuDNN default allows TF32 convolutions
        "$PY" "$PEER" --bench infer --device "$DEV" --precision "$tp" --arch "$A" --batch-size "$b" \
          --crop-size "$C" --channels-last --steps "$S" --warmup-steps "$W" 2>/dev/null | tail -1 > "$out/eager_${p}_${b}_$i.json"
        "$PY" "$PEER" --bench infer --device "$DEV" --precision "$tp" --arch "$A" --batch-size "$b" \
          --crop-size "$C" --channels-last --jit --steps "$S" --warmup-steps "$W" 2>/dev/null | tail -1 > "$out/jit_${p}_${b}_$i.json"
      fi
    done
    if [ "$DEV" = cpu ]; then
      "$PY" bench/opencv_dnn_infer.py "$out/m/model.onnx" "$b" "$C" "$S" "$W" > "$out/cv_${b}_$i.json"
    fi
  done
done
"$PY" - "$out" "$BS" "$R" "$A" "$C" "$PRECS" "$DEV" <<'PY'
import json, os, statistics, sys
out, bs, r, arch, crop, precs = sys.argv[1], sys.argv[2].split(","), int(sys.argv[3]), sys.argv[4], sys.argv[5], sys.argv[6].split(",")
dev = sys.argv[7]
def load(name, b):
    rows = []
    for i in range(1, r + 1):
        p = f"{out}/{name}_{b}_{i}.json"
        p = p + "l" if not os.path.exists(p) else p
        if os.path.exists(p) and os.path.getsize(p):
            rows.append(json.loads(open(p).read().splitlines()[-1]))
    if not rows: return None
    ips = statistics.median([x.get("infer.ips", x.get("ips")) for x in rows])
    p99 = statistics.median([x.get("infer.latency_p99_ms", x.get("latency_ms_p99")) for x in rows])
    return ips, p99
print(f"{arch} {crop}px {dev} inference, median of {r} runs each, same run (img/s, p99 latency ms)")
print(f"{'batch':>5} {'engine':<28} {'img/s':>9} {'p99 ms':>8}   rn50 (same precision) over it")
for b in bs:
    rows = []
    for p in precs:
        rows.append((f"rn50 {p}", load(f"rn50_{p}", b), p))
    for p in precs:
        if p == "int8":
            rows.append(("torch int8 (FX PTQ, onednn)", load("tint8_int8", b), p))
        else:
            rows.append((f"torch eager {p} (chl last)", load(f"eager_{p}", b), p))
            rows.append((f"torch jit {p} (frozen)", load(f"jit_{p}", b), p))
    if dev == "cpu":
        rows.append(("opencv dnn fp32 (onnx)", load("cv", b), "fp32"))
    own = {p: v for name, v, p in rows if name == f"rn50 {p}"}
    for name, v, p in rows:
        if v is None:
            print(f"{b:>5} {name:<28} {'failed':>9}")
            continue
        ratio = "" if name.startswith("rn50") or own.get(p) is None else f"{own[p][0] / v[0]:.2f}x"
        if name == "rn50 int8" and own.get("fp32"):
            ratio = f"{v[0] / own['fp32'][0]:.2f}x rn50 fp32"
        print(f"{b:>5} {name:<28} {v[0]:>9.2f} {v[1]:>8.1f}   {ratio}")
PY
