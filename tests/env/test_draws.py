"""The structured input sets both workers build from (seed, transform) alone."""

import torch

from cuda_agent.env.workers.draws import structured


def test_spikes_sets_carry_a_drawn_number_of_spikes_and_repeat_for_their_seed():
    x = [torch.rand(64, 256)]   # positive values: every spike is an element well above the rest
    counts = set()
    for seed in range(40):
        spiked = structured(x, "spikes", seed)[0]
        assert torch.equal(spiked, structured(x, "spikes", seed)[0])   # the judge draws the same set
        spikes = int((spiked > 2).sum())
        assert 1 <= spikes <= 64
        assert spiked[spiked > 2].sum() >= 0.5 * x[0].sum()   # about as much mass as all the rest together
        counts.add(spikes)
    # how many spikes is drawn too: an estimate from every k-th element cannot count on its share
    assert len(counts) > 10
