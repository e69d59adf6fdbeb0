"""Worker processes: `python -m cuda_agent.env.workers.worker judge|candidate`.

Both are driven call by call by the harness (evaluation.py), which alone knows the schedule:

- The judge (trusted: it runs only the task's code) builds the reference `Model`, and for every
  call draws the same inputs as the candidate (from the seed the harness sends), runs the reference
  on them (timed, when the call is a timed one, so the eager and torch.compile baselines are measured
  on the very same draws, interleaved with the candidate's), and compares the candidate's output:
  whole (a file) or at the positions the candidate sampled right after its call returned.
- The candidate (sandboxed, one per evaluation) builds nothing: it loads the libraries the harness
  built, then for every call draws its inputs, runs `ModelNew` under the runtime guard, times it the
  same way, samples its output and reports. It never holds the reference model or its outputs.

Every call is treated alike: the candidate cannot tell a checked call from a timed one, and cannot
prepare for a call before the harness sends its seed. Both speak the JSON-lines protocol in
protocol.py; each gets a fresh process per evaluation.
"""

from __future__ import annotations

import json
import os
import sys
import time
import traceback
from contextlib import contextmanager, nullcontext
from pathlib import Path

import torch

from cuda_agent.env.measure import timing  # captures clocks and sync before candidate code can patch them
from cuda_agent.env.rules import registry as rules
from cuda_agent.env.rules.verify import take_samples as _take_samples  # bound before candidate code runs, likewise
from cuda_agent.env.rules.verify import tensors_in
from cuda_agent.env.workers.transfer import Staging  # likewise
from cuda_agent.env.workers.transfer import host_copies as _host_copies
from cuda_agent.env.workers.transfer import output_layout as _output_layout
from cuda_agent.env.workers.transfer import staged_bytes
from cuda_agent.env.workers.transfer import write_host as _write_host
from cuda_agent.env.workers.draws import draw_inputs
from cuda_agent.env.measure.hold import Timer, load_hold
from cuda_agent.env.infra.locks import DeviceLock
from cuda_agent.env.workers.protocol import ChildChannel
from cuda_agent.env.infra.reserve import judge_bytes, reserve


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


def _device(backend: str) -> torch.device:
    return torch.device("cuda", 0) if backend == "cuda" else torch.device("cpu")


def draw_init_inputs(module) -> list:
    init = module.get_init_inputs()
    if not isinstance(init, (list, tuple)):
        raise TypeError(f"get_init_inputs() must return a list, got {type(init).__name__}")
    return list(init)


def _short_traceback(exc: BaseException, limit_frames: int = 4) -> str:
    tb = traceback.format_exception(type(exc), exc, exc.__traceback__)
    head, frames = tb[0], tb[1:-1]
    text = "".join([head, *frames[-limit_frames:], tb[-1]]) if len(tb) > 1 else "".join(tb)
    return text.strip()[-3000:]


def _all_finite(value) -> bool:
    from cuda_agent.env.rules.verify import tensors_in

    return all(bool(torch.isfinite(t).all()) for t in tensors_in(value) if t.is_floating_point() or t.is_complex())


# ---------------------------------------------------------------------------------------------
# judge


