#!/usr/bin/env bash
# Inference throughput and latency, rn50's CPU engine vs ONNX Runtime, PyTorch and OpenCV DNN, in
# the same run on the same machine (issue 13's table; ONNX Runtime: issue 33).
#   bench/infer_vs_peers.sh [BATCH_SIZES] [CROP] [STEPS] [WARMUP]     (defaults 1,32 224 20 3)
# Environment: DEVICE (cpu; cuda: the GPU engine against torch on the GPU, no OpenCV, no ONNX
# Runtime, no int8; PRECISIONS then default fp16,fp32, tf32 and bf16 also possible),
# PRECISIONS (default fp32,int8; bf16 also possible), REPEATS (default 3), ARCH
# (resnet50), DATA (calibration images for int8: ../shared/data/imagenette), BUILD_DIR (build),
# PEER, PYTHON (/usr/bin/python3: torch, onnx, cv2), ORT_DIR (where ../shared/peers/ort-setup.sh
# installed onnxruntime-node: /tmp/ort-peer; `bash ../shared/peers/ort-setup.sh DIR` installs it,
# about 300 MB), ORT_JS (../shared/peers/ort_infer.js), THREADS (ONNX Runtime's intra-op
# threads: the cores, nproc), PEAK_FILE (a `rn50 bench peak` report: rn50's rows then also show
# their share of the measured peak of their precision).
# First it makes one model: Kaiming weights and BatchNorm statistics of one synthetic step at lr 0
# and 64 px (timing needs weights, not accuracy), written with --inference-dir (model.json/.safetensors and
# model.onnx), exported again as an fp32 ONNX at CROP (ONNX Runtime checks the input's declared
# size) and with --precision int8 calibrated on 64 images of DATA/train (model.json for rn50 and
# a QDQ model.onnx for ONNX Runtime).
# Then for each batch size, REPEATS times in turn, every engine: rn50 (bench infer --model) at
# each precision; ONNX Runtime (onnxruntime-node, CPU, all graph optimisations) on rn50's fp32
# and QDQ int8 ONNX; torch eager (channels_last) and frozen TorchScript (--jit) at fp32/bf16;
# torch's own INT8 (FX post-training quantization, onednn engine) for int8; OpenCV DNN on
# model.onnx (fp32). Prints the median images/s and p99 latency of each, and rn50's ratios.
# ort_infer.js times 224 x 224 inputs only: at another CROP ONNX Runtime is left out (said so).
set -euo pipefail
cd "$(dirname "$0")/.."
BS=${1:-1,32}; C=${2:-224}; S=${3:-20}; W=${4:-3}; R=${REPEATS:-3}; A=${ARCH:-resnet50}
DEV=${DEVICE:-cpu}
if [ "$DEV" = cpu ]; then PRECS=${PRECISIONS:-fp32,int8}; else PRECS=${PRECISIONS:-fp16,fp32}; fi
DATA=${DATA:-../shared/data/imagenette}
RN50=${BUILD_DIR:-build}/rn50
PEER=${PEER:-../shared/peers/torch_reference.py}
PY=${PYTHON:-/usr/bin/python3}
ORT_DIR=${ORT_DIR:-/tmp/ort-peer}
ORT_JS=${ORT_JS:-../shared/peers/ort_infer.js}
THREADS=${THREADS:-$(nproc)}
PEAK_ARGS=()
[ -n "${PEAK_FILE:-}" ] && PEAK_ARGS=(--peak-file "$PEAK_FILE")
# ONNX Runtime runs where it is installed, on the CPU, at the 224 px ort_infer.js feeds.
ORT=0
if [ "$DEV" != cpu ]; then
  echo "onnxruntime: left out (DEVICE=$DEV: the peer is ONNX Runtime's CPU library)"
elif [ "$C" != 224 ]; then
  echo "onnxruntime: left out (CROP $C: $ORT_JS feeds 224 x 224 inputs only)"
