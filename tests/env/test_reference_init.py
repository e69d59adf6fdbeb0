"""The reference's initial weights handed from the judge to the candidate (`judge.save_init`, read mapped
by the candidate): the same values, the process's checksum setting left as it was."""

from __future__ import annotations

import torch

from cuda_agent.env.workers.judge import save_init


def test_saved_init_loads_mapped_with_the_same_weights_and_leaves_the_checksum_setting(tmp_path):
    model = torch.nn.Sequential(torch.nn.Linear(64, 32), torch.nn.ReLU(), torch.nn.Linear(32, 8))
    before = torch.serialization.get_crc32_options()
    save_init(tmp_path, [64, [32], 8], model.state_dict())
    assert torch.serialization.get_crc32_options() == before
    init = torch.load(tmp_path / "reference_init.pt", map_location="cpu", weights_only=False, mmap=True)
    assert init["init_inputs"] == [64, [32], 8]
    twin = torch.nn.Sequential(torch.nn.Linear(64, 32), torch.nn.ReLU(), torch.nn.Linear(32, 8))
    twin.load_state_dict(init["state_dict"])
    del init
    for name, value in model.state_dict().items():
        assert torch.equal(twin.state_dict()[name], value), name
