"""Whether a failed cudaHostRegister leaves an error that PyTorch's next kernel launch reports, and whether
transfer._clear_cuda_error clears it (GPU diagnostic for the staging file's fallback to pageable copies)."""
import os

import torch

from cuda_agent.env.workers.transfer import _clear_cuda_error

x = torch.ones(4, device="cuda")
cudart = torch.cuda.cudart()
for name in ("libcudart.so.13", "libcudart.so.12", "libcudart.so"):
    try:
        __import__("ctypes").CDLL(name, mode=os.RTLD_NOLOAD | os.RTLD_LAZY)
        print("loaded:", name)
    except OSError:
        print("not loaded:", name)
print("a bad registration returns", int(cudart.cudaHostRegister(1, 4096, 0)))
try:
    print("launch after it, not cleared:", float((x + 1).sum()))
except Exception as exc:
    print("launch after it, not cleared, raised:", str(exc).splitlines()[0][:120])
print("a bad registration returns", int(cudart.cudaHostRegister(1, 4096, 0)))
_clear_cuda_error()
print("launch after it, cleared:", float((x + 1).sum()))