class _Judge:
    """The reference side of an evaluation: the task's model, its compiled twin, the tolerance."""

    def __init__(self, job: dict):
        from cuda_agent.env.rules.verify import Dependence, Tolerance
        from cuda_agent.tasks.task import load_task_module

        self.cfg, self.box = job["config"], Path(job["box"])
        self.device = _device(job["backend"])
        self.tol = Tolerance(self.cfg["atol"], self.cfg["rtol"], relative_to_scale=self.cfg["protocol"] == "strict")
        self.dependence = Dependence(seed=self.cfg["seed"])
        self.compiled = None
        self.lock = DeviceLock(job["lock"]) if job.get("lock") else None
        self.lock_wait_s = 0.0   # of the call in hand, for the harness's account of device time
        self.staging = Staging.from_environment()   # the candidate's verification outputs, when staged
        self.drawn: dict[int, list] = {}            # inputs drawn for the candidate (`draw`), by call index
        self.slots: dict[int, tuple[int, torch.Tensor]] = {}   # staging slot -> (call index, its bytes as put)
        self.mutated: list[int] = []                # calls whose inputs the candidate changed in its slot
        hold = load_hold(job.get("hold_lib"))
        self.timers = {"eager": Timer(hold), "compile": Timer(hold)}
        self.module = load_task_module(job["task_code"], "reference_task", filename=f"<task {job['task_name']}>")
        for name in ("Model", "get_inputs", "get_init_inputs"):
            if not hasattr(self.module, name):
                raise AttributeError(f"the task defines no `{name}`")
        init_inputs = draw_init_inputs(self.module)
        torch.manual_seed(self.cfg["seed"])
        self.model = self.module.Model(*init_inputs).to(self.device).eval()
        if job.get("save_init", True):   # the candidate builds its model from the same weights
            torch.save({"init_inputs": init_inputs, "state_dict": self.model.state_dict()},
                       self.box / "reference_init.pt")
        with torch.no_grad(), self._device(shared=True, label="setup"):   # the task runs at all (and is warm)
            # the memory of a batch of timed calls, asked for here and not inside the first one (reserve.py)
            reserve(self.device, judge_bytes(job.get("footprint"), int(job.get("batch") or 1), GROUP_BYTES))
            inputs = draw_inputs(self.module, self.cfg["seed"], self.device)
            self.input_bytes = staged_bytes(tensors_in(inputs))   # what a call's inputs take in a slot
            first = self.model(*inputs)
            del inputs
            self.flush = timing.L2Flusher(self.device, self.cfg["flush_l2"])   # its buffer, likewise
        # what a verification output takes in the staging file: its slots are made ready now, off the lock
        self.output_bytes = staged_bytes(tensors_in(first))
        if self.staging is not None:
            self.staging.prepare(self.output_bytes, self.device)

    def draw(self, cmd: dict) -> dict:
        """A call's inputs, drawn here and put into the staging slot the candidate reads them from
        (the CPU backend): the candidate runs no code of the task's and sees its inputs only inside
        its call. The judge keeps what it drew for the reference, and the bytes it put, to notice a
        candidate that wrote into its slot (`inputs_kept`)."""
        from cuda_agent.env.workers.transfer import output_layout

        if self.staging is None:
            return {"ok": False, "message": "no staging file for the candidate's inputs"}
        slot = cmd["slot"]
        self._check_slot(slot)
        try:
            inputs = draw_inputs(self.module, cmd["seed"], self.device, cmd.get("transform"))
            layout, tensors = output_layout(inputs)
            if not self.staging.fits(tensors):
                return {"ok": False, "message": "the inputs do not fit a staging slot"}
            self.staging.put(slot, tensors)
        except Exception as exc:
            if cmd.get("transform"):   # the structured set is not defined for this task: the candidate
                inputs, layout = None, None   # gets none, and the call is skipped (see _draw)
            else:
                return _task_error(exc)
        if inputs is None:
            return {"ok": True, "layout": None}
        self.drawn[cmd["index"]] = inputs
        self.slots[slot] = (cmd["index"], self._slot_bytes(slot, staged_bytes(tensors)).clone())
        return {"ok": True, "layout": layout}

    def _slot_bytes(self, slot: int, nbytes: int) -> torch.Tensor:
        return self.staging.memory[slot * self.staging.slot_bytes:][:nbytes]

    def _check_slot(self, slot: int) -> None:
        kept = self.slots.pop(slot, None)
        if kept is None:
            return
        index, put = kept
        if not torch.equal(self._slot_bytes(slot, put.numel()), put):
            self.mutated.append(index)

    def inputs_kept(self) -> dict:
        """The calls whose inputs the candidate changed in their slot (every slot checked now)."""
        for slot in list(self.slots):
            self._check_slot(slot)
        mutated, self.mutated = self.mutated, []
        return {"mutated": mutated}

    def compile(self) -> dict:
        """torch.compile the reference and warm it up (its compilation is not timed)."""
        try:
            compiled = torch.compile(self.model)
            with torch.no_grad():
                for n in range(2):
                    compiled(*draw_inputs(self.module, self.cfg["seed"] + 7919 * (n + 1), self.device))
            timing.device_synchronize(self.device)
        except Exception as exc:  # torch.compile can't handle every model; report, don't fail
            return {"ok": False, "error": f"{type(exc).__name__}: {str(exc)[:500]}"}
        self.compiled = compiled
        return {"ok": True}

    def calls(self, items: list[dict]) -> list[dict]:
        """The reference on each call's draw (timed, for a timed call), and the candidate's output
        compared with it: a file (verification) or the candidate's samples. Answered in order, ending
        at the first task error. Calls are drawn under one shared hold of the device's lock until
        `GROUP_BYTES` of inputs are held, then their reference runs are timed one after the other under
        one exclusive hold (`locks`), each read at once where the candidate's output was sampled; so
        samples are compared on the CPU, and only whole outputs (verification) take the device again."""
        self.lock_wait_s = 0.0
        answers: list[dict] = []
        queue = list(items)
        with torch.no_grad():
            while queue:
                answers += self._settle(self._draw_group(queue))
                if answers and "task_error" in answers[-1]:
                    break
        if answers:   # the device lock's wait, for the harness's account of device time
            answers[-1]["lock_wait_s"] = self.lock_wait_s
        return answers

    def _draw_group(self, queue: list[dict]) -> list["_JudgeCall"]:
        """The next calls of `queue` (taken off it), drawn under one shared hold: until GROUP_BYTES of
        inputs, a call settled early, or a call whose output file is to be read (never under the lock)."""
        group, held = [], 0
        part = self._load(queue.pop(0))
        with self._device(shared=True, label="draw"):
            while True:
                self._draw(part)
                group.append(part)
                held += part.bytes
                if part.answer is not None or held >= GROUP_BYTES or not queue or \
                        "path" in (queue[0].get("compare") or {}):
                    return group
                part = self._load(queue.pop(0))

    def _load(self, cmd: dict) -> "_JudgeCall":
        """A call on its way; a verification call's output file read first, without the device:
        reading 128 MB outlasts most kernels."""
        from cuda_agent.env.workers.transfer import UnreadableOutput, read_output
        from cuda_agent.env.rules.verify import decode_samples

        part = _JudgeCall(cmd, _CallTrace() if _TRACE_CALLS else None)
        compare = cmd.get("compare") or {}
        if "path" in compare:
            try:
                if "slot" in compare:   # in the staging file (transfer.Staging), not in the file
                    if self.staging is None:
                        raise UnreadableOutput("no staging file")
                    part.candidate = self.staging.take(compare["slot"], compare.get("layout"), self.device)
                else:
                    part.candidate = read_output(compare["path"], compare.get("layout"), torch.device("cpu"),
                                                 pin=self.device.type == "cuda")
            except Exception as exc:   # kept as it is: the candidate's failure, reported when compared
                part.candidate = exc
            part.trace and part.trace.lap("load", self.device)
        elif "samples" in compare:   # decoded now, so that reading the reference there holds the device less
            part.decoded = decode_samples(compare["samples"])
        return part

    def _draw(self, part: "_JudgeCall") -> None:
        """The call's inputs (and the reference's output when it is not timed), under the caller's hold."""
        paired = part.timed and part.cmd.get("compile") and self.compiled is not None
        try:
            drawn = self.drawn.pop(part.cmd.get("index"), None)   # what the candidate was given (`draw`)
            part.inputs = drawn if drawn is not None else \
                draw_inputs(self.module, part.cmd["seed"], self.device, part.transform)
            part.again = draw_inputs(self.module, part.cmd["seed"], self.device, part.transform) if paired else None
            if not part.timed:
                part.reference = self.model(*part.inputs)
                self._sample(part)
        except Exception as exc:
            part.fail(exc)
        part.bytes = sum(t.numel() * t.element_size() for t in tensors_in([part.inputs, part.again]))
        part.trace and part.trace.lap("draw", self.device)

    def _sample(self, part: "_JudgeCall") -> None:
        """For a call checked by samples: the reference read where the candidate's output was sampled,
        inside the hold that computed it (verify.sample_reference); comparing then needs no device."""
        self._start_sample(part)
        self._finish_sample(part)

    def _start_sample(self, part: "_JudgeCall") -> None:
        """`_sample`'s device work, launched (the hold's end waits for it); `_finish_sample` after."""
        from cuda_agent.env.rules.verify import start_sample_reference

        compare = part.cmd.get("compare") or {}
        if "samples" not in compare:
            return
        skipped = self._before_comparing(part)
        if skipped:
            part.sampled = skipped
            return
        try:
            part.sampled = start_sample_reference(part.reference, compare["samples"], self.tol, decoded=part.decoded)
        except Exception as exc:   # forged or unreadable samples: the candidate's, reported by _compare
            part.sampled = exc

    def _before_comparing(self, part: "_JudgeCall") -> str | None:
        """Why the call is not compared (a structured set the reference is not finite on), or None; the
        task's own first draw sets the tolerance's scale."""
        if part.transform and not _all_finite(part.reference):
            return "the reference is not finite on it"
        if not part.transform and not self.tol.base_scales:
            self.tol = self.tol.with_base(part.reference)
        return None

    @staticmethod
    def _finish_sample(part: "_JudgeCall") -> None:
        from cuda_agent.env.rules.verify import PendingReference

        if isinstance(part.sampled, PendingReference):
            try:
                part.sampled = part.sampled.finish()
            except Exception as exc:
                part.sampled = exc

    def _settle(self, group: list["_JudgeCall"]) -> list[dict]:
        from cuda_agent.env.rules.verify import PendingReference

        timed = [part for part in group if part.timed and part.answer is None]
        began, waited = timing._perf_counter(), self.lock_wait_s
        if timed:
            with self._device(shared=False, label="timed") as hold:
                for part in timed:
                    try:
                        eager = self._timed("eager", self.model, part.inputs)
                        part.extra["eager_ms"], part.extra["eager_host_ms"], part.reference = eager
                        part.extra["timers"] = {"eager": self.timers["eager"].mode}
                        if part.again is not None:
                            part.extra["compile_ms"], part.extra["compile_host_ms"], _ = \
                                self._timed("compile", self.compiled, part.again)
                            part.extra["timers"]["compile"] = self.timers["compile"].mode
                    except Exception as exc:
                        part.fail(exc)
                        if part.transform is None:   # a task error ends the batch here
                            break
                # the timed runs are over: reading the references at the samples needs the device, not
                # alone (the rest of the hold shared, as the harness does after a candidate's timed call)
                timing.device_synchronize(self.device)
                if hold is not None:
                    hold.share()
                for part in timed:
                    if part.answer is None and part.reference is not None:
                        self._start_sample(part)
            # the reads landed when the hold ended (it waits for the device); a reference with NaN or
            # Inf values needs the device once more for its scale
            pending = [p for p in timed if isinstance(p.sampled, PendingReference)]
            scaled_on_device = any(p.sampled.needs_device() for p in pending)
            with self._device(shared=True, label="sample") if scaled_on_device else nullcontext():
                for part in pending:
                    self._finish_sample(part)
        if _TRACE_CALLS and timed:
            eager = " ".join(f"{part.extra.get('eager_ms', float('nan')):.4f}" for part in timed)
            print(f"judge batch trace n={len(timed)} held={(timing._perf_counter() - began) * 1e3:.3f} "
                  f"of which lock wait={(self.lock_wait_s - waited) * 1e3:.3f} eager_ms {eager}",
                  file=sys.stderr, flush=True)
        answers = []
        whole = any("path" in (part.cmd.get("compare") or {}) for part in group)   # compared on the device
        with self._device(shared=True, label="compare") if whole else nullcontext():
            for part in group:
                part.inputs = part.again = None
                if part.answer is None and part.reference is None:   # not reached: after a task error
                    break
                part.trace and part.trace.lap("reference", self.device)
                if part.answer is None:
                    part.answer = {**self._compare(part), **part.extra}
                part.candidate = part.reference = part.sampled = None
                answers.append(part.answer)
                if "task_error" in part.answer:
                    break
        return answers

    def _timed(self, name: str, model, inputs) -> tuple[float, float | None, object]:
        """One timed run of a reference, held while its forward lets the hold work (hold.Timer): its
        device time, its host's time (None unheld) and its output."""
        timer = self.timers[name]
        hold = timer.active_hold()
        ms, host_ms, out, _ = timing.time_once(model, inputs, self.device, self.flush,
                                               settle_s=self.cfg.get("settle_ms", 0.0) / 1e3, hold=hold,
                                               cpu_clock=timing._thread_time)
        timer.note(hold)
        return ms, host_ms, out

    @contextmanager
    def _device(self, shared: bool, label: str = ""):
        """The device's lock around one part of a call (none without a lock file in the job), as its
        `Hold` (None without one); what that part queued on the device has finished when it is let go."""
        asked = timing._perf_counter()
        with self.lock.held(shared=shared, label=f"judge.{label}") if self.lock else nullcontext() as hold:
            self.lock_wait_s += timing._perf_counter() - asked
            yield hold
            timing.device_synchronize(self.device)

    def _compare(self, part: "_JudgeCall") -> dict:
        """The candidate's output (read from its file by `_load`, or its samples, against the reference
        read by `_sample`) against the reference: the verdict's fields."""
        from cuda_agent.env.rules.verify import ForgedSamples, compare_outputs, compare_sampled, compared_whole

        cmd, reference, trace = part.cmd, part.reference, part.trace
        transform = cmd.get("transform")
        compare = cmd.get("compare") or {}
        if "samples" in compare:
            if isinstance(part.sampled, str):
                return {"ok": True, "skipped": part.sampled}
        elif "path" in compare:
            skipped = self._before_comparing(part)
            if skipped:
                return {"ok": True, "skipped": skipped}
        # From here on the task has done its part: whatever fails while reading or comparing what the
        # candidate sent is the candidate's doing, never the task's (a failure here must not turn a
        # wrong solution into a "broken task", which scores nothing and leaves every denominator).
        try:
            if "path" in compare:
                candidate_host = part.candidate
                if isinstance(candidate_host, Exception):   # an output is never one (transfer.read_output)
                    return {"ok": False, "max_abs_error": float("inf"),
                            "message": f"candidate output unreadable: {candidate_host}"}
                candidate = timing.to_device(candidate_host, self.device)
                trace and trace.lap("to_device", self.device)
                verdict = compare_outputs(reference, candidate, self.tol)
                if verdict.ok and cmd.get("dependence"):
                    self.dependence.add(reference, candidate)
                del candidate
            elif "samples" in compare:
                if isinstance(part.sampled, Exception):
                    raise part.sampled
                verdict = compare_sampled(part.sampled, compare["samples"])
                if verdict.ok and cmd.get("dependence") and compared_whole(part.sampled):
                    self.dependence.add_later(verdict.max_abs_error)
            else:
                return {"ok": True}
        except ForgedSamples as exc:
            return {"ok": False, "max_abs_error": float("inf"), "rule": rules.FORGED_SAMPLES.name,
                    "message": f"the output samples the harness reads in the solution's process are not its own "
                               f"({exc}): the solution changed the harness's code in its process"}
        except Exception as exc:
            return {"ok": False, "max_abs_error": float("inf"), "rule": rules.UNCOMPARABLE_OUTPUT.name,
                    "message": f"the solution's output could not be compared with the reference "
                               f"({type(exc).__name__}: {str(exc)[:300]})"}
        if trace:
            trace.lap("compare", self.device)
            kind = "whole" if "path" in compare else "timed" if cmd.get("time") else "sampled"
            print(f"judge trace {kind} {transform or ''} {trace}", file=sys.stderr, flush=True)
        return {"ok": verdict.ok, "max_abs_error": verdict.max_abs_error, "message": verdict.message,
                "rule": verdict.rule, "nonfinite": verdict.nonfinite,
                "fp32_relative_error": verdict.fp32_relative_error, "worst": list(verdict.worst)}


