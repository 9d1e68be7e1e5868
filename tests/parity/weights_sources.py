#!/usr/bin/python3
"""Fixtures for `rn50 convert-weights` (tools/convert_weights.py): one torchvision ResNet saved
the ways torchvision, DLE PyTorch and DLE Paddle save weights, and torch's answer on it.

    weights_sources.py --arch resnet50 --num-classes N --seed S --out-dir DIR [images...]

Builds torchvision.models.<arch>(num_classes=N) exactly as predict_golden.py does (seeded
torchvision init, every BatchNorm's gamma/beta/running mean/running var drawn at random with the
generator seeded S+1, fc multiplied by --fc-scale) and writes into DIR:

  torchvision.pth     torch.save(model.state_dict()) (zip)
  dle.pth.tar         a DLE PyTorch checkpoint as image_classification/training.py writes it:
                      {"epoch", "best_prec1", "state_dict", "optimizer", "state_dict_ema"}, model
                      keys "module."-prefixed (DistributedDataParallel) with DLE's stage names
                      "layers.<i>" (models/resnet.py), conv weights in channels_last memory
                      (--memory-format nhwc), SGD state with DLE's two parameter groups
  paddle.pdparams     what DLE Paddle's paddle.static.save writes for that network: a pickled
                      (protocol 4) dict of numpy arrays under Paddle's generated names, numbered
                      in models/resnet.py's creation order (conv2d_<n>.w_0; batch_norm_<n>.w_0 /
                      .b_0 / .w_1 / .w_2 = scale, bias, mean, variance; linear_0.w_0 as [in, out],
                      linear_0.b_0), entries in sorted-name order (conv2d_10 before conv2d_2)
  reference.safetensors      the state_dict (I64 num_batches_tracked), as predict_golden.py
  reference_ema.safetensors  the checkpoint's state_dict_ema (every float tensor scaled by a
                             random factor in [0.95, 1.05]), what --ema must give

With --stem-channels 4 the three files hold a 4-channel stem, conv1.weight [64, 4, 7, 7], as
every DLE Paddle run at its default --image-shape 4,224,224 writes it: the model's RGB weights
plus a fourth input channel of random weights, which never meet data (DLE pads the input with a
zero channel), so torch's answer is the 3-channel model's; reference.safetensors stays the
3-channel state_dict and reference_stem4.safetensors holds the 4-channel one.

and prints, for each image and --sizes entry, torch's eval-mode softmax as one JSON line
{"resize_short", "crop_size", "file", "probs"}, exactly like predict_golden.py (PIL RGB ->
Resize(resize_short) -> CenterCrop(crop) -> ToTensor -> Normalize(ImageNet) -> softmax).
With random BatchNorm a resnet50's logits reach the hundreds and its softmax is one-hot; pass
--fc-scale 0.01 or so for probabilities worth comparing.

dle.pth.tar holds floats (best_prec1, the optimizer's lr), which torch 1.13's weights-only
reader refuses, so it also exercises convert_weights.py's own zip reader.
"""
import argparse, collections, copy, os, pickle, sys

import numpy as np
import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from predict_golden import build_model, print_probs, save_safetensors  # noqa: E402


def dle_name(k):
    """torchvision key -> DLE ConvNets' key under DistributedDataParallel."""
    if k.startswith("layer"):
        stage, rest = k.split(".", 1)
        k = f"layers.{int(stage[5:]) - 1}.{rest}"
    return "module." + k


def dle_checkpoint(m, seed, stem):
    """The dict DLE's train_loop saves: epoch, best_prec1, Trainer.state_dict() (+ EMA); `stem`
    is conv1.weight (3 or 4 input channels)."""
    g = torch.Generator().manual_seed(seed + 2)
    live = copy.deepcopy(m)
    if stem.shape[1] != live.conv1.in_channels:
        live.conv1 = torch.nn.Conv2d(stem.shape[1], stem.shape[0], 7, 2, 3, bias=False)
        with torch.no_grad():
            live.conv1.weight.copy_(stem)
    live = live.to(memory_format=torch.channels_last)
    ema = copy.deepcopy(live)
    with torch.no_grad():
        for t in ema.state_dict().values():
            if t.is_floating_point():
                t.mul_(0.95 + 0.1 * torch.rand(t.shape, generator=g))
    named = list(live.named_parameters())  # DLE: optimizers.get_sgd_optimizer, bn_weight_decay off
    opt = torch.optim.SGD([{"params": [p for n, p in named if "bn" in n], "weight_decay": 0},
                           {"params": [p for n, p in named if "bn" not in n]}],
                          lr=2.048, momentum=0.875, weight_decay=3.0517578125e-05)
    for _, p in named:
        opt.state[p]["momentum_buffer"] = 0.01 * torch.randn(p.shape, generator=g)
    prefixed = lambda sd: collections.OrderedDict((dle_name(k), v) for k, v in sd.items())
    ckpt = {"epoch": 90, "best_prec1": 76.5, "state_dict": prefixed(live.state_dict()),
            "optimizer": opt.state_dict(), "state_dict_ema": prefixed(ema.state_dict())}
    return ckpt, ema.state_dict()


