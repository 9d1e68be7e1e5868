#!/usr/bin/python3
"""Converts ResNet weights from torchvision, DLE PyTorch and DLE Paddle files to what rn50 reads:
a safetensors file with torchvision's keys, F32 (num_batches_tracked is left out).

    convert_weights.py SRC --output OUT.safetensors [--from auto|torchvision|dle-pytorch|paddle]
                       [--arch auto|resnet18|resnet34|resnet50|resnet101|resnet152] [--ema]
                       [--input-channels 3|4]

`rn50 convert-weights` runs this script. Exit 0 and one summary line on stdout; exit 2 and one
line on stderr ("convert_weights: error: ...") for a file or argument that cannot be used. OUT
is written atomically (OUT.tmp in the same folder, fsync, rename).

Formats (--from auto tells them apart by content, not by file name)
  torchvision  torch.save(model.state_dict()) of torchvision.models.resnet*, keys as they are.
  dle-pytorch  NVIDIA DeepLearningExamples PyTorch/Classification/ConvNets. A checkpoint
               (image_classification/training.py train_loop: {"epoch", "best_prec1",
               **Trainer.state_dict()} = "state_dict", "optimizer"[, "state_dict_ema"], saved by
               utils.py Checkpointer.save_checkpoint) holds the model's state_dict, its keys
               "module."-prefixed under DistributedDataParallel (Executor.distributed). DLE's
               ResNet (image_classification/models/resnet.py) calls the stages "layers.0".."3"
               where torchvision says "layer1".."4"; stem (conv1, bn1), blocks (conv1..3,
               bn1..3, downsample.0/.1) and fc are named as in torchvision. DLE before 2021
               (the EfficientNet release) and NGC's nvidia_resnet50_200821.pth.tar (a bare
               state_dict; models/resnet.py ngc_checkpoint_remap renames its layer<N> to
               layers.<N-1>) use "layer<N>". Bare state dicts (checkpoint2model.py) are accepted
               too. Here "module." is stripped and "layers.<i>." becomes "layer<i+1>.".
               EMA: with --use-ema DLE validates both copies ("val", "val_ema") but picks
               model_best.pth.tar by the plain "val" accuracy, and checkpoint2model.py exports
               checkpoint["state_dict"] (its --ema switch has no effect), so "state_dict" is
               converted by default and "state_dict_ema" with --ema.
  paddle       DLE PaddlePaddle/Classification/RN50v1.5: utils/save_load.py save_model calls
               paddle.static.save, which pickles (protocol 4) {parameter name: numpy array} into
               <prefix>.pdparams. Names are Paddle's generated ones, numbered per layer type
               (unique_name, reset by program.py's unique_name.guard) in creation order:
               conv2d_<n>.w_0 (Conv2D, no bias); batch_norm_<n>.w_0, .b_0, .w_1, .w_2
               (paddle.nn.BatchNorm scale, bias, moving mean, moving variance; batch_norm2d_<n>
               is accepted, both spellings in one file are refused); linear_<n>.w_0 stored
               [in, out] (transposed here) and .b_0. models/resnet.py creates the stem
               ConvBNLayer (conv, then bn), then per BottleneckBlock conv0 (1x1), conv1 (3x3,
               the stride), conv2 (1x1) and, in each stage's first block, the shortcut "short";
               then fc. The k-th conv2d and batch norm (by <n>) are the k-th conv/bn pair of
               torchvision's ResNet in that order: conv0/1/2 -> conv1/2/3, short ->
               downsample.0/.1. "<param>.asp_mask" entries (ASP training) are skipped: the
               weights are already pruned. float16 weights (pure fp16) are widened exactly.
               Every DLE Paddle training command keeps its default --image-shape 4,224,224
               (dali.py: CropMirrorNormalize(pad_output=image_channel == 4) appends a zero
               fourth channel, for tensor cores), so its stem conv2d_0.w_0 is [64, 4, 7, 7].

The stem's input channels (--input-channels, `rn50 convert-weights --image-shape C,H,W`): a
4-channel conv1.weight (DLE Paddle's default, or any file of a 4-channel run) becomes the 3-channel
model by default, the fourth input channel's weights dropped; exact for inputs whose fourth channel
is zero, as DLE's padding is. With --input-channels 4 the 4-channel stem is written as it is (a
3-channel one gets a zero fourth channel). DLE PyTorch always trains on 3 channels
(image_classification/dali.py and dataloaders.py do not pad; --memory-format only changes the
layout), so its checkpoints have a 3-channel stem.

Reading never runs code from the file. Torch files: torch.load(map_location="cpu",
weights_only=True); where that refuses (torch 1.13's weights-only reader has no floats, and
DLE checkpoints hold best_prec1 and the optimizer's lr) or torch is missing, a torch.save zip is
read by TorchZipUnpickler below (numpy; torch.load's pickle_module cannot be used instead:
Debian's torch 1.13 ignores it and unpickles unrestricted). Paddle files: NumpyOnlyUnpickler,
no torch. Both resolve only numpy arrays, dtypes and plain containers (and tensor rebuilding).
Every key is checked against torchvision's resnet for the architecture (--arch, else found from
the block counts; classes from fc): missing, unexpected and wrong-shape keys are named.
"""
import argparse, collections, io, json, os, pickle, re, struct, sys, warnings

