#!/usr/bin/env bash
# Does rn50 train like PyTorch? The same recipe, data and flags for several seeds per system:
# rn50 and ../shared/peers/torch_reference.py (torchvision, channels_last) train in turn, then
# per-epoch val top-1 is printed as mean and standard deviation per system, with the difference
# of the means and its standard error, sqrt(sd_rn50^2 / n + sd_torch^2 / n). Verdict: the final
# epoch's difference must be within two standard errors.
#   bench/convergence.sh OUT_DIR [IMAGE_ROOT]        (default ../shared/data/imagenette)
# Environment: SEEDS ("0 1 2"), EPOCHS (5), ARCH (resnet18), CROP (128), BATCH (64),
# WARMUP (1), WORKERS (2), BUILD_DIR (build), PEER, PYTHON (/usr/bin/python3), PRECISION (fp32;
# bf16: rn50 --amp --amp-dtype bf16 against torch's bf16 autocast, --precision bf16).
# rn50 runs with --exact-decode, so that both systems see torchvision's pixels (the crops and
# their order still come from each system's own random generator). About an hour on a 2-core
# machine with the defaults; logs and per-epoch JSON go to OUT_DIR.
# PINNED=name (e.g. onednn) adds a third system: rn50 with every convolution pinned to that
# implementation (RN50_CONV_IMPL, src/backend/cpu/conv_registry.h), so that the registry's
# default choice is checked for convergence against one implementation too (a second verdict:
# default vs pinned within two standard errors).
set -euo pipefail
cd "$(dirname "$0")/.."
[ $# -ge 1 ] || { sed -n '2,12p' "$0"; exit 2; }
OUT=$1; DATA=${2:-../shared/data/imagenette}
PINNED=${PINNED:-}
SEEDS=${SEEDS:-0 1 2}; EPOCHS=${EPOCHS:-5}; ARCH=${ARCH:-resnet18}; CROP=${CROP:-128}
BATCH=${BATCH:-64}; WARMUP=${WARMUP:-1}; WORKERS=${WORKERS:-2}
RESIZE=$(( CROP * 256 / 224 )); PREC=${PRECISION:-fp32}
case "$PREC" in
  fp32) RN50_PREC=() ;;
  bf16) RN50_PREC=(--amp --amp-dtype bf16) ;;
  *) echo "convergence.sh: PRECISION=$PREC: use fp32 or bf16" >&2; exit 2 ;;
esac
RN50=${BUILD_DIR:-build}/rn50
PEER=${PEER:-../shared/peers/torch_reference.py}
PY=${PYTHON:-/usr/bin/python3}
[ -x "$RN50" ] || { echo "convergence.sh: $RN50 not built (bash scripts/build.sh)" >&2; exit 2; }
[ -f "$PEER" ] || { echo "convergence.sh: peer $PEER not found" >&2; exit 2; }
mkdir -p "$OUT"
# rn50 on seed $1, its report and log as $OUT/$2_seed$1.{jsonl,log}, in the caller's environment.
rn50_run() {
  "$RN50" train --image-root "$DATA" --arch "$ARCH" --epochs "$EPOCHS" --warmup-epochs "$WARMUP" \
    --batch-size "$BATCH" --crop-size "$CROP" --resize-short "$RESIZE" --workers "$WORKERS" \
    --seed "$1" --exact-decode --save-interval 0 "${RN50_PREC[@]}" \
    --report-file "$OUT/$2_seed$1.jsonl" > "$OUT/$2_seed$1.log" 2>&1
}
for s in $SEEDS; do
  echo "convergence.sh: seed $s: rn50"
  rn50_run "$s" rn50
  if [ -n "$PINNED" ]; then
    echo "convergence.sh: seed $s: rn50 with RN50_CONV_IMPL=$PINNED"
    RN50_CONV_IMPL="$PINNED" rn50_run "$s" rn50pin
  fi
  echo "convergence.sh: seed $s: torch"
  "$PY" "$PEER" --data "$DATA" --arch "$ARCH" --epochs "$EPOCHS" --warmup-epochs "$WARMUP" \
    --batch-size "$BATCH" --crop-size "$CROP" --resize-short "$RESIZE" --workers "$WORKERS" \
    --seed "$s" --channels-last --precision "$PREC" > "$OUT/torch_seed$s.jsonl" \
    2> "$OUT/torch_seed$s.log"
done
"$PY" - "$OUT" "$PREC" "${PINNED:--}" $SEEDS <<'PYEOF'
import json, math, statistics, sys
out, prec, pinned, seeds = sys.argv[1], sys.argv[2], sys.argv[3], sys.argv[4:]
def rn50(s, stem="rn50"):
    rows = [json.loads(l) for l in open(f"{out}/{stem}_seed{s}.jsonl")]
    return {r["epoch"]: r["val.top1"] for r in rows if r.get("type") == "epoch" and "val.top1" in r}
def torch(s):
    rows = [json.loads(l) for l in open(f"{out}/torch_seed{s}.jsonl") if l.startswith("{")]
    return {r["epoch"]: r["val_top1"] for r in rows if "val_top1" in r}
n = len(seeds)
sd = lambda v: statistics.stdev(v) if len(v) > 1 else float("nan")
def compare(a, b, epochs, title, header, verdict):
    """Prints the per-epoch table of runs `a` against runs `b` and the final epoch's verdict;
    returns whether their difference is within two standard errors."""
    print(title)
    print(header)
    print("|---|---|---|---|---|---|---|")
    for e in epochs:
        va, vb = [x[e] for x in a], [x[e] for x in b]
        d = statistics.mean(va) - statistics.mean(vb)
        se = math.sqrt(sd(va) ** 2 / n + sd(vb) ** 2 / n)
        print(f"| {e} | {statistics.mean(va):.2f} | {sd(va):.2f} | {statistics.mean(vb):.2f} | "
              f"{sd(vb):.2f} | {d:+.2f} | {se:.2f} |")
    last = epochs[-1]
    va, vb = [x[last] for x in a], [x[last] for x in b]
    d = statistics.mean(va) - statistics.mean(vb)
    se = math.sqrt(sd(va) ** 2 / n + sd(vb) ** 2 / n)
    ok = abs(d) <= 2 * se
    print(f"{verdict}: final epoch {last}: difference {d:+.2f} points, 2 x std error "
          f"{2 * se:.2f}: {'WITHIN' if ok else 'OUTSIDE'} two standard errors")
    return ok
a, b = [rn50(s) for s in seeds], [torch(s) for s in seeds]
epochs = sorted(set.intersection(*(set(x) for x in a + b)))
if not epochs:
    sys.exit("convergence.sh: no epoch has val top-1 from every run")
ok = compare(a, b, epochs, f"{prec}: val top-1 (%) over {n} seeds ({' '.join(seeds)})",
             "| epoch | rn50 mean | rn50 sd | torch mean | torch sd | diff (rn50 - torch) | "
             "std error |", "verdict")
if pinned != "-":
    c = [rn50(s, "rn50pin") for s in seeds]
    common = sorted(set(epochs).intersection(*(set(x) for x in c)))
    if not common:
        sys.exit("convergence.sh: no epoch has val top-1 from every pinned run")
    ok = compare(a, c, common, f"rn50 default vs RN50_CONV_IMPL={pinned}: val top-1 (%)",
                 f"| epoch | default mean | default sd | {pinned} mean | {pinned} sd | diff | "
                 "std error |", f"verdict (default vs {pinned})") and ok
sys.exit(0 if ok else 1)
PYEOF
