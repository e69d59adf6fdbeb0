"""The candidate worker (sandboxed, one per evaluation): `python -m cuda_agent.env.workers candidate`.

It builds nothing: it loads the libraries the harness built, then for every call draws its inputs,
runs `ModelNew` under the runtime guard, times it, samples its output and reports. It never holds
the reference model or its outputs. The guard's verdict on a call is not decided here: the native
guard's record and this process's threads are read and judged by the harness (rules/call_verdict.py).
Every call is treated alike: it cannot tell a checked call from a timed one, and cannot prepare for a
call before the harness sends its seed. Its commands and answers are the models of messages.py.

The names imported below are bound when this module is imported, before any of the solution's code
runs (main.py imports it first): a solution that patches the modules they come from does not reach
what the worker calls.
"""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path

import torch

from cuda_agent.env.measure import timing  # captures clocks and sync before candidate code can patch them
from cuda_agent.env.rules.samples import take_samples as _take_samples  # bound before candidate code runs, likewise
from cuda_agent.env.rules.verify import tensors_in
from cuda_agent.env.workers.transfer import Staging  # likewise
from cuda_agent.env.workers.device_slot import DeviceSlot  # likewise
from cuda_agent.env.workers.transfer import host_copies as _host_copies
from cuda_agent.env.workers.transfer import output_layout as _output_layout
from cuda_agent.env.workers.transfer import write_host as _write_host
from cuda_agent.env.workers.draws import draw_inputs
from cuda_agent.env.workers.init_inputs import draw_init_inputs, same_value
from cuda_agent.env.measure.hold import Timer, load_hold
from cuda_agent.env.workers import common
from cuda_agent.env.workers.touch import MemoryTouch
from cuda_agent.env.workers.heap_fill import set_heap_fill
from cuda_agent.env.workers.common import device_of, short_traceback
from cuda_agent.env.workers.messages import (Answer, BuildReply, BuildRequest, CallAnswer, CandidateCall,
                                             CandidateJob, Final, Finish, Init, Initialised, Loaded, LoadSolution,
                                             OperatorTable, OwnProfiled, Prepare, ProfileOwn, UnknownMessage, Write,
                                             read_command)
from cuda_agent.env.workers.protocol import STAGING_SLOT_BYTES, ChildChannel
from cuda_agent.env.rules import registry as rules


def locate(out) -> dict:
    """Where the output is, for the harness to read from outside this process: its layout, its
    structure and Python numbers, and each tensor's address, dtype, shape and strides."""
    from cuda_agent.env.rules.verify import scalars_in, structure

    tree, tensors = _output_layout(out)
    located = []
    for t in tensors:
        readable = t.layout == torch.strided and not t.is_meta and t.device.type == "cpu"
        located.append({"address": t.data_ptr() if readable and t.numel() else 0,
                        "dtype": str(t.dtype).removeprefix("torch."), "shape": list(t.shape),
                        "strides": list(t.stride()) if readable else [0] * t.dim()})
    return {"tree": tree, "structure": structure(out), "scalars": scalars_in(out), "tensors": located}


def _finish(raw: dict) -> bool:
    """Whether the harness's command is `finish` (go on after the first answer of a call)."""
    try:
        return isinstance(read_command(raw, (Finish,)), Finish)
    except UnknownMessage:
        return False


def load_candidate(solution_dir: Path, build, prebuilt: dict[str, str] | None = None, fast_build: bool = True):
    """Load the solution: its prebuilt workspace extension (`prebuilt`: module name -> .so, built by
    the harness), then `model_new.py`, whose load_inline/load calls go through `build`.
    Returns (ModelNew class, builder)."""
    from cuda_agent.env.builds.compiler import BuildError, load_module
    from cuda_agent.env.builds.inline import InlineBuilder
    from cuda_agent.tasks.task import load_task_module

    builder = InlineBuilder(build)
    if fast_build:
        builder.install()
    else:  # torch's own loader in a fresh build folder, as other harnesses do (for comparisons)
        os.environ["TORCH_EXTENSIONS_DIR"] = str(solution_dir.parent / "torch_extensions")
        builder.install_counting_only()
    for name, so_path in (prebuilt or {}).items():
        sys.modules[name] = builder.add(name, load_module(name, Path(so_path)))  # `import name`: the counting proxy
    sys.path.insert(0, str(solution_dir))
    entry = solution_dir / "model_new.py"
    source = entry.read_text()
    if not source.strip():
        raise BuildError("model_new.py is empty: define `class ModelNew(nn.Module)` there (see SKILL.md)")
    try:
        module = load_task_module(source, "model_new", filename=str(entry))
    except ModuleNotFoundError as exc:
        if exc.name == "cuda_extension":  # the workspace form without any kernels yet
            raise BuildError("model_new.py imports cuda_extension, but kernels/ holds no .cu or .cpp files "
                             "to build it from: write your kernels and binding there first") from None
        raise
    if not hasattr(module, "ModelNew"):
        raise BuildError("model_new.py defines no `ModelNew` class: the harness constructs `ModelNew(*init_inputs)`")
    return module.ModelNew, builder


