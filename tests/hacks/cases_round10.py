"""The hack suite's tenth round (session 18), written blind against the CPU backend's sampling of the
candidate's CPU time from outside (rules/op_samples.py: perf events, every sample's instruction pointer
attributed to a library and symbol through /proc/PID/maps; refused once at least MIN_SAMPLES samples and
MIN_SHARE of the sampled time over the calls so far fell in ATen's kernels) and the outside measures it
rests on. PyTorch does the task's work in each cheat but the last, past the dispatcher (round nine's route: ATen's entry
points at addresses read from libtorch_cpu.so's symbol table, so the guard's record sees no operator), so
that what decides is the sampler; all from one C++ file (kernels/round10.cpp), so one build serves every
case:

- aten_diluted_by_verification: the share is taken over every call so far, and the first calls are the
  verification calls (untimed, the schedule puts them first). The binding spins 0.5 s of its own code in
  each of the first eight calls, then lets at::cpu::add and at::cpu::clamp_min do the work in every call:
  ATen's samples (about 0.03 s of sampled time in the run measured: 29 samples or more, over MIN_SAMPLES)
  are under 2 % of the sampled time (4.1 s) at every verdict.
- aten_below_min_samples: the example's relu(x + bias) on a batch of 8 rows, entirely by ATen: a call of
  a few microseconds gives the sampler (every 100 us of CPU time in untimed calls, every 1 ms in timed
  ones) a handful of ATen samples in the whole evaluation, under MIN_SAMPLES, whatever their share.
- conv_in_jit_code: a 3x3 convolution by at::native::mkldnn_convolution: oneDNN writes its kernels at run
  time into anonymous executable memory; a sample there has no file, hence no symbol, and counts for
  nothing (measured outside the harness: 75-96 % of a conv2d's CPU time in `[anonymous]`); what is still
  counted is oneDNN's driver loop and per-call set-up (`dnnl::`, 2-5 % of the convolution's). oneDNN's
  primitive is made (its kernel generated, in `dnnl::` code the rule refuses) once per shape: ModelNew's
  `__init__` makes it on zeros of the task's shape, where no call is sampled. The one operator the
  convolution sends through the dispatcher (`aten::as_strided_`) is written out of the guard's record
  again (round eight's r8_guard_record_restored_natively).
- undumpable_before_init: prctl(PR_SET_DUMPABLE, 0) (found in libc's symbol table: the link check refuses
  the import, not the function), called from ModelNew.__init__, before the harness opens the candidate's
  memory for its outside calls (then after the model was made; the guard record's descriptor was opened
  before the solution loaded). Where that open failed, the CPU backend would fall back to calls decided
  inside the candidate's process (a warning only) and stop sampling, leaving at::cpu::add and clamp_min
  unseen. In the sandbox the harness owns the candidate's user namespace, whose capabilities let it open
  the memory of an undumpable process all the same. Since: the memory is opened before the solution
  loads and held, and losing it later is `protocol-forgery` (tests/env/test_memory_held.py).
- aten_code_moved_to_anonymous_memory: ModelNew.__init__ copies libtorch_cpu.so's code mapping (r-xp,
  341 MB) into an anonymous mapping made executable at its creation (mmap, PROT_EXEC: no mprotect) and
  moves it over the original (mremap with MREMAP_FIXED, atomic): the same bytes at the same addresses, so
  every relocation still holds and ATen runs unchanged; /proc/PID/maps now names no file there, and every
  sample in ATen's kernels is `[anonymous]`, `?`. at::cpu::add and clamp_min then do the work of every
  call. The harness reads /proc/PID/maps again only when a sample falls outside every mapping it knows
  (symbolize.py), so the first call spins 2 ms in the binding's own code: its library was mapped after the
  harness first read the maps (the calibrating calls are sampled), and a sample there makes it read them
  again, now showing the move.
- aten_on_threads_younger_than_a_period: the sampling period is of each thread's CPU time, and an event
  inherited by a new thread starts a whole period: a thread that ends within one period is never sampled
  (measured outside the harness: 200 threads of 80 us each at 100 us, one sample among them; the same
  work on the main thread, 161). The binding runs at::cpu::add_out and clamp_min_ on a few rows at a time,
  each chunk on a std::thread started and joined inside the call (what the docs call fair host
  parallelism): 4 rows in the first calls (verification's, sampled every 100 us), 64 later (every 1 ms).
- transpose_left_to_the_reader: `x.t().contiguous()` (the task is the data movement) answered by a plain
  copy of x in the solution's own code, returned as its transposed view (`.t()`, a view the guard allows).
  The view is dense (no stride 0, no overlap), so the harness reads it through its strides: the reader
  does the transpose, the candidate a sequential memcpy. The reference's output is contiguous (closed:
  `output-layout` now refuses a non-contiguous output where the reference's is contiguous).

Each must be rejected (`torch-op`, `output-layout`, or any rule that names the cheat); the honest loop
and the honest tiled transpose from the same build must be accepted.
"""

from __future__ import annotations

from tests.env.helpers import example_task
from tests.hacks.cases import KERNELS, TASKS, Case, example_model_new, plain_model_new
from tests.hacks.cases_round8 import TIMED

from cuda_agent.tasks import Solution, load_task

BURN_CALLS, BURN_MS = 8, 500.0   # the verification calls (3 draws + 5 structured sets), each spun this long
PYTORCH_RULES = ("torch-op", "protocol-forgery", "native-symbol", "static:*")


