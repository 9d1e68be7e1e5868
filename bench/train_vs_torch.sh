#!/usr/bin/env bash
# Training throughput, rn50 vs the PyTorch peer, in the same run on the same machine.
#   bench/train_vs_torch.sh [BATCH] [CROP] [STEPS] [WARMUP]      (defaults 32 224 10 2)
# Environment: PRECISION fp32 (default) | fp16 | bf16 (rn50 --amp [--amp-dtype bf16]; the peer's
# --precision), DEVICE auto (default) | cpu | cuda, REPEATS (default 3), BUILD_DIR (build).
# Runs `rn50 train --benchmark --data synthetic` and `torch_reference.py --bench train
# --channels-last` alternately REPEATS times and prints the median images/s of each and the
# ratio (fp32 on a GPU means TF32 on both sides: the peer enables it, rn50 allows it by default).
# On a GPU, the memory of each: device total - free at the end of the run (CUDA context, caches
# and workspaces included), and torch's peak allocated tensor memory.
# Needs ../shared/peers beside the repo (or PEER=path).
set -euo pipefail
cd "$(dirname "$0")/.."
B=${1:-32}; C=${2:-224}; S=${3:-10}; W=${4:-2}; R=${REPEATS:-3}
P=${PRECISION:-fp32}; D=${DEVICE:-auto}
RN50=${BUILD_DIR:-build}/rn50
PEER=${PEER:-../shared/peers/torch_reference.py}
PY=${PYTHON:-/usr/bin/python3}
case "$P" in
  fp32) AMP=() ;;
  fp16) AMP=(--amp) ;;
  bf16) AMP=(--amp --amp-dtype bf16) ;;
  *) echo "PRECISION must be fp32, fp16 or bf16, got '$P'" >&2; exit 2 ;;
esac
PEER_DEV=()
[ "$D" != auto ] && PEER_DEV=(--device "$D")
out=$(mktemp -d)
for i in $(seq "$R"); do
  "$RN50" train --benchmark --data synthetic --device "$D" "${AMP[@]}" --batch-size "$B" \
    --crop-size "$C" --benchmark-steps "$S" --benchmark-warmup-steps "$W" \
    --report-file "$out/rn50_$i.jsonl" > "$out/rn50_$i.log" 2>&1 ||
    { echo "rn50 failed (run $i):"; tail -30 "$out/rn50_$i.log"; exit 1; }
  # The peer under a wrapper that records torch's peak allocated GPU memory (0 on CPU).
  PEAK_FILE="$out/torch_peak_$i" "$PY" -c '
import os, runpy, sys, torch
sys.argv = sys.argv[1:]
try:
    runpy.run_path(sys.argv[0], run_name="__main__")
finally:
    used = peak = 0
    if torch.cuda.is_initialized():  # device total - free, as rn50 reports it; and the peak
        free, total = torch.cuda.mem_get_info()
        used, peak = total - free, torch.cuda.max_memory_allocated()
    open(os.environ["PEAK_FILE"], "w").write(f"{used} {peak}")
' "$PEER" --bench train "${PEER_DEV[@]}" --precision "$P" --batch-size "$B" --crop-size "$C" \
    --channels-last --steps "$S" --warmup-steps "$W" > "$out/torch_$i.jsonl" 2> "$out/torch_$i.err" ||
    { echo "torch peer failed (run $i):"; tail -30 "$out/torch_$i.err"; exit 1; }
done
"$PY" - "$out" "$R" "$B" "$C" "$P" <<'PY'
import json, statistics, sys
out, r, b, c, p = sys.argv[1], int(sys.argv[2]), sys.argv[3], sys.argv[4], sys.argv[5]
def bench_line(path):
    for line in open(path):
        d = json.loads(line)
        if d.get("type", "benchmark") == "benchmark":
            return d
    raise SystemExit(f"no benchmark line in {path}")
ours = [bench_line(f"{out}/rn50_{i}.jsonl") for i in range(1, r + 1)]
peer = [bench_line(f"{out}/torch_{i}.jsonl") for i in range(1, r + 1)]
oi, pi = [d["train.ips"] for d in ours], [d["ips"] for d in peer]
mo, mp = statistics.median(oi), statistics.median(pi)
dev = ours[0].get("device", "?")
mem = ours[-1].get("gpu_memory_used_bytes")
try:
    tmem, tpeak = (max(v) for v in zip(*(map(int, open(f"{out}/torch_peak_{i}").read().split())
                                         for i in range(1, r + 1))))
except (OSError, ValueError):
    tmem = tpeak = 0
print(f"train {p} batch {b} crop {c} on {dev}: rn50 {mo:.2f} img/s (runs {', '.join(f'{x:.2f}' for x in oi)}), "
      f"torch channels_last {mp:.2f} img/s (runs {', '.join(f'{x:.2f}' for x in pi)}), ratio {mo / mp:.2f}x"
      + (f"; rn50 GPU memory in use {mem / 2**30:.2f} GiB" if mem else "")
      + (f"; torch {tmem / 2**30:.2f} GiB (peak allocated {tpeak / 2**30:.2f})" if tmem else ""))
PY
