#!/usr/bin/env bash
# Scaling study, DLPerf's method: the same `rn50 bench train` sweep under 1, 2, ... processes
# (mpirun -np N; one GPU per process on a GPU node, a share of the cores on a CPU one), one
# sweep JSON per process count, then `rn50 report` over all of them: throughput, speedup over
# one device, scaling efficiency, and the throughput-vs-devices plot.
#   bench/scaling.sh OUT_DIR [NPROCS] [-- rn50 bench train flags...]
# NPROCS: space- or comma-separated process counts (default "1 2"); 1 is required (the baseline
# of the speedup). Example (the table of docs/benchmarking.md):
#   bench/scaling.sh runs/scaling "1 2" -- --arch resnet50 --batch-sizes 16 --precisions fp32 \
#     --repeats 3 --data synthetic
# Environment: BUILD_DIR (build), MPIRUN (mpirun), MPIRUN_FLAGS (default: --oversubscribe
# --bind-to none, plus --allow-run-as-root as root; rn50 binds each local rank to its own
# cores itself). Writes OUT_DIR/sweep_np<N>.json, OUT_DIR/report.md and OUT_DIR/plots/.
set -euo pipefail
cd "$(dirname "$0")/.."
if [ $# -lt 1 ] || [ "$1" = -h ] || [ "$1" = --help ]; then
  sed -n '2,15p' "$0"; exit 2
fi
OUT=$1; shift
NPROCS="1 2"
if [ $# -gt 0 ] && [ "$1" != -- ]; then NPROCS=$1; shift; fi
[ $# -gt 0 ] && [ "$1" = -- ] && shift
NPROCS=${NPROCS//,/ }
case " $NPROCS " in *" 1 "*) ;; *) echo "scaling.sh: NPROCS '$NPROCS' lacks 1 (the speedup baseline)" >&2; exit 2 ;; esac
RN50=${BUILD_DIR:-build}/rn50
[ -x "$RN50" ] || { echo "scaling.sh: $RN50 not built (bash scripts/build.sh)" >&2; exit 2; }
MPIRUN=${MPIRUN:-mpirun}
if [ -z "${MPIRUN_FLAGS+x}" ]; then
  MPIRUN_FLAGS="--oversubscribe --bind-to none"
  [ "$(id -u)" -eq 0 ] && MPIRUN_FLAGS="$MPIRUN_FLAGS --allow-run-as-root"
fi
mkdir -p "$OUT"
files=()
for n in $NPROCS; do
  f="$OUT/sweep_np$n.json"
  echo "scaling.sh: $n process(es) -> $f"
  # shellcheck disable=SC2086
  "$MPIRUN" $MPIRUN_FLAGS -np "$n" "$RN50" bench train "$@" --report-file "$f"
  files+=("$f")
done
"$RN50" report "${files[@]}" --plot "$OUT/plots" --output "$OUT/report.md"
cat "$OUT/report.md"
