#!/usr/bin/env python3
"""Top kernels per step from ktrace traces (tools/ktrace/libktrace.so), and a side-by-side
comparison of kernel families when two traces are given.

Input: JSON lines written by libktrace.so at process exit:
  {"type":"meta","range":"all"|"profiler","windows":[[t0,t1],...],"dropped":N,"error":"",...}
  {"type":"kernel","name":...,"start":ns,"end":ns,"stream":...,"graph_node":...,...}
  {"type":"memcpy","kind":"HtoD"|"DtoH"|"DtoD"|...,"bytes":...,"host":"pageable"|"pinned"|"",...}
  {"type":"memset","bytes":...,"start":ns,"end":ns,...}
  {"type":"api","counts":{"cudaStreamSynchronize":12,...},"categories":{"sync":12,...}}
With range "profiler", records count when their start lies in one of the meta windows; with
range "all" every record counts and the window is the span from the first kernel start to the
last kernel end. The busy share is the union of the kernel intervals (clipped to the windows)
over the windows' length: how much of the window the GPU had a kernel running.
Per-step figures are totals / --steps, so --steps must be the number of steps inside the window
(e.g. rn50 --benchmark's timed steps, or the torch peer's --steps with torch_traced.py).

Usage:
  ktrace_report.py TRACE.jsonl [TRACE2.jsonl] --steps N [--label A --label B] [--top 40]
                   [--json OUT]
  ktrace_report.py --self-test      # synthetic traces with known numbers; CI runs this
"""
import argparse
import json
import os
import re
import sys
import tempfile

# Kernel families, first match wins (case-insensitive search in the kernel name); FAMILY_ORDER
# is the display order.
FAMILIES = [
    ("conv dgrad", r"dgrad"),
    ("conv wgrad", r"wgrad"),
    ("batchnorm", r"(^|[^a-z])bn_|_bn_|batch_?norm"),
    ("copy/convert", r"copy|convert|(^|[^a-z])cast|transpose|nchwtonhwc|nhwctonchw|fill"),
    ("conv fwd", r"fprop|implicit_gemm|xmma|conv|cudnn|winograd|im2col"),
    ("gemm", r"gemm|cublas|cutlass|matmul"),
    ("pooling", r"pool"),
    ("optimizer", r"sgd|multi_tensor|foreach|adam|momentum|optimizer|non_finite|check_finite"
                  r"|loss_scale|update_scale"),
    ("softmax/loss", r"softmax|cross_entropy|nll_loss|loss|xent|topk"),
    ("reduce", r"reduce|reduction|bias_grad|absmax"),
    ("elementwise", r"elementwise|eltwise|relu|add|mul|act|threshold|bias"),
]
FAMILY_ORDER = ["conv fwd", "conv dgrad", "conv wgrad", "gemm", "batchnorm", "elementwise",
                "pooling", "softmax/loss", "optimizer", "reduce", "copy/convert", "other"]
API_CATEGORIES = ["sync", "alloc", "free", "memcpy", "memset", "graph_launch", "kernel_launch"]
_FAMILY_RE = [(f, re.compile(p, re.I)) for f, p in FAMILIES]


def family(name):
    """The family of a kernel name (see FAMILIES), or "other"."""
    return next((f for f, r in _FAMILY_RE if r.search(name)), "other")


def union_ns(intervals):
    """Total length of the union of [start, end] intervals."""
    total, cur_s, cur_e = 0, None, None
    for s, e in sorted(intervals):
        if cur_e is None or s > cur_e:
            if cur_e is not None:
                total += cur_e - cur_s
            cur_s, cur_e = s, e
        else:
            cur_e = max(cur_e, e)
    return total + (cur_e - cur_s if cur_e is not None else 0)


def load(path):
    """Reads a trace: (meta, kernels, memcpys, memsets, api), without the records outside the
    profiler windows; meta["windows"] is replaced by the windows the busy share uses."""
    meta, api, recs = {}, {}, {"kernel": [], "memcpy": [], "memset": []}
    with open(path) as f:
        for n, line in enumerate(f, 1):
            if not line.strip():
                continue
            try:
                r = json.loads(line)
            except json.JSONDecodeError as e:
                sys.exit(f"{path}:{n}: not a JSON line ({e})")
            if r["type"] == "meta":
                meta = r
            elif r["type"] == "api":
                api = r
            elif r["type"] in recs:
                recs[r["type"]].append(r)
    profiler = meta.get("range") == "profiler"
    if profiler:
        windows = [tuple(w) for w in meta.get("windows", [])]
    elif recs["kernel"]:
        windows = [(min(k["start"] for k in recs["kernel"]), max(k["end"] for k in recs["kernel"]))]
    else:
        windows = []
    inside = lambda r: not profiler or any(t0 <= r["start"] <= t1 for t0, t1 in windows)
    meta = dict(meta, windows=windows)
    kept = [[r for r in recs[kind] if inside(r)] for kind in ("kernel", "memcpy", "memset")]
    return (meta, *kept, api)


