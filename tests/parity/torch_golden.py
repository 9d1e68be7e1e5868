#!/usr/bin/python3
"""Golden data for rn50's whole-network parity test (tests/test_model_parity.cpp).

Builds torchvision.models.<arch>(num_classes=K) (or, for --arch bottleneck:a,b,c,d /
basic:a,b,c,d, torchvision's ResNet class with that block and depth) with torchvision's
initialisation, perturbs every BatchNorm so that gamma/beta and the running statistics are
neither 1 nor 0 (random gamma/beta; running statistics from a calibration batch, then perturbed;
random num_batches_tracked), and records, for a random input batch, what rn50's ResNet must
reproduce:

  init.<key>        the initial state_dict (every key, incl. num_batches_tracked), F32 / I64
  input             (N,3,H,W) F32, NCHW;  labels (N) I32
  logits            train-mode logits;  loss: label-smoothed (0.1) cross-entropy (mean)
  grad.<param>      d loss / d param after one backward
  after.<buffer>    running_mean / running_var / num_batches_tracked after the train forward
  eval_logits       eval-mode logits with the initial running statistics (fresh copy)
  tie_slack.conv1.weight
                    F32, conv1.weight's shape: how far its gradient may move when the stem max
                    pool routes a window's gradient to another of its tied maxima (see
                    maxpool_tie_slack; zero without ties); metadata pool_ties counts those windows
  sgd_losses        (steps+1) losses of a fresh copy trained with the DLE SGD recipe on the same
                    batch: torch.optim.SGD(momentum 0.875, dampening 0, nesterov False), weight
                    decay 1/32768 on conv and fc weights only (two param groups), constant lr,
                    training mode; entry i is the loss before update i (the last one after the
                    final update).

With --qat, every model above is quantization-aware as rn50's --qat (src/core/fake_quant.h,
src/model/qat.h): conv/fc weights fake-quantized per output channel, their inputs, the average
pool's input and each residual add's shortcut per tensor with moving-average (rate 0.9) abs-max ranges,
8 bits symmetric, and the straight-through estimator in Paddle's unclipped form
(x + (q - x).detach()); the ranges after the training forward are recorded as
qat.<quantizer>._amax (F32 [1]).

With --margin-tries T, the input batch is the best of T draws: the one whose smallest ReLU
input (relative to the max-abs of that ReLU's input) is largest, stored as metadata relu_margin.

The reference is computed in float64 (--dtype float64, the default) from the float32 initial
weights, so the only error a comparison sees is rn50's own float32 error. Logits, losses and
running statistics are then stored as F64, gradients always as F32 (to halve the file).

The file is written in the safetensors format by hand (8-byte LE header length, JSON header
{name: {dtype, shape, data_offsets}}, raw little-endian data), as the safetensors package is not
a dependency.

--list-keys writes the state_dict keys instead, one per line: "P|B <name> <dtype> <d0,d1,..>"
(P: parameter, B: buffer; in state_dict() order; shape "-" for a 0-d tensor).

Run with /usr/bin/python3 (torch 1.13 + torchvision 0.14).
"""
import argparse
import copy
import json
import struct
import sys

import numpy as np
import torch
import torch.nn.functional as F
import torchvision

DTYPES = {
    np.dtype("float32"): "F32",
    np.dtype("float64"): "F64",
    np.dtype("int64"): "I64",
    np.dtype("int32"): "I32",
    np.dtype("uint8"): "U8",
}


def write_safetensors(path, tensors, metadata=None):
    """tensors: list of (name, np.ndarray). Writes the safetensors format."""
    header = {}
    blobs = []
    off = 0
    for name, arr in tensors:
        arr = np.ascontiguousarray(arr)
        if arr.dtype.byteorder == ">":
            arr = arr.astype(arr.dtype.newbyteorder("<"))
        data = arr.tobytes()
        header[name] = {"dtype": DTYPES[arr.dtype], "shape": list(arr.shape),
                        "data_offsets": [off, off + len(data)]}
        blobs.append(data)
        off += len(data)
    if metadata:
        header["__metadata__"] = {k: str(v) for k, v in metadata.items()}
    h = json.dumps(header, separators=(",", ":")).encode("utf-8")
    h += b" " * ((8 - len(h) % 8) % 8)  # align the data section to 8 bytes
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(h)))
        f.write(h)
        for b in blobs:
            f.write(b)


