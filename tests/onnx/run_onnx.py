#!/usr/bin/env python3
"""Runs an rn50-exported ONNX model through the tools a user has (Debian python3-onnx and
python3-opencv) for test_infer_onnx and bench/infer_accuracy.py.

  run_onnx.py MODEL.onnx INPUT.bin N H W OUTPUT.bin

INPUT.bin: float32 NCHW (N, 3, H, W), little-endian, normalised. Checks the model with
onnx.checker (full_check: shape inference too), checks its interface (opset 13, input "input"
with a symbolic batch axis, output "logits", the metadata keys), then runs it with OpenCV DNN
(cv2.dnn.readNetFromONNX) once on all N images and once per image (the dynamic batch axis) and
writes the batched logits, float32 (N, classes), to OUTPUT.bin. Prints one line of facts.
Exits non-zero with a message on any failure.
"""
import sys

import cv2
import numpy as np
import onnx


def main():
    model_path, in_path, n, h, w, out_path = sys.argv[1:7]
    n, h, w = int(n), int(h), int(w)
    model = onnx.load(model_path)
    onnx.checker.check_model(model, full_check=True)
    opsets = {o.domain: o.version for o in model.opset_import}
    assert opsets.get("", 0) == 13, f"opset {opsets}"
    assert [i.name for i in model.graph.input] == ["input"], model.graph.input
    assert [o.name for o in model.graph.output] == ["logits"], model.graph.output
    dims = model.graph.input[0].type.tensor_type.shape.dim
    assert dims[0].dim_param == "batch" and dims[1].dim_value == 3, dims
    meta = {p.key: p.value for p in model.metadata_props}
    for key in ("arch", "num_classes", "classes", "mean", "std", "resize_short", "crop_size"):
        assert key in meta, f"metadata_props has no '{key}'"
    ops = sorted({node.op_type for node in model.graph.node})

    x = np.fromfile(in_path, dtype=np.float32).reshape(n, 3, h, w)
    net = cv2.dnn.readNetFromONNX(model_path)
    net.setPreferableBackend(cv2.dnn.DNN_BACKEND_OPENCV)
    net.setPreferableTarget(cv2.dnn.DNN_TARGET_CPU)
    net.setInput(x)
    y = net.forward().astype(np.float32)
    classes = int(meta["num_classes"])
    assert y.shape == (n, classes), y.shape
    # The dynamic batch axis: one image at a time gives the same logits.
    for i in range(n):
        net.setInput(x[i:i + 1])
        yi = net.forward()
        err = float(np.max(np.abs(yi[0] - y[i])))
        assert err <= 1e-4 * max(1.0, float(np.max(np.abs(y[i])))), f"batch 1 vs {n}: {err}"
    y.tofile(out_path)
    print(f"onnx {onnx.__version__} checker ok, opencv {cv2.__version__}: {len(model.graph.node)} "
          f"nodes ({', '.join(ops)}), logits {y.shape}")


if __name__ == "__main__":
    main()
