"""What a built solution library may link against: the check that no source trick can dodge.

Whatever a library calls in PyTorch or the C library it must import by name, so the harness reads the
undefined symbols of every library it built for a solution (`nm -D`) and its `syscall` instructions,
and refuses, naming the symbol, those listed in docs/verification.md ("Link-level check"). What the
toolchain links in by itself is not the solution's (a wrapper's static libstdc++ imports `syscall`):
a library's imports are checked less those of a minimal extension (`toolchain_imports`), the objects
built from its own sources in full.
"""

from __future__ import annotations

import bisect
import re
import shutil
import struct
import subprocess
import threading
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path

# Namespaces whose functions are ATen operators' backend kernels, named after the operator.
_BACKEND_KERNELS = re.compile(
    r"^at::(cpu|cuda|meta|mps|xpu|compositeexplicitautograd|compositeexplicitautogradnonfunctional|"
    r"compositeimplicitautograd|compositeimplicitautogradnestedtensor)::([A-Za-z0-9_]+)\(")
# ATen helpers a kernel may use: handles and device facts for cuBLAS / cuDNN / the CUDA runtime.
_ALLOWED_HELPERS = re.compile(
    r"^at::(cuda::(getCurrentCUDABlasHandle|getCurrentCUDABlasLtHandle|getCurrentCUDASparseHandle|"
    r"getCurrentCUDASolverDnHandle|getCurrentCUDAStream|getDefaultCUDAStream|getStreamFromPool|"
    r"getCurrentDeviceProperties|getDeviceProperties|warp_size|getCUDABlasLtWorkspace\w*|"
    r"getChosenWorkspaceSize|getCurrentCUDABlasLtWorkspace\w*)|native::getCudnnHandle)\(")
_DENIED = [
    (re.compile(r"^at::native::"), "calls an ATen kernel directly (at::native), past the dispatcher"),
    (re.compile(r"^at::cuda::blas::"), "calls ATen's cuBLAS wrappers (at::cuda::blas); call cuBLAS itself"),
    (re.compile(r"^at::_ops::\w+::redispatch\("), "redispatches an ATen operator below the guard"),
    (re.compile(r"^c10::(Dispatcher|KernelFunction|OperatorHandle|impl::OperatorEntry|BoxedKernel)\b"),
     "drives PyTorch's dispatcher directly"),
    (re.compile(r"^at::(\w+::)*(\w*RecordFunction\w*|\w*[Cc]allbacks?\w*|\w*record_function\w*|"
                r"ThreadLocalState::setThreadLocalState|ThreadLocalStateGuard)\b"),
     "touches the operator-recording machinery the harness watches with"),
    (re.compile(r"^at::(launch|intraop_launch|internal::launch_no_thread_state)\("),
     "hands work to PyTorch's thread pools, where it outlives the call"),
    (re.compile(r"^c10::impl::(TorchDispatchModeTLS|PythonDispatcherTLS|_force_tls_local_dispatch_key_set|"
                r"tls_set_dispatch_key_(included|excluded))"), "reads or changes the dispatcher's thread-local state"),
    (re.compile(r"^at::DynamicLibrary\b"),
     "loads libraries and looks up symbols at run time (ATen's dlopen and dlsym), past this check"),
    (re.compile(r"^torch::jit::tensorexpr::"),
     "runs PyTorch's tensor-expression compiler (NNC): kernels it generates or interprets are not the solution's"),
]
_DENIED_C = {
    "fork", "vfork", "clone", "clone3", "execve", "execv", "execvp", "execvpe", "execl", "execlp", "execle",
    "fexecve", "execveat", "posix_spawn", "posix_spawnp", "system", "popen", "daemon", "setsid", "ptrace",
    "process_vm_readv", "process_vm_writev", "dlopen", "dlmopen", "dlsym", "dlvsym", "dl_iterate_phdr",
    "mprotect", "pkey_mprotect", "syscall", "unshare", "setns", "prctl", "kill", "tgkill", "killpg",
    "pidfd_send_signal", "getrandom",
    # the C library's other names for some of them (glibc exports these beside the names above)
    "__fork", "_Fork", "__libc_fork", "forkpty", "__clone", "__vfork", "_IO_popen", "__libc_system", "__mprotect",
}
# Signals and timers: a handler or a timer runs the solution's code outside its calls, in whatever
# the process is doing then (the harness's timing included); a signal raised at itself lands there too.
_DENIED_SIGNALS = {
    "signal", "sigaction", "sigset", "sigvec", "bsd_signal", "sysv_signal", "__sysv_signal", "siginterrupt",
    "signalfd", "raise", "sigqueue", "tkill", "pthread_kill", "pthread_sigqueue", "setitimer", "alarm", "ualarm",
    "timer_create", "timer_settime", "timerfd_create", "timerfd_settime", "clock_settime", "settimeofday",
    "adjtime", "adjtimex", "clock_adjtime", "PyOS_setsig", "PyErr_SetInterrupt", "PyErr_SetInterruptEx",
    # the C library's other names for some of them
    "__sigaction", "__libc_sigaction", "ssignal", "gsignal",
}
# The Python C-API that runs code, imports modules or reaches the interpreter's state (frames, sys,
# other threads, tracing, watchers, pending calls): no honest binding imports any of it. The few that
# pybind11 itself imports in every binding stay allowed: PyEval_GetBuiltins, PyInterpreterState_GetDict
# (its internals), PyFrame_GetBack / GetCode / GetLineNumber (a Python error's traceback), the GIL's
# PyGILState_* / PyThreadState_New / PyEval_SaveThread / AcquireThread, and plain calls and attributes
# (docs/verification.md, "Link-level check", lists the bindings this was checked on).
_DENIED_PYTHON = [
    (re.compile(r"^_?Py(Run|Compile|AST|Parser|Marshal)_\w+$|^_?Py_Compile\w*$|^Py_CompileString\w*$|"
                r"^PyEval_(EvalCode|EvalFrame)\w*$|^_PyEval_\w+$|^Py(Function|Code|Unstable_Code)_New\w*$|"
                r"^Py_(Main|BytesMain|RunMain)$"), "runs Python code from native code"),
    (re.compile(r"^_?PyImport_\w+$|^PyCapsule_Import$"), "imports Python modules from native code"),
    (re.compile(r"^_?PySys_\w+$|^PyEval_Get(Frame\w*|Globals|Locals)$|"
                r"^_?PyFrame_(?!(GetBack|GetCode|GetLineNumber)$)\w+$|"
                r"^PyThreadState_(GetFrame|GetDict|SetAsyncExc|Swap|Next)$|"
                r"^PyInterpreterState_(New|Clear|Delete|Head|Next|ThreadHead)$|"
                r"^Py_(NewInterpreter|EndInterpreter|Initialize\w*|Finalize\w*|Exit|AddPendingCall|AtExit)$|"
                r"^PyEval_Set(Trace|Profile)\w*$|^Py\w+_AddWatcher$|^PyRefTracer_\w+$"),
     "reaches the Python interpreter's state (frames, sys, other threads, tracing)"),
]
_PYTHON_NAME = re.compile(r"^_?Py")


