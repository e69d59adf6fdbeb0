"""The symbolizer (measure/symbolize.py) on this test's own process: an address is named from its
library's file once and then from what it kept while the mappings stay as they were, and an address
no mapping held is asked again (a file mapped there since is seen)."""

from __future__ import annotations

import ctypes
import mmap
import os

import pytest

from cuda_agent.env.measure import symbolize
from cuda_agent.env.measure.symbolize import UNMAPPED, Symbolizer

LIBC = ctypes.CDLL(None)


def _address(function) -> int:
    return ctypes.cast(function, ctypes.c_void_p).value


def test_an_address_is_named_from_the_file_once(monkeypatch):
    qsort, bsearch = _address(LIBC.qsort), _address(LIBC.bsearch)
    symbolizer = Symbolizer(os.getpid())
    first = symbolizer.resolve([qsort, qsort])
    assert first[0] == first[1] and first[0][0].startswith("libc") and first[0][1] == "qsort"
    monkeypatch.setattr(symbolizer, "reload", lambda: None)   # this process's mappings held as they were
    reads = []
    original = symbolize.ElfSymbols.lookup
    monkeypatch.setattr(symbolize.ElfSymbols, "lookup",
                        lambda self, vaddrs, path: reads.append(len(vaddrs)) or original(self, vaddrs, path))
    assert symbolizer.resolve([qsort, bsearch, qsort]) == [first[0], (first[0][0], "bsearch"), first[0]]
    assert reads == [1]   # bsearch alone was read from the file
    assert Symbolizer(os.getpid()).resolve([qsort, bsearch]) == [first[0], (first[0][0], "bsearch")]


def test_an_address_no_mapping_held_is_asked_again(tmp_path):
    size = 2 * mmap.PAGESIZE
    libc = ctypes.CDLL(None, use_errno=True)
    libc.mmap.restype = ctypes.c_void_p
    libc.mmap.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int, ctypes.c_int, ctypes.c_int, ctypes.c_long]
    # a reserved range (PROT_NONE), not executable: no library is mapped there yet
    base = libc.mmap(None, size, 0, mmap.MAP_PRIVATE | mmap.MAP_ANONYMOUS, -1, 0)
    symbolizer = Symbolizer(os.getpid())
    assert symbolizer.resolve([base + 64]) == [(UNMAPPED, symbolize.UNKNOWN)]
    late = tmp_path / "late.so"
    late.write_bytes(b"\0" * size)
    with open(late, "rb") as fh:
        got = libc.mmap(base, size, mmap.PROT_READ | mmap.PROT_EXEC, mmap.MAP_PRIVATE | 0x10, fh.fileno(), 0)  # MAP_FIXED
    assert got == base
    try:
        assert symbolizer.resolve([base + 64]) == [(symbolize.NOT_ELF + "late.so", symbolize.UNKNOWN)]
    finally:
        libc.munmap.argtypes = [ctypes.c_void_p, ctypes.c_size_t]
        libc.munmap(base, size)


def _elf_header(loads: bool) -> bytes:
    """A 64-bit little-endian ELF header, with one PT_LOAD (R+X) over the file from its second page where
    `loads`, else with no program or section headers at all."""
    import struct

    ident = b"\x7fELF\x02\x01\x01" + b"\0" * 9
    header = ident + struct.pack("<HHIQQQIHHHHHH", 3, 62, 1, 0, 64 if loads else 0, 0, 0, 64, 56, 1 if loads else 0,
                                 64, 0, 0)
    if loads:
        header += struct.pack("<IIQQQQQQ", 1, 5, mmap.PAGESIZE, mmap.PAGESIZE, mmap.PAGESIZE, mmap.PAGESIZE,
                              mmap.PAGESIZE, mmap.PAGESIZE)
    return header


def _mapped(path, offset: int = 0):
    """The file mapped executable (its page at `offset`) in this process: (address, unmap)."""
    libc = ctypes.CDLL(None, use_errno=True)
    libc.mmap.restype = ctypes.c_void_p
    libc.mmap.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int, ctypes.c_int, ctypes.c_int, ctypes.c_long]
    libc.munmap.argtypes = [ctypes.c_void_p, ctypes.c_size_t]
    fd = os.open(path, os.O_RDONLY)
    try:
        base = libc.mmap(None, mmap.PAGESIZE, mmap.PROT_READ | mmap.PROT_EXEC, mmap.MAP_PRIVATE, fd, offset)
    finally:
        os.close(fd)
    assert base not in (None, ctypes.c_void_p(-1).value)
    return base, lambda: libc.munmap(base, mmap.PAGESIZE)


