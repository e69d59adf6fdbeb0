"""One call of the schedule, a round between the harness and its workers.

The candidate's half: the call's inputs prepared beside other evaluations' work, the call itself
holding the device alone (unless it is a verification call), the harness's own clock around it and
the check for processes of the candidate's own; then the judge's half: the same draw for the
reference, the candidate's output to compare, and the verdict (a rejection raises; a timed call's
measures are kept as a round, `rounds`).
"""

from __future__ import annotations

import math
import time

from cuda_agent.env.rules import registry as rules
from cuda_agent.env.run.schedule import Call
from cuda_agent.env.run.worker_run import Failed
from cuda_agent.env.workers import messages as msg


class CallRounds:
    """An evaluation's rounds (a part of evaluation._Evaluation)."""

    def _candidate_round(self, call: Call, phase: str, timeout: float) -> dict | None:
        """The candidate's half of a call: its answer, or None for an empty call (or a structured set
        the task's inputs do not admit). The call holds the device alone unless it is a verification
        call (untimed, and told apart by its place anyway); its inputs are drawn beside other
        evaluations' work. Its steps run one of two ways: in the candidate's process, which times the
        call and samples its output (`_inside_*`), or on the CPU backend decided from outside it
        (`_outside_*`); the device's lock and the trace around them are the same. The candidate's
        silence past `timeout` in any of its steps names the call (`_timeout_message`)."""
        self.index += 1
        call.index = self.index
        self.current_call = self.calling = call
        try:
            return self._round(call, phase, timeout)
        finally:
            self.calling = None

    def _round(self, call: Call, phase: str, timeout: float) -> dict | None:
        if self.outside:
            prepare, ready, measure, settle = (self._outside_prepare, self._outside_ready,
                                               self._outside_call, self._outside_settle)
        else:
            prepare, ready, measure, settle = (self._inside_prepare, self._inside_ready,
                                               self._inside_call, self._inside_settle)
        save = call.kind == "verify"
        asked = time.perf_counter()
        with self.lock.held(shared=True, label=f"harness.{phase}.prepare"):
            asked = self._traced(f"{phase}.lock_shared", asked)
            prepared = prepare(call, phase, timeout)
        asked = self._traced(f"{phase}.prepare", asked)
        if not ready(call, phase, prepared):
            return None
        if call.kind == "null" and self.outside:   # first, the twin's: the harness's steps where no solution runs
            self._twin_call(call, timeout, prepared)
        # warm-up calls are not measured: sampled as finely as verification's (more forwards seen closely)
        self._verdict(phase, self.verdicts.before_call, call.kind == "timed", call.kind == "null",
                      self._data_bytes(prepared))
        with self.lock.held(shared=save, label=f"harness.{phase}.{call.kind}") as hold:
            asked = self._traced(f"{phase}.lock_call", asked)
            out, wall_ms, read = measure(call, phase, timeout, hold, prepared)
        asked = self._traced(f"{phase}.call", asked)
        self._check_processes(phase)
        asked = self._traced(f"{phase}.check_processes", asked)
        if not out["ok"]:   # an exception of the solution's (no rule) says on which input set it came
            raise Failed(phase, out["message"] if out.get("rule") else f"forward failed {self._where(call)}:\n"
                                                                       f"{out['message']}", out.get("rule"))
        self._verdict(phase, self.verdicts.after_call, call.kind == "null", out.pop("outputs", 0), call=call)
        asked = self._traced(f"{phase}.verdict", asked)
        if call.kind == "null":
            self.null_walls.append(wall_ms)
            return None
        return settle(call, phase, timeout, out, wall_ms, read, asked)

    def _data_bytes(self, prepared: dict) -> int:
        """The bytes a call's forward reads and writes, as the harness knows them: its inputs' (the judge's draw,
        on the CPU backend) and the reference's output; what is not known counts 0."""
        from cuda_agent.env.workers.transfer import UnreadableOutput, parse_layout

        try:
            inputs = sum(dtype.itemsize * math.prod(shape) for dtype, shape in parse_layout(prepared.get("layout")))
        except UnreadableOutput:
            inputs = 0
        return inputs + self._known_output_bytes()

    def _known_output_bytes(self) -> int:
        """The reference's output's bytes (the judge's first run), 0 while unknown."""
        known = getattr(self, "output_bytes", None)
        return known if isinstance(known, int) else 0

    def _verdict(self, phase: str, step, *args, call: Call | None = None) -> None:
        """A step of the harness's verdict on the call (call_verdict.CallVerdicts): a rule broken fails
        `phase`, naming the call's input set where there is one."""
        from cuda_agent.env.rules.call_verdict import Refused

        try:
            step(*args)
        except Refused as refused:
            where = f" ({self._where(call)})" if call is not None and call.kind != "null" else ""
            raise Failed(phase, f"{refused}{where}", refused.rule) from None

    # -- in the candidate's process: it draws, times and samples --------------------------------

    def _inside_prepare(self, call: Call, phase: str, timeout: float) -> dict:
        save = call.kind == "verify"
        # the inputs first (drawing them costs more, and varies more, than many kernels take)
        self.candidate.send(msg.Prepare(seed=call.seed, transform=call.transform, save=save))
        return self._ask(self.candidate, timeout, phase)

    def _inside_ready(self, call: Call, phase: str, ready: dict) -> bool:
        if not ready["ok"]:
            raise Failed(phase, ready["message"], ready.get("rule"))
        return True

    def _inside_call(self, call: Call, phase: str, timeout: float, hold, ready: dict) -> tuple[dict, float, None]:
        save = call.kind == "verify"
        # the harness's own clock covers the call itself; the CPU backend's measure is the
        # worker's CPU time (`_outside_clock`), a GPU's wall time
        cpu_start = self.candidate.cpu_seconds() if self.backend == "cpu" else None
        start = time.perf_counter()
        sent = time.monotonic()   # on the lock log's clock (diagnosis: CUDA_AGENT_LOG_ROUNDS)
        self.candidate.send(msg.CandidateCall(index=call.index, seed=call.seed, transform=call.transform, save=save,
                                                  null=call.kind == "null", slot=call.index % 2, release=not save))
        out = self._ask(self.candidate, timeout, phase)
        wall_ms = self._outside_clock(start, cpu_start)
        if out.get("timed"):   # timing is over and the device idle: its checks run beside others' work
            self.verdicts.answered()   # the solution's threads' time from here to `finish`'s answer is not the call's
            hold.share()
            self.candidate.send(msg.Finish())
            out = self._ask(self.candidate, timeout, phase)
        out["sent"] = sent
        samples = out.get("samples")
        out["outputs"] = _nonempty(samples.get("tensors") if isinstance(samples, dict) else None)
        return out, wall_ms, None

    def _inside_settle(self, call: Call, phase: str, timeout: float, out: dict, wall_ms: float, read: None,
                       asked: float) -> dict:
        save = call.kind == "verify"
        if save and not out.get("staged") and not out.get("device"):   # its output to the box's file, now that the device is let go
            self.candidate.send(msg.Write(index=call.index))
            written = self._ask(self.candidate, timeout, phase)
            if not written["ok"]:
                raise Failed(phase, written["message"], written.get("rule"))
            self._traced(f"{phase}.write", asked)
        out["wall_ms"] = wall_ms
        return out

    # -- the CPU backend's, decided from outside the candidate's process ---------------------------
    # The judge draws the inputs into a staging slot; the candidate, resumed, runs its forward on them
    # and answers where its output is; stopped again, its CPU time (all threads; an empty call's, the
    # harness's own threads') is the call's time and its output is read from its memory, at positions
    # drawn now (whole for a verification call). Its own checks (the guard's verdict) come after that,
    # on `finish`. An empty call is made by the candidate's twin too, which measures the harness's steps
    # (twin.py).

    def _outside_prepare(self, call: Call, phase: str, timeout: float) -> dict:
        slot = call.index % 2
        self.judge.channel.send(msg.Draw(index=call.index, seed=call.seed, transform=call.transform, slot=slot))
        return self._ask(self.judge, self.config.timeout_reference, "task")

    def _outside_ready(self, call: Call, phase: str, drawn: dict) -> bool:
        if "task_error" in drawn:
            raise Failed("task", f"the task's inputs could not be drawn: {drawn['task_error']}")
        if not drawn["ok"]:
            raise Failed("internal", drawn["message"])
        if drawn["layout"] is None:   # a structured set this task's inputs do not admit
            self.result.skipped_sets.append(f"{call.transform}: the task's inputs do not admit it")
            return False
        return True

    def _outside_call(self, call: Call, phase: str, timeout: float, hold, drawn: dict) -> tuple[dict, float, object]:
        from cuda_agent.env.measure.outside import own_memory, read_samples, write_whole
        from cuda_agent.env.rules.verify import SAMPLES_PER_TENSOR

        save, slot, touch_bytes = call.kind == "verify", call.index % 2, self._touch_bytes(call)
        read = None
        cpu_start = self.candidate.cpu_seconds()
        sent = time.monotonic()   # on the lock log's clock (diagnosis: CUDA_AGENT_LOG_ROUNDS)
        self.candidate.send(msg.CandidateCall(index=call.index, seed=call.seed, transform=call.transform, save=save,
                                                  null=call.kind == "null", touch_bytes=touch_bytes,
                                                  inputs={"slot": slot, "layout": drawn["layout"]}))
        out = self._ask(self.candidate, timeout, phase)
        cpu_end = self.candidate.cpu_seconds()
        self.verdicts.answered()   # the clock stopped: its threads' time in the harness's checks is between calls
        # an empty call measures the harness's own steps: its threads' time alone (none of the solution's threads')
        harness = self.verdicts.harness_seconds() if call.kind == "null" else None
        located = out.get("output")
        outputs = _nonempty(located.get("tensors") if isinstance(located, dict) else None)
        if not save:   # the measured part is over: reading and checking go beside others' work
            hold.share()
        if out["ok"] and call.kind != "null":
            try:
                own_memory(self.candidate.main_pid, out["output"])
                if save:
                    path = self.job_dir / f"out_{call.index}.bin"
                    read = {"path": str(path), "layout": write_whole(self.memory, out["output"], path,
                                                                     self._output_limit()),
                            "strides": [entry["strides"] for entry in out["output"]["tensors"]]}
                else:
                    read = {"samples": read_samples(self.memory, out["output"], SAMPLES_PER_TENSOR)}
            except Exception as exc:   # whatever the located output makes the reader do: not comparable
                read = exc
        finish_ms = 0.0
        if out["ok"]:   # its checks of the call: the solution's code can run there (an output's deleter, a
            # profile function), just before eager's run on the same draw, so their time is the call's too
            finish_ms, out = self._finish_measured(self.candidate, timeout, phase)
        out["sent"], out["outputs"] = sent, outputs
        wall_ms = (cpu_end - cpu_start) * 1e3 if cpu_start is not None and cpu_end is not None else float("nan")
        if harness is not None:   # less its reads and writes of the inputs (touch.py), as long as the twin's of the
            # same draw just before (twin.py): the solution's own clock never says what is taken off
            wall_ms = min(wall_ms, harness * 1e3) - (min(self.twin_touched_ms, wall_ms) if touch_bytes else 0.0)
        return out, wall_ms + finish_ms, read

    def _touch_bytes(self, call: Call) -> int:
        """What an empty call writes after reading its inputs (workers/touch.py): the reference's output's
        bytes, where known; 0 (nothing touched) for the calibrating calls before the solution loads
        (calibration.py, negative indices), which measure the cheapest call."""
        return self._known_output_bytes() if call.kind == "null" and call.index >= 0 else 0

    def _finish_measured(self, worker, timeout: float, phase: str) -> tuple[float, dict]:
        """`finish` sent to a stopped worker of the CPU backend and answered: its process's CPU milliseconds
        in it (nan where its clock could not be read), and the answer."""
        before = worker.cpu_seconds()
        worker.send(msg.Finish())
        out = self._ask(worker, timeout, phase)
        after = worker.cpu_seconds()
        return ((after - before) * 1e3 if before is not None and after is not None else float("nan")), out

    def _output_limit(self) -> int:
        """The most the harness reads of a located output: the reference's output four times over
        (outputs of another dtype or layout), at least 64 MiB; 8 GiB when the reference's is unknown."""
        known = self.output_bytes
        return max(4 * known, 64 << 20) if isinstance(known, int) and known > 0 else 8 << 30

    def _outside_settle(self, call: Call, phase: str, timeout: float, out: dict, wall_ms: float, read,
                        asked: float) -> dict:
        from cuda_agent.env.measure.outside import ForeignMemory, HiddenMemory

        if isinstance(read, (HiddenMemory, PermissionError)):   # never a fallback to decisions in its process
            raise Failed(phase, f"the harness lost its view of the solution's memory ({read}; {self._where(call)}): "
                                 "a process that hides its memory from the harness is refused",
                         rule=rules.PROTOCOL_FORGERY)
        if isinstance(read, ForeignMemory):
            raise Failed(phase, f"{read} ({self._where(call)}): return tensors the solution allocated (torch.empty "
                                 "and the like)", rule=rules.OUTPUT_TYPE)
        if isinstance(read, Exception):
            raise Failed(phase, f"the output could not be read from the solution's memory ({read}): return "
                                 "plain CPU tensors or Python numbers", rule=rules.UNCOMPARABLE_OUTPUT)
        out.update(read, wall_ms=wall_ms, read_outside=True)
        return out

    # -- the harness's own checks of a call ------------------------------------------------------

    def _outside_clock(self, start: float, cpu_start: float | None) -> float:
        """How long the candidate's call took, measured out of its process's reach: wall time on a GPU;
        on the CPU backend its main thread's CPU time (the kernel's scheduler statistics), which a
        loaded machine's other processes do not inflate. An honest forward's CPU time is at most its
        wall time, which is what its clock reports."""
        cpu_end = self.candidate.cpu_seconds() if self.backend == "cpu" else None
        if cpu_start is not None and cpu_end is not None:
            return (cpu_end - cpu_start) * 1e3
        return (time.perf_counter() - start) * 1e3

    def _check_processes(self, phase: str) -> None:
        if not self.config.guard:
            return
        extras = self.candidate.extra_processes()
        if extras:
            raise Failed(phase, f"the solution started {len(extras)} process(es) of its own; kernels run in the "
                                 "calling process and finish inside forward", rule=rules.EXTRA_PROCESS)

    # -- the judge's half -------------------------------------------------------------------------

    def _judge_request(self, call: Call, out: dict) -> dict:
        """What the judge gets for one call: the same draw, whether to time the references on it, and
        the candidate's output to compare (its file for a verification call, else its samples)."""
        save = call.kind == "verify"
        timed = call.kind in ("warmup", "timed")
        whole = {"path": str(self.box / f"out_{call.index}.bin"), "layout": out.get("layout")}
        if out.get("read_outside") and save:   # read by the harness into a file of its own
            whole = {"path": out["path"], "layout": out["layout"], "strides": out["strides"]}
        else:
            if isinstance(out.get("samples"), dict) and isinstance(out["samples"].get("tensors"), list):
                # the strides the candidate's output was located with (output layout, judged by the judge)
                whole["strides"] = [t.get("strides") if isinstance(t, dict) else None
                                    for t in out["samples"]["tensors"]]
            if out.get("staged"):   # in the staging file's slot of the call (transfer.Staging), not in the file
                whole["slot"] = call.index % 2
            elif out.get("device") and self.device_slot:   # in the judge's device slot (device_slot.py)
                whole["device"] = True
        return dict(index=call.index, seed=call.seed, transform=call.transform, time=timed,
                    compile=timed and self.compile_mode == "paired",
                    compare=whole if save else {"samples": out["samples"]},
                    # verification's own draws set the spread; later calls' whole comparisons are held to it
                    dependence=self.strict and not call.transform and call.kind != "null")

    def _judged(self, call: Call, phase: str, out: dict, verdict: dict) -> dict | None:
        """The judge's verdict on one call: a rejection raises; a timed call's measures are kept."""
        if "task_error" in verdict:
            raise Failed("task", f"the task's reference failed on an input set: {verdict['task_error']}")
        if call.kind == "verify":
            (self.box / f"out_{call.index}.bin").unlink(missing_ok=True)
            (self.job_dir / f"out_{call.index}.bin").unlink(missing_ok=True)
        if verdict.get("skipped"):
            self.result.skipped_sets.append(f"{call.transform}: {verdict['skipped']}")
            return None
        if not verdict["ok"] and not self._unscored_miss(call, phase, verdict):
            self._reject(call, phase, verdict)
        if call.kind == "timed":
            # each side's device time and its host's time to queue the forward (None: timed unheld);
            # round_times weighs the two
            kernel = out["wall_ms"] if out.get("read_outside") else out["ms"]
            self.rounds.append({"kernel": kernel, "kernel_host": out.get("host_ms"), "wall": out["wall_ms"],
                                "eager": verdict.get("eager_ms"), "eager_host": verdict.get("eager_host_ms"),
                                "compile": verdict.get("compile_ms"), "compile_host": verdict.get("compile_host_ms"),
                                "sent": out.get("sent"),
                                "own": out.get("ms")})   # the solution's own clock: diagnosis (the rounds' log) only
            if self.backend == "cuda":   # how each side was timed (hold.Timer), as of its last call
                self.result.timer = {"kernel": out.get("timer"), **verdict.get("timers", {})}
        return verdict

    current_call: Call | None = None   # the call the candidate was last asked to make
    calling: Call | None = None        # the call whose round is under way (None between rounds)

    def _timeout_message(self, worker, timeout: float, phase: str) -> str:
        """The candidate's silence during a round names the round's call and input set."""
        call = self.calling
        if worker.role != "candidate" or call is None:
            return super()._timeout_message(worker, timeout, phase)
        return (f"the solution timed out after {timeout:g} s {self._which(call)}, in the {phase} phase "
                "(an infinite loop or a hung kernel?)")

    def _crash_message(self, worker, died: str, phase: str) -> str:
        """The candidate's death: on which input set, and its own frames (crash.py); the whole dump
        stays in the log."""
        from cuda_agent.env.run.crash import crash_digest

        if worker.role != "candidate":
            return super()._crash_message(worker, died, phase)
        call = self.current_call
        where = f" {self._which(call)}" if call is not None else " before its first input set"
        from cuda_agent.env.builds.handed import handed_dir

        own = (str(self.box / "solution"), str(self.box / "torch_extensions"), str(handed_dir(self.box)))
        digest = crash_digest(worker.log_tail(64_000), own)
        return (f"the solution's process crashed ({died}){where}, in the {phase} phase" +
                (f"\n{digest}" if digest else "; no frame of the solution's own code was found in its log"))

    @staticmethod
    def _where(call: Call) -> str:
        """Which input set a call computed: its number, and its structured set's name or its seed."""
        return f"on input set {call.index}" + (f" (structured: {call.transform})" if call.transform else
                                               f" (seed {call.seed})" if call.kind == "verify" else "")

    @classmethod
    def _which(cls, call: Call) -> str:
        """Its input set, and the kind of call unless it is a verification call."""
        return cls._where(call) + ("" if call.kind == "verify" else f", a {call.kind} call")

    def _reject(self, call: Call, phase: str, verdict: dict) -> None:
        where = self._where(call)
        if verdict.get("rule"):
            raise Failed(phase, f"{where}: {verdict['message']}", verdict["rule"])
        if call.transform and verdict.get("nonfinite"):
            raise Failed(phase, f"wrong output {where}: {verdict['message']}; the reference stays finite on these "
                                 "inputs (scaled or spiked values): compute stably (e.g. subtract the max before exp)",
                          rule=rules.NUMERICALLY_FRAGILE)
        if call.kind == "verify":
            raise Failed(phase, f"wrong output {where}: {verdict['message']}", rule=rules.CORRECTNESS)
        raise Failed(phase, f"an output produced while timing is wrong for its inputs, although verification "
                             f"passed (results cached, work skipped or approximated?): {verdict['message']}",
                      rule=rules.RECHECK_AFTER_TIMING)


def _nonempty(tensors) -> int:
    """How many of an answer's described tensors (samples or locations: each with its shape) hold
    elements: those the candidate's guard must have checked."""
    count = 0
    for entry in tensors if isinstance(tensors, list) else []:
        shape = entry.get("shape") if isinstance(entry, dict) else None
        if isinstance(shape, list) and all(isinstance(n, int) for n in shape) and math.prod(shape) > 0:
            count += 1
    return count