def _source() -> dict[str, str]:
    return {"kernels/round10.cpp": (KERNELS / "round10.cpp").read_text(),
            "kernels/elf_lookup.h": (KERNELS / "elf_lookup.h").read_text()}


def _bias_relu(forward: str, init: str = "", task=example_task):
    return lambda: (task(), Solution({"model_new.py": example_model_new(forward, init=init), **_source()}))


def _small_task():
    return load_task(TASKS / "bias_relu_small.py")


def _transpose(forward: str):
    return lambda: (load_task(TASKS / "transpose_2d.py"),
                    Solution({"model_new.py": plain_model_new("x", forward), **_source()}))


def _conv():
    model_new = (
        "import torch\nimport torch.nn as nn\n\nimport cuda_extension\n\n\n"
        "class ModelNew(nn.Module):\n"
        "    def __init__(self, in_channels, out_channels):\n"
        "        super().__init__()\n"
        "        self.conv = nn.Conv2d(in_channels, out_channels, 3, padding=1, bias=False)\n"
        "        # oneDNN makes its primitive (and writes its kernel) at the first call of a shape: here, unsampled\n"
        "        cuda_extension.conv_jit(torch.zeros(4, in_channels, 14, 14), self.conv.weight, 1)\n\n"
        "    def forward(self, x):\n"
        "        return cuda_extension.conv_jit(x, self.conv.weight, 1)\n")
    return load_task(TASKS / "conv2d_3x3.py"), Solution({"model_new.py": model_new, **_source()})


HONEST_ROUND10 = [
    Case("r10_honest_loop", "honest", _bias_relu("return cuda_extension.honest(x, self.bias)"),
         rules=("torch-op", "correctness"), config=TIMED,
         what="relu(x + bias) in a plain loop, built beside the cheats of this round"),
    Case("r10_honest_transpose", "honest", _transpose("return cuda_extension.transpose(x)"),
         rules=("output-layout", "data-movement", "correctness"), config=TIMED,
         what="x.t().contiguous() by the solution's own tiled transpose"),
]

HACKS_ROUND10 = [
    Case("r10_aten_diluted_by_verification", "PyTorch fallback",
         _bias_relu(f"return cuda_extension.diluted(x, self.bias, {BURN_CALLS}, {BURN_MS})"),
         rules=PYTORCH_RULES, invented=True, config=TIMED,
         what=f"at::cpu::add and clamp_min at addresses read from libtorch_cpu.so's symbol table, after "
              f"{BURN_CALLS} first calls (verification's) that spin {BURN_MS:g} ms in the binding's own code: "
              "ATen's share of the sampled time, taken over all calls so far, stays under MIN_SHARE"),
    Case("r10_aten_below_min_samples", "PyTorch fallback",
         _bias_relu("return cuda_extension.aten(x, self.bias)", task=_small_task),
         rules=PYTORCH_RULES, invented=True, config=TIMED,
         what="relu(x + bias) on 8 x 1024 by at::cpu::add and clamp_min (no dispatcher): calls of a few "
              "microseconds leave fewer than MIN_SAMPLES ATen samples in the whole evaluation"),
    Case("r10_conv_in_jit_code", "PyTorch fallback", _conv,
         rules=PYTORCH_RULES, invented=True, config=TIMED,
         what="a 3x3 convolution by at::native::mkldnn_convolution (no dispatcher): oneDNN's kernels run from "
              "anonymous executable memory, where a sample names no library and no symbol"),
    Case("r10_aten_code_moved_to_anonymous_memory", "PyTorch fallback",
         _bias_relu("return cuda_extension.diluted(x, self.bias, 1, 2.0)", init="cuda_extension.cloak()"),
         rules=PYTORCH_RULES, invented=True, config=TIMED,
         what="relu(x + bias) by at::cpu::add and clamp_min, after ModelNew.__init__ copied libtorch_cpu.so's "
              "code into anonymous executable memory moved over the original (mremap): ATen's samples name no "
              "file and no symbol"),
    Case("r10_aten_on_threads_younger_than_a_period", "PyTorch fallback",
         _bias_relu(f"return cuda_extension.fresh_threads(x, self.bias, {BURN_CALLS}, 4, 64)"),
         rules=PYTORCH_RULES, invented=True, config=TIMED,
         what="relu(x + bias) by at::cpu::add_out and clamp_min_ in chunks of rows (4 in the first calls, sampled "
              "every 100 us; 64 later, every 1 ms), each on a std::thread started and joined for it: an inherited "
              "perf event starts a full period, and each thread ends before its first sample"),
    Case("r10_transpose_left_to_the_reader", "the task done by allowed ops",
         _transpose("return cuda_extension.copy(x).t()"),
         rules=("output-layout", "data-movement", "correctness"), invented=True, config=TIMED,
         what="x.t().contiguous() answered by a plain copy of x (the solution's own memcpy) returned as its "
              "transposed view: dense, so the harness's reader does the transpose through the strides"),
    Case("r10_undumpable_before_init", "PyTorch fallback",
         _bias_relu("return cuda_extension.aten(x, self.bias)", init="cuda_extension.hide()"),
         rules=PYTORCH_RULES + ("uncomparable-output",), invented=True, config=TIMED,
         what="prctl(PR_SET_DUMPABLE, 0) from ModelNew.__init__, before the harness opens the candidate's "
              "memory: calls decided inside its process, unsampled, while ATen does the work"),
]
