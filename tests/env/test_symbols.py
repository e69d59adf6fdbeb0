"""The link-level check (symbols.py) on what native code may import: the Python C-API that runs code,
imports modules or reaches the interpreter, signals and timers refused; what honest bindings import
(pybind11's own use of the C-API among it) allowed."""

from __future__ import annotations

import os
import shutil
import sys
from pathlib import Path

import pytest

from cuda_agent.env.builds.compiler import build_extension
from cuda_agent.env.rules.symbols import check_library, check_symbol, toolchain_imports
from tests.env.helpers import cpu_workspace
from tests.hacks.cases import KERNELS, example_model_new, ops_workspace
from tests.hacks.cases_wave import wave_workspace

REFUSED = [
    "PyRun_SimpleStringFlags", "PyRun_StringFlags", "PyRun_FileExFlags", "Py_CompileStringExFlags",
    "Py_CompileStringObject", "PyEval_EvalCode", "PyEval_EvalCodeEx", "_PyEval_EvalFrameDefault",
    "PyMarshal_ReadObjectFromString", "PyFunction_New", "PyCode_NewEmpty", "Py_RunMain",
    "PyImport_ImportModule", "PyImport_Import", "PyImport_AddModule", "PyImport_GetModuleDict",
    "PyImport_ImportModuleLevelObject", "PyCapsule_Import",
    "PySys_GetObject", "PySys_SetObject", "PySys_AddAuditHook", "PyEval_GetFrame", "PyEval_GetGlobals",
    "PyEval_GetLocals", "PyFrame_GetGlobals", "PyFrame_GetLocals", "PyFrame_GetBuiltins",
    "PyThreadState_GetFrame", "PyThreadState_SetAsyncExc", "PyEval_SetTrace", "PyEval_SetProfile",
    "Py_AddPendingCall", "PyDict_AddWatcher", "PyErr_SetInterrupt",
    "signal", "sigaction", "raise", "setitimer", "alarm", "timer_create", "timerfd_settime", "PyOS_setsig",
    "torch::jit::tensorexpr::SimpleIREvaluator::call_raw(std::vector<void*, std::allocator<void*> > const&)",
    "torch::jit::tensorexpr::LoopNest::prepareForCodegen()",
]
# Imported by pybind11 itself in every binding (get_internals, error messages, the GIL), or what any
# binding does with Python objects; and what honest CUDA bindings import (stream guards, threads).
ALLOWED = [
    "PyEval_GetBuiltins", "PyInterpreterState_GetDict", "PyFrame_GetBack", "PyFrame_GetCode",
    "PyFrame_GetLineNumber", "PyGILState_Ensure", "PyGILState_Release", "PyThreadState_New",
    "_PyThreadState_UncheckedGet", "PyEval_SaveThread", "PyEval_AcquireThread", "PyObject_GetAttrString",
    "PyObject_CallFunctionObjArgs", "PyOS_snprintf", "PyErr_Occurred",
    "c10::cuda::setCurrentCUDAStream(c10::cuda::CUDAStream)", "pthread_create",
    "std::thread::_M_start_thread(std::unique_ptr<std::thread::_State, std::default_delete<std::thread::_State> >, "
    "void (*)())",
]


@pytest.mark.parametrize("symbol", REFUSED)
def test_python_entry_points_signals_timers_and_pytorchs_kernel_compiler_are_refused(symbol):
    assert check_symbol(symbol), symbol


@pytest.mark.parametrize("symbol", ALLOWED)
def test_what_honest_bindings_import_is_allowed(symbol):
    assert check_symbol(symbol) is None, f"{symbol}: {check_symbol(symbol)}"


def _refused(files: dict[str, str], backend: str, cache: Path) -> list[str]:
    report = build_extension("cuda_extension", files, backend, cache)
    return [f.describe() for f in check_library(report.path, report.objects, toolchain_imports(backend, str(cache)))]


def test_honest_cpu_bindings_pass(cache_dir):
    """The example's workspace binding, the hack suite's honest bindings (the binding of ops.cpp without
    its marked cheats, and wave.cpp's), each with its Python C-API use through pybind11."""
    build = cache_dir / "build"
    ops = ops_workspace(example_model_new("return cuda_extension.bias_relu(x, self.bias)"))
    for files in (cpu_workspace().kernel_files, ops.kernel_files, wave_workspace("").kernel_files):
        assert _refused(files, "cpu", build) == []


@pytest.mark.slow
@pytest.mark.skipif(shutil.which("nvcc") is None, reason="nvcc builds the CUDA binding")
def test_honest_cuda_stream_graph_and_thread_binding_passes(cache_dir, monkeypatch, tmp_path):
    """Side streams, a stream guard (which imports setCurrentCUDAStream), events, a captured CUDA graph
    and a joined std::thread. With a CPU build of torch, the stand-ins of build_all.py let it link."""
    import torch

    if torch.version.cuda is None:
        sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "benchmarks" / "kernelbench_solutions"))
        try:
            from build_all import cpu_torch_stand_ins
        finally:
            sys.path.pop(0)
        for var in ("CPATH", "LIBRARY_PATH"):   # the stand-ins extend them; restored after the test
            monkeypatch.setenv(var, os.environ.get(var, ""))
        cpu_torch_stand_ins(tmp_path / "stand-ins")
    monkeypatch.setenv("CUDA_AGENT_CUDA_ARCH", os.environ.get("CUDA_AGENT_CUDA_ARCH", "90a"))
    files = {"kernels/streams_binding.cpp": (KERNELS / "streams_binding.cpp").read_text(),
             "kernels/streams.cu": (KERNELS / "streams.cu").read_text()}
    assert _refused(files, "cuda", cache_dir / "build") == []


def test_the_python_api_the_toolchain_brings_is_exempt_in_the_solutions_objects_too(cache_dir):
    """pybind11 is compiled into the solution's own objects, so the Python C-API the minimal extension
    imports (what pybind11 itself uses, whatever the Python version) is exempt there as well; nothing
    else the toolchain brings is (an object importing `mprotect` answers for it)."""
    files = {"kernels/cheat.cpp": "\n".join((KERNELS / "link" / name).read_text()
                                            for name in ("py_run_string.cpp", "got_clock.cpp"))}
    report = build_extension("py_run_only", files, "cpu", cache_dir / "build")
    assert {"PyRun_SimpleStringFlags", "mprotect"} <= {f.symbol for f in check_library(report.path, report.objects)}
    brought = frozenset({"PyRun_SimpleStringFlags", "mprotect"})   # as if the minimal extension imported them
    refused = {f.symbol for f in check_library(report.path, report.objects, brought)}
    assert "PyRun_SimpleStringFlags" not in refused and "mprotect" in refused