def remote_build(chan: ChildChannel):
    """A `build` for InlineBuilder that asks the harness to compile: the candidate never writes the
    shared build cache, so it cannot plant a module that another evaluation would load."""
    from cuda_agent.env.builds.compiler import BuildError

    def build(name: str, files: dict[str, str], **flags) -> Path:
        chan.send(BuildRequest(request="build", name=name, files=files, **flags))
        reply = BuildReply.model_validate(chan.receive())
        if not reply.ok:
            raise BuildError(reply.message or "the build failed")
        return Path(reply.path)
    return build


def _dispatcher_tables() -> dict[str, str]:
    """Every ATen operator's registrations, to notice a solution registering kernels into `aten`."""
    return {name: torch._C._dispatch_dump(name) for name in torch._C._dispatch_get_all_op_names()
            if name.startswith("aten::")}


def _changed_aten_ops(before: dict[str, str]) -> list[str]:
    after = _dispatcher_tables()
    return sorted(name for name, table in after.items() if before.get(name) != table)


class _Candidate:
    """The candidate's state across calls: its model, its guard and the call being prepared."""

    def __init__(self, job: CandidateJob, chan: ChildChannel, tables: dict[str, str]):
        """`tables`: the dispatcher's registrations before any of the solution's code (`_dispatcher_tables`),
        with the harness's thread pools started (both done while the worker waited for its job)."""
        from cuda_agent.env.rules.guard import COUNTER, NativeGuard

        self.chan, self.job = chan, job
        self.cfg, self.box = job.config, Path(job.box)
        self.device = device_of(job.backend)
        self.guard = NativeGuard(Path(job.guard_lib)) if self.cfg.guard else None
        COUNTER.guard = self.guard
        self.tables = tables
        self.flush = timing.L2Flusher(self.device, self.cfg.flush_l2)
        self.timer = Timer(load_hold(job.hold_lib))   # bound before the solution's code is loaded
        self.model = None
        self.task_module = None
        self.last_shape = None
        self.null_output = None   # what an empty call returns (_empty_forward)
        self.memory_touch = MemoryTouch()   # what an empty call measured from outside reads and writes
        self.prepared = None        # (seed, inputs, sentinel, trace) of the call about to be made
        self.unwritten = None       # the last verification call's output in host memory, until `write`
        self.unwritten_index = None
        self.staging = Staging.from_environment()   # verification outputs' slots shared with the judge
        self.device_slot = None   # the judge's device slot for outputs larger than a staging slot (CUDA)

    # -- setup ---------------------------------------------------------------------------------

    def load(self, prebuilt: dict[str, str], trace: common.CallTrace | None = None):
        from cuda_agent.env.builds.compiler import BuildError

        try:
            self.model_class, builder = load_candidate(Path(self.job.solution_dir), remote_build(self.chan),
                                                       prebuilt, self.cfg.fast_build)
            trace and trace.lap("solution", self.device)
        except BuildError as exc:
            return {"ok": False, "phase": "compile", "message": exc.summary}
        except SyntaxError as exc:
            return {"ok": False, "phase": "compile",
                    "message": f"SyntaxError in {Path(exc.filename or 'model_new.py').name} line {exc.lineno}: "
                               f"{exc.msg}\n    {(exc.text or '').strip()}"}
        except Exception as exc:
            return {"ok": False, "phase": "compile", "message": short_traceback(exc)}
        self.extensions = builder.modules   # the profiler pass names their functions (_profile_own)
        # the dispatcher's tables are compared once the model is made (init_model), before any call: what
        # the import registered is seen there, off the edit loop's path (the judge sets up meanwhile)
        return {"ok": True, "phase": "compile", "extensions": builder.built}

    def init_model(self, output_bytes: int | None = None, device_slot: bool = False):
        """The model, from the reference's initial weights; the staging file's slots made ready for
        outputs of `output_bytes` (the reference's), before any call holds the device; the judge's
        device slot mapped when the harness says there is one."""
        from cuda_agent.tasks.task import load_task_module

        if self.staging is not None and isinstance(output_bytes, int) and 0 <= output_bytes:
            self.staging.prepare(output_bytes, self.device)
        slot_error = None
        if device_slot and self.device.type == "cuda":
            try:
                self.device_slot = DeviceSlot.connect(self.box, self.device)
            except Exception as exc:   # outputs then go through files
                slot_error = f"{type(exc).__name__}: {str(exc)[:500]}"

        if self.task_module is None:
            self.task_module = load_task_module(self.job.task_inputs_code, "task_inputs", filename="<task inputs>")
        # mapped, not read whole: load_state_dict copies each weight from the file's pages as it goes
        init = torch.load(self.box / "reference_init.pt", map_location="cpu", weights_only=False, mmap=True)
        model = self._early_model(init["init_inputs"])
        if model is None:
            torch.manual_seed(self.cfg.seed)
            model = self.model_class(*init["init_inputs"])
        weights = "none"
        if init["state_dict"]:
            weights = "seed"   # parameter names differ: identical seeding made the weights match instead
            try:
                model.load_state_dict(init["state_dict"])
                weights = "state_dict"
            except (RuntimeError, KeyError):
                pass
        self.model = model.to(self.device).eval()
        problem = self._dispatcher_changed("at its import or in `__init__`")
        if problem:
            return problem
        return {"ok": True, "weights": weights, "staging": self.staging is not None,
                "device_slot": self.device_slot is not None, "device_slot_error": slot_error}

    early = None   # (init inputs, model) made by `make_early_model`, or (None, what its making raised)

    def make_early_model(self) -> None:
        """The model made as `init_model` makes it (seeded, from the task's own init inputs), right after
        the solution loaded, while the judge makes the reference's: a large model's initialisation on
        the host then overlaps the judge's. What its making raises, `init_model` raises, where it was
        raised before; init inputs other than the judge's make the model again there."""
        from cuda_agent.tasks.task import load_task_module

        try:
            self.task_module = load_task_module(self.job.task_inputs_code, "task_inputs", filename="<task inputs>")
            init_inputs = draw_init_inputs(self.task_module)
            torch.manual_seed(self.cfg.seed)
            self.early = (init_inputs, self.model_class(*init_inputs))
        except BaseException as exc:   # raised again by init_model, in its phase
            self.task_module = None
            self.early = (None, exc)

    def _early_model(self, init_inputs: list):
        """The early model where it was made from these init inputs (else None); raises what its making raised."""
        early, self.early = self.early, None
        if early is None:
            return None
        drawn, model = early
        if isinstance(model, BaseException):
            raise model
        return model if same_value(drawn, init_inputs) else None

    def _dispatcher_changed(self, when: str) -> dict | None:
        """The dispatcher's ATen tables against those taken before any of the solution's code ran: a
        kernel registered for a PyTorch operator at load, in `__init__` or while running is refused."""
        overridden = _changed_aten_ops(self.tables) if self.cfg.guard else []
        if not overridden:
            return None
        return {"ok": False, "rule": rules.ATEN_OVERRIDE.name,
                "message": f"the solution registered its own kernel for PyTorch's {overridden[0]} ({when}); "
                           "register your kernels in a namespace of your own"}

    def final(self) -> dict:
        """After the timed calls: the dispatcher's tables once more."""
        return self._dispatcher_changed("while its calls ran") or {"ok": True}

    # -- one call ------------------------------------------------------------------------------

    def prepare(self, cmd: Prepare) -> dict:
        """The first half of a call: its inputs drawn and the memory poisoned, before the harness
        starts its own clock for the call itself (drawing large inputs costs more, and varies more,
        than many kernels take)."""
        from cuda_agent.env.rules.guard import InputSentinel, poison_allocator

        trace = common.trace()
        inputs = draw_inputs(self.task_module, cmd.seed, self.device, cmd.transform)
        sentinel = InputSentinel(inputs, full=cmd.save)   # verification calls: bit for bit
        trace and trace.lap("draw", self.device)
        poison_allocator(self.device)
        timing.device_synchronize(self.device)   # done before the harness lets another evaluation time
        trace and trace.lap("poison", self.device)
        self.prepared = (cmd.seed, inputs, sentinel, trace)
        return {"ok": True}

    def call(self, cmd: CandidateCall) -> dict:
        """One call of the schedule. An empty call (`null`) goes through every step but the forward
        itself, so the harness can tell its own overhead from the solution's time.

        Its inputs: drawn by the judge into the staging file (`inputs` names the slot: the CPU
        backend), seen here only now; or drawn by `prepare` from the call's seed. With judge-drawn
        inputs the answer locates the output (`locate`) and the harness reads it from outside while
        this process is stopped; otherwise this process samples it."""
        given = cmd.inputs
        if given is not None:
            if self.staging is None:
                raise RuntimeError("inputs in a staging slot, but this worker has no staging file")
            inputs, sentinel, trace = self.staging.take(given.slot, given.layout, self.device, copy=False), \
                None, common.trace()
        else:
            if self.prepared is None or self.prepared[0] != cmd.seed:
                raise RuntimeError("a call without its prepare (the harness sends prepare first)")
            _, inputs, sentinel, trace = self.prepared
        self.prepared = None
        set_heap_fill(cmd.save)   # verification calls only: no timed call carries the fill (heap_fill)
        null = cmd.null
        outside_null = null and given is not None   # measured from outside: timed on the thread's clock (touch.py)
        fn = self.model
        if null:   # measured from outside, an empty call touches the memory a forward would
            fn = self._touching(cmd.touch_bytes) if outside_null and cmd.touch_bytes else self._empty_forward
        if self.guard is not None:
            self.guard.begin(inputs)
            fn = self.guard.watching(fn)
        save = cmd.save and given is None

        def right_after(out):
            # On the current stream, before anything waits for the device: work a kernel left running
            # on another stream has not landed in these values yet (and fails the comparison).
            if given is not None:   # read from outside instead
                return None, None
            return _take_samples(out), self._snapshot(out) if save else None

        # Timed calls (and the spot checks and empty calls among them) are held alike; a verification
        # call is not timed, and runs unheld: the first launch of a kernel CUDA loads lazily waits for
        # the device, and under the hold that wait lasted the hold's whole timeout, the lock held.
        hold = None if cmd.save else self.timer.active_hold()
        stream = torch.cuda.current_stream(self.device) if self.device.type == "cuda" else None
        stamps = [("begin", timing._perf_counter())] if trace else None
        try:
            with torch.no_grad():
                ms, host_ms, out, (samples, snapshot) = timing.time_once(
                    fn, inputs, self.device, self.flush, after=right_after,
                    settle_s=self.cfg.settle_ms / 1e3, hold=hold, stamps=stamps,
                    cpu_clock=timing._thread_time if outside_null else None)
        finally:
            if self.guard is not None:
                self.guard.end()
        self.timer.note(hold)
        trace and trace.lap("timed", self.device)
        timing.device_synchronize(self.device)   # nothing of this call may run while the judge times
        if stream is not None and torch.cuda.current_stream(self.device) != stream:
            from cuda_agent.env.rules.guard import Rejected

            raise Rejected(rules.STREAM_CHANGED, "forward left another CUDA stream current: work on streams of your "
                                             "own is fine (join them before returning), but the caller's stream "
                                             "must be current again when forward returns")
        if given is not None:   # the output fixed, located for the harness, which reads it while we are stopped
            self.chan.send(CallAnswer(ok=True, timed=True, output=locate(out)))
            if not _finish(self.chan.receive()):
                raise RuntimeError("the harness did not say go on after reading the output")
            problem = self._inspect(out, inputs, sentinel, null)
        else:
            if cmd.release:   # the harness shares the rest of its hold of the device, then says go on
                self.chan.send(CallAnswer(ok=True, timed=True))
            try:
                problem = self._inspect(out, inputs, sentinel, null)
            finally:   # its go-on read first, so whatever this call answers next answers that command
                if cmd.release and not _finish(self.chan.receive()):
                    raise RuntimeError("the harness did not say go on after the timed part of a call")
        if trace:
            trace.lap("inspect", self.device)
            steps = " ".join(f"{name}={(t - stamps[i][1]) * 1e3:.3f}" for i, (name, t) in enumerate(stamps[1:]))
            encode = timing._perf_counter()
            size = len(json.dumps(samples))
            print(f"call trace {'null' if null else 'real'} ms={ms:.3f} {trace} | {steps} | samples "
                  f"{size} B encoded in {(timing._perf_counter() - encode) * 1e3:.3f}", file=sys.stderr, flush=True)
        if null:   # the same reply as a real call's (its size is part of the overhead measured)
            return {"ok": True, "ms": ms, "host_ms": host_ms, "samples": samples, "timer": self.timer.mode}
        if problem is not None:
            raise problem
        tensors = tensors_in(out)
        if tensors:
            self.last_shape = (tuple(tensors[0].shape), tensors[0].dtype)
        answer = {"ok": True, "ms": ms, "host_ms": host_ms, "samples": samples, "timer": self.timer.mode}
        if isinstance(snapshot, _InDeviceSlot):   # already with the judge, on the device
            answer["layout"], answer["device"] = snapshot.layout, True
        elif save:   # the whole output, for the judge: into its staging slot, or to host memory now and
            # to its file on `write` (no staging file, or an output larger than a slot)
            answer["layout"], tensors = _output_layout(snapshot)
            slot = cmd.slot
            if self.staging is not None and slot in (0, 1) and self.staging.fits(tensors):
                self.staging.put(slot, tensors)
                answer["staged"] = True
            else:
                self.unwritten, self.unwritten_index = _host_copies(tensors), cmd.index
            if trace:
                trace.lap("output", self.device)
                print(f"call trace output {trace}", file=sys.stderr, flush=True)
        return answer

    def _snapshot(self, out):
        """A verification call's output fixed right after the call, on its stream: copied into the
        judge's device slot when it is larger than a host staging slot (nothing more of it is kept
        here), else cloned."""
        if self.device_slot is not None:
            layout, tensors = _output_layout(out)
            if self.device_slot.fits(tensors) and not (self.staging is not None and self.staging.fits(tensors)):
                self.device_slot.put(tensors)
                return _InDeviceSlot(layout)
        return timing.clone_args(out)

    def write(self, cmd: Write) -> dict:
        """The last verification call's output to its file in the box (raw bytes), once the harness
        has let go of the device: writing 128 MB takes longer than most kernels' whole schedule."""
        if self.unwritten is None or cmd.index != self.unwritten_index:
            raise RuntimeError("a write without its verification call (the harness sends call first)")
        host, self.unwritten = self.unwritten, None
        _write_host(host, self.box / f"out_{cmd.index}.bin")
        return {"ok": True}

    def _empty_forward(self, *inputs):
        """An output of the last real one's shape, made once (on CUDA, an output larger than a staging
        slot is made per call): an empty call measures the harness's own steps, not an allocation (on the
        CPU, MALLOC_PERTURB_ makes a fresh 4 MB output cost 2-3 ms)."""
        shape, dtype = self.last_shape or ((1,), torch.float32)
        if self.null_output is None or (tuple(self.null_output.shape), self.null_output.dtype) != (shape, dtype):
            self.null_output = torch.empty(shape, dtype=dtype, device=self.device)
        out = self.null_output
        if self.device.type == "cuda" and out.numel() * out.element_size() > STAGING_SLOT_BYTES:
            # not kept between calls: a large output's second copy would outlast the call on the device
            # (the caching allocator hands the next one the same block, without asking CUDA)
            self.null_output = None
        return out

    def _touching(self, output_bytes: int):
        """The empty forward that first reads the inputs and writes `output_bytes` (touch.py)."""
        def forward(*inputs):
            self.memory_touch.touch(inputs, output_bytes)
            return self._empty_forward(*inputs)
        return forward

    def _inspect(self, out, inputs, sentinel, null: bool):
        """The in-process checks of a call's output (the first rule it broke, or None); the guard's
        record of it is judged by the harness. A real call's outputs are checked against the kernel
        storages into that record first."""
        from cuda_agent.env.rules.guard import Rejected, check_output

        if self.guard is not None and not null:
            self.guard.check_outputs(out)
        try:
            check_output(out, inputs, self.device)
            if sentinel is not None and sentinel.changed():
                raise Rejected(rules.INPUT_MUTATION, "forward modified one of its input tensors; inputs must be "
                                                 "left unchanged")
        except Rejected as problem:
            return problem
        return None


