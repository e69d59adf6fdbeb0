"""What handing a 128 MB verification output from one process to another costs (GPU diagnostic).

One process plays both sides, each step timed on its own (median of REPS):
  d2h pinned      the output to a pinned host buffer (cached by the allocator)
  write new       that buffer to a new file on /dev/shm (what the candidate does now)
  write reuse     the same into a file that already has its pages
  read pinned     the file into a pinned buffer (what the judge does now)
  h2d pinned      the pinned buffer back to the device
  mmap d2h        the output straight into a shared mapping (pageable)
  mmap d2h reg    the same into a mapping registered with CUDA (cudaHostRegister)
  mmap h2d        the mapping to the device (pageable)
  mmap h2d reg    the same, registered
"""
import mmap
import os
import statistics
import time

import torch

REPS = 7
SIZE = 8192 * 4096 * 4
dev = torch.device("cuda")
out = torch.randn(SIZE // 4, device=dev).view(torch.uint8)
torch.cuda.synchronize()


def timed(fn):
    times = []
    for _ in range(REPS):
        torch.cuda.synchronize()
        t = time.perf_counter()
        fn()
        torch.cuda.synchronize()
        times.append((time.perf_counter() - t) * 1e3)
    return statistics.median(times)


pinned = torch.empty(SIZE, dtype=torch.uint8, pin_memory=True)
back = torch.empty(SIZE, dtype=torch.uint8, device=dev)
path = "/dev/shm/handover-diag.bin"


def write_new():
    if os.path.exists(path):
        os.unlink(path)
    with open(path, "wb") as fh:
        fh.write(pinned.numpy().data)


def write_reuse():
    with open(path, "r+b") as fh:
        fh.write(pinned.numpy().data)


def read_pinned():
    view, done = pinned.numpy().data, 0
    with open(path, "rb") as fh:
        while done < SIZE:
            done += fh.readinto(view[done:])


rows = {"d2h pinned": timed(lambda: pinned.copy_(out)), "write new": timed(write_new),
        "write reuse": timed(write_reuse), "read pinned": timed(read_pinned),
        "h2d pinned": timed(lambda: back.copy_(pinned))}
fd = os.memfd_create("handover", os.MFD_ALLOW_SEALING)
os.ftruncate(fd, SIZE)
mapping = mmap.mmap(fd, SIZE)
shared = torch.frombuffer(mapping, dtype=torch.uint8)
rows["mmap first touch d2h"] = timed(lambda: shared.copy_(out))
rows["mmap d2h"] = timed(lambda: shared.copy_(out))
rows["mmap h2d"] = timed(lambda: back.copy_(shared))
cudart = torch.cuda.cudart()
err = cudart.cudaHostRegister(shared.data_ptr(), SIZE, 0)
rows["register"] = timed(lambda: None)
if int(err) == 0:
    rows["mmap d2h reg"] = timed(lambda: shared.copy_(out, non_blocking=True))
    rows["mmap h2d reg"] = timed(lambda: back.copy_(shared, non_blocking=True))
    t = time.perf_counter()
    cudart.cudaHostUnregister(shared.data_ptr())
    cudart.cudaHostRegister(shared.data_ptr(), SIZE, 0)
    rows["unregister + register"] = (time.perf_counter() - t) * 1e3
else:
    print("cudaHostRegister failed:", err)
for name, ms in rows.items():
    print(f"{name:24} {ms:8.2f} ms  ({SIZE / ms / 1e6:6.1f} GB/s)")
os.unlink(path)
