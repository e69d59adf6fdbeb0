"""The judge worker (trusted: it runs only the task's code): `python -m cuda_agent.env.workers judge`.

It builds the reference `Model`, and for every call draws the same inputs as the candidate (from the
seed the harness sends), runs the reference on them (timed, when the call is a timed one, so the
eager and torch.compile baselines are measured on the very same draws, interleaved with the
candidate's), and compares the candidate's output: whole (a file) or at the positions the candidate
sampled right after its call returned. Its commands and answers are the models of messages.py.
"""

from __future__ import annotations

import sys
from contextlib import contextmanager, nullcontext
from pathlib import Path

import torch

from cuda_agent.env.infra.box_file import box_file
from cuda_agent.env.infra.locks import DeviceLock
from cuda_agent.env.infra.reserve import call_bytes, judge_bytes, reserve, reserve_heap
from cuda_agent.env.measure import timing
from cuda_agent.env.measure.hold import Timer, load_hold
from cuda_agent.env.rules.verify import tensors_in
from cuda_agent.env.workers import common
from cuda_agent.env.workers.common import device_of, short_traceback
from cuda_agent.env.workers.draws import draw_inputs
from cuda_agent.env.workers.handover import kept
from cuda_agent.env.workers.init_inputs import draw_init_inputs
from cuda_agent.env.workers.messages import (Compile, Compare, Compiled, Dependence, DependenceVerdict, Draw, Drawn,
                                             GraphTimed, InputsKept, JudgeCall, JudgeCalls, JudgeJob, Kept,
                                             OperatorTable, ProfileReference, ReferenceProfiled, TimeGraph, Verdict,
                                             Verdicts)
from cuda_agent.env.workers.transfer import STAGING_SLOT_BYTES, Staging, staged_bytes
from cuda_agent.env.rules import registry as rules


def save_init(box: Path, init_inputs: list, state_dict: dict) -> None:
    """The reference's init inputs and initial weights, for the candidate (`reference_init.pt`, never
    through a link its import planted). Without the zip records' checksums: the file goes from one
    worker to the other in the box, and a large model's checksum costs a quarter of the write."""
    crc = getattr(torch.serialization, "get_crc32_options", lambda: True)()
    if hasattr(torch.serialization, "set_crc32_options"):
        torch.serialization.set_crc32_options(False)
    try:
        with box_file(box, "reference_init.pt") as fh:
            torch.save({"init_inputs": init_inputs, "state_dict": state_dict}, fh)
    finally:
        if hasattr(torch.serialization, "set_crc32_options"):
            torch.serialization.set_crc32_options(crc)


def _all_finite(value) -> bool:
    return all(bool(torch.isfinite(t).all()) for t in tensors_in(value) if t.is_floating_point() or t.is_complex())


def _whole(cmd: JudgeCall) -> bool:
    """Whether the call compares a whole output (a file), which the judge reads without the device."""
    return cmd.compare is not None and cmd.compare.has("path")