class ToolMissing(RuntimeError):
    pass


class CheckLimit(RuntimeError):
    """A library or object too large to check: more code to disassemble than MAX_CODE_CHECKED, or a tool of the check
    past its time (the build's failure, not the harness's)."""


@dataclass(frozen=True)
class Finding:
    symbol: str
    why: str

    def describe(self) -> str:
        return f"{self.symbol}: {self.why}"


@lru_cache(maxsize=1)
def _aten_operator_names() -> frozenset[str]:
    import torch

    return frozenset(name.split("::", 1)[1].split(".", 1)[0]
                     for name in torch._C._dispatch_get_all_op_names() if name.startswith("aten::"))


def _is_operator_kernel(function: str) -> bool:
    names = _aten_operator_names()
    base = re.sub(r"(_outf|_out|_symint)$", "", function)
    return function in names or base in names or base.rstrip("_") in names


def undefined_symbols(library: Path, dynamic: bool = True) -> list[str]:
    """The undefined symbols of a shared library (its dynamic imports) or of an object file, demangled."""
    nm = shutil.which("nm")
    if nm is None:
        raise ToolMissing("`nm` (binutils) is needed to check built libraries: apt-get install binutils")
    try:
        out = subprocess.run([nm, *(["-D"] if dynamic else []), "--undefined-only", "-C", str(library)],
                             capture_output=True, text=True, timeout=CHECK_SECONDS)
    except subprocess.TimeoutExpired:
        raise CheckLimit(f"reading the imports of {library.name} took more than {CHECK_SECONDS} s") from None
    if out.returncode != 0:
        raise ToolMissing(f"nm could not read {library.name}: {out.stderr.strip()[:200]}")
    symbols = []
    for line in out.stdout.splitlines():
        parts = line.split(None, 1)
        if len(parts) == 2 and parts[0] in ("U", "w", "v"):
            symbols.append(parts[1].split("@")[0].strip())
    return symbols


