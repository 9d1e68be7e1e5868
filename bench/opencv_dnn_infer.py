#!/usr/bin/env python3
"""OpenCV DNN (Debian python3-opencv) timing an ONNX model, the peer of `rn50 bench infer` in
bench/infer_vs_peers.sh. Prints one JSON line with the same keys as torch_reference.py
--bench infer: ips, latency_ms_avg/p50/p90/p95/p99 (numpy.percentile, linear).

  opencv_dnn_infer.py MODEL.onnx BATCH CROP STEPS WARMUP
"""
import json
import sys
import time

import cv2
import numpy as np


def main():
    model, b, crop, steps, warm = sys.argv[1], *map(int, sys.argv[2:6])
    net = cv2.dnn.readNetFromONNX(model)
    net.setPreferableBackend(cv2.dnn.DNN_BACKEND_OPENCV)
    net.setPreferableTarget(cv2.dnn.DNN_TARGET_CPU)
    x = np.random.default_rng(0).standard_normal((b, 3, crop, crop)).astype(np.float32)
    for _ in range(warm):
        net.setInput(x)
        net.forward()
    ms = []
    for _ in range(steps):
        t0 = time.perf_counter()
        net.setInput(x)
        net.forward()
        ms.append(1e3 * (time.perf_counter() - t0))
    total = sum(ms) / 1e3
    r = {"peer": f"opencv-dnn-{cv2.__version__}", "batch_size": b, "crop_size": crop,
         "threads": cv2.getNumThreads(), "ips": b * steps / total,
         "latency_ms_avg": float(np.mean(ms))}
    for q in (50, 90, 95, 99):
        r[f"latency_ms_p{q}"] = float(np.percentile(ms, q))
    print(json.dumps(r))


if __name__ == "__main__":
    main()
