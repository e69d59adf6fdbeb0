"""Metrics against values computed by hand on a small fixture of attempts."""

from pytest import approx

from cuda_agent.bench.metrics import summarize, task_scores
from cuda_agent.bench.store import Attempt
from cuda_agent.env.reward import milestone_reward


def correct(key, kernel, eager, compile_, attempt=0):
    return Attempt(key, attempt, "correct", compiled=True, correct=True, kernel_ms=kernel, eager_ms=eager,
                   compile_ms=compile_, speedup_vs_eager=eager / kernel, speedup_vs_compile=compile_ / kernel,
                   reward=milestone_reward(True, kernel, eager, compile_))


def failed(key, verdict, attempt=0):
    return Attempt(key, attempt, verdict, reward=None if verdict == "task_error" else -1)


TASKS = [{"key": k, "grp": k.split("/")[0]} for k in
         ("level1/1", "level1/2", "level1/3", "level1/4", "level2/1", "level2/2", "level2/3", "level2/4")]
ATTEMPTS = [
    correct("level1/1", 1.0, 2.0, 1.5),            # 2x eager, 1.5x compile: reward 3
    correct("level1/2", 1.0, 1.02, 0.5),           # 1.02x eager is inside the 5 % margin: reward 1
    failed("level1/3", "incorrect"),
    failed("level1/4", "compile_error"),           # the better of two attempts counts
    correct("level1/4", 0.5, 1.0, 2.0, attempt=1),
    failed("level2/1", "task_error"),              # broken: out of every denominator
    correct("level2/2", 1.0, 1.2, 1.0),            # faster than eager only: reward 2
    failed("level2/3", "missing"),
    # level2/4: nothing recorded yet (pending)
]


def test_metrics_by_hand():
    scores = task_scores(TASKS, ATTEMPTS)
    assert [s.state for s in scores] == ["scored"] * 4 + ["broken", "scored", "scored", "pending"]
    assert scores[3].attempts == 2 and scores[3].best.attempt == 1
    level1, level2, overall = summarize(scores)

    assert (level1.group, level1.tasks, level1.broken, level1.pending, level1.correct) == ("level1", 4, 0, 0, 3)
    assert level1.pass_rate == 0.75
    assert level1.faster_eager == 0.5 and level1.faster_compile == 0.5
    assert level1.gm_vs_eager == approx((2.0 * 1.02 * 2.0) ** (1 / 3))
    assert level1.gm_vs_compile == approx(3.0 ** (1 / 3))
    assert level1.fast_p == {"0": 0.75, "1": 0.75, "1.5": 0.5, "2": 0.0}
    assert level1.fast_p_compile == {"0": 0.75, "1": 0.5, "1.5": 0.25, "2": 0.25}
    assert level1.mean_reward == approx((3 + 1 - 1 + 3) / 4)

    assert (level2.tasks, level2.broken, level2.pending, level2.correct) == (2, 1, 1, 1)
    assert level2.pass_rate == 0.5 and level2.faster_eager == 0.5 and level2.faster_compile == 0.0
    assert level2.gm_vs_eager == approx(1.2) and level2.gm_vs_compile == approx(1.0)
    assert level2.fast_p["1"] == 0.5 and level2.mean_reward == approx(0.5)

    assert (overall.group, overall.tasks, overall.broken, overall.pending, overall.correct) == ("overall", 6, 1, 1, 4)
    assert overall.pass_rate == approx(4 / 6)
    assert overall.faster_eager == approx(3 / 6) and overall.faster_compile == approx(2 / 6)
    assert overall.gm_vs_eager == approx((2.0 * 1.02 * 2.0 * 1.2) ** (1 / 4))
    assert overall.gm_vs_compile == approx(3.0 ** (1 / 4))
    assert overall.mean_reward == approx(7 / 6)


def test_empty_group_has_no_rates():
    [group, overall] = summarize(task_scores([{"key": "level3/1", "grp": "level3"}], []))
    assert group.tasks == 0 and group.pending == 1 and group.pass_rate is None and overall.gm_vs_eager is None


def test_infrastructure_failures_are_not_scored():
    """An episode the endpoint failed, an evaluation our side failed: out of every denominator and counted
    apart; a task with a real attempt beside one is scored on that attempt."""
    tasks = [{"key": k, "grp": "level1"} for k in ("level1/1", "level1/2", "level1/3")]
    attempts = [Attempt("level1/1", 0, "episode_failed", error_message="client_error: Connection refused"),
                Attempt("level1/2", 0, "internal_error", error_message="the evaluator crashed"),
                failed("level1/3", "internal_error"), failed("level1/3", "incorrect", attempt=1)]
    scores = task_scores(tasks, attempts)
    assert [s.state for s in scores] == ["failed", "failed", "scored"]
    assert scores[2].verdict == "incorrect"
    # what was left unscored stays in view (the command exits 3 for it), the scored task's too
    assert [s.unscored.verdict for s in scores] == ["episode_failed", "internal_error", "internal_error"]
    _, overall = summarize(scores)
    assert (overall.tasks, overall.failed, overall.broken, overall.pending) == (1, 2, 0, 0)
    assert overall.pass_rate == 0.0 and overall.mean_reward == -1.0


def test_the_best_attempt_is_the_one_whose_reward_read_the_higher_speedup():
    """Two attempts of one reward: a median of 2.0 over calls whose totals give 1.3 ranks below a plain
    1.6 (the agent ranks its candidates so, `agent.tracking.rank`)."""
    import json
    from dataclasses import replace

    slow_calls = replace(correct("level1/1", 0.5, 1.0, 1.0), result=json.dumps({"speedup_totals": {"compile": 1.3,
                                                                                                 "eager": 1.3}}))
    plain = correct("level1/1", 0.625, 1.0, 1.0, attempt=1)
    assert slow_calls.reward == plain.reward == 3
    best = task_scores(TASKS[:1], [slow_calls, plain])[0]
    assert best.best.attempt == 1 and best.speedup("compile") == approx(1.6)
