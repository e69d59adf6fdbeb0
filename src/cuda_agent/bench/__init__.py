"""The KernelBench benchmark: baselines, scoring a solution folder or a policy, metrics and reports.

    cuda-agent baseline --levels 1,2,3 --kernelbench DIR --out runs/base
    cuda-agent bench --levels 1,2,3 --solutions DIR --out runs/mine
    cuda-agent bench --levels 1 --model NAME --base-url URL --out runs/policy
    cuda-agent report runs/mine --compare runs/policy

A run is one folder (`bench.sqlite`, its solutions, trajectories and report), resumed by `--resume`.
"""
