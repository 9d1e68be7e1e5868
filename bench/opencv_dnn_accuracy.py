#!/usr/bin/env python3
"""OpenCV DNN on an rn50-exported model.onnx over an ImageFolder val split, with torchvision's
eval preprocessing (PIL decode, Resize(resize_short), CenterCrop(crop), ImageNet mean/std; the
sizes come from the model's metadata_props). Writes path<TAB>label<TAB>top1 per image in the
sorted ImageFolder order (the format of `rn50 bench infer --predictions-file`) and prints top-1.

  opencv_dnn_accuracy.py MODEL.onnx IMAGE_ROOT PREDICTIONS.tsv [BATCH]
"""
import os
import sys

import cv2
import numpy as np
import onnx
import torch
import torchvision.transforms as T
from PIL import Image


def main():
    model_path, root, pred_path = sys.argv[1:4]
    batch = int(sys.argv[4]) if len(sys.argv) > 4 else 64
    meta = {p.key: p.value for p in onnx.load(model_path).metadata_props}
    rs, crop = int(meta["resize_short"]), int(meta["crop_size"])
    mean = [float(v) for v in meta["mean"].split(",")]
    std = [float(v) for v in meta["std"].split(",")]
    tf = T.Compose([T.Resize(rs), T.CenterCrop(crop), T.ToTensor(), T.Normalize(mean, std)])
    val = os.path.join(root, "val")
    classes = sorted(d for d in os.listdir(val) if os.path.isdir(os.path.join(val, d)))
    exts = (".jpg", ".jpeg", ".png")
    samples = [(os.path.join(val, c, f), i) for i, c in enumerate(classes)
               for f in sorted(os.listdir(os.path.join(val, c))) if f.lower().endswith(exts)]
    net = cv2.dnn.readNetFromONNX(model_path)
    hits, lines = 0, []
    for s in range(0, len(samples), batch):
        chunk = samples[s:s + batch]
        x = torch.stack([tf(Image.open(p).convert("RGB")) for p, _ in chunk]).numpy()
        net.setInput(x)
        top = net.forward().argmax(axis=1)
        for (p, label), t in zip(chunk, top):
            hits += int(t == label)
            lines.append(f"{p}\t{label}\t{int(t)}\n")
    with open(pred_path, "w") as f:
        f.writelines(lines)
    print(f"opencv dnn {cv2.__version__} fp32 onnx: top1 {100.0 * hits / len(samples):.2f}% "
          f"({len(samples)} images, resize {rs} crop {crop})")


if __name__ == "__main__":
    main()