def analyse(path, steps, label):
    """All tables for one trace, as a JSON-ready dict."""
    meta, kernels, memcpys, memsets, api = load(path)
    per_name = {}
    for k in kernels:
        calls, ns = per_name.get(k["name"], (0, 0))
        per_name[k["name"]] = (calls + 1, ns + k["end"] - k["start"])
    total_ns = sum(ns for _, ns in per_name.values())
    rows = [{"name": n, "family": family(n), "calls": c, "total_ms": ns / 1e6,
             "ms_per_step": ns / 1e6 / steps, "share": ns / total_ns if total_ns else 0.0,
             "us_per_call": ns / 1e3 / c} for n, (c, ns) in per_name.items()]
    rows.sort(key=lambda r: (-r["total_ms"], r["name"]))
    windows = meta["windows"]
    wall_ns = sum(t1 - t0 for t0, t1 in windows)
    clipped = [(max(k["start"], t0), min(k["end"], t1)) for k in kernels for t0, t1 in windows
               if k["start"] < t1 and k["end"] > t0]
    busy_ns = union_ns(clipped)
    copies = {}
    for m in memcpys:
        key = m["kind"] + (" " + m["host"] if m.get("host") else "")
        copies[key] = copies.get(key, 0) + 1
    families = {}
    for r in rows:
        families[r["family"]] = families.get(r["family"], 0.0) + r["ms_per_step"]
    cats = api.get("categories", {})
    return {
        "label": label, "file": path, "steps": steps, "range": meta.get("range", "?"),
        "windows": len(windows), "dropped": meta.get("dropped", 0), "error": meta.get("error", ""),
        "kernels": rows, "kernel_calls_per_step": len(kernels) / steps,
        "kernel_ms_per_step": total_ns / 1e6 / steps, "wall_ms_per_step": wall_ns / 1e6 / steps,
        "busy_share": busy_ns / wall_ns if wall_ns else None,
        "memcpy_per_step": {k: v / steps for k, v in sorted(copies.items())},
        "memcpy_mb_per_step": sum(m["bytes"] for m in memcpys) / 1e6 / steps,
        "memset_per_step": len(memsets) / steps,
        "api_per_step": {c: cats.get(c, 0) / steps for c in API_CATEGORIES},
        "api_counts": api.get("counts", {}),
        "families_ms_per_step": {f: families[f] for f in FAMILY_ORDER if f in families},
    }


def compare(a, b):
    """Family rows (ms per step in a and b, ratio a/b) for two analysed traces."""
    fa, fb = a["families_ms_per_step"], b["families_ms_per_step"]
    rows = []
    for f in FAMILY_ORDER + ["total"]:
        x = a["kernel_ms_per_step"] if f == "total" else fa.get(f, 0.0)
        y = b["kernel_ms_per_step"] if f == "total" else fb.get(f, 0.0)
        if x or y:
            rows.append({"family": f, "a_ms": x, "b_ms": y, "ratio": x / y if y else None})
    return rows


def print_trace(t, top, out=sys.stdout):
    """Prints the tables of one analysed trace."""
    p = lambda *a: print(*a, file=out)
    p(f"== {t['label']} ({t['file']}): range={t['range']}, {t['windows']} window(s), "
      f"{t['steps']} steps ==")
    if t["dropped"] or t["error"]:
        p(f"  WARNING: {t['dropped']} records dropped; error: {t['error'] or '-'}")
    p(f"{'calls':>7} {'total ms':>10} {'ms/step':>9} {'share':>6} {'us/call':>9}  kernel")
    for r in t["kernels"][:top]:
        p(f"{r['calls']:>7} {r['total_ms']:>10.3f} {r['ms_per_step']:>9.3f}"
          f" {100 * r['share']:>5.1f}% {r['us_per_call']:>9.2f}  {r['name'][:110]}")
    if len(t["kernels"]) > top:
        p(f"  ... {len(t['kernels']) - top} more kernel names")
    busy = "n/a" if t["busy_share"] is None else f"{100 * t['busy_share']:.1f}%"
    p(f"kernel time/step {t['kernel_ms_per_step']:.3f} ms ({t['kernel_calls_per_step']:.1f}"
      f" kernels); GPU busy {busy} of the {t['wall_ms_per_step']:.3f} ms/step window")
    copies = ", ".join(f"{k} {v:.2f}" for k, v in t["memcpy_per_step"].items()) or "none"
    p(f"memcpy/step: {copies} ({t['memcpy_mb_per_step']:.3f} MB);"
      f" memset/step {t['memset_per_step']:.2f}")
    p("api/step: " + ", ".join(f"{c} {v:.2f}" for c, v in t["api_per_step"].items()))
    p("")


