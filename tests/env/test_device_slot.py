"""Outputs larger than a staging slot on CUDA: the judge's device slot (device_slot.py), the chunked
comparison that keeps the judge's temporaries small (verify.COMPARE_CHUNK), and the harness's choice
of path. The slot's copy logic runs here on CPU memory standing in for the mapped device memory (the
driver calls themselves run in tests/gpu/test_large_outputs.py)."""

from __future__ import annotations

import json
import time
from pathlib import Path

import pytest
import torch

from cuda_agent.env.rules import verify
from cuda_agent.env.workers.device_slot import DeviceSlot
from cuda_agent.env.workers.transfer import UnreadableOutput, output_layout


def cpu_slot(nbytes: int) -> DeviceSlot:
    """A slot over host memory: put and take as on the device, without the driver's mapping."""
    slot = DeviceSlot.__new__(DeviceSlot)
    slot.memory, slot.nbytes, slot.device, slot.address = torch.zeros(nbytes, dtype=torch.uint8), nbytes, \
        torch.device("cpu"), 0
    return slot


def test_an_output_comes_back_whole_and_as_the_judges_own_copy():
    out = [torch.randn(33, 7), {"b": torch.arange(5, dtype=torch.int16)}, 2.5]
    layout, tensors = output_layout(out)
    slot = cpu_slot(4096)
    assert slot.fits(tensors)
    slot.put(tensors)
    taken = slot.take(json.loads(json.dumps(layout)))
    assert torch.equal(taken[0], out[0]) and torch.equal(taken[1]["b"], out[1]["b"]) and taken[2] == 2.5
    slot.memory.fill_(0)   # the candidate writes its slot after the judge took it: the judge's copy stays
    assert torch.equal(taken[0], out[0]) and torch.equal(taken[1]["b"], out[1]["b"])


def test_a_layout_larger_than_the_slot_is_refused_before_anything_is_read():
    slot = cpu_slot(1024)
    with pytest.raises(UnreadableOutput, match="do not fit the device slot"):
        slot.take({"tensor": "float32", "shape": [257]})
    with pytest.raises(UnreadableOutput):
        slot.take({"tensor": "nonsense", "shape": [1]})
    assert not slot.fits([torch.zeros(257)]) and slot.fits([torch.zeros(256)])


def _same(a: verify.Comparison, b: verify.Comparison) -> None:
    assert (a.ok, a.max_abs_error, a.message, a.fp32_relative_error, a.nonfinite, a.worst) == \
        (b.ok, b.max_abs_error, b.message, b.fp32_relative_error, b.nonfinite, b.worst)


@pytest.mark.parametrize("case", ["pass", "outside", "zero limit", "nonfinite", "float64", "transposed"])
def test_the_comparison_in_parts_says_exactly_what_the_whole_one_says(monkeypatch, case):
    gen = torch.Generator().manual_seed(3)
    ref = torch.randn(6, 50, 40, generator=gen)
    out = ref + 1e-4 * torch.randn(ref.shape, generator=gen)
    atol, rtol = 1e-2, 1e-2
    if case == "outside":
        out[4, 7, 3] += 1.0                        # a later part holds the first element outside
        out[5, 1, 2] += 2.0
    elif case == "zero limit":
        atol, rtol = 0.0, 1e-2
        out = ref * (1 + 1e-4 * torch.randn(ref.shape, generator=gen))
        ref[2, 2, 2] = out[2, 2, 2] = 0.0          # no allowance there: no worst element is named
    elif case == "nonfinite":
        out[3, 3, 3] = float("nan")
    elif case == "float64":
        ref, out = ref.double(), out.double()
    elif case == "transposed":
        ref, out = ref.transpose(0, 2), out.transpose(0, 2)
    tol = verify.Tolerance(atol, rtol)
    whole = verify.compare_tensors(ref, out, tol, "output")
    monkeypatch.setattr(verify, "COMPARE_CHUNK", 1000)   # 12 parts, the last one short
    parts = verify.compare_tensors(ref, out, tol, "output")
    _same(whole, parts)
    assert whole.ok == (case not in ("outside", "nonfinite"))
    if case == "outside":
        assert "2 of 12000 elements" in parts.message and "[4, 7, 3]" in parts.message
    if case == "pass":
        assert parts.worst and parts.fp32_relative_error > 0


def test_the_judge_is_sent_to_the_device_slot_only_when_the_harness_made_one(tmp_path):
    from cuda_agent.env.run.rounds import CallRounds
    from cuda_agent.env.run.schedule import Call

    rounds = CallRounds.__new__(CallRounds)
    rounds.box, rounds.compile_mode, rounds.strict = tmp_path, "off", True
    call = Call("verify", seed=5, index=3)
    layout = {"tensor": "float32", "shape": [4]}
    for has_slot, answer, where in [(True, {"device": True, "layout": layout}, "device"),
                                    (False, {"device": True, "layout": layout}, "path"),   # a claim alone: the file
                                    (True, {"staged": True, "layout": layout}, "slot"),
                                    (True, {"layout": layout}, "path")]:
        rounds.device_slot = has_slot
        # a GPU verification call's answer also carries its located output (strides for the layout rule):
        # where the output lies is decided the same with it
        located = {"tensors": [{"strides": [1]}]}
        for answer in (answer, {**answer, "samples": located}):
            compare = rounds._judge_request(call, answer)["compare"]
            assert compare["layout"] == layout and compare["path"] == str(tmp_path / "out_3.bin")
            assert ("device" in compare) == (where == "device") and ("slot" in compare) == (where == "slot")
            assert compare.get("strides") == ([[1]] if "samples" in answer else None)


def test_the_slot_descriptor_reaches_a_candidate_inside_the_sandbox(tmp_path):
    """The hand-over itself, with a shared memory file standing in for the driver's descriptor: the
    judge offers it on the box's socket, a process in the candidate's sandbox (PID, network and user
    namespaces of its own) receives it and writes through it; the socket is gone after one taker."""
    import mmap
    import os
    import subprocess
    import sys

    from cuda_agent.env import EvalConfig
    from cuda_agent.env.infra.sandbox import sandbox_available, sandbox_prefix
    from cuda_agent.env.workers.device_slot import SOCKET_NAME, offer

    if not sandbox_available()[0]:
        pytest.skip("bubblewrap is needed")
    box = tmp_path / "box"
    box.mkdir()
    fd = os.memfd_create("stand-in")
    os.ftruncate(fd, 4096)
    offer(os.dup(fd), 4096, box)
    child = (f"import mmap, os; from pathlib import Path\n"
             f"from cuda_agent.env.workers.device_slot import receive\n"
             f"size, fd = receive(Path({str(box)!r}))\n"
             f"view = mmap.mmap(fd, size); view[:6] = b'judged'; print(size, os.getpid())\n")
    wrap = sandbox_prefix(EvalConfig(sandbox="bwrap", cache_dir=tmp_path / "cache"), box)
    src = str(Path(__file__).resolve().parents[2] / "src")
    done = subprocess.run([*wrap, sys.executable, "-c", child], capture_output=True, text=True, timeout=120,
                          env={**os.environ, "PYTHONPATH": src})
    assert done.returncode == 0, done.stderr[-2000:]
    size, pid = done.stdout.split()
    assert size == "4096" and int(pid) < 10   # its own PID namespace
    assert mmap.mmap(fd, 4096)[:6] == b"judged"
    for _ in range(100):   # the judge's thread removes the socket once it has handed the slot over
        if not (box / SOCKET_NAME).exists():
            break
        time.sleep(0.05)
    assert not (box / SOCKET_NAME).exists()
    os.close(fd)