GROUP_BYTES = 1 << 30   # the judge's drawn inputs held at once before their reference runs are timed


class _JudgeCall:
    """One call of a judge's batch on its way: its draw, its reference output, and its answer once
    that is settled early (a structured set the reference is not defined on, or a task error)."""

    def __init__(self, cmd: dict, trace):
        self.cmd, self.trace = cmd, trace
        self.transform, self.timed = cmd.get("transform"), bool(cmd.get("time"))
        self.inputs = self.again = self.reference = None
        self.bytes = 0
        self.extra: dict = {}
        self.answer: dict | None = None
        self.candidate = None       # a verification call's output read into host memory, or the error
        self.sampled = None         # the reference where the candidate was sampled, a reason to skip, or the error
        self.decoded = None         # the candidate's samples, decoded before the device was held

    def fail(self, exc: Exception) -> None:
        if self.transform:   # the reference is not defined on this structured set: nothing to compare
            self.answer = {"ok": True, "skipped": f"the reference fails on it ({type(exc).__name__})"}
        else:                # the task's own code failed on one of its draws
            self.answer = _task_error(exc)


def _task_error(exc: Exception) -> dict:
    return {"ok": False, "task_error": f"{type(exc).__name__}: {exc}\n{_short_traceback(exc)}"}


def _judge_answers(judge: _Judge, items: list[dict]) -> list[dict]:
    try:
        return judge.calls(items)
    except Exception as exc:   # whatever else fails in a call is the task's code too
        return [_task_error(exc)]


