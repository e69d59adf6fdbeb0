"""GAE as the value and agentic stages run it: verl's own function, gamma 1, lambda 0.95, on a
multi-turn response whose tool tokens have mask 0 and whose outcome reward sits on the last model token."""

import pytest

pytest.importorskip("verl")

import torch  # noqa: E402
from verl.trainer.ppo.core_algos import compute_gae_advantage_return  # noqa: E402

GAMMA, LAM = 1.0, 0.95
#        model  model  tool tool tool  model model model  pad
MASK = [1, 1, 0, 0, 0, 1, 1, 1, 0]
VALUES = [0.5, 0.8, 9.0, 9.0, 9.0, 1.2, 1.5, 2.0, 9.0]   # values on tool/pad tokens must not matter
REWARD = 3.0


def by_hand():
    """GAE over the model tokens only: tool tokens are skipped, not discounted through."""
    model = [i for i, m in enumerate(MASK) if m]
    adv, returns = {}, {}
    last = 0.0
    for k in reversed(range(len(model))):
        i = model[k]
        next_value = VALUES[model[k + 1]] if k + 1 < len(model) else 0.0
        reward = REWARD if k == len(model) - 1 else 0.0
        last = reward + GAMMA * next_value - VALUES[i] + GAMMA * LAM * last
        adv[i], returns[i] = last, last + VALUES[i]
    return adv, returns


def gae(reward_at):
    rewards = torch.zeros(1, len(MASK))
    rewards[0, reward_at] = REWARD
    return compute_gae_advantage_return(rewards, torch.tensor([VALUES]), torch.tensor([MASK], dtype=torch.float32),
                                        torch.tensor(GAMMA), torch.tensor(LAM))


def test_verl_gae_matches_hand_computation():
    advantages, returns = gae(reward_at=7)
    adv, ret = by_hand()
    for i, expected in ret.items():
        assert returns[0, i].item() == pytest.approx(expected, abs=1e-6)
    # With gamma 1, the return of every model token before the end is a lambda-mix of later values and the reward;
    # the last one's is the reward itself.
    assert returns[0, 7].item() == pytest.approx(REWARD)
    # Advantages come back whitened over the model tokens (masked mean, unbiased masked variance).
    raw = [adv[i] for i, m in enumerate(MASK) if m]
    mean = sum(raw) / len(raw)
    std = (sum((a - mean) ** 2 for a in raw) / (len(raw) - 1)) ** 0.5
    model = [i for i, m in enumerate(MASK) if m]
    for i, a in zip(model, raw):
        assert advantages[0, i].item() == pytest.approx((a - mean) / std, abs=1e-4)


def test_reward_on_a_tool_token_is_lost():
    """Why the agent loop ends every response on a model token: verl places the outcome reward on the
    last response token, and GAE drops a reward that sits on a masked token."""
    _, returns = gae(reward_at=8)   # the pad/tool position after the last model token
    assert returns[0, 7].item() == pytest.approx(0.0, abs=1e-6)
    assert returns[0, 0].item() < by_hand()[1][0] - 1.0   # the reward never reached the first token