ARCHS = {  # torchvision.models.resnet*: block kind and blocks per stage
    "resnet18": ("basic", (2, 2, 2, 2)), "resnet34": ("basic", (3, 4, 6, 3)),
    "resnet50": ("bottleneck", (3, 4, 6, 3)), "resnet101": ("bottleneck", (3, 4, 23, 3)),
    "resnet152": ("bottleneck", (3, 8, 36, 3))}
BN_FIELDS = ("weight", "bias", "running_mean", "running_var")
TORCH_LEGACY_MAGIC = b"\x80\x02\x8a\x0a" + (0x1950a86a20f9469cfc6c).to_bytes(10, "little")


class UserError(Exception):
    """A file or argument rn50 cannot use: reported as one line, exit code 2."""


def names(keys, limit=12):
    keys = list(keys)
    return ", ".join(keys[:limit]) + (f" (+{len(keys) - limit} more)" if len(keys) > limit else "")


def one_line(e):
    return " ".join(str(e).split())[:300] or type(e).__name__


# ---------------------------------------------------------------- torchvision's layout
def expected_shapes(arch, classes, input_channels=3):
    """torchvision's state_dict keys (less num_batches_tracked) -> shape, in its order."""
    kind, counts = ARCHS[arch]
    exp = 4 if kind == "bottleneck" else 1
    out = collections.OrderedDict()

    def conv_bn(conv, bn, o, i, k):
        out[conv + ".weight"] = (o, i, k, k)
        out.update((f"{bn}.{f}", (o,)) for f in BN_FIELDS)

    conv_bn("conv1", "bn1", 64, input_channels, 7)
    inplanes = 64
    for s, n in enumerate(counts):
        w = 64 << s
        for j in range(n):
            p = f"layer{s + 1}.{j}"
            if kind == "bottleneck":
                conv_bn(p + ".conv1", p + ".bn1", w, inplanes, 1)
                conv_bn(p + ".conv2", p + ".bn2", w, w, 3)
                conv_bn(p + ".conv3", p + ".bn3", w * exp, w, 1)
            else:
                conv_bn(p + ".conv1", p + ".bn1", w, inplanes, 3)
                conv_bn(p + ".conv2", p + ".bn2", w, w, 3)
            if j == 0 and (kind == "bottleneck" or s > 0):
                conv_bn(p + ".downsample.0", p + ".downsample.1", w * exp, inplanes, 1)
            inplanes = w * exp
    out["fc.weight"] = (classes, 512 * exp)
    out["fc.bias"] = (classes,)
    return out


