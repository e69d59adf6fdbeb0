"""How fast this host starts CUDA processes: N processes at once, each importing torch and creating its
context, on one GPU and spread over every visible GPU (diagnosis: every evaluation starts a judge and a
candidate, each with its own context, so a host that serialises context creation across GPUs caps the
pool's evaluations per second whatever the number of GPUs).

    python benchmarks/diag/context_rate.py [--counts 1,4,8,12]
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import time

CHILD = """
import json, sys, time
import torch
began = time.monotonic()
torch.empty(1, device="cuda")
torch.cuda.synchronize()
made = time.monotonic()
x = torch.randn(1 << 16, device="cuda"); torch.relu(x).sum().item()   # a first kernel's module load
print(json.dumps({"context_s": made - began, "first_kernel_s": time.monotonic() - made}))
"""


def start_many(count: int, gpus: list[int]) -> dict:
    began = time.monotonic()
    procs = [subprocess.Popen([sys.executable, "-c", CHILD], stdout=subprocess.PIPE, text=True,
                              env={**__import__("os").environ, "CUDA_VISIBLE_DEVICES": str(gpus[i % len(gpus)])})
             for i in range(count)]
    answers = [json.loads(p.communicate()[0].strip().splitlines()[-1]) for p in procs]
    wall = time.monotonic() - began
    return {"processes": count, "gpus": len(gpus), "wall_s": round(wall, 2),
            "context_s_median": round(statistics.median(a["context_s"] for a in answers), 3),
            "context_s_max": round(max(a["context_s"] for a in answers), 3),
            "first_kernel_s_median": round(statistics.median(a["first_kernel_s"] for a in answers), 3)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--counts", default="1,4,8,12")
    args = parser.parse_args()
    import torch

    visible = list(range(torch.cuda.device_count()))
    if not visible:
        raise SystemExit("no GPU")
    spreads = [[0]] + ([visible] if len(visible) > 1 else [])
    for count in (int(c) for c in args.counts.split(",")):
        for gpus in spreads:
            print(json.dumps(start_many(count, gpus)), flush=True)


if __name__ == "__main__":
    main()