def np_of(t):
    return t.detach().cpu().numpy()


def build(arch, classes):
    """arch: a torchvision name (resnet18 .. resnet152) or "<bottleneck|basic>:a,b,c,d", a custom
    depth of torchvision's ResNet class (e.g. "bottleneck:1,1,1,1")."""
    if ":" in arch:
        kind, layers = arch.split(":")
        block = {"bottleneck": torchvision.models.resnet.Bottleneck,
                 "basic": torchvision.models.resnet.BasicBlock}[kind]
        return torchvision.models.resnet.ResNet(block, [int(v) for v in layers.split(",")],
                                                num_classes=classes)
    return torchvision.models.__dict__[arch](num_classes=classes)


def list_keys(args):
    m = build(args.arch, args.classes)
    params = dict(m.named_parameters())
    lines = []
    for k, v in m.state_dict().items():
        kind = "P" if k in params else "B"
        dt = {torch.float32: "F32", torch.int64: "I64"}[v.dtype]
        lines.append(f"{kind} {k} {dt} {','.join(str(d) for d in v.shape) or '-'}")
    text = "\n".join(lines) + "\n"
    if args.out:
        with open(args.out, "w") as f:
            f.write(text)
    else:
        sys.stdout.write(text)


def fake_quant(x, amax):
    """8-bit symmetric fake quantization with step amax / 127 (round half to even), and the
    unclipped straight-through gradient. amax: a float or a broadcastable tensor (0 -> 0)."""
    s = amax / 127.0
    if torch.is_tensor(s):
        safe = torch.where(s > 0, s, torch.ones_like(s))
        q = torch.where(s > 0, torch.clamp(torch.round(x * (1.0 / safe)), -127, 127) * safe,
                        torch.zeros_like(x))
    else:
        q = (torch.clamp(torch.round(x * (1.0 / s)), -127, 127) * s if s > 0
             else torch.zeros_like(x))
    return x + (q - x).detach()


class MovingAbsMax:
    """Paddle's moving-average abs-max range (state = accum = 1 at the start), in float32
    arithmetic as rn50 keeps it (so the ranges agree bit for bit with rn50's given the same
    batch maxima)."""

    def __init__(self, owner):
        one = np.float32(1)
        self.owner, self.state, self.accum, self.amax = owner, one, one, one

    def __call__(self, x):
        if self.owner.training:
            m = np.float32(float(x.detach().abs().max()))
            r = np.float32(0.9)
            self.state = np.float32(r * self.state) + np.float32(1)
            self.accum = np.float32(r * self.accum) + m
            self.amax = np.float32(self.accum / self.state)
        return fake_quant(x, float(self.amax))


def add_qat(m):
    """Makes model m quantization-aware in place; returns {quantizer name: MovingAbsMax}."""
    quant = {}

    def weight_fq(w):
        amax = w.detach().abs().amax(dim=tuple(range(1, w.dim())), keepdim=True)
        return fake_quant(w, amax)

    for name, mod in m.named_modules():
        if isinstance(mod, torch.nn.Conv2d):
            q = quant[name + "._input_quantizer"] = MovingAbsMax(m)
            mod.forward = (lambda x, mod=mod, q=q:
                           mod._conv_forward(q(x), weight_fq(mod.weight), mod.bias))
        elif isinstance(mod, torch.nn.Linear):
            q = quant[name + "._input_quantizer"] = MovingAbsMax(m)
            mod.forward = lambda x, mod=mod, q=q: F.linear(q(x), weight_fq(mod.weight), mod.bias)
        elif isinstance(mod, torch.nn.AdaptiveAvgPool2d):
            q = quant[name + "._input_quantizer"] = MovingAbsMax(m)
            mod.register_forward_pre_hook(lambda _m, inp, q=q: (q(inp[0]),))
        elif isinstance(mod, (torchvision.models.resnet.BasicBlock,
                              torchvision.models.resnet.Bottleneck)):
            # The residual add reads its shortcut quantized (pytorch-quantization's
            # residual_quantizer): the downsample's output, or the block input (rn50 shares
            # that value's quantizer with conv1; a separate one here sees the same data).
            q = quant[name + ".residual_quantizer"] = MovingAbsMax(m)
            mod.forward = lambda x, b=mod, q=q: block_forward(b, x, q)
    return quant