def conv_bn_order(arch):
    """(conv prefix, bn prefix) of every conv+BN pair, in creation (= state_dict) order."""
    items = list(expected_shapes(arch, 1).items())
    return [(k[:-len(".weight")], items[i + 1][0][:-len(".weight")])
            for i, (k, shape) in enumerate(items) if len(shape) == 4]


def check_keys(tensors, arch, src, input_channels=3):
    """Validates {torchvision key: array} against torchvision's `arch` -> (classes, [(k, a)])."""
    if "fc.weight" not in tensors or tensors["fc.weight"].ndim != 2:
        raise UserError(f"'{src}': no 2-d fc.weight, so the class count is unknown "
                        f"(keys: {names(tensors, 6)})")
    classes = int(tensors["fc.weight"].shape[0])
    exp = expected_shapes(arch, classes, input_channels)
    missing = [k for k in exp if k not in tensors]
    extra = [k for k in tensors if k not in exp]
    wrong = [f"{k} {list(tensors[k].shape)} (expected {list(s)})"
             for k, s in exp.items() if k in tensors and tuple(tensors[k].shape) != s]
    if missing or extra or wrong:
        parts = [f"{label}: {names(v)}" for label, v in
                 (("missing keys", missing), ("unexpected keys", extra), ("wrong shapes", wrong)) if v]
        raise UserError(f"'{src}' does not hold torchvision {arch} weights ({classes} classes): "
                        + "; ".join(parts))
    return classes, [(k, tensors[k]) for k in exp]


def sniff(src):
    """'torch' (zip or legacy torch pickle), 'pickle' (another pickle), 'safetensors' or None."""
    try:
        with open(src, "rb") as f:
            head = f.read(16)
    except OSError as e:
        raise UserError(f"cannot read '{src}': {e.strerror}")
    if len(head) < 8:
        raise UserError(f"'{src}' is empty or truncated ({len(head)} bytes)")
    if head[:4] == b"PK\x03\x04" or head[:14] == TORCH_LEGACY_MAGIC:
        return "torch"
    if head[0] == 0x80 and 2 <= head[1] <= 5:
        return "pickle"
    if head[8:9] == b"{" and struct.unpack("<Q", head[:8])[0] < os.path.getsize(src):
        return "safetensors"
    return None


# ---------------------------------------------------------------- restricted pickles
class NumpyOnlyUnpickler(pickle.Unpickler):
    """Unpickles numpy arrays in plain containers; any other global is refused, so a hostile
    file cannot call anything. numpy 2 writes numpy._core.*, read here as numpy.core.*."""
    ALLOWED = {("numpy.core.multiarray", "_reconstruct"), ("numpy.core.multiarray", "scalar"),
               ("numpy.core.numeric", "_frombuffer"), ("numpy", "ndarray"), ("numpy", "dtype"),
               ("collections", "OrderedDict"), ("builtins", "tuple"), ("builtins", "list"),
               ("builtins", "dict"), ("builtins", "set"), ("builtins", "frozenset")}

    def find_class(self, module, name):
        if module.startswith("numpy._core"):
            module = "numpy.core" + module[len("numpy._core"):]
        if (module, name) not in self.ALLOWED:
            raise pickle.UnpicklingError(f"refusing to load global {module}.{name}")
        return super().find_class(module, name)


STORAGE_DTYPES = {"FloatStorage": "<f4", "DoubleStorage": "<f8", "HalfStorage": "<f2",
                  "BFloat16Storage": "bf16", "LongStorage": "<i8", "IntStorage": "<i4",
                  "ShortStorage": "<i2", "CharStorage": "i1", "ByteStorage": "u1", "BoolStorage": "?"}