def paddle_params(arch, sd):
    """What paddle.static.save writes for DLE Paddle's ResNet holding `sd`: generated names
    numbered in the creation order of models/resnet.py (ResNet.__init__ and BottleneckBlock)."""
    counts = {"resnet18": (2, 2, 2, 2), "resnet34": (3, 4, 6, 3), "resnet50": (3, 4, 6, 3),
              "resnet101": (3, 4, 23, 3), "resnet152": (3, 8, 36, 3)}[arch]
    bottleneck = arch not in ("resnet18", "resnet34")
    layers = [("conv1", "bn1")]  # self.stem: one ConvBNLayer (Conv2D, then BatchNorm)
    for block_idx, depth in enumerate(counts):
        shortcut = False
        for i in range(depth):
            p = f"layer{block_idx + 1}.{i}"  # conv0, conv1, conv2 = torchvision conv1..3
            layers += [(f"{p}.conv{c}", f"{p}.bn{c}") for c in range(1, 4 if bottleneck else 3)]
            if not shortcut and (bottleneck or block_idx > 0):  # self.short, created last
                layers.append((f"{p}.downsample.0", f"{p}.downsample.1"))
            shortcut = True
    a = lambda k: sd[k].detach().cpu().numpy().astype(np.float32)
    out = {}
    for n, (conv, bn) in enumerate(layers):
        out[f"conv2d_{n}.w_0"] = a(conv + ".weight")
        for s, t in (("w_0", "weight"), ("b_0", "bias"), ("w_1", "running_mean"), ("w_2", "running_var")):
            out[f"batch_norm_{n}.{s}"] = a(f"{bn}.{t}")
    out["linear_0.w_0"] = np.ascontiguousarray(a("fc.weight").T)  # Linear weight is [in, out]
    out["linear_0.b_0"] = a("fc.bias")
    return {k: out[k] for k in sorted(out)}  # sorted names: conv2d_10 before conv2d_2


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--arch", default="resnet50",
                   choices=["resnet18", "resnet34", "resnet50", "resnet101", "resnet152"])
    p.add_argument("--num-classes", type=int, default=1000)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--fc-scale", type=float, default=1.0, help="multiplies fc weight and bias")
    p.add_argument("--out-dir", required=True)
    p.add_argument("--stem-channels", type=int, default=3, choices=[3, 4],
                   help="input channels of conv1.weight in the written files")
    p.add_argument("--sizes", default="256:224", help="comma-separated resize_short:crop pairs")
    p.add_argument("images", nargs="*")
    a = p.parse_args()
    torch.set_num_threads(1)
    os.makedirs(a.out_dir, exist_ok=True)
    out = lambda name: os.path.join(a.out_dir, name)
    m = build_model(a.arch, a.num_classes, a.seed, a.fc_scale)
    sd = m.state_dict()
    save_safetensors(out("reference.safetensors"), sd)
    if a.stem_channels == 4:  # the fourth channel's weights: random, never multiplied by data
        w = m.conv1.weight.detach()
        fourth = torch.randn(w.shape[0], 1, *w.shape[2:], generator=torch.Generator().manual_seed(a.seed + 3))
        sd = collections.OrderedDict(sd)
        sd["conv1.weight"] = torch.cat([w, 0.05 * fourth], dim=1)
        save_safetensors(out("reference_stem4.safetensors"), sd)
    torch.save(sd, out("torchvision.pth"))
    ckpt, ema = dle_checkpoint(m, a.seed, sd["conv1.weight"])
    torch.save(ckpt, out("dle.pth.tar"))
    save_safetensors(out("reference_ema.safetensors"), ema)
    with open(out("paddle.pdparams"), "wb") as f:
        pickle.dump(paddle_params(a.arch, sd), f, protocol=4)  # paddle.static.save's protocol
    print_probs(m, a.sizes, a.images)


if __name__ == "__main__":
    sys.exit(main())