def run_judge(chan: ChildChannel) -> None:
    job = chan.receive()
    try:
        judge = _Judge(job)
    except Exception as exc:  # the task itself is broken
        chan.send(ok=False, message=f"{type(exc).__name__}: {exc}\n{_short_traceback(exc)}")
        return
    name = torch.cuda.get_device_name(judge.device) if judge.device.type == "cuda" else "cpu"
    chan.send(ok=True, device=name, output_bytes=judge.output_bytes, input_bytes=judge.input_bytes,
              slot_bytes=judge.staging.slot_bytes if judge.staging is not None else 0)
    while True:
        cmd = chan.receive()
        kind = cmd.get("cmd")
        if kind == "compile":
            chan.send(**judge.compile())
        elif kind == "call":
            chan.send(**_judge_answers(judge, [cmd])[0])
        elif kind == "calls":   # a batch, answered in order; it ends at the first task error
            chan.send(answers=_judge_answers(judge, cmd["items"]))
        elif kind == "draw":
            chan.send(**judge.draw(cmd))
        elif kind == "inputs_kept":
            chan.send(**judge.inputs_kept())
        elif kind == "dependence":
            try:
                message = judge.dependence.later_verdict() if cmd.get("later") else judge.dependence.verdict()
            except Exception as exc:   # built from the candidate's outputs: its failure, not the task's
                message = f"the solution's outputs could not be judged ({type(exc).__name__}: {str(exc)[:300]})"
            chan.send(message=message)
        else:
            return


