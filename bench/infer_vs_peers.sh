#!/usr/bin/env bash
# Inference throughput and latency, rn50's engine vs PyTorch, in the same run on the same machine.
#   bench/infer_vs_peers.sh [BATCH_SIZES] [CROP] [STEPS] [WARMUP]     (defaults 1,32 224 20 3)
# Environment: PRECISION fp32 (default) | bf16 (both sides), REPEATS (default 3), ARCH (resnet50),
# BUILD_DIR (build), PEER, PYTHON.
# For each batch size, REPEATS times in turn: `rn50 bench infer` (CPU engine), the peer's
# eager model (channels_last) and its frozen TorchScript (--jit: trace, freeze,
# optimize_for_inference); prints the median images/s and p99 latency of each and rn50's ratio
# over each peer. OpenCV DNN on the exported ONNX joins once `rn50 export` exists.
# Needs ../shared/peers beside the repo (or PEER=path) and torch in PYTHON (/usr/bin/python3).
set -euo pipefail
cd "$(dirname "$0")/.."
BS=${1:-1,32}; C=${2:-224}; S=${3:-20}; W=${4:-3}; R=${REPEATS:-3}; A=${ARCH:-resnet50}; P=${PRECISION:-fp32}
RN50=${BUILD_DIR:-build}/rn50
PEER=${PEER:-../shared/peers/torch_reference.py}
PY=${PYTHON:-/usr/bin/python3}
out=$(mktemp -d)
for b in ${BS//,/ }; do
  for i in $(seq "$R"); do
    "$RN50" bench infer --precision "$P" --arch "$A" --batch-sizes "$b" --crop-size "$C" --benchmark-steps "$S" \
      --benchmark-warmup-steps "$W" --report-file "$out/rn50_${b}_$i.jsonl" > /dev/null
    "$PY" "$PEER" --bench infer --device cpu --precision "$P" --arch "$A" --batch-size "$b" \
      --crop-size "$C" --channels-last --steps "$S" --warmup-steps "$W" 2>/dev/null | tail -1 > "$out/eager_${b}_$i.json"
    "$PY" "$PEER" --bench infer --device cpu --precision "$P" --arch "$A" --batch-size "$b" \
      --crop-size "$C" --channels-last --jit --steps "$S" --warmup-steps "$W" 2>/dev/null | tail -1 > "$out/jit_${b}_$i.json"
  done
done
"$PY" - "$out" "$BS" "$R" "$A" "$C" "$P" <<'PY'
import json, statistics, sys
out, bs, r, arch, crop, prec = sys.argv[1], sys.argv[2].split(","), int(sys.argv[3]), sys.argv[4], sys.argv[5], sys.argv[6]
def med(xs): return statistics.median(xs)
print(f"{arch} {crop}px {prec} CPU, median of {r} runs each, same run")
print(f"{'batch':>5} {'rn50 img/s':>11} {'p99 ms':>8} {'torch eager':>12} {'p99 ms':>8} {'torch jit':>10} {'p99 ms':>8} {'vs eager':>9} {'vs jit':>7}")
for b in bs:
    rn = [json.loads(open(f"{out}/rn50_{b}_{i}.jsonl").read().splitlines()[-1]) for i in range(1, r + 1)]
    ea = [json.loads(open(f"{out}/eager_{b}_{i}.json").read()) for i in range(1, r + 1)]
    jt = [json.loads(open(f"{out}/jit_{b}_{i}.json").read()) for i in range(1, r + 1)]
    ri, rp = med([x["infer.ips"] for x in rn]), med([x["infer.latency_p99_ms"] for x in rn])
    ei, ep = med([x["ips"] for x in ea]), med([x["latency_ms_p99"] for x in ea])
    ji, jp = med([x["ips"] for x in jt]), med([x["latency_ms_p99"] for x in jt])
    print(f"{b:>5} {ri:>11.2f} {rp:>8.1f} {ei:>12.2f} {ep:>8.1f} {ji:>10.2f} {jp:>8.1f} {ri/ei:>8.2f}x {ri/ji:>6.2f}x")
print("OpenCV DNN: not run (needs the ONNX export, not built yet)")
PY
rm -rf "$out"