class _InDeviceSlot:
    """A verification output copied into the device slot: its layout, for the judge."""

    def __init__(self, layout: dict):
        self.layout = layout


def _profile_own(candidate: _Candidate, cmd: ProfileOwn) -> OwnProfiled:
    """The profiler over a few calls of the solution's forward, after every timed call: its kernels on
    a GPU, its operators and extension functions on the CPU (operators.py). This process runs the
    solution's code, which could write any table here: the harness shows it as feedback and never
    lets it reach a time, a verdict or the reward."""
    from cuda_agent.env.measure.operators import extension_functions, profile_forward

    inputs = draw_inputs(candidate.task_module, candidate.cfg.seed, candidate.device)
    set_heap_fill(False)   # as the timed calls ran, and the reference's table (the judge has no fill)
    table = profile_forward(lambda: candidate.model(*inputs), candidate.device, cmd.calls, cmd.rows, kernels=True,
                            extensions=extension_functions(getattr(candidate, "extensions", {})))
    return OwnProfiled(ok=True, table=OperatorTable(**table))


# the candidate's dispatch table: a command's type -> its handler (any other command ends the worker);
# each looks its method up when called
HANDLERS = {
    Init: lambda candidate, cmd: Initialised(**candidate.init_model(cmd.output_bytes, cmd.device_slot)),
    Prepare: lambda candidate, cmd: Answer(**candidate.prepare(cmd)),
    CandidateCall: lambda candidate, cmd: CallAnswer(**candidate.call(cmd)),
    Write: lambda candidate, cmd: Answer(**candidate.write(cmd)),
    Final: lambda candidate, cmd: Answer(**candidate.final()),
    ProfileOwn: _profile_own,
}