def test_a_mapping_named_with_bytes_that_are_not_utf8_is_read(tmp_path):
    """A mapping's name is whatever bytes its process chose: the maps are read all the same, the file
    found by its name and the name shown with those bytes replaced."""
    odd = os.path.join(os.fsencode(tmp_path), b"odd-\xff\xfe.so")
    with open(odd, "wb") as fh:
        fh.write(b"\0" * mmap.PAGESIZE)
    base, unmap = _mapped(odd)
    try:
        [(library, symbol)] = Symbolizer(os.getpid()).resolve([base + 64])
    finally:
        unmap()
    assert library == symbolize.NOT_ELF + "odd-\ufffd\ufffd.so" and symbol == symbolize.UNKNOWN


def test_code_in_a_file_that_only_looks_like_an_elf_file_is_no_librarys(tmp_path):
    """A file that starts with the ELF magic but whose header cannot be read is not an ELF file; one whose
    header loads nothing where the code was mapped from does not hold that code as a library would: both
    labelled so (op_samples counts such samples against the candidate); a header whose segment loads the
    code stays a library's."""
    pages = {"magic.so": b"\x7fELF" + b"\0" * 60, "empty.so": _elf_header(loads=False),
             "loaded.so": _elf_header(loads=True)}
    found = {}
    for name, header in pages.items():
        (tmp_path / name).write_bytes(header.ljust(mmap.PAGESIZE, b"\0") + b"\xc3" * mmap.PAGESIZE)
        base, unmap = _mapped(tmp_path / name, offset=mmap.PAGESIZE)
        try:
            found[name] = Symbolizer(os.getpid()).resolve([base + 64])[0][0]
        finally:
            unmap()
    assert found == {"magic.so": symbolize.NOT_ELF + "magic.so", "empty.so": symbolize.NOT_LOADED + "empty.so",
                     "loaded.so": "loaded.so"}, found


def test_code_in_a_memory_file_named_like_a_path_is_no_librarys():
    """A memory file's name is the process's choice, a path included: /proc/PID/maps lists it as
    `/memfd:<name> (deleted)`, whose base name can be any library's. No file at that path is the one mapped,
    so its code is no library's, whatever the file holds (here an ELF header that loads it)."""
    from cuda_agent.env.rules.op_samples import unattributable

    fd = os.memfd_create("r14/../libc.so.6")
    try:
        os.write(fd, _elf_header(loads=True).ljust(mmap.PAGESIZE, b"\0") + b"\xc3" * mmap.PAGESIZE)
        base, unmap = _mapped(f"/proc/self/fd/{fd}", offset=mmap.PAGESIZE)
    finally:
        os.close(fd)
    try:
        [(library, symbol)] = Symbolizer(os.getpid()).resolve([base + 64])
    finally:
        unmap()
    assert library == symbolize.NO_FILE + "libc.so.6 (deleted)" and symbol == symbolize.UNKNOWN
    assert unattributable(library)


def test_only_the_kernels_own_code_among_its_names_is_a_librarys():
    from cuda_agent.env.rules.op_samples import unattributable

    assert [unattributable(name) for name in ("[vdso]", "[vsyscall]", "libc.so.6")] == [False] * 3
    assert all(unattributable(name) for name in ("[heap]", "[stack]", "[anon:libc.so.6]", symbolize.ANONYMOUS))


def test_a_python_packages_library_loaded_after_the_symbolizer_is_the_solutions_doing():
    """Pillow's image arithmetic (or any package's library, torch's and numpy's aside) mapped after the symbolizer
    was made is labelled `[package]`, which the sampler counts against the candidate; one mapped before (the
    worker's own) is read as any library."""
    import pytest

    imagingmath = pytest.importorskip("PIL._imagingmath")
    library = ctypes.CDLL(imagingmath.__file__)
    address = _address(library.PyInit__imagingmath)
    before = Symbolizer(os.getpid())
    assert before.resolve([address])[0][0] == os.path.basename(imagingmath.__file__)
    after = Symbolizer(os.getpid())
    after.first_mapped = frozenset(p for p in after.first_mapped if p != os.path.realpath(imagingmath.__file__))
    assert after.resolve([address])[0][0] == symbolize.PACKAGE + os.path.basename(imagingmath.__file__)
    assert symbolize.package_of("/v/lib/python3.11/site-packages/PIL/_imaging.so") == "PIL"
    assert symbolize.package_of("/v/lib/python3.11/site-packages/_cffi_backend.so") == "_cffi_backend.so"
    assert symbolize.package_of("/usr/lib/python3.11/lib-dynload/_json.so") is None
    assert not after.late_package("/v/lib/python3.11/site-packages/torch/lib/libtorch_cpu.so")