# ---------------------------------------------------------------------------------------------
# candidate


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
        chan.send(request="build", name=name, files=files, **flags)
        reply = chan.receive()
        if not reply.get("ok"):
            raise BuildError(reply.get("message", "the build failed"))
        return Path(reply["path"])
    return build


def _dispatcher_tables() -> dict[str, str]:
    """Every ATen operator's registrations, to notice a solution registering kernels into `aten`."""
    return {name: torch._C._dispatch_dump(name) for name in torch._C._dispatch_get_all_op_names()
            if name.startswith("aten::")}


def _changed_aten_ops(before: dict[str, str]) -> list[str]:
    after = _dispatcher_tables()
    return sorted(name for name, table in after.items() if before.get(name) != table)


class _Candidate:
    """The candidate's state across calls: its model, guard, watches and the counts seen so far."""

    def __init__(self, job: dict, chan: ChildChannel, tables: dict[str, str]):
        """`tables`: the dispatcher's registrations before any of the solution's code (`_dispatcher_tables`),
        with the harness's thread pools started (both done while the worker waited for its job)."""
        from cuda_agent.env.rules.guard import COUNTER, NativeGuard, ThreadWatch

        self.chan, self.job = chan, job
        self.cfg, self.box = job["config"], Path(job["box"])
        self.device = _device(job["backend"])
        self.guard = NativeGuard(Path(job["guard_lib"])) if self.cfg["guard"] else None
        COUNTER.guard = self.guard
        self.threads = ThreadWatch()
        self.tables = tables
        self.flush = timing.L2Flusher(self.device, self.cfg["flush_l2"])
        self.timer = Timer(load_hold(job.get("hold_lib")))   # bound before the solution's code is loaded
        self.model = None
        self.task_module = None
        self.calls_per_forward: list[int] = []
        self.last_shape = None
        self.null_output = None   # what an empty call returns (_empty_forward)
        self.prepared = None        # (seed, inputs, sentinel, trace) of the call about to be made
        self.unwritten = None       # the last verification call's output in host memory, until `write`
        self.unwritten_index = None
        self.staging = Staging.from_environment()   # verification outputs' slots shared with the judge

    # -- setup ---------------------------------------------------------------------------------

    def load(self):
        from cuda_agent.env.builds.compiler import BuildError

        try:
            self.model_class, builder = load_candidate(Path(self.job["solution_dir"]), remote_build(self.chan),
                                                       self.job.get("prebuilt"), self.cfg["fast_build"])
        except BuildError as exc:
            return {"ok": False, "phase": "compile", "message": exc.summary}
        except SyntaxError as exc:
            return {"ok": False, "phase": "compile",
                    "message": f"SyntaxError in {Path(exc.filename or 'model_new.py').name} line {exc.lineno}: "
                               f"{exc.msg}\n    {(exc.text or '').strip()}"}
        except Exception as exc:
            return {"ok": False, "phase": "compile", "message": _short_traceback(exc)}
        problem = self._dispatcher_changed("TORCH_LIBRARY_IMPL(aten, ...)")
        if problem:
            return {**problem, "phase": "compile"}
        return {"ok": True, "phase": "compile", "extensions": builder.built}

    def init_model(self, output_bytes: int | None = None):
        """The model, from the reference's initial weights; the staging file's slots made ready for
        outputs of `output_bytes` (the reference's), before any call holds the device."""
        from cuda_agent.tasks.task import load_task_module

        if self.staging is not None and isinstance(output_bytes, int) and 0 <= output_bytes:
            self.staging.prepare(output_bytes, self.device)

        self.task_module = load_task_module(self.job["task_inputs_code"], "task_inputs", filename="<task inputs>")
        init = torch.load(self.box / "reference_init.pt", map_location="cpu", weights_only=False)
        torch.manual_seed(self.cfg["seed"])
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
        problem = self._dispatcher_changed("__init__")
        if problem:
            return problem
        self.threads.mark()
        return {"ok": True, "weights": weights, "staging": self.staging is not None}

    def _dispatcher_changed(self, when: str) -> dict | None:
        """The dispatcher's ATen tables against those taken before any of the solution's code ran: a
        kernel registered for a PyTorch operator at load, in `__init__` or while running is refused."""
        overridden = _changed_aten_ops(self.tables) if self.cfg["guard"] else []
        if not overridden:
            return None
        return {"ok": False, "rule": rules.ATEN_OVERRIDE.name,
                "message": f"the solution registered its own kernel for PyTorch's {overridden[0]} ({when}); "
                           "register your kernels in a namespace of your own"}

    def final(self) -> dict:
        """After the timed calls: the dispatcher's tables once more."""
        return self._dispatcher_changed("while its calls ran") or {"ok": True}

    # -- one call ------------------------------------------------------------------------------

    def prepare(self, cmd: dict) -> dict:
        """The first half of a call: its inputs drawn and the memory poisoned, before the harness
        starts its own clock for the call itself (drawing large inputs costs more, and varies more,
        than many kernels take)."""
        from cuda_agent.env.rules.guard import InputSentinel, poison_allocator

        self._check_threads()
        trace = _CallTrace() if _TRACE_CALLS else None
        inputs = draw_inputs(self.task_module, cmd["seed"], self.device, cmd.get("transform"))
        sentinel = InputSentinel(inputs, full=bool(cmd.get("save")))   # verification calls: bit for bit
        trace and trace.lap("draw", self.device)
        poison_allocator(self.device)
        timing.device_synchronize(self.device)   # done before the harness lets another evaluation time
        trace and trace.lap("poison", self.device)
        self.prepared = (cmd["seed"], inputs, sentinel, trace)
        self.threads.mark()
        return {"ok": True}

    def _check_threads(self) -> None:
        from cuda_agent.env.rules.guard import Rejected

        if self.threads.worked_since_mark():
            raise Rejected(rules.BACKGROUND_THREAD, "a thread the solution started kept working outside forward "
                                                    "(after it returned or before the next call); all work must "
                                                    "finish inside forward")

    def call(self, cmd: dict) -> dict:
        """One call of the schedule. An empty call (`null`) goes through every step but the forward
        itself, so the harness can tell its own overhead from the solution's time.

        Its inputs: drawn by the judge into the staging file (`inputs` names the slot: the CPU
        backend), seen here only now; or drawn by `prepare` from the call's seed. With judge-drawn
        inputs the answer locates the output (`locate`) and the harness reads it from outside while
        this process is stopped; otherwise this process samples it."""
        from cuda_agent.env.rules.guard import COUNTER, python_threads

        given = cmd.get("inputs")
        if given is not None:
            if self.staging is None:
                raise RuntimeError("inputs in a staging slot, but this worker has no staging file")
            inputs, sentinel, trace = self.staging.take(given["slot"], given["layout"], self.device, copy=False), \
                None, (_CallTrace() if _TRACE_CALLS else None)
        else:
            if self.prepared is None or self.prepared[0] != cmd["seed"]:
                raise RuntimeError("a call without its prepare (the harness sends prepare first)")
            _, inputs, sentinel, trace = self.prepared
        self.prepared = None
        self._check_threads()
        null = bool(cmd.get("null"))
        fn = self._empty_forward if null else self.model
        threads_before = python_threads()
        calls_before = COUNTER.calls
        if self.guard is not None:
            self.guard.begin(inputs)
            fn = self.guard.watching(fn)
        save = bool(cmd.get("save")) and given is None

        def right_after(out):
            # On the current stream, before anything waits for the device: work a kernel left running
            # on another stream has not landed in these values yet (and fails the comparison).
            if given is not None:   # read from outside instead
                return None, None
            return _take_samples(out), timing.clone_args(out) if save else None

        # Timed calls (and the spot checks and empty calls among them) are held alike; a verification
        # call is not timed, and runs unheld: the first launch of a kernel CUDA loads lazily waits for
        # the device, and under the hold that wait lasted the hold's whole timeout, the lock held.
        hold = None if cmd.get("save") else self.timer.active_hold()
        stream = torch.cuda.current_stream(self.device) if self.device.type == "cuda" else None
        stamps = [("begin", timing._perf_counter())] if trace else None
        try:
            with torch.no_grad():
                ms, host_ms, out, (samples, snapshot) = timing.time_once(
                    fn, inputs, self.device, self.flush, after=right_after,
                    settle_s=self.cfg.get("settle_ms", 0.0) / 1e3, hold=hold, stamps=stamps)
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
            self.chan.send(ok=True, timed=True, output=locate(out))
            if self.chan.receive().get("cmd") != "finish":
                raise RuntimeError("the harness did not say go on after reading the output")
            calls, problem = self._inspect(out, inputs, calls_before, threads_before, sentinel)
        else:
            if cmd.get("release"):   # the harness shares the rest of its hold of the device, then says go on
                self.chan.send(ok=True, timed=True)
            try:
                calls, problem = self._inspect(out, inputs, calls_before, threads_before, sentinel)
            finally:   # its go-on read first, so whatever this call answers next answers that command
                if cmd.get("release") and self.chan.receive().get("cmd") != "finish":
                    raise RuntimeError("the harness did not say go on after the timed part of a call")
        self.threads.mark()
        if trace:
            trace.lap("inspect", self.device)
            steps = " ".join(f"{name}={(t - stamps[i][1]) * 1e3:.3f}" for i, (name, t) in enumerate(stamps[1:]))
            encode = timing._perf_counter()
            size = len(json.dumps(samples))
            print(f"call trace {'null' if null else 'real'} ms={ms:.3f} {trace} | {steps} | samples "
                  f"{size} B encoded in {(timing._perf_counter() - encode) * 1e3:.3f}", file=sys.stderr, flush=True)
        if null:   # the same reply as a real call's (its size is part of the overhead measured)
            return {"ok": True, "ms": ms, "host_ms": host_ms, "samples": samples, "calls": calls,
                    "timer": self.timer.mode}
        if problem is not None:
            raise problem
        self._count(calls)
        tensors = tensors_in(out)
        if tensors:
            self.last_shape = (tuple(tensors[0].shape), tensors[0].dtype)
        answer = {"ok": True, "ms": ms, "host_ms": host_ms, "samples": samples, "calls": calls,
                  "timer": self.timer.mode}
        if save:   # the whole output, for the judge: into its staging slot, or to host memory now and
            # to its file on `write` (no staging file, or an output larger than a slot)
            answer["layout"], tensors = _output_layout(snapshot)
            slot = cmd.get("slot")
            if self.staging is not None and slot in (0, 1) and self.staging.fits(tensors):
                self.staging.put(slot, tensors)
                answer["staged"] = True
            else:
                self.unwritten, self.unwritten_index = _host_copies(tensors), cmd["index"]
            if trace:
                trace.lap("output", self.device)
                print(f"call trace output {trace}", file=sys.stderr, flush=True)
        return answer

    def write(self, cmd: dict) -> dict:
        """The last verification call's output to its file in the box (raw bytes), once the harness
        has let go of the device: writing 128 MB takes longer than most kernels' whole schedule."""
        if self.unwritten is None or cmd.get("index") != self.unwritten_index:
            raise RuntimeError("a write without its verification call (the harness sends call first)")
        host, self.unwritten = self.unwritten, None
        _write_host(host, self.box / f"out_{cmd['index']}.bin")
        return {"ok": True}

    def _empty_forward(self, *inputs):
        """An output of the last real one's shape, made once: an empty call measures the harness's own
        steps, not an allocation (on the CPU, MALLOC_PERTURB_ makes a fresh 4 MB output cost 2-3 ms)."""
        shape, dtype = self.last_shape or ((1,), torch.float32)
        if self.null_output is None or (tuple(self.null_output.shape), self.null_output.dtype) != (shape, dtype):
            self.null_output = torch.empty(shape, dtype=dtype, device=self.device)
        return self.null_output

    def _inspect(self, out, inputs, calls_before, threads_before, sentinel):
        """(extension calls of this forward, the first rule it broke or None)."""
        from cuda_agent.env.rules.guard import COUNTER, Rejected, check_output, new_python_thread, violation_message

        calls = COUNTER.calls - calls_before
        found = None
        if self.guard is not None:
            found = self.guard.violation()
            calls += self.guard.custom_calls()
        leftover = new_python_thread(threads_before)
        try:
            if found:
                raise Rejected(found[0], violation_message(*found))
            if self.cfg["guard"] and calls == 0:
                raise Rejected(rules.NO_CUSTOM_KERNEL, "forward never called the solution's compiled extension: "
                                                       "the output must come from your own kernels")
            if leftover:
                raise Rejected(rules.BACKGROUND_THREAD, f"forward left a thread running ({leftover}); "
                                                        "all work must finish inside forward")
            check_output(out, inputs, self.device)
            if self.guard is not None:
                for t in tensors_in(out):
                    if t.numel() and not self.guard.is_kernel_tensor(t):
                        raise Rejected(rules.OUTPUT_NOT_FROM_KERNEL,
                                       "forward returned a tensor that none of the solution's kernels produced or "
                                       "wrote (computed in Python or by a library?); outputs must come from your "
                                       "kernels")
            if sentinel is not None and sentinel.changed():
                raise Rejected(rules.INPUT_MUTATION, "forward modified one of its input tensors; inputs must be "
                                                     "left unchanged")
        except Rejected as problem:
            return calls, problem
        return calls, None

    def _count(self, calls: int) -> None:
        """Every call must call the kernels equally often (the first may do one-time work)."""
        from cuda_agent.env.rules.guard import Rejected

        self.calls_per_forward.append(calls)
        steady = self.calls_per_forward[1:]
        if self.cfg["guard"] and steady and any(c != steady[0] for c in steady):
            raise Rejected(rules.BEHAVIOUR_CHANGED, f"forward called its kernels {steady[-1]} times in one call and "
                                                    f"{steady[0]} times in another: every call must do the same work")


