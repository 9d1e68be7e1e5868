#!/usr/bin/env bash
# Load on `rn50 serve` from Debian's hey, on loopback, against the engine's own figures in the
# same run (issue 30's table).
#   bench/serve_load.sh [CLIENTS] [REQUESTS_PER_CLIENT]        (defaults 1,4,16,64 and 6;
#                                                                at least 24 requests a row)
# Environment: ARCH (resnet50), CROP (224), MAX_BATCH (16: --max-batch-size), QUEUE_DELAY_US
# (2000), IMAGE (a JPEG; default the first imagenette val image), KINDS (fp32,jpeg), BUILD_DIR
# (build), PYTHON (/usr/bin/python3).
# Steps: one ResNet-50 model (Kaiming weights, one synthetic step at lr 0, exported at CROP);
# `rn50 bench infer` on it at batch 1, 2, 4, ..., MAX_BATCH (images/s, p50 latency); then
# `rn50 serve` with that model, every batch size warmed up once, and for each kind of body,
#   fp32  POST /v2/models/m/infer, binary FP32 [1,3,CROP,CROP] (Triton's binary extension)
#   jpeg  POST /v2/models/m/infer, binary BYTES [1]: the JPEG, decoded and preprocessed here
# and each number of concurrent clients, `hey -c CLIENTS -n CLIENTS*REQUESTS`. Per row: images/s
# (answered images / wall seconds), latency p50/p90/p99, the average batch the server formed
# (the change of nv_inference_count / nv_inference_exec_count in /metrics), errors by status,
# and the serving efficiency = served images/s / the engine's images/s at the batch size the
# clients can fill (min(clients, MAX_BATCH)).
set -euo pipefail
cd "$(dirname "$0")/.."
CLIENTS=${1:-1,4,16,64}; PER=${2:-6}
A=${ARCH:-resnet50}; C=${CROP:-224}; MB=${MAX_BATCH:-16}; QD=${QUEUE_DELAY_US:-2000}
KINDS=${KINDS:-fp32,jpeg}
RN50=${BUILD_DIR:-build}/rn50
PY=${PYTHON:-/usr/bin/python3}
IMAGE=${IMAGE:-$(find ../shared/data/imagenette/val -name '*.JPEG' | sort | sed -n 1p)}
command -v hey > /dev/null || { echo "serve_load: hey not found (apt-get install hey)" >&2; exit 2; }
out=$(mktemp -d)
pid=""
cleanup() { [ -n "$pid" ] && kill "$pid" 2> /dev/null; wait 2> /dev/null; rm -rf "$out"; }
trap cleanup EXIT

"$RN50" train --data synthetic --synthetic-samples 2 --batch-size 2 --epochs 1 --warmup-epochs 0 \
  --lr 0 --crop-size 64 --arch "$A" --checkpoint-dir "$out/ck" > "$out/train.log" 2>&1
"$RN50" export --from-checkpoint "$out/ck" --output "$out/m" --format rn50 --crop-size "$C" \
  --resize-short $((C * 256 / 224)) > "$out/export.log"
batches=1; b=2; while [ "$b" -le "$MB" ]; do batches="$batches,$b"; b=$((b * 2)); done
echo "serve_load: engine alone (rn50 bench infer --batch-sizes $batches)" >&2
"$RN50" bench infer --model "$out/m" --batch-sizes "$batches" --crop-size "$C" \
  --benchmark-steps 20 --benchmark-warmup-steps 2 --report-file "$out/engine.jsonl" > /dev/null

"$RN50" serve --model "$out/m" --port 0 --max-batch-size "$MB" --max-queue-delay-us "$QD" \
  > "$out/serve.log" 2>&1 &
pid=$!
for _ in $(seq 200); do grep -q listening "$out/serve.log" && break; sleep 0.1; done
port=$(sed -n 's/.*http:\/\/127.0.0.1:\([0-9]*\).*/\1/p' "$out/serve.log" | head -1)
[ -n "$port" ] || { echo "serve_load: the server did not start:"; cat "$out/serve.log"; exit 1; }
url="http://127.0.0.1:$port/v2/models/m/infer"

# The request bodies (JSON header + binary tensor) and their header lengths.
"$PY" - "$out" "$C" "$IMAGE" "$MB" <<'PY'
import json, struct, sys, numpy as np
out, c, image, mb = sys.argv[1], int(sys.argv[2]), sys.argv[3], int(sys.argv[4])
def write(name, datatype, shape, raw):
    h = json.dumps({"inputs": [{"name": "input", "datatype": datatype, "shape": shape,
                                "parameters": {"binary_data_size": len(raw)}}],
                    "outputs": [{"name": "logits", "parameters": {"binary_data": True}}]}).encode()
    open(f"{out}/{name}.body", "wb").write(h + raw)
    open(f"{out}/{name}.hlen", "w").write(str(len(h)))
