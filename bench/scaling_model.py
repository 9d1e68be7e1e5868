#!/usr/bin/env python3
"""Expected data-parallel scaling efficiency of ResNet-50 on paper (docs/scaling.md).

Model: a step computes for t_c = batch / per-GPU throughput seconds; the gradient allreduce of
S bytes on N GPUs is NCCL's ring, t_ar = 2 (N - 1) / N * S / busbw + 2 (N - 1) * alpha (NCCL's
tests' bus-bandwidth definition, nccl-tests doc/PERFORMANCE.md), where busbw is the slowest
link of the ring: NVLink inside a node, the node's network bandwidth across nodes; a share
`hidden` of t_ar runs under backward (the overlap that --bucket-size-mb buckets buy, measured by
bench/netns_allreduce.sh), the rest adds to the step. Efficiency = t_c / (t_c + (1 - hidden)
t_ar). Input loading, stragglers and BatchNorm are left out, so these are upper bounds.

  python3 bench/scaling_model.py [--ips 2470] [--batch 256] [--params 25557032]
                                 [--hidden 0 0.41 0.9] [--nvlink-gbs 230] [--link-eff 0.8]
"""
import argparse


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--ips", type=float, default=2470.0,
                    help="per-GPU training images/s (default: DLE PyTorch, A100, AMP, batch 256)")
    ap.add_argument("--batch", type=int, default=256, help="per-GPU batch")
    ap.add_argument("--params", type=int, default=25557032, help="ResNet-50 parameters")
    ap.add_argument("--hidden", type=float, nargs="+", default=[0.0, 0.5],
                    help="shares of the allreduce hidden under backward (measured): one "
                         "efficiency column each")
    ap.add_argument("--nvlink-gbs", type=float, default=230.0,
                    help="intra-node bus bandwidth, GB/s (nccl-tests all_reduce busbw, 8 GPUs)")
    ap.add_argument("--link-eff", type=float, default=0.8,
                    help="share of a network link's line rate a ring reaches")
    ap.add_argument("--alpha-us", type=float, default=5.0, help="per-hop latency, microseconds")
    a = ap.parse_args()

    t_c = a.batch / a.ips
    print(f"step compute {t_c * 1e3:.1f} ms ({a.ips:g} img/s per GPU, batch {a.batch}); "
          f"ring bus bandwidth: NVLink {a.nvlink_gbs:g} GB/s, network {a.link_eff:.0%} of the "
          f"line rate; {a.alpha_us:g} us per hop\n")
    cols = " | ".join(f"efficiency, {h:.0%} hidden" for h in a.hidden)
    print(f"| GPUs (nodes x 8) | network per node | gradients | allreduce ms | {cols} |")
    print("|---|---|---|---|" + "---|" * len(a.hidden))
    for n in (8, 16, 32):
        nets = [("NVLink only", None)] if n == 8 else [
            (f"{g} Gbit/s", g) for g in (100, 200, 400)]
        for label, gbit in nets:
            busbw = a.nvlink_gbs * 1e9 if gbit is None else gbit / 8 * 1e9 * a.link_eff
            for dtype, size in (("fp32", 4), ("fp16", 2)):
                s = a.params * size
                t_ar = 2 * (n - 1) / n * s / busbw + 2 * (n - 1) * a.alpha_us * 1e-6
                effs = " | ".join(f"{t_c / (t_c + (1 - h) * t_ar):.1%}" for h in a.hidden)
                print(f"| {n} ({n // 8} x 8) | {label} | {dtype} | {t_ar * 1e3:.1f} | {effs} |")


if __name__ == "__main__":
    main()