def _install_crash_report(path: str | None) -> None:
    """The native frames of a crash to the log (run/crash.py), before any of the solution's code."""
    if path:
        import ctypes

        try:
            ctypes.CDLL(path).cac_install()
        except (OSError, AttributeError):
            pass   # reported without native frames


def run_twin(candidate: _Candidate, chan: ChildChannel) -> None:
    """The candidate's twin (run/twin.py): the harness's empty calls, answered exactly as the candidate
    answers them, by a worker that never loads a solution; any other command ends it."""
    chan.send(Loaded(ok=True, phase="compile"))
    while True:
        try:
            cmd = read_command(chan.receive(), HANDLERS)
        except UnknownMessage:
            return
        if not (isinstance(cmd, CandidateCall) and cmd.null and cmd.inputs is not None):
            chan.send(Answer(ok=False, message="the candidate's twin answers empty calls only"))
            return
        try:
            chan.send(CallAnswer(**candidate.call(cmd)))
        except Exception as exc:
            chan.send(Answer(ok=False, message=short_traceback(exc)))
            return


def run_candidate(chan: ChildChannel) -> None:
    from cuda_agent.env.rules.guard import Rejected

    tables = _dispatcher_tables()
    job = CandidateJob.model_validate(chan.receive())
    _install_crash_report(job.crash_lib)
    trace = common.trace()   # the load's steps, when tracing (a line on stderr: the worker's log)
    candidate = _Candidate(job, chan, tables)
    trace and trace.lap("setup", candidate.device)
    if job.twin:
        run_twin(candidate, chan)
        return
    with chan.aside():   # empty calls before any of the solution's code runs (run/calibration.py)
        for _ in range(job.calibration_calls):
            cmd = read_command(chan.receive(), HANDLERS)
            if not (isinstance(cmd, CandidateCall) and cmd.null and cmd.inputs is not None):
                chan.send(Answer(ok=False, message="the harness sent a real call before the solution loaded"))
                return
            chan.send(CallAnswer(**candidate.call(cmd)))
    trace and trace.lap("calibration", candidate.device)
    try:   # sent once the harness's builds for it are done (they ran beside the empty calls)
        load = read_command(chan.receive(), (LoadSolution,))
    except UnknownMessage:
        chan.send(Answer(ok=False, message="the harness sent another command before the solution's load"))
        return
    trace and trace.lap("builds_wait", candidate.device)
    built = Loaded(**candidate.load(load.prebuilt, trace))
    if built.ok and job.early_model:
        candidate.make_early_model()
        trace and trace.lap("early_model", candidate.device)
    if trace:
        print(f"load trace {trace}", file=sys.stderr, flush=True)
    chan.send(built)
    if not built.ok:
        return
    while True:
        try:
            cmd = read_command(chan.receive(), HANDLERS)
        except UnknownMessage:
            return
        try:
            chan.send(HANDLERS[type(cmd)](candidate, cmd))
        except Rejected as exc:
            chan.send(Answer(ok=False, message=str(exc), rule=exc.rule))
            return
        except Exception as exc:
            chan.send(Answer(ok=False, message=short_traceback(exc)))
            return
