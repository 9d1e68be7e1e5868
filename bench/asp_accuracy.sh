#!/usr/bin/env bash
# Issue 16's ASP table: val top-1 on IMAGE_ROOT of a float model rn50 trained itself
# (bench/train_accuracy_model.sh), of the same weights right after 2:4 pruning (no training),
# and after a sparse fine-tune holding the masks.
#
#   bash bench/asp_accuracy.sh [MODEL_FILE] [IMAGE_ROOT] [OUT] [EPOCHS] [LR] [MASK_ALGO]
#
# The fine-tune: rn50 train --asp --prune-model --mask-algo MASK_ALGO --from-pretrained-params
# MODEL_FILE, EPOCHS epochs, cosine from LR (per 256 images), no warmup. "Right after pruning"
# applies the masks that run computed (its optimizer file's asp_mask.* entries, computed from
# MODEL_FILE before any step) to MODEL_FILE and evaluates that with rn50 eval.
set -euo pipefail
cd "$(dirname "$0")/.."
W=${1:-runs/accuracy-model/checkpoints/resnet18/13/model.safetensors}
ROOT=${2:-../shared/data/imagenette}; OUT=${3:-runs/asp}; EPOCHS=${4:-1}; LR=${5:-0.016}
ALGO=${6:-mask_2d_best}
RN50=${BUILD_DIR:-build}/rn50
mkdir -p "$OUT"
sizes=(--arch resnet18 --num-of-class 10 --batch-size 64 --crop-size 128 --resize-short 146)
[ -f "$OUT/report.jsonl" ] || "$RN50" train --image-root "$ROOT" "${sizes[@]}" --epochs "$EPOCHS" \
  --warmup-epochs 0 --lr "$LR" --seed 1 --asp --prune-model --mask-algo "$ALGO" \
  --from-pretrained-params "$W" --checkpoint-dir "$OUT/checkpoints" \
  --report-file "$OUT/report.jsonl" | tee "$OUT/train.log"
last="$OUT/checkpoints/resnet18/$((EPOCHS - 1))"
/usr/bin/python3 - "$W" "$last/optimizer.safetensors" "$OUT/pruned.safetensors" <<'PY'
import json, struct, sys
import numpy as np
def load(path):
    with open(path, "rb") as f:
        n = struct.unpack("<Q", f.read(8))[0]
        h = json.loads(f.read(n)); data = f.read()
    dt = {"F32": np.float32, "I64": np.int64, "U8": np.uint8}
    return {k: np.frombuffer(data[v["data_offsets"][0]:v["data_offsets"][1]],
                             dtype=dt[v["dtype"]]).reshape(v["shape"])
            for k, v in h.items() if k != "__metadata__"}
w, masks = load(sys.argv[1]), load(sys.argv[2])
out, zeros = [], 0
for k, v in w.items():
    m = masks.get("asp_mask." + k)
    if m is not None:
        v = v * (m != 0)
        zeros += int((v == 0).sum())
    out.append((k, np.ascontiguousarray(v)))
header, blobs, off = {}, [], 0
for k, v in out:
    b = v.tobytes()
    header[k] = {"dtype": {np.dtype("float32"): "F32", np.dtype("int64"): "I64"}[v.dtype],
                 "shape": list(v.shape), "data_offsets": [off, off + len(b)]}
    blobs.append(b); off += len(b)
h = json.dumps(header).encode(); h += b" " * ((8 - len(h) % 8) % 8)
with open(sys.argv[3], "wb") as f:
    f.write(struct.pack("<Q", len(h))); f.write(h); [f.write(b) for b in blobs]
print(f"pruned: {sum(1 for k in w if 'asp_mask.' + k in masks)} convs masked, {zeros} zero weights")
PY
ev() {  # weights file -> val top-1
  "$RN50" eval --image-root "$ROOT" "${sizes[@]}" --from-pretrained-params "$1" \
    --report-file "$OUT/eval-$2.jsonl" > "$OUT/eval-$2.log"
  /usr/bin/python3 -c "import json,sys
e=[json.loads(l) for l in open(sys.argv[1])]
print([x for x in e if 'val.top1' in x][-1]['val.top1'])" "$OUT/eval-$2.jsonl"
}
dense=$(ev "$W" dense); pruned=$(ev "$OUT/pruned.safetensors" pruned)
tuned=$(/usr/bin/python3 -c "import json,sys
e=[json.loads(l) for l in open(sys.argv[1])]
print([x for x in e if x.get('type')=='epoch'][-1]['val.top1'])" "$OUT/report.jsonl")
printf 'dense %.2f%%  right after pruning (%s) %.2f%%  after %s sparse fine-tune epoch(s) %.2f%%\n' \
  "$dense" "$ALGO" "$pruned" "$EPOCHS" "$tuned"