class TorchZipUnpickler(NumpyOnlyUnpickler):
    """Reads the data.pkl of a torch.save zip into numpy arrays: storages come from the zip's
    data/<key> records, tensors are rebuilt with bounds-checked sizes and strides; beyond
    NumpyOnlyUnpickler's globals only storage types and tensor/parameter rebuilding resolve."""

    def __init__(self, zf, prefix):
        super().__init__(io.BytesIO(zf.read(prefix + "data.pkl")), encoding="utf-8")
        self.zf, self.prefix, self.storages = zf, prefix, {}

    def find_class(self, module, name):
        if module == "torch" and name in STORAGE_DTYPES:
            return STORAGE_DTYPES[name]
        if module == "torch._utils" and name in ("_rebuild_tensor_v2", "_rebuild_parameter",
                                                 "_rebuild_parameter_with_state"):
            return getattr(self, name)
        return super().find_class(module, name)

    def persistent_load(self, pid):
        import numpy as np
        if not (isinstance(pid, tuple) and len(pid) == 5 and pid[0] == "storage"
                and pid[1] in STORAGE_DTYPES.values()):
            raise pickle.UnpicklingError(f"unsupported persistent id {str(pid)[:80]}")
        dtype, key = pid[1], str(pid[2])
        if key not in self.storages:
            raw = self.zf.read(f"{self.prefix}data/{key}")
            self.storages[key] = np.frombuffer(raw, "<u2" if dtype == "bf16" else dtype), dtype
        return self.storages[key]

    @staticmethod
    def _rebuild_tensor_v2(storage, offset, size, stride, *unused):
        import numpy as np
        data, dtype = storage
        size, stride = tuple(size), tuple(stride)
        last = offset + sum((n - 1) * s for n, s in zip(size, stride))
        if (not isinstance(data, np.ndarray) or data.ndim != 1 or len(size) != len(stride)
                or offset < 0 or min(stride, default=0) < 0 or np.prod(size) > len(data)
                or (0 not in size and last >= len(data))):
            raise pickle.UnpicklingError("a tensor outside its storage or overlapping itself")
        a = np.array(np.lib.stride_tricks.as_strided(
            data[offset:], size, [s * data.itemsize for s in stride]))  # an owned C-order copy
        return (a.astype("<u4") << 16).view("<f4") if dtype == "bf16" else a

    @staticmethod
    def _rebuild_parameter(data, *unused):
        return data

    _rebuild_parameter_with_state = _rebuild_parameter


# ---------------------------------------------------------------- torch files
def load_torch(src):
    import zipfile
    try:
        warnings.simplefilter("ignore")
        import torch
        return torch.load(src, map_location="cpu", weights_only=True)
    except ImportError:
        err = "reading it needs python3-torch, or a torch.save zip"
    except Exception as e:  # (torch's message advises an unrestricted retry: dropped)
        err = "weights-only load: " + one_line(e).split("WeightsUnpickler error: ")[-1]
    if zipfile.is_zipfile(src):
        try:
            with zipfile.ZipFile(src) as zf:
                pkl = [n for n in zf.namelist() if n.endswith("data.pkl")]
                if len(pkl) != 1:
                    raise ValueError(f"{len(pkl)} data.pkl records")
                prefix = pkl[0][:-len("data.pkl")]
                if prefix + "byteorder" in zf.namelist() and zf.read(prefix + "byteorder") != b"little":
                    raise ValueError("big-endian tensors")
                return TorchZipUnpickler(zf, prefix).load()
        except Exception as e:
            err = one_line(e)
    raise UserError(f"cannot read '{src}' as a PyTorch file (truncated, damaged, or more than "
                    f"tensors and plain containers): {err}")


