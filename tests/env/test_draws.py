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


def test_large_aligned_sets_are_a_permutation_with_shared_top_positions(monkeypatch):
    """Above LIGHT_ALIGNED_ELEMENTS the aligned set is made by swaps in one copy (a sort and shuffle of a
    6 GiB input ran a GPU out of memory): still the input's own values, the same for its seed, and its
    largest values at positions every input of that size in the set shares."""
    from cuda_agent.env.workers import draws

    monkeypatch.setattr(draws, "LIGHT_ALIGNED_ELEMENTS", 1 << 12)
    n = 1 << 16
    first, second = torch.randn(n), torch.randn(n)
    made = structured([first], "aligned", 3)[0]
    assert torch.equal(made, structured([first], "aligned", 3)[0])
    assert torch.equal(torch.sort(made).values, torch.sort(first).values)
    assert not torch.equal(made, first)
    k = n // 1024
    tops = [set(torch.topk(x, k).indices.tolist()) for x in structured([first, second], "aligned", 3)]
    assert len(tops[0] & tops[1]) >= k - 2   # only where a drawn position held a top value already


def test_the_weights_seed_is_a_hash_of_the_evaluations_seed():
    """The verification calls' seeds follow from the evaluation's seed; the candidate's job carries
    this hash of it instead (both models are made under it): distinct, stable, a valid torch seed."""
    from cuda_agent.env.workers.common import weights_seed

    seeds = {weights_seed(s) for s in range(1000)}
    assert len(seeds) == 1000 and all(0 <= s < (1 << 31) for s in seeds)
    assert weights_seed(42) != 42 and weights_seed(42) == weights_seed(42)
