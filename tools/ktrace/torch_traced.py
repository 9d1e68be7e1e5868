#!/usr/bin/env python3
"""Run the PyTorch peer script so that ktrace records only its timed steps.

Usage (libktrace.so injected by the CUDA driver; see tools/ktrace/README.md):
  CUDA_INJECTION64_PATH=$PWD/libktrace.so KTRACE_OUT=torch.jsonl \\
      python3 tools/ktrace/torch_traced.py .gpu/peers/torch_reference.py \\
      --bench train --precision fp16 --channels-last --batch-size 256 --steps 30 --warmup-steps 10
  python3 tools/ktrace/ktrace_report.py torch.jsonl --steps 30

How: the peer's bench() binds `sync = torch.cuda.synchronize` when it is called and calls it
once after its warmup loop and once after every timed step. This wrapper replaces
torch.cuda.synchronize before running the peer (runpy.run_path(path, run_name="__main__") with
sys.argv set to the peer's path and arguments) by a function that calls the real synchronize and,
on its first call only, torch.cuda.profiler.start() (cudaProfilerStart). When the script ends
(normally, by sys.exit, or by an exception) the wrapper synchronizes once more and calls
torch.cuda.profiler.stop() (cudaProfilerStop). With KTRACE_RANGE=profiler, which this wrapper
sets unless it is already set (libktrace reads it when CUDA initialises, after this point),
the trace then holds exactly the timed steps: pass the peer's --steps to ktrace_report.py
--steps, and the per-step figures are the window totals / --steps.

Caveats: any other torch.cuda.synchronize() call made before bench()'s first one (none in the
peer today) would open the window early; the window also covers the host time between steps
(the per-step sync and Python overhead), which is what the busy share measures.
"""
import os
import runpy
import sys


def main():
    if len(sys.argv) < 2 or sys.argv[1] in ("-h", "--help"):
        print(__doc__)
        return 0 if len(sys.argv) >= 2 else 2
    os.environ.setdefault("KTRACE_RANGE", "profiler")  # before CUDA initialises
    injected = os.environ.get("CUDA_INJECTION64_PATH", "") + os.environ.get("LD_PRELOAD", "")
    if "ktrace" not in injected:
        print("torch_traced: CUDA_INJECTION64_PATH does not name libktrace.so; nothing is traced",
              file=sys.stderr)
    import torch  # after KTRACE_RANGE is set; importing torch does not initialise CUDA

    real_sync = torch.cuda.synchronize
    started = False

    def sync_and_start(device=None):
        """torch.cuda.synchronize that opens the profiler range on its first call."""
        nonlocal started
        real_sync(device)
        if not started:
            started = True
            torch.cuda.profiler.start()

    path = sys.argv[1]
    sys.argv = [path] + sys.argv[2:]
    sys.path.insert(0, os.path.dirname(os.path.abspath(path)))
    torch.cuda.synchronize = sync_and_start
    try:
        runpy.run_path(path, run_name="__main__")
    finally:
        torch.cuda.synchronize = real_sync
        if started:
            real_sync()
            torch.cuda.profiler.stop()
        else:
            print("torch_traced: torch.cuda.synchronize was never called; nothing traced",
                  file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
