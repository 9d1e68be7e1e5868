#!/usr/bin/env python3
"""The accuracy risk of pure fp16 (rn50 train --use-pure-fp16), measured on a real checkpoint.

    bench/pure_fp16_risk.py CHECKPOINT_EPOCH_DIR [LR ...]

Pure fp16 keeps the conv/fc weights in fp16: an SGD step lr * buf smaller than half an fp16 ulp
of its weight rounds away. With the weights and momentum buffers of an rn50 checkpoint (its
model.safetensors and optimizer.safetensors), prints the share of conv/fc weights whose next
update would be lost at each lr (default: 0.064, 0.01, 0.001, 1e-4). Needs numpy only.
"""
import json, struct, sys
import numpy as np
def load(p):
    b = open(p, "rb").read()
    n = struct.unpack("<Q", b[:8])[0]
    h = json.loads(b[8:8 + n]); out = {}
    for k, v in h.items():
        if k == "__metadata__": continue
        a, e = v["data_offsets"]
        dt = {"F32": np.float32, "I64": np.int64, "U8": np.uint8}[v["dtype"]]
        out[k] = np.frombuffer(b[8 + n + a:8 + n + e], dtype=dt).reshape(v["shape"])
    return out
if len(sys.argv) < 2: sys.exit(__doc__)
d = sys.argv[1]
w = load(d + "/model.safetensors"); m = load(d + "/optimizer.safetensors")
keys = [k for k in w if (k.endswith("weight") and w[k].ndim in (2, 4)) or k == "fc.bias"]
W = np.concatenate([w[k].ravel() for k in keys]).astype(np.float64)
B = np.concatenate([m[k].ravel() for k in keys]).astype(np.float64)
W16 = W.astype(np.float16)
ulp = np.abs(np.spacing(np.abs(W16))).astype(np.float64)
lrs = [float(x) for x in sys.argv[2:]] or [0.064, 0.01, 0.001, 0.0001]
for lr in lrs:
    lost = np.abs(lr * B) < ulp / 2
    print(f"lr {lr:g}: {100 * lost.mean():.1f}% of {W.size} conv/fc weight updates below half an fp16 ulp")
