"""nvcc's final host compile with the headers' part of its source precompiled (host_headers.py): the same
object as the plain compile, a header per text and command, and the plain compile wherever it does not fit."""

from __future__ import annotations

import subprocess
from pathlib import Path

from cuda_agent.env.builds import host_headers, nvcc_steps
from tests.env.test_build_speed import KERNEL_CU, _contents, _nvcc_command, needs_nvcc


def _compile(tmp_path: Path, out: str, cache: Path | None, *extra: str, source: str | None = None) -> Path:
    """One compile of the example kernel through nvcc_steps, with the header cache `cache` (None: none)."""
    (tmp_path / "bias_relu.cu").write_text(source or KERNEL_CU.read_text())
    keep = tmp_path / f"keep-{out}"
    keep.mkdir()
    steps = nvcc_steps.plan(_nvcc_command(str(tmp_path / out), *extra), tmp_path, keep)
    assert steps is not None
    scratch = tmp_path / f"scratch-{out}"
    scratch.mkdir()
    nvcc_steps.run(steps, tmp_path, headers=cache, scratch=scratch if cache else None)
    return tmp_path / out


def _headers(cache: Path) -> list[Path]:
    return sorted(cache.glob(f"*/{host_headers.HEADER}.gch"))


def _compile_twice(tmp_path: Path, out: str, cache: Path, *extra: str, source: str | None = None) -> None:
    """Compiles seen the second time, which builds their header."""
    for time in ("1", "2"):
        _compile(tmp_path, out + time, cache, *extra, source=source)


@needs_nvcc
def test_the_precompiled_headers_give_the_plain_compiles_object(tmp_path):
    cache = tmp_path / "cache"
    cache.mkdir()
    plain = _compile(tmp_path, "plain.o", None)
    first = _compile(tmp_path, "first.o", cache)                # compiled plainly, its headers marked seen
    assert _headers(cache) == []
    second = _compile(tmp_path, "second.o", cache)              # compiled plainly, the header built beside it
    assert len(_headers(cache)) == 1
    edited = KERNEL_CU.read_text().replace("int threads = 256;", "int threads = 512;")
    with_header = _compile(tmp_path, "with_header.o", cache, source=edited)   # a kernel edit: the same header
    assert len(_headers(cache)) == 1
    again = _compile(tmp_path, "again.o", cache)
    assert _contents(first) == _contents(plain) == _contents(second) == _contents(again)
    assert _contents(with_header) != _contents(plain)           # the edit is in it
    subprocess.run(_nvcc_command(str(tmp_path / "nvcc.o")), cwd=tmp_path, check=True, capture_output=True)
    assert _contents(again) == _contents(tmp_path / "nvcc.o")


@needs_nvcc
def test_another_flag_or_other_headers_get_a_header_of_their_own(tmp_path):
    cache = tmp_path / "cache"
    cache.mkdir()
    _compile_twice(tmp_path, "a.o", cache)
    _compile_twice(tmp_path, "b.o", cache, "-DUNUSED=1")                # the same text and final command
    assert len(_headers(cache)) == 1
    _compile_twice(tmp_path, "c.o", cache, "-Xcompiler", "-g1")          # the host compile's own flags differ
    assert len(_headers(cache)) == 2
    _compile_twice(tmp_path, "d.o", cache, source="#include <cstdio>\n" + KERNEL_CU.read_text())
    assert len(_headers(cache)) == 3


@needs_nvcc
def test_a_header_gcc_cannot_use_or_a_failing_compile_falls_back_to_the_plain_one(tmp_path, monkeypatch):
    cache = tmp_path / "cache"
    cache.mkdir()
    plain = _compile(tmp_path, "plain.o", None)
    _compile_twice(tmp_path, "first.o", cache)
    (gch,) = _headers(cache)
    gch.write_bytes(b"not a precompiled header")                # gcc reads the header's text instead
    assert _contents(_compile(tmp_path, "stale.o", cache)) == _contents(plain)

    chained = []
    real_chain = nvcc_steps._chain

    def failing_with_header(lines, cwd, env, timeout, wrap):
        chained.append(lines)
        if "-include" in lines[0] and host_headers.HEADER in lines[0]:
            raise nvcc_steps.StepFailed("as if the header did not fit")
        return real_chain(lines, cwd, env, timeout, wrap)

    monkeypatch.setattr(nvcc_steps, "_chain", failing_with_header)
    assert _contents(_compile(tmp_path, "fallback.o", cache)) == _contents(plain)
    assert any("-include" in lines[0] for lines in chained)     # it was tried, then the plain compile ran


def test_only_a_clear_headers_part_is_split():
    headers = b'# 1 "unit.cu"\n# 1 "h.h"\n' + b"int x;\n" * 20000
    tail = b'# 5 "unit.cu"\nint main() {}\n# 1 "unit.stub.c"\n#include "unit.stub.c"\n# 1 "unit.stub.c"\n'
    assert host_headers.split(headers + tail) == (headers, tail)
    assert host_headers.split(b'# 1 "unit.cu"\n# 1 "h.h"\nint x;\n' + tail) is None      # too small to be worth it
    assert host_headers.split(headers + tail.replace(b"int main", b'#include "more.h"\nint main')) is None
    assert host_headers.split(b"int x;\n" * 20000) is None                               # no line markers
    assert host_headers.split(b'# 1 "unit.cu"\n' + b"int x;\n" * 20000 + tail) is None  # no header at all
