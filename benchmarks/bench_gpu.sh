#!/usr/bin/env bash
# KernelBench on the GPU machine, results under $OUT (see benchmarks/gpu_env.sh for what it expects).
#   STEPS=baseline   bash benchmarks/bench_gpu.sh   eager and torch.compile baselines of all 250 tasks
#   STEPS=bench      bash benchmarks/bench_gpu.sh   the hand-written solutions (kernelbench_solutions/) scored
#   STEPS=throughput bash benchmarks/bench_gpu.sh   benchmarks/pool_throughput.py
# Default: STEPS="baseline bench". baseline and bench are time-boxed (no task starts after MAX_MINUTES,
# default 7, and the step is interrupted at STEP_TIMEOUT seconds, default 570, so one call fits in ten
# minutes) and resumable: the same command again continues where the last call stopped. Runs live in
# $RUNS (default .bench-runs/ in the checkout: ignored by git, kept between calls while the machine
# stays warm; carry it to a fresh machine to resume there). Each call copies every run's SQLite,
# report and log to $OUT/<run>/. Extra options: BASELINE_ARGS, BENCH_ARGS.
set -u
here=$(cd "$(dirname "$0")" && pwd)
. "$here/gpu_env.sh"
RUNS=${RUNS:-$PWD/.bench-runs}
MAX_MINUTES=${MAX_MINUTES:-7}
STEP_TIMEOUT=${STEP_TIMEOUT:-570}
mkdir -p "$RUNS"

resume() { [ -f "$1/bench.sqlite" ] && echo --resume; }

collect() {   # the run's record and report, for fetching
  mkdir -p "$OUT/$1"
  cp -r "$RUNS/$1"/bench.sqlite* "$RUNS/$1"/report.md "$RUNS/$1"/report.html "$RUNS/$1"/report_files "$OUT/$1/" 2>/dev/null
}

for step in ${STEPS:-baseline bench}; do
  start=$(date +%s)
  case $step in
    baseline)
      # SIGINT at the cap: the run records what finished, the next call resumes the rest
      timeout -s INT "$STEP_TIMEOUT" python3 -m cuda_agent.cli baseline --levels 1,2,3 --out "$RUNS/baseline" \
        $(resume "$RUNS/baseline") --max-minutes "$MAX_MINUTES" ${BASELINE_ARGS:-} > "$OUT/baseline.log" 2>&1
      echo "exit $?" >> "$OUT/baseline.log"
      collect baseline
      grep -E "already recorded|stopped with|wrote|error" "$OUT/baseline.log" | tail -5 ;;
    bench)
      tasks=$(cd "$here/kernelbench_solutions" && ls -d level*/* | paste -sd, -)
      timeout -s INT "$STEP_TIMEOUT" python3 -m cuda_agent.cli bench --solutions "$here/kernelbench_solutions" \
        --tasks "$tasks" --out "$RUNS/solutions" $(resume "$RUNS/solutions") --max-minutes "$MAX_MINUTES" \
        ${BENCH_ARGS:-} > "$OUT/bench.log" 2>&1
      echo "exit $?" >> "$OUT/bench.log"
      collect solutions
      grep -vE "^level[0-9]+/[0-9]+: " "$OUT/bench.log" | tail -14 ;;
    throughput)
      timeout "$STEP_TIMEOUT" python3 "$here/pool_throughput.py" --json "$OUT/pool_throughput.json" \
        > "$OUT/pool_throughput.txt" 2>&1
      tail -12 "$OUT/pool_throughput.txt" ;;
  esac
  echo "[$step took $(( $(date +%s) - start )) s]"
done
