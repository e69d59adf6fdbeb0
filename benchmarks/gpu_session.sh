#!/usr/bin/env bash
# One GPU-machine session: the GPU test suite and the turnaround benchmark, results under $OUT.
# Expects (carried, not committed): .whl/ (pure-Python wheels missing there), .deb/ (bubblewrap),
# .kb/ (a KernelBench copy: level1..3). Usage on the device: bash benchmarks/gpu_session.sh [pytest args]
set -u
OUT=${OUT:-/tmp/out}
mkdir -p "$OUT"
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl
export PYTHONPATH="$PWD/src:$PWD:/tmp/site${PYTHONPATH:+:$PYTHONPATH}"
if ! command -v bwrap >/dev/null; then
  dpkg -x .deb/bubblewrap_*.deb /tmp/bw && export PATH="/tmp/bw/usr/bin:$PATH"
fi
export CUDA_AGENT_KERNELBENCH="$PWD/.kb" CUDA_AGENT_CACHE=/tmp/cuda-agent-cache
{
  nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader
  python3 -c "import torch, sys; print('python', sys.version.split()[0], 'torch', torch.__version__, 'cuda', torch.version.cuda)"
  nvcc --version | tail -1; g++ --version | head -1; bwrap --version
  python3 -c "from cuda_agent.env.sandbox import sandbox_available; print('sandbox', sandbox_available())"
} 2>&1 | tee "$OUT/machine.txt"
CUDA_AGENT_GPU_REPORT="$OUT/gpu_results.jsonl" timeout "${PYTEST_TIMEOUT:-420}" \
  python3 -m pytest -m gpu -p no:cacheprovider -q -rA "${@:-tests/gpu}" 2>&1 | tee "$OUT/pytest_gpu.txt" | tail -40
if [ "${TURNAROUND:-1}" = 1 ]; then
  timeout "${TURNAROUND_TIMEOUT:-400}" python3 benchmarks/turnaround.py --backend cuda --json "$OUT/turnaround.json" \
    2>&1 | tee "$OUT/turnaround.txt" | tail -12
fi
