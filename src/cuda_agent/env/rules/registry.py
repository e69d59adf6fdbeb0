"""Every rule that can reject a candidate, declared once: its name (`EvalError.rule`), the phase it
applies in, a one-line meaning and the docs' explanation (what is checked, what it catches).

The checks name a rule by reference (`Rejected(rules.INPUT_MUTATION, ...)`); `name_of` refuses a name
nobody declared and `reported` turns one in a worker's answer into `protocol-forgery`, so a rule the
registry does not know cannot reach a result. `render_table` writes
docs/verification.md's tables of rules (`python -m cuda_agent.env.rules.registry docs/verification.md`
rewrites them in place; without an argument it lists the rules, one line each).
"""

from __future__ import annotations

import re
import sys
from dataclasses import dataclass
from pathlib import Path

# When a rule applies, in the order an evaluation meets them.
PHASES = {
    "static": "the solution's sources, before anything is built or run",
    "setup": "the evaluation's set-up, before the solution loads",
    "link": "each library built for the solution, before the candidate may load it",
    "load": "loading the solution and creating its model (the dispatcher's tables also after its calls)",
    "call": "every call of forward, in the candidate's process and from outside it",
    "output": "the judge's comparison of each call's output with the reference",
    "process": "the candidate's process as a whole, in any phase",
    "timing": "the call times the candidate reports (GPU)",
}

STATIC_PREFIX = "static:"


@dataclass(frozen=True)
class Rule:
    name: str        # as it appears in EvalError.rule, RL data and the docs
    phase: str       # a key of PHASES
    meaning: str     # one line
    check: str       # what is checked (docs)
    catches: str     # the cheats it catches, and so why it exists (docs)

    @property
    def short(self) -> str:
        """The name without `static:`: how the static pass's findings name it (`[static:<short>]`)."""
        return self.name.removeprefix(STATIC_PREFIX)


RULES: dict[str, Rule] = {}


def _declare(name: str, phase: str, meaning: str, check: str, catches: str) -> Rule:
    assert phase in PHASES and name not in RULES, name
    RULES[name] = rule = Rule(name, phase, meaning, check, catches)
    return rule


class UnknownRule(ValueError):
    """A rule name nobody declared: a typo, or a check that skipped the registry."""


def name_of(rule: Rule | str | None) -> str | None:
    """The registered name of `rule` (a Rule, or a name another process reported); None stays None."""
    if rule is None:
        return None
    name = rule.name if isinstance(rule, Rule) else rule
    if name not in RULES or (isinstance(rule, Rule) and RULES[name] != rule):
        raise UnknownRule(f"{name!r} is not a rule of cuda_agent.env.rules.registry")
    return name


REPORTABLE_PHASES = frozenset({"load", "call", "output"})   # what a worker's own checks decide


def reported(rule: Rule | str | None) -> str | None:
    """The name of a rule a worker's answer reports (a name: a `Rule` is the harness's own). A worker's
    checks name registered rules of the load, call and output phases only (`Rejected` refuses any other
    name), so another name was written by candidate code in the worker's process (a rule it does not
    exist for, or one the harness alone decides, such as `sandbox` or `timeout`): the answer is
    forged, and the candidate's failure says so instead of failing the harness or passing for another."""
    if isinstance(rule, str) and (rule not in RULES or RULES[rule].phase not in REPORTABLE_PHASES):
        return PROTOCOL_FORGERY.name
    return name_of(rule)


# -- setup -----------------------------------------------------------------------------------------

TOO_LARGE = _declare(
    "too-large", "setup", "the task's tensors cannot fit this machine",
    "the task's inputs and outputs, measured on the meta device, against the memory of the backend",
    "nothing a candidate does: a task too large to evaluate is reported as the task's failure, not scored")
SANDBOX = _declare(
    "sandbox", "setup", "the candidate's sandbox could not be started",
    "bubblewrap starts the worker in its own namespaces (`doctor` says what the machine lacks)",
    "nothing a candidate does: no candidate runs unsandboxed by accident (an internal failure, not scored)")

# -- static ----------------------------------------------------------------------------------------

STATIC_ALLOWLIST = _declare(
    "static:allowlist", "static", "the solution's Python uses something off the allowlist",
    "an import, member, builtin or name off the lists; a module used as a value",
    "whatever a kernel solution does not need and could reach the harness through")
