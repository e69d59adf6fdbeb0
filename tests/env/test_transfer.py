"""The verification output's handover from candidate to judge: raw bytes plus a layout, neither trusted."""

import json
import os

import pytest
import torch

from cuda_agent.env.workers.transfer import UnreadableOutput, read_output, write_output

CPU = torch.device("cpu")


def round_trip(value, tmp_path):
    path = tmp_path / "out.bin"
    layout = json.loads(json.dumps(write_output(value, path)))   # as it travels: a JSON line
    return read_output(path, layout, CPU), layout, path


def test_every_tensor_and_container_comes_back_equal(tmp_path):
    complex_conj = torch.randn(3, dtype=torch.complex64).conj()
    value = [torch.randn(4, 3).t(),                                   # not contiguous
             {"a": torch.tensor(True), 3: (complex_conj, 1.5, None)},    # int keys, tuples, numbers, None
             torch.randn(5).bfloat16(), torch.empty(0, 3), torch.tensor(7), torch.arange(6, dtype=torch.int8)]
    back, _, _ = round_trip(value, tmp_path)
    assert torch.equal(back[0], value[0]) and back[0].shape == (3, 4)
    assert back[1]["a"].item() is True and back[1][3][1:] == [1.5, None]
    assert torch.equal(back[1][3][0], complex_conj.resolve_conj())
    for got, want in zip(back[2:], value[2:]):
        assert got.dtype == want.dtype and got.shape == want.shape and torch.equal(got, want)


def test_a_value_of_another_type_comes_back_as_something_no_reference_equals(tmp_path):
    back, layout, _ = round_trip(["text"], tmp_path)
    assert layout == {"list": [{"other": "str"}]}
    assert back[0] != "text" and "str" in repr(back[0])


@pytest.mark.parametrize("layout, why", [
    ({"tensor": "float32", "shape": [5]}, "bytes"),                        # 16 bytes in the file, 20 declared
    ({"tensor": "float32", "shape": [2]}, "bytes"),                        # fewer declared than written
    ({"tensor": "Tensor", "shape": [4]}, "dtype"),                         # a torch attribute that is no dtype
    ({"tensor": "__import__('os')", "shape": [4]}, "dtype"),
    ({"tensor": "float32", "shape": [-4]}, "shape"),
    ({"tensor": "float32", "shape": [2.0, 2]}, "shape"),
    ({"tensor": "float32", "shape": [4], "extra": 1}, "layout"),
    ({"list": [{"value": {"nested": "object"}}]}, "layout"),
    ({"dict": [[["key"], {"value": 1}]]}, "dict"),
    ("not a layout", "layout"),
    (None, "layout"),
])
def test_a_layout_that_does_not_match_what_the_harness_writes_is_refused(tmp_path, layout, why):
    path = tmp_path / "out.bin"
    write_output(torch.ones(4), path)
    with pytest.raises(UnreadableOutput, match=why):
        read_output(path, layout, CPU)


def test_a_deep_or_huge_layout_is_refused_before_anything_is_read(tmp_path):
    path = tmp_path / "out.bin"
    path.write_bytes(b"")
    deep = {"value": 0}
    for _ in range(100):
        deep = {"list": [deep]}
    with pytest.raises(UnreadableOutput, match="too large or too deep"):
        read_output(path, deep, CPU)
    with pytest.raises(UnreadableOutput, match="too large or too deep"):
        read_output(path, {"list": [{"value": 0}] * 200_000}, CPU)


def test_links_and_special_files_are_not_followed(tmp_path):
    secret = tmp_path / "secret.bin"
    layout = write_output(torch.ones(4), secret)
    link = tmp_path / "out.bin"
    link.symlink_to(secret)
    with pytest.raises(OSError):
        read_output(link, layout, CPU)
    fifo = tmp_path / "fifo.bin"
    os.mkfifo(fifo)
    fd = os.open(fifo, os.O_RDWR | os.O_NONBLOCK)   # a writer, so the reader's open does not block
    try:
        with pytest.raises(UnreadableOutput, match="regular file"):
            read_output(fifo, layout, CPU)
    finally:
        os.close(fd)


