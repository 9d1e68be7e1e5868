#!/usr/bin/env bash
# ResNet-50's gradient allreduce between two hosts at a given link speed: a 2-host namespace
# cluster (scripts/netns-cluster.sh), each host's veth shaped with tc tbf to RATE in both
# directions (this kernel has tbf and htb but no netem, so no added delay), and
# `rn50 train --benchmark` across the hosts (mpirun, TCP, one rank per host), which times the
# step's allreduce of the whole f32 gradient slab on its own and the part of it the measured
# steps waited for after backward (the rest hidden under backward by --bucket-size-mb buckets).
#   bench/netns_allreduce.sh OUT_DIR [RATES] [BUCKET_MBS]
# RATES: tc rates (default "1gbit 10gbit 25gbit off"; off = the veths unshaped). BUCKET_MBS:
# --bucket-size-mb values (default "1 25 100"). REPEATS runs of each (default 3). Writes
# OUT_DIR/<rate>_<mb>_r<k>.log per run and OUT_DIR/table.md (medians). Needs root. Environment: BUILD_DIR (build), TRAIN_FLAGS (the benchmark's
# model and batch; default ResNet-50, batch 8 per rank at 128 px, 3 measured steps). Each rank
# runs one OpenMP thread (the two hosts share this machine's cores).
set -euo pipefail
cd "$(dirname "$0")/.."
[ $# -ge 1 ] || { sed -n '2,13p' "$0"; exit 2; }
OUT=$1
RATES=${2:-1gbit 10gbit 25gbit off}
BUCKETS=${3:-1 25 100}
RN50=$(cd "${BUILD_DIR:-build}" && pwd)/rn50
[ -x "$RN50" ] || { echo "netns_allreduce: $RN50 not built" >&2; exit 2; }
TRAIN_FLAGS=${TRAIN_FLAGS:---arch resnet50 --batch-size 8 --crop-size 128 --benchmark-steps 3 --benchmark-warmup-steps 1}
mkdir -p "$OUT"
OUT=$(cd "$OUT" && pwd)
export RN50_NETNS_TAG=${RN50_NETNS_TAG:-ar}
C=$OUT/cluster
bash scripts/netns-cluster.sh up 2 "$C" > /dev/null
trap 'bash scripts/netns-cluster.sh down > /dev/null' EXIT
REPEATS=${REPEATS:-3}
{
  echo "| link (tc tbf, both directions) | --bucket-size-mb | buckets | allreduce s/step alone | exposed after backward s/step | hidden under backward |"
  echo "|---|---|---|---|---|---|"
} > "$OUT/table.md"
# One figure per run from its log line; the table gives the median of REPEATS runs of each
# (rate, bucket) and the runs' spread (min-max) of the allreduce alone.
field() { sed -E "$2" <<< "$1"; }
for rate in $RATES; do
  bash scripts/netns-cluster.sh rate 1 "$rate"
  bash scripts/netns-cluster.sh rate 2 "$rate"
  for mb in $BUCKETS; do
    fulls=() exps=() n=0
    for ((r = 1; r <= REPEATS; r++)); do
      log=$OUT/${rate}_${mb}_r$r.log
      # shellcheck disable=SC2086
      "$C/on" 1 mpirun --allow-run-as-root --hostfile "$C/hostfile" --mca plm_rsh_agent "$C/rsh" \
        --mca btl tcp,self --mca btl_tcp_if_include 198.18.0.0/15 \
        --mca oob_tcp_if_include 198.18.0.0/15 -x OMP_NUM_THREADS=1 -np 2 --bind-to none \
        "$RN50" train --benchmark --data synthetic --device cpu --dist-backend mpi \
        --bucket-size-mb "$mb" $TRAIN_FLAGS > "$log" 2>&1 ||
        { echo "netns_allreduce: $log failed" >&2; tail -5 "$log" >&2; exit 1; }
      line=$(grep -m1 'benchmark: gradient allreduce' "$log")
      fulls+=("$(field "$line" 's/.*allreduce ([0-9.]+) s per step.*/\1/')")
      exps+=("$(field "$line" 's/.*, ([0-9.]+) s of it exposed.*/\1/')")
      n=$(field "$line" 's/.*\(([0-9]+) buckets.*/\1/')
    done
    python3 - "$rate" "$mb" "$n" "${fulls[*]}" "${exps[*]}" << 'PY' | tee -a "$OUT/table.md"
import statistics, sys
rate, mb, n, fulls, exps = sys.argv[1:]
f = [float(x) for x in fulls.split()]
e = [float(x) for x in exps.split()]
fm, em = statistics.median(f), statistics.median(e)
hidden = max(0.0, min(1.0, 1 - em / fm)) if fm > 0 else 0.0
print(f"| {rate} | {mb} | {n} | {fm:.3f} ({min(f):.3f}-{max(f):.3f}) | {em:.3f} | {hidden:.0%} |")
PY
  done
done