STATIC_INTROSPECTION = _declare(
    "static:introspection", "static", "the solution's Python reflects on the process it runs in",
    "reflection: `__main__`, `sys`, `inspect`, `traceback`, `gc`, `importlib`, `builtins`, `cuda_agent`, "
    "`torch._C`, dispatch internals, special and private attributes, frames, computed `getattr`, "
    "`eval`/`exec`/`type`/`vars`/`globals`, format fields, special methods that intercept PyTorch, special "
    "names bound by hand (`__annotations__`, `__match_args__`), attributes read by name through a class pattern "
    "(`case C(__globals__=g)`) or `functools.wraps(f, assigned=...)`",
    "peeking at the harness, patched timers, reusing the reference through the harness's objects, code compiled "
    "by a library from names it was given (a dataclass's field names)")
STATIC_MONKEYPATCH = _declare(
    "static:monkeypatch", "static", "the solution's Python rewrites a module or class not its own",
    "a write into a module or a class that is not the solution's (through any alias); an imported name rebound",
    "patched timers and samplers, PyTorch functions replaced for the harness")
STATIC_ATTRIBUTE_WRITE = _declare(
    "static:attribute-write", "static", "the solution's Python writes to objects not its own",
    "any other write not on the solution's own objects; a receiver rebound; a method reached through its class",
    "state of the harness or of PyTorch changed through objects the solution was handed")
STATIC_EXTENSION_NAME = _declare(
    "static:extension-name", "static", "an extension named like a module, or without a literal name",
    "an extension named like a module, or without a literal name",
    "an extension registered in `sys.modules` over a module the harness imports")
STATIC_REFERENCE_MODEL = _declare(
    "static:reference-model", "static", "the solution uses the reference model",
    "subclassing or naming `Model`, importing `model` / the reference",
    "reusing the reference")
STATIC_BROAD_EXCEPT = _declare(
    "static:broad-except", "static", "a broad `except` inside forward",
    "`except:` / `except Exception` inside `forward` (a fallback path); elsewhere a warning",
    "try/except fallback to PyTorch")
STATIC_THREADING = _declare(
    "static:threading", "static", "the solution imports threads or processes",
    "imports of `threading`, `multiprocessing`, `concurrent`, `subprocess`, `asyncio`, `os.system` / `fork` / `popen`",
    "work outside forward, processes that outlive the candidate")
STATIC_CTYPES = _declare(
    "static:ctypes", "static", "the solution imports ctypes or cffi",
    "imports of `ctypes`, `cffi`",
    "native code the harness did not build or check")
STATIC_NETWORK = _declare(
    "static:network", "static", "the solution imports networking",
    "imports of `socket`, `urllib`, `requests`, `http`",
    "answers fetched from elsewhere")
STATIC_NUMPY = _declare(
    "static:numpy", "static", "the solution computes with numpy",
    "imports of `numpy`; a tensor's values taken into numpy or Python (`.numpy()`, `.tolist()`) or computed "
    "by a Python function element by element (`.apply_`, `.map_`, `.map2_`), anywhere in the solution",
    "answers computed in Python instead of the solution's kernels")
STATIC_CUSTOM_OP = _declare(
    "static:custom-op", "static", "the solution defines operators from Python",
    "imports of `torch.library`",
    "PyTorch compute dressed up as a custom operator")
STATIC_TORCH_COMPILE = _declare(
    "static:torch-compile", "static", "the solution uses torch.compile or TorchScript",
    "imports of `torch.compile`, `torch.jit`, `torch._dynamo`, `torch._inductor`",
    "generated kernels passed off as the solution's own")
STATIC_DISPATCH_BYPASS = _declare(
    "static:dispatch-bypass", "static", "C++ sources that exclude dispatch keys",
    "C++ sources that exclude dispatch keys (`ExcludeDispatchKeyGuard`, `AutoDispatchBelow...`, ...)",
    "PyTorch compute hidden from the runtime guard")
STATIC_NATIVE_ESCAPE = _declare(
    "static:native-escape", "static", "C++ sources that load libraries or start processes",
    "C++ sources that call `dlopen`/`dlsym`/`popen`/`system`/`fork`/`exec*`",
    "code the harness did not build or check, processes that outlive the candidate")
STATIC_ATEN_OVERRIDE = _declare(
    "static:aten-override", "static", "C++ sources that register kernels into the aten namespace",
    "C++ sources that register into the `aten` namespace (`TORCH_LIBRARY_IMPL(aten, ...)`)",
    "an allowed PyTorch operator overridden to compute")

# -- link ------------------------------------------------------------------------------------------

NATIVE_SYMBOL = _declare(
    "native-symbol", "link", "a library of the solution links against what it may not call",
    "the undefined symbols of every library built for the solution (`nm -D`) and its `syscall` "
    "instructions, against the list under \"Link-level check\"",
    "library compute past the dispatcher, Python run from C++, signal handlers and timers, forks and "
    "`dlopen`, the guard's own machinery switched off")