def test_the_host_copy_and_the_file_are_two_steps(tmp_path):
    """The candidate copies its output to host memory while it holds the device (`output_to_host`:
    no file touched) and writes the file after letting go (`write_host`): the same bytes as one
    `write_output`."""
    from cuda_agent.env.workers.transfer import output_to_host, write_host

    value = [torch.randn(64, 32).t(), {"n": 3, "m": torch.arange(5)}]
    layout, host = output_to_host(value)
    assert not list(tmp_path.iterdir())
    write_host(host, tmp_path / "two_steps.bin")
    assert json.loads(json.dumps(layout)) == write_output(value, tmp_path / "one_step.bin")
    assert (tmp_path / "two_steps.bin").read_bytes() == (tmp_path / "one_step.bin").read_bytes()
    back = read_output(tmp_path / "two_steps.bin", layout, CPU)
    assert torch.equal(back[0], value[0]) and torch.equal(back[1]["m"], value[1]["m"]) and back[1]["n"] == 3


# -- the staging file (outputs without files) ----------------------------------------------------------


def _pair(slot_bytes=1 << 20):
    """The candidate's and the judge's mappings of one staging file, as two workers get it."""
    from cuda_agent.env.workers.transfer import Staging, create_staging

    fd = create_staging(slot_bytes)
    try:
        return Staging(os.dup(fd)), Staging(os.dup(fd))
    finally:
        os.close(fd)


def test_a_staged_output_comes_back_equal_and_aligned():
    from cuda_agent.env.workers.transfer import output_layout

    candidate, judge = _pair()
    value = [torch.tensor([True, False, True]),                    # 3 bytes: the next tensor must still align
             {"x": torch.randn(5, 7), "n": 2}, torch.randn(4, dtype=torch.complex64), torch.empty(0, 2)]
    layout, tensors = output_layout(value)
    assert candidate.fits(tensors)
    candidate.put(1, tensors)
    back = judge.take(1, json.loads(json.dumps(layout)), CPU)
    assert torch.equal(back[0], value[0]) and torch.equal(back[1]["x"], value[1]["x"]) and back[1]["n"] == 2
    assert torch.equal(back[2], value[2]) and back[3].shape == (0, 2)
    candidate.put(1, [torch.zeros(5, 7)] * 4)   # the candidate writes again: the judge's copy stays
    assert torch.equal(back[1]["x"], value[1]["x"])


def test_the_staging_file_is_sealed_and_checked():
    from cuda_agent.env.workers.transfer import Staging, create_staging

    fd = create_staging(1 << 20)
    try:
        with pytest.raises(PermissionError):   # nobody can shrink it under a reader's mapping
            os.ftruncate(fd, 0)
    finally:
        os.close(fd)
    unsealed = os.memfd_create("plain", os.MFD_ALLOW_SEALING)
    os.ftruncate(unsealed, 1 << 20)
    with pytest.raises(UnreadableOutput, match="not sealed"):
        Staging(unsealed)


def test_a_staged_layout_is_checked_like_a_files():
    candidate, judge = _pair(slot_bytes=4096)
    assert not candidate.fits([torch.zeros(2048)])   # 8 KB: too large for a slot, goes through a file
    with pytest.raises(UnreadableOutput, match="do not fit"):
        judge.take(0, {"tensor": "float32", "shape": [4096]}, CPU)
    with pytest.raises(UnreadableOutput):
        judge.take(0, {"tensor": "os.system", "shape": [1]}, CPU)
    with pytest.raises(UnreadableOutput, match="do not fit"):
        judge.take(2, {"tensor": "float32", "shape": [1]}, CPU)


def test_the_judge_notices_any_byte_changed_in_an_input_slot():
    """The judge's check of the bytes it put into a slot (compared eight at a time where it can): one
    byte changed anywhere, at an aligned start or not, is a difference."""
    from cuda_agent.env.workers.judge import _same_bytes

    put = torch.randint(0, 256, (1 << 12,), dtype=torch.uint8)
    assert _same_bytes(put, put.clone())
    for at in (0, 7, 8, 2049, (1 << 12) - 1):
        changed = put.clone()
        changed[at] ^= 1
        assert not _same_bytes(changed, put), at
    memory = torch.zeros(200, dtype=torch.uint8)
    assert _same_bytes(memory[3:67], memory[5:69])        # unaligned views: compared byte by byte
    memory[66] = 1
    assert not _same_bytes(memory[3:67], memory[5:69])
    assert not _same_bytes(memory[:64], memory[:72])      # not the same length
