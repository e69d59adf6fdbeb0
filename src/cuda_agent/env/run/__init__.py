"""The evaluation run: one evaluation's phases and call schedule, scoring, and the baseline store."""