ASM_DIRECTIVE = _declare(
    "asm-directive", "link", "a unit's assembly embeds or includes a file, or uses assembler macros",
    "the assembly each compile of the solution hands the assembler, read first by the harness's "
    "assembler guard: `.incbin`, `.include`, and the macro directives that could spell them (`.macro`, "
    "`.irp`, `.irpc`, `.rept`, `.altmacro`, `.purgem`, `.mri`), in any case and however split by "
    "comments, quotes or blanks",
    "a file the compiler can read put into the solution's library: a library's machine code run as the "
    "solution's own (PyTorch's kernels counted as the solution's by the sampler)")

BUILD_INPUT = _declare(
    "build-input", "link", "a build's sources, their names or its flags were refused before the compiler ran",
    "the flags a solution gives its builds (an allowlist: rules/build_flags.py), its sources' names (each part "
    "of the path letters, digits and `_ . + -`, none beginning with `-`: nothing a compiler or a shell reads as "
    "an option, an argument file or a command), its sources' text (UTF-8; no control character in a flag or "
    "path; flags and include paths UTF-8, at most 4096 characters and 256 of each kind) and their number and size "
    "(512 files, 32 MiB), before any compiler runs",
    "flags that run or redirect the compiler (`-Wa,123`: the assembler reading a file of the solution's); a source "
    "named `@b.cpp`, whose name makes gcc read `b.cpp` as its arguments (a specs file of the solution's, the real "
    "assembler in place of the guard); inputs that would fail the harness instead of the build (a lone surrogate "
    "in a flag, a command past the system's length); files by the thousand, each written in the harness's time")
BUILD_LIMIT = _declare(
    "build-limit", "link", "a build went past its limits",
    "the time of all the builds of an evaluation (`timeout_compile`, for the workspace's build and for the "
    "candidate's load with its builds), each step's memory (`build_memory_gb`), each step's output "
    "(16 MiB) and each file it writes (256 MiB), a build's objects together (1 GiB), and the code the link check "
    "disassembles (16 MiB)",
    "builds meant to hold or exhaust the machine: many units each under a step's limit, a compile that "
    "instantiates templates without end, an `#include` of a binary library printing gigabytes of errors, a "
    "zero-initialised array of a gigabyte (an object of its size on the harness's disk), megabytes of `nop` "
    "that the harness's disassembler prints as gigabytes of text")

# -- load ------------------------------------------------------------------------------------------

ATEN_OVERRIDE = _declare(
    "aten-override", "load", "the solution registered a kernel for a PyTorch operator",
    "a kernel registered for a PyTorch operator (the dispatcher's tables compared before the solution "
    "loads, once its model is made, before any call, and after its timed calls)",
    "`TORCH_LIBRARY_IMPL(aten, ...)`, however spelled; a `torch::Library` made at run time")

# -- call ------------------------------------------------------------------------------------------

TORCH_OP = _declare(
    "torch-op", "call", "forward ran a PyTorch operator that computes",
    "an ATen operator outside the allowlist of allocation, views and metadata (composite operators are "
    "judged by what they decompose into), or any operator of PyTorch's own namespaces (every one registered "
    "before the solution's code ran: `mkl::_mkl_linear`, `mkldnn_prepacked::conv2d_run`); a copy that converts "
    "dtype or device",
    "PyTorch fallback, try/except fallback, `at::` compute from C++ bindings and custom-op bodies, an "
    "overridden allowed op running `at::mm`, `.cpu()` / `.half()` tricks")
DATA_MOVEMENT = _declare(
    "data-movement", "call", "forward copied an input's data with PyTorch",
    "a copy (`clone`, `copy_`, `_to_copy`) that reads the memory of one of the forward's inputs, judged "
    "by byte ranges (the bytes the copy's source spans against each input's storage), so a tensor made "
    "over an input's bytes at another address (`torch::from_blob`, any offset) is that input; likewise "
    "an output over an input's bytes is refused (`output-type`); more than 16 of the inputs' elements read "
    "into Python in one call (`item`, `float()`, a storage's elements)",
    "the task done by allowed ops (a channel shuffle by `view`/`transpose`/`.contiguous()`); layout "
    "changes count as compute; the task done in Python from the inputs' values, the kernel a decoy")
