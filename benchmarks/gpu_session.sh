#!/usr/bin/env bash
# One GPU-machine session: GPU tests, benchmarks and the agent session, results under $OUT.
# Expects what benchmarks/gpu_env.sh says (.whl/, .deb/, .kb/).
# Step time caps: GPU_TESTS_TIMEOUT, HACKS_TIMEOUT, ... (not PYTEST_TIMEOUT: pytest-timeout, installed
# there, reads that one as a per-test limit).
#   STEPS="tests hacks resilience turnaround agent synth" bash benchmarks/gpu_session.sh [pytest paths]
set -u
STEPS=${STEPS:-tests turnaround}
. "$(dirname "$0")/gpu_env.sh"
for step in $STEPS; do
  start=$(date +%s)
  case $step in
    tests)
      CUDA_AGENT_GPU_REPORT="$OUT/gpu_results.jsonl" timeout "${GPU_TESTS_TIMEOUT:-420}" \
        python3 -m pytest -m gpu -p no:cacheprovider -q -rA "${@:-tests/gpu/test_gpu_env.py}" > "$OUT/pytest_gpu.txt" 2>&1
      tail -25 "$OUT/pytest_gpu.txt" ;;
    hacks)
      CUDA_AGENT_GPU_REPORT="$OUT/gpu_results.jsonl" timeout "${HACKS_TIMEOUT:-300}" \
        python3 -m pytest -m gpu -p no:cacheprovider -q -rA tests/gpu/hacks -k "not hundred" > "$OUT/pytest_hacks.txt" 2>&1
      tail -25 "$OUT/pytest_hacks.txt" ;;
    resilience)
      CUDA_AGENT_GPU_REPORT="$OUT/gpu_results.jsonl" timeout "${RESILIENCE_TIMEOUT:-300}" \
        python3 -m pytest -m gpu -p no:cacheprovider -q -rA -s tests/gpu/hacks -k hundred > "$OUT/pytest_resilience.txt" 2>&1
      tail -8 "$OUT/pytest_resilience.txt" ;;
    turnaround)
      timeout "${TURNAROUND_TIMEOUT:-400}" python3 benchmarks/turnaround.py --backend cuda \
        --edits "${EDITS:-5}" --plain-edits "${PLAIN_EDITS:-1}" ${TURNAROUND_ARGS:-} \
        --json "$OUT/turnaround.json" > "$OUT/turnaround.txt" 2>&1
      tail -12 "$OUT/turnaround.txt" ;;
    agent)
      timeout "${AGENT_TIMEOUT:-300}" bash benchmarks/agent_session/run.sh > "$OUT/agent_session.txt" 2>&1
      grep -E "^(===|---)|reward|correct|ms|error|\(.* s\)" "$OUT/agent_session.txt" | head -60 ;;
    synth)
      timeout "${SYNTH_TIMEOUT:-300}" python3 benchmarks/synth_gpu.py --num "${SYNTH_NUM:-200}" \
        --budget-seconds "${SYNTH_BUDGET:-240}" ${SYNTH_ARGS:-} --out /tmp/synth-gpu --kernelbench "$CUDA_AGENT_KERNELBENCH" \
        > "$OUT/synth_gpu.txt" 2>&1
      cp /tmp/synth-gpu/datasheet.md "$OUT/synth_datasheet.md" 2>/dev/null
      tail -20 "$OUT/synth_gpu.txt" ;;
  esac
  echo "[$step took $(( $(date +%s) - start )) s]"
done