# CUDA_AGENT_TRACE_CALLS=1: each call's steps and their wall times on the worker's log (diagnosis
# of the harness's own overhead; the harness never reads it). Read in main(): a forked judge's
# environment is set after this module was imported.
_TRACE_CALLS = False


class _CallTrace:
    """Wall and main-thread CPU milliseconds per step of a call."""

    def __init__(self):
        self.start = self.last = timing._perf_counter()
        self.cpu_last = timing._thread_time()
        self.laps = []

    def lap(self, name, device):
        timing.device_synchronize(device)
        now, cpu = timing._perf_counter(), timing._thread_time()
        self.laps.append(f"{name}={(now - self.last) * 1e3:.3f} {name}_cpu={(cpu - self.cpu_last) * 1e3:.3f}")
        self.last, self.cpu_last = now, cpu

    def __str__(self):
        return " ".join(self.laps) + f" total={(self.last - self.start) * 1e3:.3f}"


def run_candidate(chan: ChildChannel) -> None:
    from cuda_agent.env.rules.guard import Rejected, warm_harness_threads

    # before the job, which a spare worker waits for: off the evaluation's path (about 0.07 s)
    warm_harness_threads(_device(os.environ.get("CUDA_AGENT_WORKER_BACKEND", "cpu")))
    tables = _dispatcher_tables()
    job = chan.receive()
    candidate = _Candidate(job, chan, tables)
    built = candidate.load()
    chan.send(**built)
    if not built["ok"]:
        return
    while True:
        cmd = chan.receive()
        kind = cmd.get("cmd")
        try:
            if kind == "init":
                chan.send(**candidate.init_model(cmd.get("output_bytes")))
            elif kind == "prepare":
                chan.send(**candidate.prepare(cmd))
            elif kind == "call":
                chan.send(**candidate.call(cmd))
            elif kind == "write":
                chan.send(**candidate.write(cmd))
            elif kind == "final":
                chan.send(**candidate.final())
            else:
                return
        except Rejected as exc:
            chan.send(ok=False, message=str(exc), rule=exc.rule)
            return
        except Exception as exc:
            chan.send(ok=False, message=_short_traceback(exc))
            return