def test_a_system_library_loaded_after_the_symbolizer_is_the_solutions_doing():
    """SQLite (reached through the standard library's `_sqlite3`, or linked by a solution's own library) mapped after
    the symbolizer was made is labelled `[loaded late]`, which the sampler counts against the candidate; so is a
    module of the standard library's (`lib-dynload`); the C and C++ runtimes, OpenMP and BLAS are not."""
    import ctypes.util

    import pytest

    found = ctypes.util.find_library("sqlite3")
    if found is None:
        pytest.skip("needs the system's libsqlite3")
    library = ctypes.CDLL(found)
    address = _address(library.sqlite3_libversion)
    path = next(m.path for m in Symbolizer(os.getpid()).maps if m.start <= address < m.end)
    after = Symbolizer(os.getpid())
    after.first_mapped = frozenset(p for p in after.first_mapped if p != path)
    assert after.resolve([address])[0][0] == symbolize.LATE + os.path.basename(path)
    assert after.loaded_late("/usr/lib/python3.11/lib-dynload/audioop.cpython-311-x86_64-linux-gnu.so")
    assert after.loaded_late("/usr/lib/x86_64-linux-gnu/libmpdec.so.3")
    for runtime in ("libgomp.so.1", "libstdc++.so.6", "libm.so.6", "libopenblas.so.0", "libmkl_rt.so.2",
                    "ld-linux-x86-64.so.2", "libatomic.so.1"):
        assert not after.loaded_late(f"/usr/lib/x86_64-linux-gnu/{runtime}"), runtime
    assert not after.loaded_late("/home/u/.cache/cuda-agent/lib/abc/solution.so")   # the solution's own
    assert not after.loaded_late("/v/lib/python3.11/site-packages/torch/lib/libgomp.so.1")


def test_a_system_library_mapped_before_the_sampler_is_preloaded():
    """A library of the system's the process had mapped already (hashlib's libcrypto, say) is `[preloaded]`, judged
    with the interpreter by amount: not libpython, not the runtimes, OpenMP or BLAS, nothing loaded later."""
    from cuda_agent.env.rules.op_samples import interpreter, unattributable

    symbolizer = Symbolizer(os.getpid())
    crypto, python = "/usr/lib/x86_64-linux-gnu/libcrypto.so.3", "/usr/lib/x86_64-linux-gnu/libpython3.11.so.1.0"
    symbolizer.first_mapped = frozenset({crypto, python, "/usr/lib/x86_64-linux-gnu/libgomp.so.1",
                                         "/usr/lib/python3.11/lib-dynload/_hashlib.cpython-311-x86_64-linux-gnu.so",
                                         "/home/u/.cache/cuda-agent/lib/abc/solution.so"})
    assert symbolizer.preloaded(crypto)
    assert not any(symbolizer.preloaded(path) for path in symbolizer.first_mapped - {crypto})
    assert not symbolizer.preloaded("/usr/lib/x86_64-linux-gnu/libsqlite3.so.0")   # not mapped before: late
    label = symbolize.PRELOADED + "libcrypto.so.3"
    assert interpreter(label) and not unattributable(label)


def test_the_interpreters_code_is_told_by_its_librarys_name():
    from cuda_agent.env.rules.op_samples import interpreter

    assert all(interpreter(name) for name in ("libpython3.11.so.1.0", "python3.11", "python3",
                                               "array.cpython-311-x86_64-linux-gnu.so",
                                               "_decimal.cpython-311-x86_64-linux-gnu.so"))
    assert not any(interpreter(name) for name in ("libc.so.6", "cuda_extension.so", "libtorch_python.so",
                                                   symbolize.PACKAGE + "_imagingmath.cpython-311-x86_64-linux-gnu.so",
                                                   symbolize.LATE + "audioop.cpython-311-x86_64-linux-gnu.so"))


def _judged(**state):
    """An OpSampling's judgement of the given state, without its samplers (none are needed to judge)."""
    from cuda_agent.env.rules.op_samples import OpSampling

    sampling = OpSampling.__new__(OpSampling)
    sampling.total, sampling.timed_calls, sampling.cheapest_s = 1.0, [0.0], 0.0
    sampling.interpreter, sampling.data_bytes = {"timed": [], "null": []}, 0
    sampling.__dict__.update(state)
    return sampling


def test_the_interpreters_time_beyond_the_empty_calls_is_shown():
    """The summary's `interpreter_excess_s`: the interpreter's sampled seconds a timed call less an empty call's (the
    process's first empty call, which warms it up, not counted)."""
    sampling = _judged(interpreter={"timed": [1.5e-3] * 20, "null": [9e-3] + [0.5e-3] * 20})
    assert abs(sampling.interpreter_excess_s() - 1e-3) < 1e-12
    assert _judged().interpreter_excess_s() == 0.0