def print_compare(a, b, rows, out=sys.stdout):
    """Prints the family comparison table."""
    w = max(12, len(a["label"]), len(b["label"]))
    print(f"{'family (ms/step)':<16} {a['label']:>{w}} {b['label']:>{w}} {'ratio':>7}"
          f"  (ratio = {a['label']} / {b['label']})", file=out)
    for r in rows:
        ratio = "-" if r["ratio"] is None else f"{r['ratio']:.2f}"
        print(f"{r['family']:<16} {r['a_ms']:>{w}.3f} {r['b_ms']:>{w}.3f} {ratio:>7}", file=out)


def report(paths, steps, labels, top, json_out=None, out=sys.stdout):
    """Analyses and prints one or two traces; returns the JSON-ready result."""
    labels = list(labels or []) + [os.path.basename(p) for p in paths[len(labels or []):]]
    traces = [analyse(p, steps, l) for p, l in zip(paths, labels)]
    result = {"traces": traces}
    for t in traces:
        print_trace(t, top, out)
    if len(traces) == 2:
        result["comparison"] = compare(*traces)
        print_compare(traces[0], traces[1], result["comparison"], out)
    if json_out:
        with open(json_out, "w") as f:
            json.dump(result, f, indent=1)
    return result


def self_test():
    """Synthetic traces with known numbers; raises AssertionError on a mismatch."""
    fprop = "sm90_xmma_fprop_implicit_gemm_f16f16_f16f32_f32_nhwckrsc_nhwc_tilesize128x128x64"
    bn, bnr = "cudnn::bn_fw_tr_1C11_kernel_NCHW", "rn50::cuda::bn_apply_relu_kernel"
    gemm = "cutlass3x_sm90_tensorop_gemm_f16_f16_f32_void_f16_128x128x64_1x1x1_0_tnn_align8"
    names = {
        fprop: "conv fwd", bn: "batchnorm", bnr: "batchnorm", gemm: "gemm",
        "sm90_xmma_dgrad_implicit_gemm_f16f16_f16f32_f32_nhwckrsc_nhwc": "conv dgrad",
        "sm90_xmma_wgrad_implicit_gemm_f16f16_f16f32_f32_nhwckrsc_nhwc": "conv wgrad",
        "void at::native::batch_norm_collect_statistics_channels_last_kernel<...>": "batchnorm",
        "void at::native::vectorized_elementwise_kernel<4, at::native::CUDAFunctor_add<float>, "
        "at::detail::Array<char*, 3> >(int, ...)": "elementwise",
        "rn50::cuda::(anonymous namespace)::convert_4d_kernel": "copy/convert",
        "rn50::cuda::(anonymous namespace)::sgd_half_kernel": "optimizer",
        "rn50::cuda::(anonymous namespace)::xent_fwd_rows": "softmax/loss",
        "void at::native::multi_tensor_apply_kernel<at::native::TensorListMetadata<3> >":
            "optimizer",
        "at::native::(anonymous namespace)::max_pool_forward_nhwc<c10::Half, float>": "pooling",
        "void at::native::unrolled_elementwise_kernel<at::native::direct_copy_kernel_cuda>":
            "copy/convert",
        "void at::native::reduce_kernel<512, 1, at::native::ReduceOp<float> >": "reduce",
        "mystery_kernel": "other",
    }
    for n, f in names.items():
        assert family(n) == f, (n, family(n), f)

    ms = 1_000_000
    def k(name, t0, t1, stream=1):
        return {"type": "kernel", "name": name, "start": t0 * ms, "end": t1 * ms, "stream": stream}
    def cp(kind, host, t0):
        return {"type": "memcpy", "kind": kind, "host": host, "bytes": 10**6, "start": t0 * ms,
                "end": t0 * ms + 1000}
    trace_a = [  # 10 ms profiler window, 2 steps; kernels on streams 1 and 2 overlap
        {"type": "meta", "range": "profiler", "windows": [[0, 10 * ms]], "dropped": 0},
        k(fprop, 1, 3), k(bn, 2, 4, stream=2), k(fprop, 5, 7), k(bnr, 8, 9),
        k(fprop, 20, 25),  # outside the window: ignored
        cp("HtoD", "pageable", 1), cp("HtoD", "pageable", 6), cp("DtoH", "pinned", 9),
        {"type": "memset", "bytes": 64, "start": 2 * ms, "end": 2 * ms + 10},
        {"type": "api", "counts": {"cudaStreamSynchronize": 4, "cudaLaunchKernel": 6,
                                   "cudaMalloc": 2},
         "categories": {"sync": 4, "kernel_launch": 6, "alloc": 2}}]
    trace_b = [  # range "all": the window is the kernel span, 10..22 ms
        {"type": "meta", "range": "all", "windows": [[0, 99 * ms]], "dropped": 0},
        k(fprop, 10, 13), k(fprop, 13, 16), k(gemm, 16, 17), k(bn, 20, 22),
        cp("HtoD", "pinned", 1),  # before the first kernel: still counted
        {"type": "api", "counts": {"cudaGraphLaunch": 2}, "categories": {"graph_launch": 2}}]
    with tempfile.TemporaryDirectory() as d:
        paths = []
        for i, recs in enumerate((trace_a, trace_b)):
            paths.append(os.path.join(d, f"t{i}.jsonl"))
            with open(paths[-1], "w") as f:
                f.write("".join(json.dumps(r) + "\n" for r in recs))
        with open(os.devnull, "w") as null:
            res = report(paths, 2, ["A", "B"], 40, os.path.join(d, "out.json"), out=null)
        with open(os.path.join(d, "out.json")) as f:
            assert json.load(f)["comparison"] == res["comparison"]

    def close(x, y):
        assert x is not None and abs(x - y) < 1e-9, (x, y)
    a, b = res["traces"]
    rows = {r["name"]: r for r in a["kernels"]}
    assert [r["name"] for r in a["kernels"]] == [fprop, bn, bnr]
    assert rows[fprop]["calls"] == 2 and rows[bn]["calls"] == 1
    close(rows[fprop]["total_ms"], 4); close(rows[fprop]["ms_per_step"], 2)
    close(rows[fprop]["share"], 4 / 7); close(rows[bn]["share"], 2 / 7)
    close(rows[bnr]["us_per_call"], 1000)
    close(a["kernel_ms_per_step"], 3.5); close(a["wall_ms_per_step"], 5)
    close(a["kernel_calls_per_step"], 2)
    close(a["busy_share"], 0.6)  # union [1,4] + [5,7] + [8,9] = 6 ms of the 10 ms window
    assert a["memcpy_per_step"] == {"DtoH pinned": 0.5, "HtoD pageable": 1.0}
    close(a["memset_per_step"], 0.5)
    assert a["api_per_step"] == {"sync": 2, "alloc": 1, "free": 0, "memcpy": 0, "memset": 0,
                                 "graph_launch": 0, "kernel_launch": 3}
    close(b["busy_share"], 9 / 12); close(b["wall_ms_per_step"], 6)  # union [10,17] + [20,22]
    close(b["api_per_step"]["graph_launch"], 1)
    assert b["memcpy_per_step"] == {"HtoD pinned": 0.5}
    cmp = {r["family"]: r for r in res["comparison"]}
    assert list(cmp) == ["conv fwd", "gemm", "batchnorm", "total"]
    close(cmp["conv fwd"]["a_ms"], 2); close(cmp["conv fwd"]["b_ms"], 3)
    close(cmp["conv fwd"]["ratio"], 2 / 3); close(cmp["batchnorm"]["a_ms"], 1.5)
    close(cmp["gemm"]["b_ms"], 0.5); close(cmp["gemm"]["ratio"], 0)
    close(cmp["total"]["ratio"], 3.5 / 4.5)
    print("ktrace_report self-test: ok")


def main():
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("traces", nargs="*", help="one or two ktrace .jsonl files")
    ap.add_argument("--steps", type=int, help="steps inside the traced window (per-step divisor)")
    ap.add_argument("--label", action="append", help="a name per trace (repeat)")
    ap.add_argument("--top", type=int, default=40, help="kernel names to list per trace")
    ap.add_argument("--json", metavar="OUT", help="also write the tables as JSON")
    ap.add_argument("--self-test", action="store_true", help="check against synthetic traces")
    a = ap.parse_args()
    if a.self_test:
        self_test()
        return
    if not 1 <= len(a.traces) <= 2 or not a.steps or a.steps < 1:
        ap.error("give one or two traces and --steps N (N >= 1)")
    if a.label and len(a.label) > len(a.traces):
        ap.error("more --label than traces")
    report(a.traces, a.steps, a.label, a.top, a.json)


if __name__ == "__main__":
    main()