def read_torch(src, ema):
    """A torch file -> (format name, {torchvision key: float32 array}, notes)."""
    import numpy as np
    obj = load_torch(src)
    if not isinstance(obj, dict):
        raise UserError(f"'{src}' holds a {type(obj).__name__}, not a state dict or checkpoint")
    notes, fmt = [], "torchvision"
    if isinstance(obj.get("state_dict"), dict):
        fmt, key = "dle-pytorch", "state_dict_ema" if ema else "state_dict"
        if key not in obj:
            raise UserError(f"'{src}' has no 'state_dict_ema' (the run did not use --use-ema); "
                            "leave out --ema to convert 'state_dict'")
        notes.append(f"checkpoint['{key}']" + (f", epoch {obj['epoch']}" if "epoch" in obj else ""))
        obj = obj[key]
    elif ema:
        raise UserError(f"--ema: '{src}' is a bare state dict, not a DLE checkpoint with EMA weights")
    out = {}
    for k, v in obj.items():
        if hasattr(v, "detach"):  # a torch tensor
            v = v.detach().cpu()
            v = v.float().numpy() if v.is_floating_point() else v.numpy()
        if not (isinstance(k, str) and isinstance(v, np.ndarray)):
            raise UserError(f"'{src}' is not a state dict: entry {str(k)[:60]!r} is a "
                            f"{type(v).__name__}, not a tensor")
        name = k[len("module."):] if k.startswith("module.") else k
        m = re.match(r"layers\.(\d+)\.", name)
        if m:
            name = f"layer{int(m.group(1)) + 1}." + name[m.end():]
        fmt = "dle-pytorch" if name != k else fmt
        if name.endswith("num_batches_tracked"):
            continue
        if name in out:
            raise UserError(f"'{src}': '{k}' and another key both name '{name}'")
        if v.dtype.kind != "f":
            raise UserError(f"'{src}': tensor '{k}' has dtype {v.dtype}, expected floating point")
        out[name] = np.ascontiguousarray(v, dtype="<f4")
    return fmt, out, notes


def torch_arch(tensors):
    counts = [0, 0, 0, 0]
    for k in tensors:
        m = re.match(r"layer([1-4])\.(\d+)\.", k)
        if m:
            counts[int(m.group(1)) - 1] = max(counts[int(m.group(1)) - 1], int(m.group(2)) + 1)
    bottleneck = any(re.match(r"layer\d\.\d+\.conv3\.", k) for k in tensors)
    for arch, (kind, c) in ARCHS.items():
        if (kind == "bottleneck") == bottleneck and c == tuple(counts):
            return arch
    raise UserError(f"not a torchvision ResNet-18/34/50/101/152 layout: "
                    f"{'bottleneck' if bottleneck else 'basic'} blocks per stage {counts} "
                    "(pass --arch to list the keys that differ)")


# ---------------------------------------------------------------- Paddle files
GENERATED = re.compile(r"^(conv2d|batch_norm|batch_norm2d|linear)_(\d+)\.([wb]_\d+)$")
LAYER_SUFFIXES = {"conv2d": ("w_0",), "batch_norm": ("w_0", "b_0", "w_1", "w_2"),
                  "linear": ("w_0", "b_0")}


def read_paddle_pickle(src):
    try:
        import numpy as np
    except ImportError:
        raise UserError("reading Paddle files needs numpy (Debian: apt-get install python3-numpy)")
    try:
        with open(src, "rb") as f:
            obj = NumpyOnlyUnpickler(f, encoding="latin1").load()
    except Exception as e:
        raise UserError(f"cannot read '{src}' as a Paddle .pdparams pickle of numpy arrays "
                        f"(truncated, damaged, or another kind of pickle): {one_line(e)}")
    if not isinstance(obj, dict):
        raise UserError(f"'{src}' holds a {type(obj).__name__}, not a dict of parameters")
    if "UnpackBigParamInfor@@" in obj:
        raise UserError(f"'{src}' splits big parameters (pickle protocol < 4); save it again "
                        "with protocol 4")
    params = {}
    for k, v in obj.items():
        if k == "StructuredToParameterName@@":  # paddle.save's table of structured names
            continue
        if not isinstance(k, str) or not isinstance(v, np.ndarray) or v.dtype.kind != "f":
            raise UserError(f"'{src}': entry {str(k)[:60]!r} is not a floating-point numpy array")
        params[k] = v
    return params