def check_symbol(symbol: str) -> str | None:
    """Why `symbol` may not be imported, or None."""
    if _ALLOWED_HELPERS.match(symbol):
        return None
    match = _BACKEND_KERNELS.match(symbol)
    if match and _is_operator_kernel(match.group(2)):
        return f"calls ATen's {match.group(1)} kernel for `{match.group(2)}` directly, past the dispatcher"
    for pattern, why in _DENIED:
        if pattern.search(symbol):
            return why
    if symbol in _DENIED_C:
        return "a process, loader or memory-protection call a kernel has no use for"
    if symbol in _DENIED_SIGNALS:
        return "a signal or timer call: it runs code outside the solution's calls"
    if _PYTHON_NAME.match(symbol):
        for pattern, why in _DENIED_PYTHON:
            if pattern.search(symbol):
                return why
    return None


# The encodings of `syscall`, `sysenter` and `int $0x80`: code without these bytes has none of them.
_SYSCALL_BYTES = (b"\x0f\x05", b"\x0f\x34", b"\xcd\x80")
_MAX_WINDOWS = 16   # past this many functions to disassemble, one pass over the whole file is cheaper
_MAX_HITS = 256     # past this many encodings to look up among the functions, the whole file is disassembled
# Bytes of code disassembled for one file: objdump prints about 140 bytes of text per byte of `nop`, so 16 MiB is a
# few seconds of its time (its output is read as it comes, never kept); an honest extension's code is a few MiB.
MAX_CODE_CHECKED = 16 << 20
CHECK_SECONDS = 120   # the most one tool of the check may take on one file
_SYSCALL_LINE = re.compile(rb"\t(syscall|sysenter|int\s+\$0x80)\b")


def _syscall_windows(path: Path) -> tuple[list[tuple[int, int]] | None, int]:
    """Where a 64-bit little-endian ELF library's code could hold a system call instruction: the
    address ranges of the functions whose bytes hold one of their encodings, or of the section where
    no function does (empty: nowhere, for an object file too). None where that cannot be told from the
    bytes and symbols (another kind of file, an object file with an encoding, too many ranges): then
    the whole file is disassembled. With it, the bytes that disassembling takes: the ranges' sizes, else
    the file's code (its whole size where it is no ELF file this reads)."""
    data = Path(path).read_bytes()
    if data[:6] != b"\x7fELF\x02\x01":
        return None, len(data)
    shoff, = struct.unpack_from("<Q", data, 0x28)
    entsize, count = struct.unpack_from("<HH", data, 0x3A)
    if entsize < 0x40 or shoff + entsize * count > len(data):
        return None, len(data)
    hits, functions = [], []
    code = 0
    for i in range(count):
        kind, flags, addr, offset, size, _link, _info, _align, item = struct.unpack_from(
            "<IQQQQIIQQ", data, shoff + i * entsize + 4)
        if offset + size > len(data) and kind != 8:
            return None, len(data)
        if flags & 0x4 and kind != 8:   # SHF_EXECINSTR, with contents (not SHT_NOBITS)
            code += size
            for pattern in _SYSCALL_BYTES:
                at = data.find(pattern, offset, offset + size)
                while at >= 0 and len(hits) <= _MAX_HITS:
                    hits.append((addr + at - offset, (addr, addr + size)))
                    at = data.find(pattern, at + 1, offset + size)
        if kind == 2 and item == 24:    # SHT_SYMTAB: its functions' addresses and sizes
            for _name, info, _other, _index, value, length in struct.iter_unpack("<IBBHQQ", data[offset:offset + size]):
                if info & 0xF == 2 and length:
                    functions.append((value, value + length))
    if not hits:
        return [], 0
    if struct.unpack_from("<H", data, 0x10)[0] not in (2, 3) or len(hits) > _MAX_HITS:
        return None, code   # not linked (no addresses to disassemble at), or too many places to look up
    functions.sort()
    starts = [start for start, _ in functions]
    windows = set()
    for hit, section in hits:
        # the functions holding it (among the few that start last before it), else its whole section (a PLT has
        # no function symbols): both start where an instruction does
        last = bisect.bisect_right(starts, hit)
        near = functions[max(0, last - 8):last]
        windows.update([f for f in near if hit + 2 <= f[1]] or [section])
    if len(windows) > _MAX_WINDOWS:
        return None, code
    return sorted(windows), sum(stop - start for start, stop in windows)


