#!/usr/bin/python3
"""The torchvision peer of `rn50 bench loader`: ImageFolder + DataLoader with the DLE / torchvision
ImageNet transforms, timed the same way (images/s over the batches after a warm-up).

  train: RandomResizedCrop(crop) + RandomHorizontalFlip() + PILToTensor()
  val:   Resize(resize_short) + CenterCrop(crop) + PILToTensor()

PILToTensor (uint8, no normalisation) because rn50's loader also delivers uint8 images and
normalises on the device; DLE's ToTensor + Normalize would only add CPU work to the peer. Workers
are processes (DataLoader num_workers), each with torch.set_num_threads(1); batches are collated
into uint8 (N, 3, H, W) tensors in the workers, as DataLoader does. Prints one JSON line with the same keys
as `rn50 bench loader` ("loader.ips", "loader.images", "loader.seconds", "loader.cpu_seconds" --
the main process plus the worker processes -- and "loader.ips_per_cpu_second").

Run with /usr/bin/python3 (Debian's python3-torch / python3-torchvision).
"""
import argparse
import json
import os
import sys
import time

import torch
import torchvision.transforms as T
from torch.utils.data import DataLoader
from torchvision.datasets import ImageFolder


def cpu_seconds(pids):
    """User + system CPU seconds of this process and of the processes `pids` (/proc/PID/stat)."""
    t = os.times()
    total = t.user + t.system
    tick = os.sysconf("SC_CLK_TCK")
    for pid in pids:
        try:
            with open(f"/proc/{pid}/stat") as f:
                fields = f.read().rsplit(")", 1)[1].split()
            total += (int(fields[11]) + int(fields[12])) / tick  # utime, stime
        except OSError:
            pass
    return total


def worker_init(_):
    torch.set_num_threads(1)


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--image-root", required=True, help="dataset root holding train/ and val/")
    p.add_argument("--split", default="train", choices=["train", "val"])
    p.add_argument("--workers", type=int, default=2)
    p.add_argument("--batch-size", type=int, default=64)
    p.add_argument("--crop-size", type=int, default=224)
    p.add_argument("--resize-short", type=int, default=256)
    p.add_argument("--prefetch", type=int, default=2, help="DataLoader prefetch_factor")
    p.add_argument("--batches", type=int, default=0,
                   help="batches timed after the warm-up (0 = the rest of one epoch)")
    p.add_argument("--warmup-batches", type=int, default=2)
    p.add_argument("--seed", type=int, default=0)
    a = p.parse_args()

    torch.set_num_threads(1)
    torch.manual_seed(a.seed)
    if a.split == "train":
        tf = T.Compose([T.RandomResizedCrop(a.crop_size), T.RandomHorizontalFlip(),
                        T.PILToTensor()])
    else:
        tf = T.Compose([T.Resize(a.resize_short), T.CenterCrop(a.crop_size), T.PILToTensor()])
    ds = ImageFolder(os.path.join(a.image_root, a.split), transform=tf)
    kw = {}
    if a.workers > 0:
        kw = {"prefetch_factor": a.prefetch, "worker_init_fn": worker_init,
              "persistent_workers": False}
    dl = DataLoader(ds, batch_size=a.batch_size, shuffle=a.split == "train",
                    drop_last=a.split == "train", num_workers=a.workers, **kw)
    total = len(dl)
    measured = total - a.warmup_batches if a.batches <= 0 else a.batches
    if measured <= 0 or a.warmup_batches + measured > total:
        sys.exit(f"torch_loader.py: {total} batches per epoch, cannot time {measured} after "
                 f"{a.warmup_batches} warm-up batches")
    it = iter(dl)
    for _ in range(a.warmup_batches):
        next(it)
    pids = [w.pid for w in getattr(it, "_workers", [])]  # DataLoader's worker processes
    c0 = cpu_seconds(pids)
    t0 = time.perf_counter()
    images = 0
    for _ in range(measured):
        x, _y = next(it)
        images += x.shape[0]
    s = time.perf_counter() - t0
    cpu = cpu_seconds(pids) - c0
    del it
    print(json.dumps({"peer": "torchvision", "split": a.split, "loader.ips": images / s,
                      "loader.images": images, "loader.seconds": s, "loader.cpu_seconds": cpu,
                      "loader.ips_per_cpu_second": images / cpu if cpu > 0 else 0.0,
                      "workers": a.workers, "batch_size": a.batch_size}), flush=True)


if __name__ == "__main__":
    main()
