#!/usr/bin/python3
"""Golden data for `rn50 predict` (tests/test_cli_predict.cpp): torchvision's answer on the
same weights, images and eval transform.

Builds torchvision.models.<arch>() (torchvision init, seeded), perturbs every BatchNorm (gamma,
beta, running mean/var drawn at random, so eval-mode BN is exercised and the softmax is far
from uniform; --fc-scale sharpens it further), saves the state_dict as safetensors (--weights;
written by hand: 8-byte LE header length, JSON header, raw little-endian data; I64
num_batches_tracked), then classifies each image with

  PIL.Image.open -> convert("RGB") -> Resize(resize_short) -> CenterCrop(crop) -> ToTensor ->
  Normalize(ImageNet mean/std) -> model.eval()(x) -> softmax (fp32)

for every --sizes entry "resize:crop", printing one JSON line per (size, image):
  {"resize_short", "crop_size", "file", "probs": [all class probabilities]}
"""
import argparse, json, struct, sys

import torch, torchvision
import torchvision.transforms as T
from PIL import Image


def save_safetensors(path, sd):
    names = {torch.float32: "F32", torch.int64: "I64"}
    header, blobs, off = {}, [], 0
    for k, t in sd.items():
        t = t.detach().contiguous().cpu()
        b = t.numpy().tobytes()
        header[k] = {"dtype": names[t.dtype], "shape": list(t.shape), "data_offsets": [off, off + len(b)]}
        blobs.append(b)
        off += len(b)
    h = json.dumps(header).encode()
    h += b" " * ((8 - len(h) % 8) % 8)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(h)) + h + b"".join(blobs))


def build_model(arch, num_classes, seed, fc_scale):
    """torchvision.models.<arch> with torchvision's init (seeded), every BatchNorm's gamma, beta
    and running statistics drawn at random, and fc scaled by fc_scale; in eval mode."""
    torch.manual_seed(seed)
    m = getattr(torchvision.models, arch)(num_classes=num_classes)
    g = torch.Generator().manual_seed(seed + 1)
    with torch.no_grad():
        for mod in m.modules():
            if isinstance(mod, torch.nn.BatchNorm2d):
                c = mod.num_features
                mod.weight.copy_(0.5 + torch.rand(c, generator=g))
                mod.bias.copy_(0.2 * torch.randn(c, generator=g))
                mod.running_mean.copy_(0.1 * torch.randn(c, generator=g))
                mod.running_var.copy_(0.5 + torch.rand(c, generator=g))
        m.fc.weight.mul_(fc_scale)
        m.fc.bias.mul_(fc_scale)
    return m.eval()


def print_probs(m, sizes, images):
    """One JSON line per ("resize:crop" in sizes, image): the softmax of m on the image through
    torchvision's eval transform."""
    norm = T.Normalize([0.485, 0.456, 0.406], [0.229, 0.224, 0.225])
    for pair in sizes.split(","):
        rs, crop = (int(v) for v in pair.split(":"))
        tf = T.Compose([T.Resize(rs), T.CenterCrop(crop), T.ToTensor(), norm])
        for path in images:
            x = tf(Image.open(path).convert("RGB")).unsqueeze(0)
            with torch.no_grad():
                probs = torch.softmax(m(x).float(), dim=1)[0]
            print(json.dumps({"resize_short": rs, "crop_size": crop, "file": path,
                              "probs": probs.tolist()}), flush=True)


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--arch", default="resnet18")
    p.add_argument("--num-classes", type=int, default=1000)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--fc-scale", type=float, default=1.0,
                   help="multiplies fc weight and bias (sharpens the softmax)")
    p.add_argument("--weights", required=True, help="output safetensors file")
    p.add_argument("--sizes", default="224:224", help="comma-separated resize_short:crop pairs")
    p.add_argument("images", nargs="+")
    a = p.parse_args()
    torch.set_num_threads(1)
    m = build_model(a.arch, a.num_classes, a.seed, a.fc_scale)
    save_safetensors(a.weights, m.state_dict())
    print_probs(m, a.sizes, a.images)


if __name__ == "__main__":
    sys.exit(main())
