# Sourced by the GPU-machine scripts: the environment they run in, and what it is, in $OUT/machine.txt.
# Expects (carried, not committed): .whl/ (pure-Python wheels missing there), .deb/ (bubblewrap),
# .kb/ (a KernelBench copy: level1..3, baseline_times_H100/); optional: .ray/ (RAY=1 gpu_carry.sh: a slim
# Ray core and its missing requirements, installed beside the wheels: pip keeps raylet's exec bits).
OUT=${OUT:-/tmp/out}
mkdir -p "$OUT"
wheels=$(ls .whl/*.whl .ray/*.whl 2>/dev/null || true)
if [ -n "$wheels" ]; then
  python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site $wheels
fi
export PYTHONPATH="$PWD/src:$PWD:/tmp/site${PYTHONPATH:+:$PYTHONPATH}"
if ! command -v bwrap >/dev/null; then
  dpkg -x .deb/bubblewrap_*.deb /tmp/bw && export PATH="/tmp/bw/usr/bin:$PATH"
fi
export CUDA_AGENT_KERNELBENCH=${CUDA_AGENT_KERNELBENCH:-$PWD/.kb} CUDA_AGENT_CACHE=${CUDA_AGENT_CACHE:-/tmp/cuda-agent-cache}
export CUDA_AGENT_TEST_CACHE=$CUDA_AGENT_CACHE  # one build cache (and torch header) for every step
{
  nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader
  python3 -c "import torch, sys; print('python', sys.version.split()[0], 'torch', torch.__version__, 'cuda', torch.version.cuda)"
  nvcc --version | tail -1; g++ --version | head -1; bwrap --version; nproc
  python3 -c "import pyarrow, transformers; print('pyarrow', pyarrow.__version__, 'transformers', transformers.__version__)"
  python3 -c "import ray; print('ray', ray.__version__)" 2>/dev/null || echo "ray: not installed"
} > "$OUT/machine.txt" 2>&1