NO_CUSTOM_KERNEL = _declare(
    "no-custom-kernel", "call", "forward never called the solution's kernels",
    "no call into the solution's compiled modules or custom operators (an operator of a namespace that "
    "existed before its code ran, `mkl::` or `mkldnn_prepacked::` say, is PyTorch's: `torch-op`)",
    "decoy kernels compiled but never called")
OUTPUT_NOT_FROM_KERNEL = _declare(
    "output-not-from-kernel", "call", "an output no kernel of the solution produced",
    "an output whose storage no kernel produced or was handed (kernels' arguments and results, and "
    "copies of those, are tracked)",
    "answers computed in Python or numpy, replayed cached outputs")
BEHAVIOUR_CHANGED = _declare(
    "behaviour-changed", "call", "forward called its kernels a different number of times",
    "a different number of kernel calls in one call than in another (the first may do one-time work)",
    "doing less work in some calls")
INPUT_MUTATION = _declare(
    "input-mutation", "call", "forward wrote into its inputs",
    "inputs compared bit for bit (verification) or at sampled positions (every other call); on the CPU "
    "backend the judge also compares each staging slot with what it put there",
    "writing into inputs")
OUTPUT_TYPE = _declare(
    "output-type", "call", "an output that is not a plain tensor of its own",
    "outputs must be plain `torch.Tensor` with real storage on the right device, not aliasing an input",
    "lazy tensor subclasses, meta tensors, returning the input")
BACKGROUND_THREAD = _declare(
    "background-thread", "call", "a thread of the solution worked outside forward",
    "a thread (native ones too) that a call left alive; CPU time used between calls (from a call's answer "
    "on, the harness's own checks of it included) by any thread the solution started, or one of them gone "
    "between calls: read by the harness from `/proc/PID/task`, outside the candidate's process",
    "work continuing after `forward` returns, computing ahead")
STREAM_CHANGED = _declare(
    "stream-changed", "call", "forward left another CUDA stream current",
    "(GPU) another stream current when forward returns than when it began",
    "a process-wide `set_stream` left in place, moving later work off the stream the harness times")
EXTRA_PROCESS = _declare(
    "extra-process", "call", "a process in the sandbox besides the worker",
    "a process in the sandbox besides the worker",
    "forks that escape the process group")
PROTOCOL_FORGERY = _declare(
    "protocol-forgery", "process", "the candidate wrote to the harness's own channel",
    "every answer on a worker's pipe must echo the nonce of the command it answers; an answer may name "
    "only a rule the harness declares; the guard's record in the candidate's memory, read by the harness "
    "after every call, must be readable and count exactly the calls the harness made and their outputs; "
    "(CPU) the candidate's memory, opened before it loaded, must stay readable",
    "answers forged on the harness's pipe; the guard driven again, its output check skipped, its record "
    "hidden from the harness")
CRASH = _declare(
    "crash", "process", "the candidate's process died",
    "process death",
    "illegal memory access, segfaults")
TIMEOUT = _declare(
    "timeout", "process", "the candidate ran past its phase's time limit",
    "a phase's time limit",
    "infinite loops, hung kernels")

# -- output ----------------------------------------------------------------------------------------

CORRECTNESS = _declare(
    "correctness", "output", "an output differs from the reference",
    "whole outputs (verification) against the reference: shape, dtype, tolerance, NaN/Inf only where "
    "the reference has them; allocator memory NaN-filled before every call on a GPU, the heap filled "
    "(`MALLOC_PERTURB_`) for verification calls on the CPU (`heap_fill`)",
    "stale memory, partial computation, silent launch failures, approximations (caught on the "
    "structured sets), wrong results")
FIXED_SHAPE = _declare(
    "fixed-shape", "output", "(strict) the solution fails at a second size of the task",
    "(strict, tasks `--scale` can shrink) the solution verified again on the task with its input sizes "
    "halved (`tasks/scale.py`): a wrong output or a crash there",
    "sizes hard-coded from the task's source (grids, loop bounds, buffers) instead of read from the inputs")
RECHECK_AFTER_TIMING = _declare(
    "recheck-after-timing", "output", "a call after verification disagrees with the reference",
    "the sampled output of a warm-up, timed or spot call disagrees with the reference for its draw",
    "caching, skipping or approximating only while timed, counting calls")
INPUT_INDEPENDENT = _declare(
    "input-independent", "output", "(strict) the output does not follow the inputs",
    "(strict) across the task's own draws the output stays put while the reference's moves, or its "
    "error is more than half the reference's own spread; after verification, the median error of the "
    "calls compared whole is more than half that spread",
    "constant answers within tolerance, noise dressed up as input dependence, estimators honest only "
    "while verified")
