"""The evaluation run: one evaluation's phases (evaluation.py) over its schedule, rounds and judge pipe,
its scoring and the baseline store; and the baselines measured alone, a judge run of its own."""