def read_paddle(src, arch):
    """A .pdparams -> ({torchvision key: float32 array}, arch, notes), by creation order."""
    import numpy as np
    params = read_paddle_pickle(src)
    masks = [k for k in params if k.endswith(".asp_mask")]
    notes = [f"skipped {len(masks)} ASP masks"] if masks else []
    odd = [k for k in params if not GENERATED.match(k) and k not in masks]
    if odd:
        raise UserError(f"'{src}': parameter names not generated by DLE Paddle's ResNet "
                        f"(conv2d_<n>.w_0, batch_norm_<n>.w_0, ..., linear_<n>.w_0): {names(odd)}")
    groups = {}  # layer type -> {n: {suffix: array}}
    for k, v in params.items():
        if k not in masks:
            t, n, suffix = GENERATED.match(k).groups()
            groups.setdefault(t, {}).setdefault(int(n), {})[suffix] = v
    if "batch_norm" in groups and "batch_norm2d" in groups:
        raise UserError(f"'{src}' has both batch_norm_<n> and batch_norm2d_<n> parameters: "
                        "cannot tell which BatchNorm layers belong to the network")
    bn = "batch_norm2d" if "batch_norm2d" in groups else "batch_norm"
    for t, layers in groups.items():
        for n, got in layers.items():
            want = LAYER_SUFFIXES["batch_norm" if t == bn else t]
            if set(got) != set(want):
                raise UserError(f"'{src}': layer {t}_{n} has {', '.join(sorted(got))}, expected "
                                f"exactly {', '.join(f'{t}_{n}.{s}' for s in want)}")
    convs, bns, fcs = (sorted(groups.get(t, {}).items()) for t in ("conv2d", bn, "linear"))
    if len(convs) != len(bns) or len(fcs) != 1:
        raise UserError(f"'{src}': {len(convs)} conv2d, {len(bns)} batch norm and {len(fcs)} "
                        "linear layers; DLE's ResNet has one batch norm per conv and one linear")
    if arch == "auto":
        arch = next((a for a in ARCHS if len(conv_bn_order(a)) == len(convs)), None)
        if arch is None:
            raise UserError(f"'{src}': {len(convs)} conv layers match no ResNet-18/34/50/101/152 "
                            "(50 has 53)")
    order = conv_bn_order(arch)
    if len(order) != len(convs):
        raise UserError(f"'{src}' has {len(convs)} conv layers, {arch} has {len(order)}")
    out = {}
    for (conv, bn_key), (_, c), (_, b) in zip(order, convs, bns):
        out[conv + ".weight"] = c["w_0"]
        out.update((f"{bn_key}.{f}", b[s]) for f, s in zip(BN_FIELDS, ("w_0", "b_0", "w_1", "w_2")))
    fc = fcs[0][1]
    out["fc.weight"], out["fc.bias"] = fc["w_0"].T, fc["b_0"]
    return {k: np.ascontiguousarray(v, dtype="<f4") for k, v in out.items()}, arch, notes


def adapt_stem(tensors, input_channels, notes):
    """conv1.weight [64, 3|4, 7, 7] -> `input_channels` input channels, in place; says so in notes.
    4 -> 3 drops the fourth input channel's weights (exact when that channel is zero, as DLE's
    padding is); 3 -> 4 appends a zero channel (exact for any fourth channel)."""
    import numpy as np
    w = tensors.get("conv1.weight")
    if w is None or w.ndim != 4 or w.shape[1] not in (3, 4) or w.shape[1] == input_channels:
        return  # absent or another shape: check_keys names it
    if w.shape[1] == 4:
        tensors["conv1.weight"] = np.ascontiguousarray(w[:, :3])
        notes.append("conv1.weight: 4 input channels -> 3, the fourth channel's weights dropped "
                     "(exact: DLE pads the input with a zero fourth channel; --image-shape "
                     "4,H,W keeps them)")
    else:
        tensors["conv1.weight"] = np.ascontiguousarray(
            np.concatenate([w, np.zeros_like(w[:, :1])], axis=1))
        notes.append("conv1.weight: 3 input channels -> 4, a zero fourth channel added "
                     "(--image-shape 4,H,W)")


