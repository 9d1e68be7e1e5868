#!/usr/bin/env python3
"""Checks and runs an rn50 int8 (QDQ) ONNX model with numpy alone, for test_infer_qat: this
onnx (Debian python3-onnx 1.12) has no onnx.reference evaluator, so the few ops rn50 writes are
evaluated here from the ONNX operator specification (opset 13).

  run_qdq.py MODEL.onnx INPUT.bin N H W OUTPUT.bin

INPUT.bin: float32 NCHW (N, 3, H, W), little-endian, normalised. Checks the model with
onnx.checker (full_check: shape inference too) and its form: opset 13, precision "int8" in the
metadata, every QuantizeLinear / DequantizeLinear with a scalar float scale and an int8 zero
point 0 (activations) or a per-output-channel scale on axis 0 with int8 zero points 0
(weights: int8 initializers), every Conv but the stem reading its input and weight from a
DequantizeLinear. Runs the graph on the input and writes the logits, float32 (N, classes), to
OUTPUT.bin. Prints one line of facts: "qdq ok: Q=<n> DQ=<n> int8_convs=<n> float_convs=<n>".
Exits non-zero with a message on any failure.
"""
import sys

import numpy as np
import onnx
from onnx import numpy_helper


def attrs(node):
    return {a.name: onnx.helper.get_attribute_value(a) for a in node.attribute}


def quantize_linear(x, scale, zero):
    # y = saturate(round(x / y_scale) + y_zero_point), round half to even (opset 13).
    assert zero.dtype == np.int8, zero.dtype
    q = np.rint(x / scale) + zero.astype(np.float32)
    return np.clip(q, -128, 127).astype(np.int8)


def dequantize_linear(x, scale, zero, axis):
    if scale.ndim == 1:  # per axis
        shape = [1] * x.ndim
        shape[axis] = -1
        scale, zero = scale.reshape(shape), zero.reshape(shape)
    return ((x.astype(np.int32) - zero.astype(np.int32)).astype(np.float32) * scale).astype(
        np.float32)


def conv(x, w, b, strides, pads):
    n, c, h, wd = x.shape
    k, _, r, s = w.shape
    x = np.pad(x, ((0, 0), (0, 0), (pads[0], pads[2]), (pads[1], pads[3])))
    oh = (x.shape[2] - r) // strides[0] + 1
    ow = (x.shape[3] - s) // strides[1] + 1
    cols = np.empty((n, c, r, s, oh, ow), np.float32)
    for i in range(r):
        for j in range(s):
            cols[:, :, i, j] = x[:, :, i:i + strides[0] * oh:strides[0],
                                 j:j + strides[1] * ow:strides[1]]
    y = np.einsum("ncrsij,kcrs->nkij", cols.astype(np.float64), w.astype(np.float64))
    return (y + b.reshape(1, -1, 1, 1)).astype(np.float32)


def maxpool(x, kernel, strides, pads):
    x = np.pad(x, ((0, 0), (0, 0), (pads[0], pads[2]), (pads[1], pads[3])),
               constant_values=-np.inf)
    oh = (x.shape[2] - kernel[0]) // strides[0] + 1
    ow = (x.shape[3] - kernel[1]) // strides[1] + 1
    y = np.full(x.shape[:2] + (oh, ow), -np.inf, np.float32)
    for i in range(kernel[0]):
        for j in range(kernel[1]):
            y = np.maximum(y, x[:, :, i:i + strides[0] * oh:strides[0],
                                j:j + strides[1] * ow:strides[1]])
    return y


def main():
    model_path, in_path, n, h, w, out_path = sys.argv[1:7]
    n, h, w = int(n), int(h), int(w)
    model = onnx.load(model_path)
    onnx.checker.check_model(model, full_check=True)
    opsets = {o.domain: o.version for o in model.opset_import}
    assert opsets.get("", 0) == 13, f"opset {opsets}"
    meta = {p.key: p.value for p in model.metadata_props}
    assert meta.get("precision") == "int8", meta.get("precision")
    g = model.graph
    env = {t.name: numpy_helper.to_array(t) for t in g.initializer}
    producer = {o: node for node in g.node for o in node.output}
    counts = {"Q": 0, "DQ": 0, "int8_convs": 0, "float_convs": 0}
    for node in g.node:
        if node.op_type in ("QuantizeLinear", "DequantizeLinear"):
            counts["Q" if node.op_type == "QuantizeLinear" else "DQ"] += 1
            scale, zero = env[node.input[1]], env[node.input[2]]
            assert scale.dtype == np.float32 and zero.dtype == np.int8, node.name
            assert not zero.any(), f"{node.name}: zero point not 0"
            if scale.ndim == 1:  # a weight: int8 initializer, axis 0
                assert node.op_type == "DequantizeLinear" and attrs(node).get("axis") == 0
                assert env[node.input[0]].dtype == np.int8, node.name
                assert scale.shape[0] == env[node.input[0]].shape[0], node.name
            else:
                assert scale.ndim == 0 and scale > 0, node.name
        if node.op_type == "Conv":
            src = producer.get(node.input[0])
            wsrc = producer.get(node.input[1])
            if wsrc is None:  # a float conv: the stem of a calibrated model
                counts["float_convs"] += 1
                assert node.input[0] == "input", f"{node.name}: a float conv after the stem"
            else:
                counts["int8_convs"] += 1
                assert src is not None and src.op_type == "DequantizeLinear", node.name
                assert wsrc.op_type == "DequantizeLinear", node.name
    assert counts["int8_convs"] > 0 and counts["float_convs"] <= 1, counts

    env["input"] = np.fromfile(in_path, dtype=np.float32).reshape(n, 3, h, w)
    for node in g.node:
        a = attrs(node)
        x = [env[i] for i in node.input]
        t = node.op_type
        if t == "QuantizeLinear":
            y = quantize_linear(x[0], x[1], x[2])
        elif t == "DequantizeLinear":
            y = dequantize_linear(x[0], x[1], x[2], a.get("axis", 1))
        elif t == "Conv":
            assert a.get("group", 1) == 1 and list(a.get("dilations", [1, 1])) == [1, 1]
            y = conv(x[0], x[1], x[2], a["strides"], a["pads"])
        elif t == "Add":
            y = x[0] + x[1]
        elif t == "Relu":
            y = np.maximum(x[0], 0)
        elif t == "MaxPool":
            y = maxpool(x[0], a["kernel_shape"], a["strides"], a["pads"])
        elif t == "GlobalAveragePool":
            y = x[0].mean(axis=(2, 3), keepdims=True, dtype=np.float64).astype(np.float32)
        elif t == "Flatten":
            y = x[0].reshape(x[0].shape[0], -1)
        elif t == "Gemm":
            assert a.get("transB") == 1
            y = (x[0].astype(np.float64) @ x[1].T.astype(np.float64) + x[2]).astype(np.float32)
        else:
            raise SystemExit(f"run_qdq.py: op {t} ({node.name}) is not evaluated here")
        env[node.output[0]] = y
    y = env["logits"].astype(np.float32)
    assert y.shape == (n, int(meta["num_classes"])), y.shape
    y.tofile(out_path)
    print(f"onnx {onnx.__version__} checker ok; qdq ok: Q={counts['Q']} DQ={counts['DQ']} "
          f"int8_convs={counts['int8_convs']} float_convs={counts['float_convs']} "
          f"calibration={meta.get('calibration')}")


if __name__ == "__main__":
    main()