def warm_harness_kernels(device: torch.device) -> None:
    """The harness's own device work once on a few elements, before any job: CUDA loads each kernel
    at its first launch (milliseconds each, waiting for the device), which would otherwise happen in
    an evaluation's first calls while they hold the device's lock. Like creating the CUDA context, this
    runs without the lock: a few kernels on 64 elements, once per worker."""
    from cuda_agent.env.workers.draws import TRANSFORMS, structured
    from cuda_agent.env.rules.guard import InputSentinel
    from cuda_agent.env.rules.verify import Tolerance, compare_outputs, output_scale, take_samples

    x = torch.randn(64, device=device)
    for transform in TRANSFORMS:                                        # the structured input sets
        structured([x], transform, seed=1)
    torch.empty(64, device=device).fill_(float("nan"))                  # the allocator's poison
    out = torch.relu(x)
    take_samples(out, count=16)                                         # random positions, gather, copy back
    for full in (True, False):                                          # the input sentinel, both kinds
        InputSentinel([x], full=full).changed()
    compare_outputs(out, out.clone(), Tolerance(relative_to_scale=True))  # the judge's comparison
    compare_outputs(out, out + 1, Tolerance())
    output_scale(out)
    bool(torch.isfinite(out).all())
    timing.device_synchronize(device)


def main() -> None:
    import faulthandler

    global _TRACE_CALLS
    _TRACE_CALLS = os.environ.get("CUDA_AGENT_TRACE_CALLS") == "1"
    faulthandler.enable()  # a crashing kernel leaves the Python stack that called it in the log
    role = sys.argv[1]
    chan = ChildChannel()
    started = time.monotonic()
    if os.environ.get("CUDA_AGENT_WORKER_BACKEND") == "cpu":
        torch.set_num_threads(1)   # eager and the candidate alike, each timed by its CPU time
    if os.environ.get("CUDA_AGENT_WORKER_BACKEND") == "cuda" and torch.cuda.is_available():
        torch.empty(1, device="cuda")  # create the context now, while no job waits for us
        warm_harness_kernels(torch.device("cuda"))
    chan.send(ready=True, pid=os.getpid(), device_setup=[started, time.monotonic()])
    try:
        (run_judge if role == "judge" else run_candidate)(chan)
    except EOFError:
        pass
    # Skip interpreter teardown: candidate extensions and threads may hang or crash in it.
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(0)


if __name__ == "__main__":
    main()