# ---------------------------------------------------------------- output
def write_safetensors(path, tensors, metadata):
    """Writes [(name, array)] as F32 safetensors, atomically (path.tmp, fsync, rename)."""
    header, off = {"__metadata__": metadata}, 0
    for name, a in tensors:
        header[name] = {"dtype": "F32", "shape": list(a.shape), "data_offsets": [off, off + a.nbytes]}
        off += a.nbytes
    h = json.dumps(header).encode()
    h += b" " * ((8 - len(h) % 8) % 8)
    tmp = path + ".tmp"
    try:
        with open(tmp, "wb") as f:
            f.write(struct.pack("<Q", len(h)) + h)
            for _, a in tensors:
                f.write(a.astype("<f4", copy=False).tobytes(order="C"))
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
        d = os.open(os.path.dirname(os.path.abspath(path)), os.O_RDONLY)
        try:
            os.fsync(d)
        finally:
            os.close(d)
    except OSError as e:
        if os.path.exists(tmp):
            os.unlink(tmp)
        raise UserError(f"cannot write '{path}': {e.strerror}")
    return 8 + len(h) + off


def convert(a):
    kind = sniff(a.src)
    if kind == "safetensors":
        raise UserError(f"'{a.src}' is already safetensors: pass it to rn50 directly")
    if kind is None:
        hint = (" (.pdiparams from paddle.jit.save is not supported: convert the training "
                "checkpoint's .pdparams)" if a.src.endswith(".pdiparams") else "")
        raise UserError(f"'{a.src}': unknown format, neither a PyTorch file (zip or pickle) nor "
                        f"a Paddle .pdparams pickle{hint}")
    if a.source_format == "paddle" and kind == "torch":
        raise UserError(f"'{a.src}' is a PyTorch file, not a Paddle .pdparams pickle "
                        "(use --from torchvision, dle-pytorch or auto)")
    if a.source_format in ("torchvision", "dle-pytorch") and kind != "torch":
        raise UserError(f"'{a.src}' is not a PyTorch file (no torch.save zip or pickle header); "
                        "a Paddle .pdparams needs --from paddle or auto")
    if a.ema and kind != "torch":
        raise UserError("--ema applies to DLE PyTorch checkpoints only")
    if kind == "torch":
        fmt, tensors, notes = read_torch(a.src, a.ema)
        arch = torch_arch(tensors) if a.arch == "auto" else a.arch
    else:
        fmt, (tensors, arch, notes) = "paddle", read_paddle(a.src, a.arch)
    adapt_stem(tensors, a.input_channels, notes)
    classes, ordered = check_keys(tensors, arch, a.src, a.input_channels)
    if os.path.exists(a.output) and os.path.samefile(a.output, a.src):
        raise UserError(f"--output '{a.output}' is the source file")
    size = write_safetensors(a.output, ordered, {
        "format": "pt", "source": os.path.basename(a.src), "source_format": fmt, "arch": arch,
        "input_channels": str(a.input_channels)})
    extra = f" ({'; '.join(notes)})" if notes else ""
    print(f"converted {fmt} '{a.src}'{extra} -> '{a.output}': {arch}, {classes} classes, "
          f"{len(ordered)} tensors, {size / 2**20:.1f} MiB")


class Parser(argparse.ArgumentParser):
    def error(self, message):
        raise UserError(message)


def main(argv=None):
    p = Parser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("src", help="the file to convert (.pth, .pth.tar, .pdparams)")
    p.add_argument("--output", required=True, help="the safetensors file to write")
    p.add_argument("--from", dest="source_format", default="auto",
                   choices=["auto", "torchvision", "dle-pytorch", "paddle"])
    p.add_argument("--arch", default="auto", choices=["auto"] + list(ARCHS))
    p.add_argument("--ema", action="store_true",
                   help="DLE PyTorch checkpoints: convert state_dict_ema, not state_dict")
    p.add_argument("--input-channels", type=int, default=3, choices=[3, 4],
                   help="the stem's input channels to write: 3 (a 4-channel stem's fourth "
                        "channel dropped) or 4 (kept; a 3-channel stem gets a zero channel)")
    try:
        convert(p.parse_args(argv))
    except UserError as e:
        print(f"convert_weights: error: {e}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
