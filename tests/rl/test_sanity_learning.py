"""The learning check on CPU: TRL's GRPOTrainer, a tiny local model, the real environment.

Mean episode reward must rise clearly within twelve GRPO steps: from picking among the three prepared
solutions about at random after the SFT warm-start (mean about 0.7-1.2) to installing the fast one
(reward 2). Seeded; the environment's verdicts are checked too (slow 1, wrong -1, fast 2).
"""

import pytest

pytest.importorskip("trl")
pytest.importorskip("datasets")

from cuda_agent.rl import sanity  # noqa: E402

from .conftest import SESSION  # noqa: E402


@pytest.mark.slow
def test_grpo_raises_mean_reward(tmp_path, cache_dir):
    result = sanity.learn(tmp_path, backend="cpu", steps=12, seed=0, session=SESSION, cache_dir=str(cache_dir),
                          log=lambda s: None)
    assert result["rewards_by_label"] == {"a": 1, "b": -1, "c": 2}
    rewards = [s["reward"] for s in result["steps"]]
    assert len(rewards) == 12
    first, last = sum(rewards[:2]) / 2, sum(rewards[-4:]) / 4
    assert first < 1.5 and last >= 1.75 and last - first >= 0.5, rewards
    assert result["labels_per_step"][-1].count("c") >= 7
    assert (tmp_path / "rl_sanity.json").is_file()
