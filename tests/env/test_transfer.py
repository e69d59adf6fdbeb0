"""The verification output's handover from candidate to judge: raw bytes plus a layout, neither trusted."""

import json
import os

import pytest
import torch

from cuda_agent.env.transfer import UnreadableOutput, read_output, write_output

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
    from cuda_agent.env.transfer import output_to_host, write_host

    value = [torch.randn(64, 32).t(), {"n": 3, "m": torch.arange(5)}]
    layout, host = output_to_host(value)
    assert not list(tmp_path.iterdir())
    write_host(host, tmp_path / "two_steps.bin")
    assert json.loads(json.dumps(layout)) == write_output(value, tmp_path / "one_step.bin")
    assert (tmp_path / "two_steps.bin").read_bytes() == (tmp_path / "one_step.bin").read_bytes()
    back = read_output(tmp_path / "two_steps.bin", layout, CPU)
    assert torch.equal(back[0], value[0]) and torch.equal(back[1]["m"], value[1]["m"]) and back[1]["n"] == 3