def _calls(ms_each: list[int], repeat: int) -> list[float]:
    """Calls' sampled interpreter seconds: the milliseconds given, repeated (a sample weighs a millisecond)."""
    return [ms * 1e-3 for ms in ms_each] * repeat


def test_a_forward_computed_by_the_interpreter_is_refused():
    """A forward whose timed calls hold a millisecond of interpreter samples more than the empty calls, most of its
    own time, is refused; one whose calls hold what the empty calls do is not, however long its forward."""
    from cuda_agent.env.rules.call_verdict import Refused

    nulls = _calls([1, 0, 0], 6)   # the harness's own steps: a third of a period a call
    cheat = _judged(interpreter={"timed": _calls([1, 2, 1, 1], 4), "null": nulls}, timed_calls=[1.5e-3] * 16)
    with pytest.raises(Refused) as refused:
        cheat.timing_done()
    assert refused.value.rule.name == "torch-op" and "in the Python interpreter" in str(refused.value)
    honest = _judged(interpreter={"timed": _calls([1, 0, 0, 1, 0, 0], 3), "null": nulls}, timed_calls=[1.5e-3] * 18)
    honest.timing_done()


def test_the_interpreters_honest_margin():
    """What a timed call may hold of the interpreter beyond an empty call: at least INTERPRETER_MIN_S (a forward's
    Python lines and its binding's calls), a share of the forward's own time, and a bound growing with the bytes it
    reads and writes (the harness's steps after a forward that swept the caches run slower); too few calls are not
    judged."""
    from cuda_agent.env.rules import op_samples
    from cuda_agent.env.rules.call_verdict import Refused

    nulls, timed = _calls([1, 0, 0], 6), _calls([1], 18)   # two thirds of a millisecond more a call
    short = _judged(interpreter={"timed": timed, "null": nulls}, timed_calls=[1.5e-3] * 18)
    with pytest.raises(Refused):
        short.timing_done()
    # looked at after every call, the same calls are not enough: the early test asks for more standard errors
    short._judge_interpreter(op_samples.INTERPRETER_EARLY_SURE)
    swept = _judged(interpreter={"timed": timed, "null": nulls}, timed_calls=[1.5e-3] * 18, data_bytes=4 << 20)
    assert swept.interpreter_bound_s() >= 2e-3
    swept.timing_done()
    long_forward = _judged(interpreter={"timed": timed, "null": nulls}, timed_calls=[5e-3] * 18)
    assert long_forward.interpreter_bound_s() == pytest.approx(op_samples.INTERPRETER_SHARE * 5e-3)
    long_forward.timing_done()
    few = _judged(interpreter={"timed": _calls([2], 7), "null": nulls}, timed_calls=[2e-3] * 7)
    few.timing_done()
    # every call one sample, every empty call none: no spread among them, the period's half taken instead
    excess, error = op_samples.excess_and_error(_calls([1], 8), _calls([0], 4))
    assert excess == pytest.approx(1e-3) and error == pytest.approx(0.5e-3 * (1 / 8 + 1 / 4) ** 0.5)


def test_a_calls_bytes_are_the_harnesss_own_numbers():
    """The bytes the interpreter's bound grows with: the judge's draw of the call's inputs and the reference's output
    (none of them the candidate's answer); a layout the call does not have counts nothing."""
    from cuda_agent.env.run.rounds import CallRounds

    rounds = CallRounds.__new__(CallRounds)
    rounds.output_bytes = 32768
    layout = {"list": [{"tensor": "float32", "shape": [8, 1024]}, {"value": 2}, {"tensor": "int64", "shape": [3]}]}
    assert rounds._data_bytes({"layout": layout}) == 32768 + 32768 + 24
    assert rounds._data_bytes({"ok": True}) == 32768
    rounds.output_bytes = None
    assert rounds._data_bytes({"layout": {"tensor": "float16", "shape": [4]}}) == 8


def test_the_verdict_names_the_kind_of_code_sampled():
    """A forward computed by another package's library is not said to be computed by PyTorch's operators."""
    from collections import Counter

    package = _judged(against=Counter({symbolize.PACKAGE + "_imagingmath.so ?": 0.6}))
    message = package.message(0.6)
    assert "another Python package's library" in message and "PyTorch's operators" not in message
    late = _judged(against=Counter({symbolize.LATE + "libsqlite3.so.0 sqlite3VdbeExec": 0.5}))
    assert "loaded by the solution ([loaded late]" in late.message(0.5)
    aten = _judged(against=Counter({"void at::native::AVX2::add_kernel(at::TensorIteratorBase&)": 0.9}))
    assert "PyTorch's operators (ATen's kernels)" in aten.message(0.9)
