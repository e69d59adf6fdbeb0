"""How fast this host starts and ends CUDA processes: N processes at once, each importing torch, creating
its context and taking `--alloc-mb` of device memory, then exiting, on one GPU and spread over every
visible GPU (diagnosis: every evaluation starts a judge and a candidate, each with its own context, and
ends both, so a host that serialises context creation or teardown across GPUs caps the pool's
evaluations per second whatever the number of GPUs). Teardown: from a process's last line to its exit
being reaped (the driver frees its context and memory in between).

    python benchmarks/diag/context_rate.py [--counts 1,4,8,12] [--alloc-mb 1024]
    python benchmarks/diag/context_rate.py --sustained 20 [--in-flight 4,12] [--variants 'A=1;B=2,C=3']

--sustained S: the host's steady rate instead of a burst. A parent that imported torch (no CUDA, as
the judges' fork server) keeps K forked children in flight for S seconds, each creating its context on
its GPU, taking `--alloc-mb`, and exiting: children (contexts made and torn down) per second, on one
GPU and spread over all. An evaluation makes and ends two contexts, so the pool's evaluations per
second cannot pass half this rate, whatever the number of GPUs.
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import time

CHILD = """
import json, os, sys, time
import torch
began = time.monotonic()
torch.empty(1, device="cuda")
torch.cuda.synchronize()
made = time.monotonic()
x = torch.randn(1 << 16, device="cuda"); torch.relu(x).sum().item()   # a first kernel's module load
loaded = time.monotonic()
block = torch.empty(int(sys.argv[1]) << 20, dtype=torch.uint8, device="cuda")   # as a judge's reserve
torch.cuda.synchronize()
print(json.dumps({"context_s": made - began, "first_kernel_s": loaded - made,
                  "alloc_s": time.monotonic() - loaded}), flush=True)
os._exit(0)
"""


def start_many(count: int, gpus: list[int], alloc_mb: int) -> dict:
    import threading

    began = time.monotonic()
    procs = [subprocess.Popen([sys.executable, "-c", CHILD, str(alloc_mb)], stdout=subprocess.PIPE, text=True,
                              env={**__import__("os").environ, "CUDA_VISIBLE_DEVICES": str(gpus[i % len(gpus)])})
             for i in range(count)]
    answers: list = [None] * count

    def follow(i: int, proc) -> None:   # its line, then how long its exit took to be reaped
        line = proc.stdout.readline()
        said = time.monotonic()
        proc.wait()
        answers[i] = {**json.loads(line), "teardown_s": time.monotonic() - said}

    threads = [threading.Thread(target=follow, args=(i, p)) for i, p in enumerate(procs)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    wall = time.monotonic() - began
    row = {"processes": count, "gpus": len(gpus), "alloc_mb": alloc_mb, "wall_s": round(wall, 2)}
    for key in ("context_s", "first_kernel_s", "alloc_s", "teardown_s"):
        values = [a[key] for a in answers]
        row[f"{key[:-2]}_median_s"] = round(statistics.median(values), 3)
        row[f"{key[:-2]}_max_s"] = round(max(values), 3)
    return row


def sustained(seconds: float, in_flight: int, gpus: list[int], alloc_mb: int, env: dict | None = None) -> dict:
    """Children that make a context and exit, `in_flight` at a time, for `seconds` (this process has
    imported torch and made no context: forked children may make their own), each with `env` set
    before its context is made (the driver reads its settings then)."""
    import os

    began, done, running, turn = time.monotonic(), 0, {}, 0
    while True:
        now = time.monotonic()
        while now - began < seconds and len(running) < in_flight:
            pid = os.fork()
            if pid == 0:   # the child: its own context, then out without Python's teardown
                code = 1
                try:
                    import torch   # the parent's copy: imported, no context yet

                    os.environ["CUDA_VISIBLE_DEVICES"] = str(gpus[turn % len(gpus)])
                    os.environ.update(env or {})
                    torch.empty(alloc_mb << 20, dtype=torch.uint8, device="cuda")
                    torch.cuda.synchronize()
                    code = 0
                finally:
                    os._exit(code)
            running[pid] = now
            turn += 1
        if not running:
            break
        pid, status = os.wait()
        if running.pop(pid, None) is not None and os.waitstatus_to_exitcode(status) == 0:
            done += 1
    wall = time.monotonic() - began
    return {"mode": "sustained", "env": env or {}, "in_flight": in_flight, "gpus": len(gpus), "alloc_mb": alloc_mb,
            "wall_s": round(wall, 2), "contexts": done, "contexts_per_s": round(done / wall, 2)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--counts", default="1,4,8,12")
    parser.add_argument("--alloc-mb", type=int, default=1024, help="device memory each process takes")
    parser.add_argument("--sustained", type=float, default=None, metavar="S", help="the steady rate over S seconds")
    parser.add_argument("--in-flight", default="4,12", help="children at once (--sustained)")
    parser.add_argument("--variants", default="", help="--sustained: settings to compare, alternated, e.g. "
                        "'CUDA_DEVICE_MAX_CONNECTIONS=1;CUDA_MODULE_LOADING=EAGER' (the default always runs)")
    args = parser.parse_args()
    import torch  # noqa: F401 - imported once here, so --sustained's forked children start at once (no CUDA call here)

    try:
        listed = subprocess.run(["nvidia-smi", "-L"], capture_output=True, text=True).stdout
    except OSError:
        listed = ""
    visible = list(range(sum(line.startswith("GPU ") for line in listed.splitlines())))
    if not visible:
        raise SystemExit("no GPU")
    spreads = [[0]] + ([visible] if len(visible) > 1 else [])
    if args.sustained:
        variants = [{}] + [dict(kv.split("=", 1) for kv in v.split(",") if "=" in kv)
                           for v in args.variants.split(";") if v.strip()]
        for k in (int(c) for c in args.in_flight.split(",")):
            for gpus in spreads:
                for env in variants:
                    print(json.dumps(sustained(args.sustained, k, gpus, args.alloc_mb, env)), flush=True)
        return
    for count in (int(c) for c in args.counts.split(",")):
        for gpus in spreads:
            print(json.dumps(start_many(count, gpus, args.alloc_mb)), flush=True)


if __name__ == "__main__":
    main()
