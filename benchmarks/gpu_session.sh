#!/usr/bin/env bash
# One GPU-machine session: GPU tests, hack suites, benchmarks, the KernelBench baseline and bench
# runs and the RL learning check, results under $OUT. Run a few steps per call (each call has a
# 10-minute limit); the build cache in /tmp persists while the machine stays warm between calls.
# Expects (carried, not committed; benchmarks/gpu_carry.sh makes them): .whl/ (pure-Python wheels missing
# there), .deb/ (bubblewrap), .kb/ (a KernelBench copy: level1..3 and baseline_times_H100), .old/ (optional).
#   STEPS="setup tests hacks" bash benchmarks/gpu_session.sh
# SAMPLE_LOAD=1: the machine's load and its runnable threads by name, twice a second, in $OUT/load.txt.
# compare: .old (gpu_carry.sh OLD=<commit>) against this code, alternated, each with its own scripts
# (COMPARE_FIDELITY=1: timing_fidelity.py too, with RUNS and FIDELITY_ARGS; COMPARE_FIDELITY_ONLY=1: only it), e.g.
#   STEPS="setup compare" PAIRS=2 THROUGHPUT_ARGS="--kernels small --modes concurrent" bash benchmarks/gpu_session.sh
# scaling: evaluations/s at 1, 2, 4, ... GPUs and the ratio to one (pool_scaling.py), e.g. on 4 GPUs
#   STEPS="setup scaling" bash benchmarks/gpu_session.sh
# Step time caps: <STEP>_TIMEOUT (not PYTEST_TIMEOUT: pytest-timeout, installed there, reads that).
set -u
STEPS=${STEPS:-setup tests}
. "$(dirname "$0")/gpu_env.sh"   # $OUT, carried wheels, bwrap, KernelBench, cache; machine.txt
run() {  # run STEP_NAME DEFAULT_TIMEOUT command...: output to $OUT/STEP_NAME.txt, its tail here
  local name=$1 limit=$2; shift 2
  local var; var="$(echo "$name" | tr a-z A-Z)_TIMEOUT"
  timeout "${!var:-$limit}" "$@" > "$OUT/$name.txt" 2>&1
  echo "--- $name (exit $?)"; tail -"${TAIL:-25}" "$OUT/$name.txt"
}
if [ -n "${SAMPLE_LOAD:-}" ]; then   # twice a second: the load, which threads are runnable (by name), and
  # where the threads in uninterruptible sleep wait in the kernel ("D wchan name": the driver's share of the load)
  while sleep 0.5; do
    echo "== $(date +%s.%N) $(cut -d' ' -f1-4 /proc/loadavg)"
    ps -eLo stat=,wchan:40=,comm= | awk '$1 ~ /^R/ {print $3} $1 ~ /^D/ {print "D", $2, $3}' | sort | uniq -c | sort -rn | head -10
  done > "$OUT/load.txt" 2>&1 &
  trap 'kill %1 2>/dev/null' EXIT