elif [ ! -d "$ORT_DIR/node_modules/onnxruntime-node" ] || [ ! -f "$ORT_JS" ]; then
  echo "onnxruntime: left out (not installed: bash ../shared/peers/ort-setup.sh $ORT_DIR)"
else
  ORT=1
fi
out=$(mktemp -d)
trap 'rm -rf "$out"' EXIT
"$RN50" train --data synthetic --synthetic-samples 4 --batch-size 4 --epochs 1 --warmup-epochs 0 \
  --lr 0 --crop-size 64 --arch "$A" --checkpoint-dir "$out/ck" --inference-dir "$out/m" > "$out/train.log" 2>&1
[[ ",$PRECS," == *",int8,"* ]] && "$RN50" export --from-checkpoint "$out/ck/$A" --output "$out/m8" \
  --precision int8 --image-root "$DATA" --calib-images 64 --crop-size "$C" \
  --resize-short $((C * 256 / 224)) > "$out/export.log"
if [ "$ORT" = 1 ]; then
  "$RN50" export --from-checkpoint "$out/ck/$A" --output "$out/mo" --format onnx --crop-size "$C" \
    --resize-short $((C * 256 / 224)) > "$out/export_onnx.log"
fi
# ort_run MODEL BATCH FILE: ONNX Runtime's line ("ort batch B img/s X avg_ms A p50 M p90 N p99
# P") into FILE as the JSON the summary reads; FILE empty (a 'failed' row, the error shown) when
# it did not run.
ort_run() {
  NODE_PATH="$ORT_DIR/node_modules" node "$ORT_JS" "$1" "$2" "$S" "$W" "$THREADS" 2>"$out/ort_err.log" |
    awk '/^ort batch/ {printf "{\"ips\": %s, \"latency_ms_avg\": %s, \"latency_ms_p99\": %s}\n", $5, $7, $13}' > "$3" || true
  [ -s "$3" ] || { echo "onnxruntime failed on $1 (batch $2):"; tail -5 "$out/ort_err.log"; }
}
for b in ${BS//,/ }; do
  for i in $(seq "$R"); do
    for p in ${PRECS//,/ }; do
      m="$out/m"; [ "$p" = int8 ] && m="$out/m8"
      "$RN50" bench infer --model "$m" --device "$DEV" --precision "$p" --batch-sizes "$b" --crop-size "$C" \
        --benchmark-steps "$S" --benchmark-warmup-steps "$W" "${PEAK_ARGS[@]}" \
        --report-file "$out/rn50_${p}_${b}_$i.jsonl" > /dev/null
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
    if [ "$ORT" = 1 ]; then
      for p in ${PRECS//,/ }; do
        case $p in
          fp32) ort_run "$out/mo/model.onnx" "$b" "$out/ort_fp32_${b}_$i.json" ;;
          int8) ort_run "$out/m8/model.onnx" "$b" "$out/ort_int8_${b}_$i.json" ;;
        esac
      done
    fi
  done
done
"$PY" - "$out" "$BS" "$R" "$A" "$C" "$PRECS" "$DEV" "$ORT" <<'PY'
import json, os, statistics, sys
out, bs, r, arch, crop, precs = sys.argv[1], sys.argv[2].split(","), int(sys.argv[3]), sys.argv[4], sys.argv[5], sys.argv[6].split(",")
dev, ort = sys.argv[7], sys.argv[8] == "1"
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
    shares = [x["peak_share"] for x in rows if x.get("peak_share") is not None]
    return ips, p99, (statistics.median(shares) if shares else None)
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
    if ort:
        for p in precs:
            if p in ("fp32", "int8"):
                rows.append((f"onnxruntime {p} ({'QDQ ' if p == 'int8' else ''}onnx)",
                             load(f"ort_{p}", b), p))
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
        if name.startswith("rn50") and v[2] is not None:
            ratio = (ratio + ", " if ratio else "") + f"{100 * v[2]:.1f}% of the {p} peak"
        print(f"{b:>5} {name:<28} {v[0]:>9.2f} {v[1]:>8.1f}   {ratio}")
PY