def block_forward(b, x, q):
    """torchvision's BasicBlock / Bottleneck forward with a quantized shortcut."""
    out = b.relu(b.bn1(b.conv1(x)))
    if isinstance(b, torchvision.models.resnet.Bottleneck):
        out = b.relu(b.bn2(b.conv2(out)))
        out = b.bn3(b.conv3(out))
    else:
        out = b.bn2(b.conv2(out))
    identity = b.downsample(x) if b.downsample is not None else x
    return b.relu(out + q(identity))


def perturb_bn(m, gen):
    """Random BN affine parameters and plausible running statistics (never 1/0)."""
    bns = [mod for mod in m.modules() if isinstance(mod, torch.nn.BatchNorm2d)]
    with torch.no_grad():
        for bn in bns:
            c = bn.num_features
            bn.weight.copy_(torch.rand(c, generator=gen) * 1.0 + 0.5)        # U(0.5, 1.5)
            bn.bias.copy_(torch.randn(c, generator=gen) * 0.2)
    # Running statistics near the real ones (eval activations stay O(1) through 50 layers):
    # one train-mode pass with momentum 1 on a calibration batch, then perturbed.
    calib = torch.randn(8, 3, 64, 64, generator=gen)
    saved = [bn.momentum for bn in bns]
    for bn in bns:
        bn.momentum = 1.0
    m.train()
    with torch.no_grad():
        m(calib)
    for bn, mom in zip(bns, saved):
        bn.momentum = mom
    with torch.no_grad():
        for bn in bns:
            c = bn.num_features
            bn.running_mean.add_(torch.randn(c, generator=gen) * 0.05)
            bn.running_var.mul_(torch.rand(c, generator=gen) * 0.4 + 0.8)    # x U(0.8, 1.2)
            bn.num_batches_tracked.fill_(int(torch.randint(1, 1000, (1,), generator=gen)))


def relu_margin(m, x):
    """min over every ReLU call of min|input| / max|input| in a float64 train-mode forward (the
    running statistics are left untouched). A ReLU input within float32 rounding of zero can flip
    in a float32 implementation and move the gradients it feeds by up to a few percent."""
    mm = copy.deepcopy(m).double().train()
    for mod in mm.modules():
        if isinstance(mod, torch.nn.BatchNorm2d):
            mod.momentum = 0.0
    margins = []

    def hook(mod, inp):
        a = inp[0].detach().abs()
        margins.append(float(a.min() / a.max()))

    for mod in mm.modules():
        if isinstance(mod, torch.nn.ReLU):
            mod.register_forward_pre_hook(hook)
    with torch.no_grad():
        mm(x.double())
    return min(margins)


class StemProbe:
    """Records, in one train-mode forward and backward of m, what maxpool_tie_slack needs: the
    stem conv's input (quantized as the conv sees it, under --qat), its output (the stem BN's
    input), the max pool's input and the gradient reaching the max pool's output."""

    def __init__(self, m):
        self.m, self.seen = m, {}
        self.hooks = [m.maxpool.register_forward_hook(self._pool), m.bn1.register_forward_pre_hook(
            lambda _mod, inp: self.seen.__setitem__("conv_out", inp[0].detach()))]

    def _pool(self, _mod, inp, out):
        self.seen["pool_in"] = inp[0].detach()
        out.register_hook(lambda g: self.seen.__setitem__("pool_grad", g.detach()))

    def remove(self):
        for h in self.hooks:
            h.remove()