rng = np.random.default_rng(0)
for n in range(1, mb + 1):  # warm-up bodies: one per batch size
    write(f"warm{n}", "FP32", [n, 3, c, c], rng.standard_normal((n, 3, c, c), dtype=np.float32).tobytes())
write("fp32", "FP32", [1, 3, c, c], rng.standard_normal((1, 3, c, c), dtype=np.float32).tobytes())
jpeg = open(image, "rb").read()
write("jpeg", "BYTES", [1], struct.pack("<I", len(jpeg)) + jpeg)
PY
post() {  # body-name
  curl -s -o /dev/null -w '%{http_code}' -X POST --data-binary "@$out/$1.body" \
    -H "Content-Type: application/octet-stream" \
    -H "Inference-Header-Content-Length: $(cat "$out/$1.hlen")" "$url"
}
echo "serve_load: warming every batch size up to $MB" >&2
for n in $(seq "$MB"); do [ "$(post "warm$n")" = 200 ] || { echo "warm-up $n failed"; exit 1; }; done
[ "$(post jpeg)" = 200 ] || { echo "serve_load: a JPEG request failed"; exit 1; }

metric() { curl -s "http://127.0.0.1:$port/metrics" | awk -v m="$1" '$1 ~ "^"m"[{]" {print $2}'; }
for kind in ${KINDS//,/ }; do
  i=0
  for c in ${CLIENTS//,/ }; do
    i=$((i + 1))
    echo "serve_load: $kind, $c client(s)" >&2
    n0=$(metric nv_inference_count); e0=$(metric nv_inference_exec_count)
    n=$((c * PER)); [ "$n" -lt 24 ] && n=24
    hey -n "$n" -c "$c" -t 0 -m POST -T application/octet-stream \
      -H "Inference-Header-Content-Length: $(cat "$out/$kind.hlen")" -D "$out/$kind.body" \
      -o csv "$url" > "$out/hey_${kind}_$i.csv"
    n1=$(metric nv_inference_count); e1=$(metric nv_inference_exec_count)
    echo "$((n1 - n0)) $((e1 - e0))" > "$out/batches_${kind}_$i"
  done
done

"$PY" - "$out" "$CLIENTS" "$KINDS" "$MB" "$A" "$C" <<'PY'
import csv, json, statistics, sys
out, clients, kinds, mb, arch, crop = sys.argv[1], sys.argv[2].split(","), sys.argv[3].split(","), int(sys.argv[4]), sys.argv[5], sys.argv[6]
engine = {}
for line in open(f"{out}/engine.jsonl"):
    d = json.loads(line)
    if d.get("type") == "infer_benchmark":
        engine[d["batch_size"]] = d
def pct(v, q):
    v = sorted(v); k = (len(v) - 1) * q / 100; f = int(k)
    return v[f] + (v[min(f + 1, len(v) - 1)] - v[f]) * (k - f)
print(f"\n{arch} {crop} px, rn50 serve --max-batch-size {mb}; engine alone (rn50 bench infer): " +
      ", ".join(f"batch {b} {d['infer.ips']:.1f} img/s p50 {d['infer.latency_p50_ms']:.1f} ms"
                for b, d in sorted(engine.items())))
print("\n| body | clients | requests | img/s | p50 ms | p90 ms | p99 ms | avg batch | errors | engine img/s (batch) | efficiency |")
print("|---|---|---|---|---|---|---|---|---|---|---|")
for kind in kinds:
    for i, c in enumerate(clients, 1):
        rows = list(csv.DictReader(open(f"{out}/hey_{kind}_{i}.csv")))
        ok = [r for r in rows if r["status-code"] == "200"]
        errors = {}
        for r in rows:
            if r["status-code"] != "200":
                errors[r["status-code"]] = errors.get(r["status-code"], 0) + 1
        lat = [1e3 * float(r["response-time"]) for r in ok]
        start = min(float(r["offset"]) for r in rows)
        end = max(float(r["offset"]) + float(r["response-time"]) for r in rows)
        ips = len(ok) / (end - start)
        n, e = map(int, open(f"{out}/batches_{kind}_{i}").read().split())
        b = min(int(c), mb)
        ref = max(k for k in engine if k <= b)
        eff = ips / engine[ref]["infer.ips"]
        err = ", ".join(f"{k}: {v}" for k, v in sorted(errors.items())) or "0"
        print(f"| {kind} | {c} | {len(rows)} | {ips:.1f} | {pct(lat, 50):.1f} | {pct(lat, 90):.1f} | "
              f"{pct(lat, 99):.1f} | {n / max(e, 1):.2f} | {err} | {engine[ref]['infer.ips']:.1f} ({ref}) | {eff:.2f} |")
b1 = engine[1]["infer.latency_p50_ms"]
print(f"\nengine batch-1 p50 {b1:.1f} ms (goal: 1-client fp32 p50 within 2 ms of it; efficiency >= 0.9 at 16+ clients for fp32)")
PY