class _Judge:
    """The reference side of an evaluation: the task's model, its compiled twin, the tolerance."""

    def __init__(self, job: JudgeJob, staging: Staging | None):
        from cuda_agent.env.rules import verify
        from cuda_agent.env.rules.dependence import Dependence
        from cuda_agent.tasks.task import load_task_module

        self.cfg, self.box = job.config, Path(job.box)
        self.device = device_of(job.backend)
        self.tol = verify.Tolerance(self.cfg.atol, self.cfg.rtol, relative_to_scale=self.cfg.protocol == "strict")
        self.dependence = Dependence(seed=self.cfg.seed)
        self.compiled = None
        self.lock = kept("lock", job.lock, lambda: DeviceLock(job.lock)) if job.lock else None
        self.lock_wait_s = 0.0   # of the call in hand, for the harness's account of device time
        self.staging = staging   # the candidate's verification outputs, when staged
        self.drawn: dict[int, list] = {}            # inputs drawn for the candidate (`draw`), by call index
        self.slots: dict[int, tuple[int, torch.Tensor]] = {}   # staging slot -> (call index, its bytes as put)
        self.mutated: list[int] = []                # calls whose inputs the candidate changed in its slot
        hold = kept("hold", job.hold_lib, lambda: load_hold(job.hold_lib))
        self.timers = {"eager": Timer(hold), "compile": Timer(hold)}
        self.module = load_task_module(job.task_code, "reference_task", filename=f"<task {job.task_name}>")
        for name in ("Model", "get_inputs", "get_init_inputs"):
            if not hasattr(self.module, name):
                raise AttributeError(f"the task defines no `{name}`")
        init_inputs = draw_init_inputs(self.module)
        torch.manual_seed(common.weights_seed(self.cfg.seed))   # the candidate's model is made under it too
        model = self.module.Model(*init_inputs)
        if job.save_init:   # the candidate builds its model from the same weights, saved while still on the host
            save_init(self.box, init_inputs, model.state_dict())
        self.model = model.to(self.device).eval()
        with torch.no_grad(), self._device(shared=True, label="setup"):   # the task runs at all (and is warm)
            # the memory of a batch of timed calls, asked for here and not inside the first one (reserve.py)
            batch_bytes = judge_bytes(job.footprint, job.batch, GROUP_BYTES)
            reserve(self.device, batch_bytes, call_bytes(job.footprint))
            if self.device.type == "cpu":   # its heap's pages, mapped before any timed run
                reserve_heap(batch_bytes)
            inputs = draw_inputs(self.module, self.cfg.seed, self.device)
            self.input_bytes = staged_bytes(tensors_in(inputs))   # what a call's inputs take in a slot
            first = self.model(*inputs)
            del inputs
            self.flush = kept("flush", (str(self.device), self.cfg.flush_l2),   # its buffer, likewise
                               lambda: timing.L2Flusher(self.device, self.cfg.flush_l2))
            # for the candidate's outputs (a baseline run has no candidate)
            self.device_slot, self.device_slot_error = \
                self._device_slot(staged_bytes(tensors_in(first))) if job.save_init else (None, None)
        # what a verification output takes in the staging file: its slots are made ready now, off the lock
        self.output_bytes = staged_bytes(tensors_in(first))
        if self.staging is not None:
            self.staging.prepare(self.output_bytes, self.device)

    def drop(self) -> None:
        """A persistent judge's job let go (handover.py): the task's module and model, the compiled twin
        (and torch._dynamo's caches), the inputs drawn and the slot bytes kept, the dependence check's
        outputs, the device slot, the staging file (unmapped), then the freed device and pinned host memory.
        Kept for the next job: the device lock, the hold's library and the L2 flusher (handover.kept)."""
        import gc

        compiled = self.compiled is not None
        self.model = self.compiled = self.module = self.dependence = None
        self.drawn.clear()
        self.slots.clear()
        self.mutated.clear()
        if self.device_slot is not None:
            self.device_slot.close()
            self.device_slot = None
        if compiled:
            torch._dynamo.reset()
        gc.collect()   # views of the staging file in cycles too, before it is unmapped
        if self.staging is not None:
            self.staging.close()
            self.staging = None
        if self.device.type == "cuda":
            torch.cuda.empty_cache()
            host_cache = getattr(torch._C, "_host_emptyCache", None)   # pinned copies of large outputs read
            if host_cache is not None:                                   # from files, kept job after job
                host_cache()

    def _device_slot(self, nbytes: int):
        """(the device slot for outputs of `nbytes`, or None; why not): on CUDA, for outputs larger than
        a staging slot, which would otherwise go through files (device_slot.py)."""
        if self.device.type != "cuda" or nbytes <= STAGING_SLOT_BYTES:
            return None, None
        from cuda_agent.env.workers.device_slot import DeviceSlot

        try:
            return DeviceSlot.create(nbytes, self.device, self.box), None
        except Exception as exc:   # never the task's failure: its outputs then go through files
            return None, f"{type(exc).__name__}: {str(exc)[:500]}"

    def draw(self, cmd: Draw) -> dict:
        """A call's inputs, drawn here and put into the staging slot the candidate reads them from
        (the CPU backend): the candidate runs no code of the task's and sees its inputs only inside
        its call. The judge keeps what it drew for the reference, and the bytes it put, to notice a
        candidate that wrote into its slot (`inputs_kept`)."""
        from cuda_agent.env.workers.transfer import output_layout

        if self.staging is None:
            return {"ok": False, "message": "no staging file for the candidate's inputs"}
        slot = cmd.slot
        self._check_slot(slot)
        try:
            inputs = draw_inputs(self.module, cmd.seed, self.device, cmd.transform)
            layout, tensors = output_layout(inputs)
            if not self.staging.fits(tensors):
                return {"ok": False, "message": "the inputs do not fit a staging slot"}
            self.staging.put(slot, tensors)
        except Exception as exc:
            if cmd.transform:   # the structured set is not defined for this task: the candidate
                inputs, layout = None, None   # gets none, and the call is skipped (see _draw)
            else:
                return _task_error(exc)
        if inputs is None:
            return {"ok": True, "layout": None}
        self.drawn[cmd.index] = inputs
        self.slots[slot] = (cmd.index, self._slot_bytes(slot, staged_bytes(tensors)).clone())
        return {"ok": True, "layout": layout}

    def _slot_bytes(self, slot: int, nbytes: int) -> torch.Tensor:
        return self.staging.memory[slot * self.staging.slot_bytes:][:nbytes]

    def _check_slot(self, slot: int) -> None:
        kept = self.slots.pop(slot, None)
        if kept is None:
            return
        index, put = kept
        if not _same_bytes(self._slot_bytes(slot, put.numel()), put):
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
                    compiled(*draw_inputs(self.module, self.cfg.seed + 7919 * (n + 1), self.device))
            timing.device_synchronize(self.device)
        except Exception as exc:  # torch.compile can't handle every model; report, don't fail
            return {"ok": False, "error": f"{type(exc).__name__}: {str(exc)[:500]}"}
        self.compiled = compiled
        return {"ok": True}

    def calls(self, items: list[JudgeCall]) -> list[dict]:
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
        self._drop_unjudged(max((item.index for item in items if item.index is not None), default=-1))
        if common.TRACE_CALLS:   # what the judge holds between batches (diagnosis: it must not grow)
            tensors = f" tensors={_live_tensors()}" if common.TRACE_HEAP else ""
            print(f"judge heap drawn={len(self.drawn)}{tensors}", file=sys.stderr, flush=True)
        return answers

    def _drop_unjudged(self, last: int) -> None:
        """Drop the inputs drawn for calls up to `last` that were not judged: the harness sends its
        calls in the schedule's order, so those are calls it never sends (empty calls), or calls after
        a task error; kept, they would grow the judge's heap call by call."""
        for index in [index for index in self.drawn if index <= last]:
            del self.drawn[index]

    def _draw_group(self, queue: list[JudgeCall]) -> list["_JudgeCall"]:
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
                        _whole(queue[0]):
                    return group
                part = self._load(queue.pop(0))

    def _load(self, cmd: JudgeCall) -> "_JudgeCall":
        """A call on its way; a verification call's output file read first, without the device:
        reading 128 MB outlasts most kernels (an output in the device slot is copied under a shared
        hold instead)."""
        from cuda_agent.env.workers.transfer import UnreadableOutput, read_output
        from cuda_agent.env.rules.samples import decode_samples

        part = _JudgeCall(cmd, common.trace())
        compare = part.compare
        if compare.has("path"):
            try:
                if compare.has("device"):   # in the device slot: copied into the judge's own memory first
                    if self.device_slot is None:
                        raise UnreadableOutput("no device slot")
                    with self._device(shared=True, label="load"):
                        part.candidate = self.device_slot.take(compare.layout)
                elif compare.has("slot"):   # in the staging file (transfer.Staging), not in the file
                    if self.staging is None:
                        raise UnreadableOutput("no staging file")
                    part.candidate = self.staging.take(compare.slot, compare.layout, self.device)
                else:
                    part.candidate = read_output(compare.path, compare.layout, torch.device("cpu"),
                                                 pin=self.device.type == "cuda")
            except Exception as exc:   # kept as it is: the candidate's failure, reported when compared
                part.candidate = exc
            part.trace and part.trace.lap("load", self.device)
        elif compare.has("samples"):   # decoded now, so that reading the reference there holds the device less
            part.decoded = decode_samples(compare.samples)
        return part

    def _draw(self, part: "_JudgeCall") -> None:
        """The call's inputs (and the reference's output when it is not timed), under the caller's hold."""
        paired = part.timed and part.cmd.compile and self.compiled is not None
        try:
            drawn = self.drawn.pop(part.cmd.index, None)   # what the candidate was given (`draw`)
            part.inputs = drawn if drawn is not None else \
                draw_inputs(self.module, part.cmd.seed, self.device, part.transform)
            part.again = draw_inputs(self.module, part.cmd.seed, self.device, part.transform) if paired else None
            if not part.timed:
                part.reference = self.model(*part.inputs)
                part.reached = True
                self._sample(part)
        except Exception as exc:
            part.fail(exc)
        part.bytes = sum(t.numel() * t.element_size() for t in tensors_in([part.inputs, part.again]))
        part.trace and part.trace.lap("draw", self.device)

    def _sample(self, part: "_JudgeCall") -> None:
        """For a call checked by samples: the reference read where the candidate's output was sampled,
        inside the hold that computed it (samples.sample_reference); comparing then needs no device."""
        self._start_sample(part)
        self._finish_sample(part)

    def _start_sample(self, part: "_JudgeCall") -> None:
        """`_sample`'s device work, launched (the hold's end waits for it); `_finish_sample` after."""
        from cuda_agent.env.rules.samples import start_sample_reference

        compare = part.compare
        if not compare.has("samples"):
            return
        skipped = self._before_comparing(part)
        if skipped:
            part.sampled = skipped
            return
        try:
            part.sampled = start_sample_reference(part.reference, compare.samples, self.tol, decoded=part.decoded)
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
        from cuda_agent.env.rules.samples import PendingReference

        if isinstance(part.sampled, PendingReference):
            try:
                part.sampled = part.sampled.finish()
            except Exception as exc:
                part.sampled = exc

    def _settle(self, group: list["_JudgeCall"]) -> list[dict]:
        from cuda_agent.env.rules.samples import PendingReference

        timed = [part for part in group if part.timed and part.answer is None]
        began, waited = timing._perf_counter(), self.lock_wait_s
        faults = _minor_faults() if common.TRACE_CALLS else 0
        if timed:
            with self._device(shared=False, label="timed") as hold:
                for part in timed:
                    try:
                        # unpacked at once: a name kept for the result would hold its output into the next run
                        part.extra["eager_ms"], part.extra["eager_host_ms"], part.reference = \
                            self._timed("eager", self.model, part.inputs)
                        part.reached = True
                        if self.device.type == "cpu":   # read at once and let go (`_release`)
                            self._release(part)
                        part.extra["timers"] = {"eager": self.timers["eager"].mode}
                        if part.again is not None:
                            part.extra["compile_ms"], part.extra["compile_host_ms"] = \
                                self._timed("compile", self.compiled, part.again)[:2]   # its output freed at once
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
                    if part.answer is None and part.reference is not None and part.sampled is None:
                        self._start_sample(part)
            # the reads landed when the hold ended (it waits for the device); a reference with NaN or
            # Inf values needs the device once more for its scale
            pending = [p for p in timed if isinstance(p.sampled, PendingReference)]
            scaled_on_device = any(p.sampled.needs_device() for p in pending)
            with self._device(shared=True, label="sample") if scaled_on_device else nullcontext():
                for part in pending:
                    self._finish_sample(part)
        if common.TRACE_CALLS and timed:
            eager = " ".join(f"{part.extra.get('eager_ms', float('nan')):.4f}" for part in timed)
            print(f"judge batch trace n={len(timed)} held={(timing._perf_counter() - began) * 1e3:.3f} "
                  f"of which lock wait={(self.lock_wait_s - waited) * 1e3:.3f} minor faults={_minor_faults() - faults} "
                  f"eager_ms {eager}",
                  file=sys.stderr, flush=True)
        answers = []
        whole = any(_whole(part.cmd) for part in group)   # compared on the device
        with self._device(shared=True, label="compare") if whole else nullcontext():
            for part in group:
                part.inputs = part.again = None
                if part.answer is None and not part.reached:   # not reached: after a task error
                    break
                part.trace and part.trace.lap("reference", self.device)
                if part.answer is None:
                    part.answer = {**self._compare(part), **part.extra}
                part.candidate = part.reference = part.sampled = None
                answers.append(part.answer)
                if "task_error" in part.answer:
                    break
        return answers

    def _release(self, part: "_JudgeCall") -> None:
        """On the CPU, a timed call's reference read where the candidate sampled it right after its
        run, and its output freed before the next run: each eager run then writes into the memory the
        previous one freed, as the candidate's calls do, instead of into fresh pages (a page fault per
        4 KiB, all inside the timed run) while the batch's outputs pile up."""
        self._sample(part)
        if part.compare.has("samples"):
            part.reference = None

    def _timed(self, name: str, model, inputs) -> tuple[float, float | None, object]:
        """One timed run of a reference, held while its forward lets the hold work (hold.Timer): its
        device time, its host's time (None unheld) and its output."""
        timer = self.timers[name]
        hold = timer.active_hold()
        ms, host_ms, out, _ = timing.time_once(model, inputs, self.device, self.flush,
                                               settle_s=self.cfg.settle_ms / 1e3, hold=hold,
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
        from cuda_agent.env.rules.samples import ForgedSamples, compare_sampled, compared_whole, whole_layout_refused
        from cuda_agent.env.rules.verify import compare_outputs

        cmd, reference, trace = part.cmd, part.reference, part.trace
        transform = cmd.transform
        compare = part.compare
        if compare.has("samples"):
            if isinstance(part.sampled, str):
                return {"ok": True, "skipped": part.sampled}
        elif compare.has("path"):
            skipped = self._before_comparing(part)
            if skipped:
                return {"ok": True, "skipped": skipped}
        # From here on the task has done its part: whatever fails while reading or comparing what the
        # candidate sent is the candidate's doing, never the task's (a failure here must not turn a
        # wrong solution into a "broken task", which scores nothing and leaves every denominator).
        try:
            if compare.has("path"):
                candidate_host = part.candidate
                if isinstance(candidate_host, Exception):   # an output is never one (transfer.read_output)
                    return {"ok": False, "max_abs_error": float("inf"),
                            "message": f"candidate output unreadable: {candidate_host}"}
                candidate = timing.to_device(candidate_host, self.device)
                trace and trace.lap("to_device", self.device)
                verdict = compare_outputs(reference, candidate, self.tol)
                if verdict.ok and compare.has("strides"):   # read through those strides: their layout judged here
                    verdict = whole_layout_refused(reference, compare.strides) or verdict
                if verdict.ok and cmd.dependence:
                    self.dependence.add(reference, candidate)
                del candidate
            elif compare.has("samples"):
                if isinstance(part.sampled, Exception):
                    raise part.sampled
                verdict = compare_sampled(part.sampled, compare.samples)
                if verdict.ok and cmd.dependence and compared_whole(part.sampled):
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
            kind = "whole" if compare.has("path") else "timed" if cmd.time else "sampled"
            print(f"judge trace {kind} {transform or ''} {trace}", file=sys.stderr, flush=True)
        return {"ok": verdict.ok, "max_abs_error": verdict.max_abs_error, "message": verdict.message,
                "rule": verdict.rule, "nonfinite": verdict.nonfinite,
                "fp32_relative_error": verdict.fp32_relative_error, "worst": list(verdict.worst)}


def _same_bytes(a: torch.Tensor, b: torch.Tensor) -> bool:
    """Whether two byte tensors hold the same bytes: compared eight at a time where both allow it (on
    the CPU, torch.equal over bytes takes several times as long as over the same memory in int64)."""
    aligned = all(t.is_contiguous() and t.storage_offset() % 8 == 0 for t in (a, b))
    if aligned and a.numel() == b.numel() and a.numel() % 8 == 0:
        return torch.equal(a.view(torch.int64), b.view(torch.int64))
    return torch.equal(a, b)


def _minor_faults() -> int:
    """This thread's minor page faults so far (fresh pages mapped in: a timed run's hidden cost)."""
    import resource

    return resource.getrusage(resource.RUSAGE_THREAD).ru_minflt


def _live_tensors() -> int:
    """The tensors alive in this process, reachable or not yet collected (a slow walk: diagnosis only)."""
    import gc

    return sum(1 for o in gc.get_objects() if issubclass(type(o), torch.Tensor))   # type(): never a proxy's target


GROUP_BYTES = 1 << 30   # the judge's drawn inputs held at once before their reference runs are timed


class _JudgeCall:
    """One call of a judge's batch on its way: its draw, its reference output, and its answer once
    that is settled early (a structured set the reference is not defined on, or a task error)."""

    def __init__(self, cmd: JudgeCall, trace):
        self.cmd, self.trace = cmd, trace
        self.compare = cmd.compare or Compare()
        self.transform, self.timed = cmd.transform, cmd.time
        self.inputs = self.again = self.reference = None
        self.reached = False        # the reference ran on its draw (its output may be let go since)
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
    return {"ok": False, "task_error": f"{type(exc).__name__}: {exc}\n{short_traceback(exc)}"}


def _judge_answers(judge: _Judge, items: list[JudgeCall]) -> list[dict]:
    try:
        return judge.calls(items)
    except Exception as exc:   # whatever else fails in a call is the task's code too
        return [_task_error(exc)]


def _dependence(judge: _Judge, cmd: Dependence) -> DependenceVerdict:
    try:
        message = judge.dependence.later_verdict() if cmd.later else judge.dependence.verdict()
    except Exception as exc:   # built from the candidate's outputs: its failure, not the task's
        message = f"the solution's outputs could not be judged ({type(exc).__name__}: {str(exc)[:300]})"
    return DependenceVerdict(message=message)


def _profile_reference(judge: _Judge, cmd: ProfileReference) -> ReferenceProfiled:
    """The reference's operators by self time, over calls of their own after every timed call
    (feedback: operators.py); a failure here is the profiler's, never the task's."""
    from cuda_agent.env.measure.operators import profile_forward

    try:
        with torch.no_grad(), judge._device(shared=True, label="operators"):
            inputs = draw_inputs(judge.module, judge.cfg.seed, judge.device)
            table = profile_forward(lambda: judge.model(*inputs), judge.device, cmd.calls, cmd.rows)
    except Exception as exc:
        return ReferenceProfiled(error=f"{type(exc).__name__}: {str(exc)[:200]}")
    return ReferenceProfiled(table=OperatorTable(**table))


def _time_graph(judge: _Judge, cmd: TimeGraph) -> GraphTimed:
    from cuda_agent.env.workers.graphs import time_graph

    return GraphTimed(**time_graph(judge, cmd.calls))


# the judge's dispatch table: a command's type -> its handler (any other command ends the worker)
HANDLERS = {
    Compile: lambda judge, cmd: Compiled(**judge.compile()),
    JudgeCall: lambda judge, cmd: Verdict(**_judge_answers(judge, [cmd])[0]),
    JudgeCalls: lambda judge, cmd: Verdicts(answers=_judge_answers(judge, cmd.items)),   # ends at a task error
    Draw: lambda judge, cmd: Drawn(**judge.draw(cmd)),
    InputsKept: lambda judge, cmd: Kept(**judge.inputs_kept()),
    Dependence: _dependence,
    ProfileReference: _profile_reference,
    TimeGraph: _time_graph,
}