def maxpool_tie_slack(m, probe, x_conv, rel_tol=1e-10):
    """Per element of conv1.weight, the most its gradient can change when the stem max pool
    (3x3, stride 2, padding 1) sends a window's gradient to another of its tied maxima.

    Under --qat the stem conv multiplies 8-bit grids (input codes x per-channel weight codes), so
    its outputs are integer multiples of one step per channel, and two positions of a pool
    window often hold the same value in exact arithmetic. Float64 rounding then breaks the tie
    by ~1e-16, in an order that depends on the summation order: torch and rn50 may route that
    window's gradient to different positions, both valid subgradients of a function that is not
    differentiable there. The forward, the BatchNorm gradients and the gradients of every later
    layer are unchanged (the tied values, their normalised values and all sums are equal); only
    the stem conv's weight gradient moves, by gamma_c / sqrt(var_c + eps) * g * (patch(p') -
    patch(p)) for a window of channel c with gradient g and tied positions p, p'. The slack is the
    sum over tied windows of the largest such change (elementwise absolute value).

    A window is tied when its two largest values differ by < rel_tol of the channel's max |x| and
    the largest is > 0 (a window of ReLU zeros sends nothing back through the ReLU). Returns
    (slack with conv1.weight's shape, number of tied windows)."""
    a, g, y = probe.seen["pool_in"], probe.seen["pool_grad"], probe.seen["conv_out"]
    w = m.conv1.weight
    slack = torch.zeros_like(w, dtype=torch.float64)
    n_, c_, h_, w_ = a.shape
    pad = F.pad(a, (1, 1, 1, 1), value=float("-inf"))
    win = pad.unfold(2, 3, 2).unfold(3, 3, 2)  # (N, C, OH, OW, 3, 3)
    top = win.reshape(*win.shape[:4], 9).topk(2, dim=-1).values
    scale = a.abs().amax(dim=(0, 2, 3)).view(1, c_, 1, 1)
    tied = (top[..., 0] > 0) & (top[..., 0] - top[..., 1] < rel_tol * scale)
    var = y.var(dim=(0, 2, 3), unbiased=False)
    k_c = (m.bn1.weight.detach().double() / torch.sqrt(var.double() + m.bn1.eps))
    windows = tied.nonzero().tolist()
    for n, c, oh, ow in windows:
        vals = win[n, c, oh, ow].reshape(9)
        lim = float(vals.max()) - rel_tol * float(scale.flatten()[c])
        pos = [(oh * 2 - 1 + i // 3, ow * 2 - 1 + i % 3) for i in range(9) if float(vals[i]) >= lim]
        best = torch.zeros_like(slack[c])
        for i, p in enumerate(pos):
            for q in pos[i + 1:]:
                d = torch.zeros(1, c_, y.shape[2], y.shape[3], dtype=torch.float64)
                d[0, c, p[0], p[1]] = 1.0
                d[0, c, q[0], q[1]] = -1.0
                dw = torch.nn.grad.conv2d_weight(x_conv[n:n + 1].double(), w.shape, d,
                                                 stride=m.conv1.stride, padding=m.conv1.padding)
                best = torch.maximum(best, dw[c].abs())
        slack[c] += abs(float(k_c[c]) * float(g[n, c, oh, ow])) * best
    return slack, len(windows)


def pick_input(m, args, gen):
    """Draws --margin-tries input batches and keeps the one whose smallest ReLU margin is largest
    (fewer ReLUs that a float32 computation can flip). One draw when --margin-tries is 0."""
    best, best_margin = None, -1.0
    for _ in range(max(1, args.margin_tries)):
        x = torch.randn(args.batch, 3, args.size, args.size, generator=gen)
        if args.margin_tries <= 0:
            return x, relu_margin(m, x)
        mg = relu_margin(m, x)
        if mg > best_margin:
            best, best_margin = x, mg
    return best, best_margin


def golden(args):
    torch.manual_seed(args.seed)
    gen = torch.Generator().manual_seed(args.seed + 1)
    m = build(args.arch, args.classes)
    perturb_bn(m, gen)
    init_sd = {k: v.detach().clone() for k, v in m.state_dict().items()}
    x, margin = pick_input(m, args, gen)
    labels = torch.randint(0, args.classes, (args.batch,), generator=gen)
    cdt = torch.float64 if args.dtype == "float64" else torch.float32

    quantizers = {}

    def fresh():
        mm = build(args.arch, args.classes)
        mm.load_state_dict(init_sd)
        mm = mm.to(cdt)
        if args.qat:
            quantizers.clear()
            quantizers.update(add_qat(mm))
        return mm

    out = [("init." + k, np_of(v)) for k, v in init_sd.items()]
    out += [("input", np_of(x)), ("labels", np_of(labels).astype(np.int32))]

    # Train-mode forward + backward.
    mt = fresh().train()
    probe = StemProbe(mt)
    logits = mt(x.to(cdt))
    loss = F.cross_entropy(logits, labels, label_smoothing=args.smoothing)
    loss.backward()
    probe.remove()
    out += [("logits", np_of(logits)), ("loss", np_of(loss).reshape(1))]
    x_conv = x.to(cdt)
    if args.qat:  # the stem conv's input as it saw it (its quantizer's range after the update)
        x_conv = fake_quant(x_conv, float(quantizers["conv1._input_quantizer"].amax)).detach()
    slack, ties = maxpool_tie_slack(mt, probe, x_conv)
    out.append(("tie_slack.conv1.weight", np_of(slack).astype(np.float32)))
    # Gradients are stored as F32 (their rounding, ~6e-8 relative, is far below any tolerance).
    out += [("grad." + k, np_of(p.grad).astype(np.float32)) for k, p in mt.named_parameters()]
    out += [("after." + k, np_of(v)) for k, v in mt.named_buffers()]
    out += [("qat." + k + "._amax", np.array([q.amax], dtype=np.float32))
            for k, q in quantizers.items()]

    # Eval-mode forward with the initial running statistics.
    me = fresh().eval()
    with torch.no_grad():
        out.append(("eval_logits", np_of(me(x.to(cdt)))))

    # DLE SGD recipe on a fresh copy, same batch each step.
    ms = fresh().train()
    decay, no_decay = [], []
    for mod in ms.modules():
        if isinstance(mod, (torch.nn.Conv2d, torch.nn.Linear)):
            decay.append(mod.weight)
            if mod.bias is not None:
                no_decay.append(mod.bias)
        elif isinstance(mod, torch.nn.BatchNorm2d):
            no_decay += [mod.weight, mod.bias]
    assert len(decay) + len(no_decay) == len(list(ms.parameters()))
    opt = torch.optim.SGD([{"params": decay, "weight_decay": args.weight_decay},
                           {"params": no_decay, "weight_decay": 0.0}],
                          lr=args.lr, momentum=args.momentum)
    losses = []
    for step in range(args.steps + 1):
        opt.zero_grad()
        l = F.cross_entropy(ms(x.to(cdt)), labels, label_smoothing=args.smoothing)
        losses.append(float(l))
        if step < args.steps:
            l.backward()
            opt.step()
    out.append(("sgd_losses", np.array(losses, dtype=np.float64 if cdt == torch.float64
                                       else np.float32)))

    meta = {k: v for k, v in vars(args).items() if k != "out"}
    meta["relu_margin"] = margin
    meta["pool_ties"] = ties
    write_safetensors(args.out, out, meta)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--out", help="output file (safetensors; text for --list-keys)")
    ap.add_argument("--arch", default="resnet50")
    ap.add_argument("--classes", type=int, default=16)
    ap.add_argument("--batch", type=int, default=4)
    ap.add_argument("--size", type=int, default=64, help="input H = W")
    ap.add_argument("--seed", type=int, default=1234)
    ap.add_argument("--lr", type=float, default=0.05)
    ap.add_argument("--momentum", type=float, default=0.875)
    ap.add_argument("--weight-decay", type=float, default=1.0 / 32768)
    ap.add_argument("--smoothing", type=float, default=0.1)
    ap.add_argument("--steps", type=int, default=3)
    ap.add_argument("--dtype", choices=["float32", "float64"], default="float64",
                    help="precision of the reference computation")
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--margin-tries", type=int, default=0,
                    help="input draws to pick the largest smallest-ReLU-margin from")
    ap.add_argument("--qat", action="store_true",
                    help="quantization-aware model (fake quantization as rn50 --qat)")
    ap.add_argument("--list-keys", action="store_true",
                    help="write the state_dict keys, kinds, dtypes and shapes and exit")
    args = ap.parse_args()
    torch.set_num_threads(args.threads)
    if args.list_keys:
        list_keys(args)
        return
    if not args.out:
        ap.error("--out is required")
    golden(args)


if __name__ == "__main__":
    main()