NUMERICALLY_FRAGILE = _declare(
    "numerically-fragile", "output", "(strict) NaN/Inf where the reference stays finite",
    "(strict) NaN/Inf on a structured set where the reference stays finite",
    "softmax without the max subtraction, unguarded `exp`")
OUTPUT_LAYOUT = _declare(
    "output-layout", "output", "an output whose strides leave work to its reader",
    "judged from the strides the output is read through: not contiguous where the reference's is "
    "contiguous; a broadcast (stride 0) or overlapping output where the reference's is dense",
    "one row computed, returned as a view of many; a plain copy returned as its transposed view")
FORGED_SAMPLES = _declare(
    "forged-samples", "output", "output samples the harness's sampler cannot have taken",
    "(GPU; the CPU backend reads outputs from outside) the judge takes a call's samples only if the "
    "harness's sampler can have taken them: one record per output tensor, min(elements, 2048) positions "
    "inside the output, one value each; the sampler itself is bound before candidate code runs",
    "a library that rewrites the harness's sampler in its process (a C++ static initializer running "
    "Python through pybind11) to report nothing, so that nothing after verification is compared; "
    "samples that would crash the judge")
UNCOMPARABLE_OUTPUT = _declare(
    "uncomparable-output", "output", "the output could not be read or compared",
    "the output's location in the candidate's answer is not readable memory of its process (CPU), or "
    "describes no tensor the reference has; whatever fails while the judge reads or compares candidate "
    "data is the candidate's failure, never a broken task",
    "outputs that are not plain CPU tensors or numbers; answers that would crash the judge")

# -- timing ----------------------------------------------------------------------------------------

CLOCK_DISAGREEMENT = _declare(
    "clock-disagreement", "timing", "the candidate's call times disagree with the harness's wall clock",
    "(GPU) the candidate's reported call times against the harness's own wall time, less its own "
    "overhead measured with empty calls. On the CPU backend nothing the candidate reports is a time: a "
    "call's time is its process's CPU time read from outside",
    "forged clocks below Python (GOT patches of `clock_gettime` / `cudaEventElapsedTime`)")


# -- the docs' tables ------------------------------------------------------------------------------

# docs/verification.md holds each table between these markers; `render_table` writes what is between.
TABLES = {
    "static": ("static",),
    "runtime": ("setup", "link", "load", "call", "output", "process", "timing"),
}
_BEGIN, _END = "<!-- rules:{} (generated from env/rules/registry.py) -->", "<!-- /rules:{} -->"


def _cell(text: str) -> str:
    return text.replace("|", "\\|")


def render_table(table: str) -> str:
    """The markdown table of the rules of one of TABLES, in phase order then declaration order."""
    phases = TABLES[table]
    chosen = sorted((r for r in RULES.values() if r.phase in phases), key=lambda r: phases.index(r.phase))
    if table == "static":
        lines = ["| rule | what | catches |", "|---|---|---|"]
        lines += [f"| `{r.name}` | {_cell(r.check)} | {_cell(r.catches)} |" for r in chosen]
    else:
        lines = ["| rule | phase | check | catches |", "|---|---|---|---|"]
        lines += [f"| `{r.name}` | {r.phase} | {_cell(r.check)} | {_cell(r.catches)} |" for r in chosen]
    return "\n".join(lines)


def _block(table: str) -> re.Pattern:
    return re.compile(re.escape(_BEGIN.format(table)) + r"\n(?:(.*?)\n)?" + re.escape(_END.format(table)), re.S)


def tables_in(doc: str) -> dict[str, str]:
    """The rendered tables found in a document, by table name (absent ones left out)."""
    found = {}
    for table in TABLES:
        match = _block(table).search(doc)
        if match:
            found[table] = match.group(1) or ""
    return found


def with_tables(doc: str) -> str:
    """`doc` with every marked table replaced by its rendering from the registry."""
    for table in TABLES:
        begin, end = _BEGIN.format(table), _END.format(table)
        doc = _block(table).sub(lambda _m, t=table, b=begin, e=end: f"{b}\n{render_table(t)}\n{e}", doc)
    return doc


def listing() -> str:
    """One line per rule: its name, its phase and what it means."""
    width = max(map(len, RULES))
    return "\n".join(f"{r.name:<{width}}  {r.phase:<7}  {r.meaning}" for r in RULES.values())


if __name__ == "__main__":   # with documents: their tables rewritten; without: the rules listed
    for arg in sys.argv[1:]:
        path = Path(arg)
        path.write_text(with_tables(path.read_text()))
    if len(sys.argv) == 1:
        print(listing())