fi
for step in $STEPS; do
  start=$(date +%s)
  case $step in
    setup)
      cat "$OUT/machine.txt"
      run doctor 120 python3 -m cuda_agent.cli doctor --backend cuda
      run warm 300 python3 -m cuda_agent.cli cache warm --backend cuda ;;
    tests)
      CUDA_AGENT_GPU_REPORT="$OUT/gpu_results.jsonl" run tests 420 \
        python3 -m pytest -m gpu -p no:cacheprovider -q -rA ${TESTS:-tests/gpu --ignore=tests/gpu/hacks} ;;
    hacks)
      CUDA_AGENT_GPU_REPORT="$OUT/gpu_results.jsonl" run hacks 420 \
        python3 -m pytest -m gpu -p no:cacheprovider -q -rA tests/gpu/hacks -k "not hundred" ;;
    resilience)
      CUDA_AGENT_GPU_REPORT="$OUT/gpu_results.jsonl" TAIL=8 run resilience 300 \
        python3 -m pytest -m gpu -p no:cacheprovider -q -rA -s tests/gpu/hacks -k hundred ;;
    diag)   # the GPU diagnostics under benchmarks/diag/ (DIAG: which, default all; DIAG_ARGS: their arguments)
      run diag 240 bash -c 'for f in ${DIAG:-benchmarks/diag/*.py}; do echo "== $f"; python3 "$f" ${DIAG_ARGS:-}; done' ;;
    fidelity)
      run fidelity 420 python3 benchmarks/timing_fidelity.py --runs "${RUNS:-10}" --kernelbench .kb ${FIDELITY_ARGS:-} \
        --json "$OUT/fidelity.json" ;;
    throughput)
      run throughput 420 python3 benchmarks/pool_throughput.py ${THROUGHPUT_ARGS:-} --json "$OUT/throughput.json" ;;
    throughput_all)   # the same, every timed call made (--precision 0): the schedule before early stopping
      run throughput_all 420 python3 benchmarks/pool_throughput.py ${THROUGHPUT_ARGS:-} --precision 0 \
        --json "$OUT/throughput_all.json" ;;
    scaling)   # evaluations/s at 1, 2, 4, ... GPUs of this machine and the ratio to one: one EvalPool over the
      # first N GPUs, then the Ray service (one actor per GPU; skipped with a line where Ray is not installed),
      # the four fidelity kernels in turn, counts alternated over two rounds; then how fast the host starts and
      # ends CUDA processes (context_rate.py). SCALING_TRACE=1: each evaluation's worker start-up too
      # (trace.startup.*, larger results). Needs the setup step's cache (same call or warm machine).
      CUDA_AGENT_TRACE_CALLS=${SCALING_TRACE:-0} run scaling 450 python3 benchmarks/pool_scaling.py --roles \
        --budget-s "${SCALING_BUDGET:-330}" ${SCALING_ARGS:-} --json "$OUT/scaling.json"
      [ "${CONTEXT_COUNTS:-}" = none ] || TAIL=8 run context_rate 90 python3 benchmarks/diag/context_rate.py --counts "${CONTEXT_COUNTS:-1,4,8}" ;;
    scaling_ab)   # pool_scaling (the pool alone) for the code before (.old) and this code, in AB_ORDER, each
      # with its own scripts: the pool's rate at 1, 2, 4 GPUs before and after a change, in one call. An entry
      # may add settings: "new+CUDA_AGENT_PERSISTENT_JUDGE=1" (several joined by '+')
      i=0
      for entry in ${AB_ORDER:-old new old}; do
        i=$((i + 1)); code=${entry%%+*}; root=$PWD; [ "$code" = old ] && root=$PWD/.old
        settings=""; [ "$entry" != "$code" ] && settings=$(echo "${entry#*+}" | tr '+' ' ')
        echo "== $i: $entry" >> "$OUT/scaling_ab.txt"
        env $settings PYTHONPATH="$root/src:$PYTHONPATH" timeout "${SCALING_AB_TIMEOUT:-200}" python3 "$root/benchmarks/pool_scaling.py" \
          --service off --rounds 1 ${SCALING_ARGS:-} --json "$OUT/scaling_${i}_$code.json" >> "$OUT/scaling_ab.txt" 2>&1
      done
      grep -E "^== |^pool  |slow: " "$OUT/scaling_ab.txt" ;;
    runs_scaling)   # one command's wall time at 1, 2, 4 GPUs (runs_scaling.py): RUNS_KIND=baseline|bench|synth;
      # synth runs RUNS_SECONDS each, a build of its own from data/ops6k/build.tar.xz's catalog (RUNS_ARGS=--ray:
      # through a local Ray cluster, as the Ops-6K build)
      kind=${RUNS_KIND:-bench}
      run "runs_$kind" 570 python3 benchmarks/runs_scaling.py "$kind" --kernelbench .kb --counts "${RUNS_COUNTS:-1,2,4}" \
        --seconds "${RUNS_SECONDS:-100}" ${RUNS_ARGS:-} --json "$OUT/runs_$kind.json" ;;
    synth_ab)   # the Ops-6K synthesis for SYNTH_AB_SECONDS, the code before (.old) and this code in SYNTH_AB_ORDER,
      # each from data/ops6k/build.tar.xz with SYNTH_AB_ARGS (e.g. --workers 12); the last "new" run's state
      # comes back as $OUT/build.tar.xz (an Ops-6K part: copy it over data/ops6k/build.tar.xz and commit)
      for code in ${SYNTH_AB_ORDER:-old new}; do
        root=$PWD; [ "$code" = old ] && root=$PWD/.old
        run_dir=$(mktemp -d) && tar -xJf data/ops6k/build.tar.xz -C "$run_dir"
        kept() { (cd "$run_dir" && grep -c '"ok": true' work/results.jsonl); }   # tasks kept in the state
        before=$(kept)
        echo "== $code (tasks kept before: $before)" >> "$OUT/synth_ab.txt"
        PYTHONPATH="$root/src:$PYTHONPATH" timeout $(( ${SYNTH_AB_SECONDS:-150} + 90 )) python3 "$root/benchmarks/synth_gpu.py" \
          --num 6000 --out "$run_dir" --budget-seconds "${SYNTH_AB_SECONDS:-150}" --kernelbench .kb ${SYNTH_AB_ARGS:-} \
          >> "$OUT/synth_ab.txt" 2>&1
        echo "kept this run: $(( $(kept) - before ))" >> "$OUT/synth_ab.txt"
        [ "$code" = new ] && tar -cJf "$OUT/build.tar.xz" -C "$run_dir" --exclude='work/kernelbench_trees_*' .
      done
      grep -E "^== |candidates composed|^kept this run" "$OUT/synth_ab.txt" ;;
    same_code)   # each task's reference handed in as its own solution: a fair harness says about 1.0x
      run same_code 420 python3 benchmarks/same_code.py --backend cuda --kernelbench .kb --evals "${SAME_EVALS:-2}" ${SAME_TASKS:-} ;;
    same_code_ab)   # same_code with settings alternated (SAME_AB: entries of settings joined by '+', "-" for none),
      # e.g. kept judges against fresh ones: SAME_AB="- CUDA_AGENT_PERSISTENT_JUDGE=1 - CUDA_AGENT_PERSISTENT_JUDGE=1"
      for entry in ${SAME_AB:-- CUDA_AGENT_PERSISTENT_JUDGE=1}; do
        settings=""; [ "$entry" != "-" ] && settings=$(echo "$entry" | tr '+' ' ')
        echo "== $entry" >> "$OUT/same_code_ab.txt"
        env $settings timeout "${SAME_CODE_AB_TIMEOUT:-150}" python3 benchmarks/same_code.py --backend cuda --kernelbench .kb \
          --evals "${SAME_EVALS:-3}" ${SAME_TASKS:-} >> "$OUT/same_code_ab.txt" 2>&1
      done
      grep -E "^== |speedups|^all" "$OUT/same_code_ab.txt" ;;
    contexts)   # the host's steady rate of CUDA contexts made and ended (forked children, as judges are), on
      # one GPU and over all: an evaluation makes two, so the pool cannot pass half this rate
      TAIL=8 run contexts 150 python3 benchmarks/diag/context_rate.py --sustained "${CONTEXT_SECONDS:-10}" \
        --in-flight "${CONTEXT_IN_FLIGHT:-4,12}" --variants "${CONTEXT_VARIANTS:-CUDA_DEVICE_MAX_CONNECTIONS=1}" ;;
    traced)   # per-call traces of one evaluation per mode (CUDA_AGENT_TRACE_CALLS=1), under $OUT/logs
      CUDA_AGENT_TRACE_CALLS=1 run traced 300 python3 benchmarks/pool_throughput.py \
        ${TRACED_ARGS:---evals 3 --kernels small --modes back-to-back} --logs "$OUT/logs" --json "$OUT/traced.json" ;;
    throughput_old)   # the same benchmark on the package in .old/src (gpu_carry.sh OLD=<commit>): the code before
      PYTHONPATH="$PWD/.old/src:$PYTHONPATH" run throughput_old 420 \
        python3 benchmarks/pool_throughput.py ${THROUGHPUT_ARGS:-} --json "$OUT/throughput_old.json" ;;
    compare)   # the code before (.old) and this code, alternated ABBA over PAIRS pairs (runs of one code on
      # two machines differ by up to 10 %, one pair can even disagree in sign: twelfth session)
      for pair in $(seq "${PAIRS:-2}"); do
        order="old new"; [ $((pair % 2)) -eq 0 ] && order="new old"
        for code in $order; do
          root=$PWD; [ "$code" = old ] && root=$PWD/.old   # each code runs its own scripts
          if [ -z "${COMPARE_FIDELITY_ONLY:-}" ]; then
            echo "== pair $pair: $code" >> "$OUT/compare.txt"
            PYTHONPATH="$root/src:$PYTHONPATH" timeout "${COMPARE_TIMEOUT:-200}" python3 "$root/benchmarks/pool_throughput.py" \
              ${THROUGHPUT_ARGS:-} >> "$OUT/compare.txt" 2>&1
          fi
          if [ -n "${COMPARE_FIDELITY:-}${COMPARE_FIDELITY_ONLY:-}" ]; then   # timing fidelity too, the same alternation
            echo "== pair $pair: $code fidelity" >> "$OUT/compare.txt"
            PYTHONPATH="$root/src:$PYTHONPATH" timeout "${COMPARE_TIMEOUT:-200}" python3 "$root/benchmarks/timing_fidelity.py" \
              --runs "${RUNS:-4}" --kernelbench .kb ${FIDELITY_ARGS:-} >> "$OUT/compare.txt" 2>&1
          fi
        done
      done
      grep -E "^== |/s per GPU|precision" "$OUT/compare.txt" ;;
    build_ab)   # a kernel-only edit's build (turnaround.py --only-build) for the code before (.old) and this
      # code, alternated in BUILD_AB_ORDER, each with its own scripts and build cache (its precompiled header
      # made once per code): what a change to the builder costs
      i=0
      for code in ${BUILD_AB_ORDER:-old new old new}; do
        i=$((i + 1)); root=$PWD; [ "$code" = old ] && root=$PWD/.old
        echo "== $i: $code" >> "$OUT/build_ab.txt"
        PYTHONPATH="$root/src:$PYTHONPATH" timeout "${BUILD_AB_TIMEOUT:-150}" python3 "$root/benchmarks/turnaround.py" \
          --backend cuda --only-build --build-edits "${BUILD_EDITS:-7}" --cache-dir "/tmp/build-ab-$code" \
          --json "$OUT/build_ab_${i}_$code.json" \
          >> "$OUT/build_ab.txt" 2>&1
      done
      tail -"${TAIL:-40}" "$OUT/build_ab.txt" ;;
    turnaround)
      run turnaround 400 python3 benchmarks/turnaround.py --backend cuda --edits "${EDITS:-5}" \
        --plain-edits "${PLAIN_EDITS:-1}" ${TURNAROUND_ARGS:-} --json "$OUT/turnaround.json" ;;
    baseline|bench)   # time-boxed and resumable: the same step again continues where the last call stopped
      STEPS=$step bash "$(dirname "$0")/bench_gpu.sh" ;;
    ops6k)   # one part of the Ops-6K build (docs/synthesis.md, "Building Ops-6K"): the run saved in
      # data/ops6k/build.tar.xz goes on for OPS6K_SECONDS, and its state comes back as $OUT/build.tar.xz
      # (copy it over data/ops6k/build.tar.xz and commit: the next part, on any machine, starts there)
      rm -rf /tmp/ops6k && mkdir -p /tmp/ops6k
      [ -f data/ops6k/build.tar.xz ] && tar -xJf data/ops6k/build.tar.xz -C /tmp/ops6k
      run ops6k $(( ${OPS6K_SECONDS:-480} + 90 )) python3 benchmarks/synth_gpu.py --num "${OPS6K_NUM:-6000}" \
        --out /tmp/ops6k --budget-seconds "${OPS6K_SECONDS:-480}" --kernelbench .kb ${OPS6K_ARGS:-}
      tar -cJf "$OUT/build.tar.xz" -C /tmp/ops6k --exclude='work/kernelbench_trees_*' . ;;
    large)   # the 14 KernelBench tasks with 6-8 GiB inputs, one after the other (LARGE_BUDGET: start none after it)
      run large 420 python3 benchmarks/large_tasks.py --kernelbench .kb --budget "${LARGE_BUDGET:-330}" ${LARGE_ARGS:-} ;;
    demo)   # what a policy sees on the GPU (docs/agent.md): a workspace for DEMO_TASK with its hand-written
      # solution from benchmarks/kernelbench_solutions, then ./verify, ./profile and ./profile --ncu
      task=${DEMO_TASK:-level2/76}; ws=/tmp/demo-workspace; rm -rf "$ws"
      python3 -m cuda_agent.cli workspace "$task" "$ws" --kernelbench .kb --backend cuda > "$OUT/demo.txt" 2>&1
      cp -r "benchmarks/kernelbench_solutions/$task/." "$ws/"
      for cmd in ./verify ./profile "./profile --ncu"; do
        echo "\$ $cmd" >> "$OUT/demo.txt"; (cd "$ws" && timeout 240 $cmd) >> "$OUT/demo.txt" 2>&1; echo "[exit $?]" >> "$OUT/demo.txt"
      done
      tail -"${TAIL:-60}" "$OUT/demo.txt" ;;
    rl)
      run rl 570 python3 benchmarks/rl_sanity.py --backend cuda --steps "${RL_STEPS:-40}" --out "$OUT/rl" ;;
  esac
  echo "[$step took $(( $(date +%s) - start )) s]"
done