def has_syscall_instruction(library: Path) -> bool:
    """Whether the library's own code issues system calls directly (no libc symbol to see). In a
    library, only the functions (or sections) whose bytes hold one of the instructions' encodings are
    disassembled (`_syscall_windows`); any other file is disassembled whole. CheckLimit where that is more
    than MAX_CODE_CHECKED bytes of code, or takes objdump more than CHECK_SECONDS."""
    windows, code = _syscall_windows(Path(library))
    if code > MAX_CODE_CHECKED:
        raise CheckLimit(f"{Path(library).name} holds {code >> 20} MiB of code to check for system calls: at most "
                         f"{MAX_CODE_CHECKED >> 20} MiB")
    objdump = shutil.which("objdump")
    if objdump is None:
        raise ToolMissing("`objdump` (binutils) is needed to check built libraries: apt-get install binutils")
    ranges = [[]] if windows is None else [[f"--start-address={start:#x}", f"--stop-address={stop:#x}"]
                                           for start, stop in windows]
    return any(_disassembly_has_syscall([objdump, "-d", "--no-show-raw-insn", *window, str(library)])
               for window in ranges)


def _disassembly_has_syscall(command: list[str]) -> bool:
    """Whether objdump's `command` prints a system call instruction: its output read as it comes and dropped
    (a few MiB of code print gigabytes), objdump killed past CHECK_SECONDS (CheckLimit)."""
    proc = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, stdin=subprocess.DEVNULL)
    timer = threading.Timer(CHECK_SECONDS, proc.kill)
    timer.start()
    tail = b""
    try:
        while chunk := proc.stdout.read(1 << 20):
            block = tail + chunk
            if _SYSCALL_LINE.search(block):
                return True
            tail = block[-64:]   # a line cut between two reads
        if proc.wait() < 0 and not timer.is_alive():
            raise CheckLimit(f"disassembling {Path(command[-1]).name} took more than {CHECK_SECONDS} s")
        return False
    finally:
        timer.cancel()
        proc.kill()
        proc.wait()
        proc.stdout.close()


# Findings per file, keyed by the file itself (device, inode, size, mtime) rather than its path: a
# library checked where it was linked keeps its findings once published into the cache (a rename).
_CHECKED: dict[tuple, tuple[Finding, ...]] = {}


def _check_file(path: Path, dynamic: bool, exempt: frozenset[str] = frozenset()) -> list[Finding]:
    stat = Path(path).stat()
    key = (stat.st_dev, stat.st_ino, stat.st_size, stat.st_mtime_ns, dynamic, exempt)
    if key not in _CHECKED:
        findings = [Finding(s, why) for s in undefined_symbols(Path(path), dynamic) if s not in exempt
                    and (why := check_symbol(s))]
        if has_syscall_instruction(Path(path)):
            findings.append(Finding("syscall", "the library's code issues system calls itself"))
        if len(_CHECKED) > 4096:
            _CHECKED.clear()
        _CHECKED[key] = tuple(findings)
    return list(_CHECKED[key])


_MINIMAL_SOURCES = {
    "cpu": {"binding.cpp": "#include <torch/extension.h>\n"
                           "torch::Tensor identity(torch::Tensor x) { return x; }\n"
                           "PYBIND11_MODULE(TORCH_EXTENSION_NAME, m) { m.def(\"identity\", &identity); }\n"},
}
_MINIMAL_SOURCES["cuda"] = {
    **_MINIMAL_SOURCES["cpu"],
    "kernel.cu": "#include <cuda_runtime.h>\n__global__ void noop(float* x) { x[threadIdx.x] += 1.f; }\n"
                 "void launch_noop(float* x) { noop<<<1, 32>>>(x); }\n",
}


@lru_cache(maxsize=None)
def toolchain_imports(backend: str, cache_dir: str) -> frozenset[str]:
    """What a minimal extension built by this machine's toolchain imports on its own."""
    from cuda_agent.env.builds.compiler import build_extension

    report = build_extension("toolchain_probe", _MINIMAL_SOURCES[backend], backend, Path(cache_dir))
    return frozenset(undefined_symbols(report.path))


def check_library(library: Path, objects=(), exempt: frozenset[str] = frozenset()) -> list[Finding]:
    """Every refused import of a built library (empty when it is clean): the library's imports less
    `exempt` (what the toolchain brings, `toolchain_imports`), and every import of `objects`."""
    findings = _check_file(Path(library), True, frozenset(exempt))
    seen = {f.symbol for f in findings}
    # pybind11 is compiled into the solution's own objects: the Python C-API it brings (whatever the
    # Python version) is the toolchain's, as the minimal extension shows
    pybind = frozenset(s for s in exempt if _PYTHON_NAME.match(s))
    for obj in objects:
        for finding in _check_file(Path(obj), False, pybind):
            if finding.symbol not in seen:   # each refused symbol named once
                seen.add(finding.symbol)
                findings.append(finding)
    return findings
