#!/usr/bin/env bash
# Acting as the agent on two KernelBench tasks through the workspace only (GPU machine).
# For each task: create the workspace, look at SKILL.md and the stub, run the reference profile
# snippet, put in the kernels written for it, then ./compile, ./verify, ./profile.
set -u
here=$(cd "$(dirname "$0")" && pwd)
# AGENT_TASKS picks tasks by folder name (default: both)
for pair in "level1/40 level1_40_layernorm" "level2/12 level2_12_gemm_mul_leaky"; do
  case " ${AGENT_TASKS:-level1_40_layernorm level2_12_gemm_mul_leaky} " in *" ${pair#* } "*) ;; *) continue ;; esac
  set -- $pair
  ws=/tmp/agent-ws-$2
  rm -rf "$ws"
  echo "=== $1"
  python3 -m cuda_agent.cli workspace "$1" "$ws" --backend cuda --kernelbench "$CUDA_AGENT_KERNELBENCH"
  (cd "$ws" && echo "--- ./verify on the untouched stub" && ./verify | tail -5)
  cp -r "$here/$2/kernels/." "$ws/kernels/"
  cp "$here/$2/model_new.py" "$ws/model_new.py"
  (cd "$ws" && for c in compile verify profile; do echo "--- ./$c"; /usr/bin/time -f "(%e s)" ./$c; done)
  # a kernel-only edit, as an agent iterates: the binding must come from the cache
  sed -i 's/THREADS = 256/THREADS = 512/; s/<<<sms \* 8, 256/<<<sms * 4, 256/' "$ws"/kernels/*.cu
  (cd "$ws" && echo "--- ./profile after a kernel-only edit" && /usr/bin/time -f "(%e s)" ./profile)
done
