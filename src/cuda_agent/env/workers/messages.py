"""The messages between the harness and its workers, one pydantic model each.

A command names itself in `cmd` (a job, the first message, has none) and declares the answer it
expects (`answer`); the worker finds its handler by the command's type (`read_command` refuses any
other), the harness validates every answer against the model its last command expects (`read_answer`
refuses a malformed or unexpected one as forged: the candidate's answers are untrusted). On the wire a
message is the JSON object of the fields its sender set (a default is not sent; `cmd` always is).
Large payloads (samples, output layouts) are typed `Any`: their contents are checked where they are
used (the judge's comparison), not per element here.
"""

from __future__ import annotations

from dataclasses import is_dataclass
from typing import Annotated, Any, ClassVar, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError, model_validator

from cuda_agent.env.config import EvalConfig


Milliseconds = Annotated[float, Field(ge=0, allow_inf_nan=False)]   # a time a worker reports


class Message(BaseModel):
    model_config = ConfigDict(extra="forbid")

    def fields(self) -> dict:
        """The fields its sender set, nested messages as dicts: what the other end reads."""
        out = {}
        for name in self.model_fields_set:
            value = getattr(self, name)
            if isinstance(value, Message):
                value = value.fields()
            elif isinstance(value, list) and value and isinstance(value[0], Message):
                value = [item.fields() for item in value]
            out[name] = value
        return out

    def wire(self) -> dict:
        """`fields()` for `json.dumps`: a job's EvalConfig as JSON values. Payloads (samples, layouts)
        go as they are, never copied: a call's answer carries thousands of numbers."""
        out = self.fields()
        for name, value in out.items():
            if is_dataclass(value):
                out[name] = self.model_dump(mode="json", include={name})[name]
        return out


class UnknownMessage(ValueError):
    """A command of a type the worker has no handler for, or one that does not validate."""


# -- answers ------------------------------------------------------------------------------------


class Ready(Message):
    """A worker's first line: started (its pid, and when its device set-up began and ended)."""
    ready: bool
    pid: int
    device_setup: list[float]


class Answer(Message):
    """What every candidate answer may be: done, or failed (`message`, and the rule it broke)."""
    may_build: ClassVar[bool] = True   # the candidate may ask for a build before it answers
    ok: bool
    message: str | None = None
    rule: str | None = None

    @model_validator(mode="after")
    def _says_why(self):
        if not self.ok and not isinstance(self.message, str):
            raise ValueError("a failure answer without its message")
        return self


class Loaded(Answer):
    """The candidate's solution loaded (`extensions`: the builds its load_inline calls made)."""
    phase: str | None = None
    extensions: Any = None


class Initialised(Answer):
    """The candidate's model made from the reference's weights (`weights`: how they were matched)."""
    weights: str | None = None
    staging: bool | None = None
    device_slot: bool | None = None          # the judge's device slot mapped (device_slot.py)
    device_slot_error: str | None = None     # or why not

    @model_validator(mode="after")
    def _complete(self):
        if self.ok and (self.weights is None or self.staging is None):
            raise ValueError("a done answer without how the weights were matched and whether it has staging")
        return self


class CallAnswer(Answer):
    """A candidate's call: its times, its samples (or its output located, read from outside), its
    extension calls; `timed`: the timed part is over and the rest waits for `finish`."""
    timed: bool | None = None
    ms: Milliseconds | None = None
    host_ms: Milliseconds | None = None
    samples: Any = None
    calls: int | None = None
    timer: str | None = None
    layout: Any = None
    staged: bool | None = None
    device: bool | None = None   # a verification output in the judge's device slot (device_slot.py)
    output: Any = None


class BuildRequest(Message):
    """The candidate's load_inline/load call, compiled by the harness (answered by `BuildReply`)."""
    request: Literal["build"]
    name: Any = None   # checked by the harness's build service, which refuses a malformed request
    files: Any = None
    extra_cflags: Any = None
    extra_cuda_cflags: Any = None
    extra_ldflags: Any = None
    extra_include_paths: Any = None


class JudgeAnswer(Message):
    may_build: ClassVar[bool] = False


class JudgeSetUp(JudgeAnswer):
    """The judge's answer to its job: the reference ran (its device, the bytes of an output and of a
    call's inputs, a staging slot's size), or the task is broken (`message`)."""
    ok: bool
    message: str | None = None
    device: str | None = None
    output_bytes: int | None = None
    input_bytes: int | None = None
    slot_bytes: int | None = None
    device_slot: bool | None = None          # a device slot for outputs larger than a staging slot
    device_slot_error: str | None = None     # why it could not be made


class Compiled(JudgeAnswer):
    ok: bool
    error: str | None = None


class Verdict(JudgeAnswer):
    """The judge on one call: the comparison's outcome, the reference's times for a timed call, or
    the task's own failure (`task_error`)."""
    ok: bool
    skipped: str | None = None
    task_error: str | None = None
    message: str | None = None
    rule: str | None = None
    max_abs_error: float | None = None
    nonfinite: bool | None = None
    fp32_relative_error: float | None = None
    worst: list | None = None
    eager_ms: float | None = None
    eager_host_ms: float | None = None
    compile_ms: float | None = None
    compile_host_ms: float | None = None
    timers: dict[str, Any] | None = None
    lock_wait_s: float | None = None


class OperatorRow(Message):
    """One row of a profiler table: an operator, an extension's function or a kernel, per forward."""
    name: Annotated[str, Field(max_length=400)]
    kind: Literal["op", "extension", "kernel"]
    ms: Milliseconds
    calls: Annotated[float, Field(ge=0, allow_inf_nan=False)]


class OperatorTable(Message):
    """Where a forward's time goes (operators.profile_forward): `clock` "cpu" or "cuda"."""
    clock: Literal["cpu", "cuda"]
    calls: Annotated[int, Field(ge=1)]
    total_ms: Milliseconds
    rows: Annotated[list[OperatorRow], Field(max_length=40)]


class ReferenceProfiled(JudgeAnswer):
    """The reference's operators (`table`), or why the profiler could not give them (`error`)."""
    table: OperatorTable | None = None
    error: str | None = None


class OwnProfiled(Answer):
    """The candidate's table of its own operators or kernels: its process's word, feedback only."""
    table: OperatorTable | None = None


class GraphTimed(JudgeAnswer):
    """The reference captured in a CUDA graph, timed with eager on the same draws (device times of
    each replay and each eager call, in order), or why it could not be captured (`error`)."""
    graph_ms: list[Milliseconds] = []
    eager_ms: list[Milliseconds] = []
    error: str | None = None


class Dropped(JudgeAnswer):
    """A persistent judge's answer to `NextJob`: its job let go, ready for the next (`ok`), or not
    (`message`: the harness then kills it)."""
    ok: bool
    message: str | None = None


class Verdicts(JudgeAnswer):
    answers: list[Verdict]


class Drawn(JudgeAnswer):
    """A call's inputs put into a staging slot (`layout`; None: the structured set does not apply)."""
    ok: bool
    layout: Any = None
    message: str | None = None
    task_error: str | None = None


class Kept(JudgeAnswer):
    mutated: list[int]


class DependenceVerdict(JudgeAnswer):
    message: str | None = None


# -- commands -----------------------------------------------------------------------------------


class Command(Message):
    answer: ClassVar[type[Message] | None] = None   # None: the answer of the command before it

    def model_post_init(self, _context) -> None:
        if "cmd" in type(self).model_fields:   # always on the wire: the worker dispatches on it
            self.model_fields_set.add("cmd")


class JudgeJob(Command):
    """The judge's job: the task, the evaluation's settings (its seed decided), its lock and hold."""
    answer: ClassVar = JudgeSetUp
    task_code: str
    task_name: str
    backend: str
    config: EvalConfig
    box: str
    save_init: bool = True        # the reference's weights to the box, for the candidate
    lock: str | None = None
    hold_lib: str | None = None
    footprint: dict[str, int | None] | None = None   # bytes of one input set and one output (None: not tensors)
    batch: int = 1


class CandidateJob(Command):
    """The candidate's job: the solution to load (when `LoadSolution` follows), the task's input code, the
    harness's libraries."""
    answer: ClassVar = Loaded
    task_inputs_code: str
    solution_dir: str
    backend: str
    config: EvalConfig
    box: str
    guard_lib: str | None = None
    hold_lib: str | None = None
    crash_lib: str | None = None   # the fatal-signal report's library (run/crash.py), loaded before the solution
    calibration_calls: int = 0     # empty calls answered before the solution loads (run/calibration.py)
    twin: bool = False             # the candidate's twin (run/twin.py): empty calls only, never a solution
    early_model: bool = False      # make the model once loaded, while the judge makes the reference's


class LoadSolution(Command):
    """Load the solution now (after the job's empty calls): the workspace's extensions the harness built
    meanwhile (module name -> library), handed into the candidate's box."""
    answer: ClassVar = Loaded
    cmd: Literal["load_solution"] = "load_solution"
    prebuilt: dict[str, str] = {}


class BuildReply(Command):
    """The harness's answer to a `BuildRequest`: the library's path, or why it was refused."""
    ok: bool
    path: str | None = None
    message: str | None = None


class Compile(Command):
    """torch.compile the reference (the compile baseline)."""
    answer: ClassVar = Compiled
    cmd: Literal["compile"] = "compile"


class Compare(Message):
    """The candidate's output for the judge: a file (`path`, with its `layout` and each tensor's `strides`
    as it was read; `slot`: in the staging file instead; `device`: in the device slot instead) or its
    samples."""
    path: str | None = None
    layout: Any = None
    strides: Any = None
    slot: int | None = None
    device: bool | None = None
    samples: Any = None

    def has(self, name: str) -> bool:
        """Whether the harness sent `name` (a key's presence decides the comparison, whatever its value)."""
        return name in self.model_fields_set


class JudgeCall(Command):
    """One call for the judge: the same draw (`seed`, `transform`, or the inputs it drew for `index`),
    whether to time the references on it, the output to compare."""
    answer: ClassVar = Verdict
    cmd: Literal["call"] = "call"
    seed: int
    transform: str | None = None
    index: int | None = None
    time: bool = False
    compile: bool = False
    compare: Compare | None = None
    dependence: bool = False


class JudgeCalls(Command):
    """A batch of calls, answered in order; it ends at the first task error."""
    answer: ClassVar = Verdicts
    cmd: Literal["calls"] = "calls"
    items: list[JudgeCall]


class Draw(Command):
    """A call's inputs drawn by the judge into a staging slot (the CPU backend's calls from outside)."""
    answer: ClassVar = Drawn
    cmd: Literal["draw"] = "draw"
    index: int
    seed: int
    transform: str | None = None
    slot: int


class InputsKept(Command):
    """Which calls' inputs the candidate changed in their slots."""
    answer: ClassVar = Kept
    cmd: Literal["inputs_kept"] = "inputs_kept"


class Dependence(Command):
    """Whether the outputs depend on the inputs (`later`: on the timed calls' samples)."""
    answer: ClassVar = DependenceVerdict
    cmd: Literal["dependence"] = "dependence"
    later: bool = False


class Init(Command):
    answer: ClassVar = Initialised
    cmd: Literal["init"] = "init"
    output_bytes: int | None = None
    device_slot: bool = False   # map the judge's device slot (its socket in the box)


class Prepare(Command):
    """A call's first half: its inputs drawn and the memory poisoned, before the harness's clock."""
    answer: ClassVar = Answer
    cmd: Literal["prepare"] = "prepare"
    seed: int
    transform: str | None = None
    save: bool = False


class StagedInputs(Message):
    slot: int
    layout: Any


class CandidateCall(Command):
    """A call of the schedule (`null`: an empty one; `save`: a verification call, its output kept;
    `inputs`: drawn by the judge into a staging slot; `release`: answer once its timed part is over;
    `touch_bytes`: what an empty call with staged inputs writes, the reference's output's bytes: touch.py)."""
    answer: ClassVar = CallAnswer
    cmd: Literal["call"] = "call"
    index: int
    seed: int
    transform: str | None = None
    save: bool = False
    null: bool = False
    slot: int | None = None
    release: bool = False
    inputs: StagedInputs | None = None
    touch_bytes: int = 0


class Finish(Command):
    """Go on: the harness has read or shared what the call's first answer let it."""
    answer: ClassVar = CallAnswer
    cmd: Literal["finish"] = "finish"


class Write(Command):
    answer: ClassVar = Answer
    cmd: Literal["write"] = "write"
    index: int


class ProfileReference(Command):
    """The profiler over a few untimed calls of the reference (after every timed call)."""
    answer: ClassVar = ReferenceProfiled
    cmd: Literal["profile_reference"] = "profile_reference"
    calls: int = 3
    rows: int = 8


class ProfileOwn(Command):
    """The profiler over a few untimed calls of the candidate's forward (after every timed call)."""
    answer: ClassVar = OwnProfiled
    cmd: Literal["profile_own"] = "profile_own"
    calls: int = 3
    rows: int = 8


class TimeGraph(Command):
    """The reference's eager forward captured in a CUDA graph and timed `calls` times with eager."""
    answer: ClassVar = GraphTimed
    cmd: Literal["time_graph"] = "time_graph"
    calls: int = 20


class NextJob(Command):
    """A persistent judge's handover: let go of this job and wait for the next (handover.py)."""
    answer: ClassVar = Dropped
    cmd: Literal["next_job"] = "next_job"


class Final(Command):
    """After the timed calls: the dispatcher's tables checked once more."""
    answer: ClassVar = Answer
    cmd: Literal["final"] = "final"


# -- reading ------------------------------------------------------------------------------------


def read_command(raw: dict, table) -> Command:
    """The command `raw` is, if `table` (a worker's dispatch table, keyed by command type) has it."""
    kinds = {model.model_fields["cmd"].default: model for model in table}
    model = kinds.get(raw.get("cmd")) if isinstance(raw, dict) else None
    if model is None:
        raise UnknownMessage(f"no handler for a command {raw.get('cmd') if isinstance(raw, dict) else raw!r}")
    try:
        return model.model_validate(raw)
    except ValidationError as exc:
        raise UnknownMessage(f"a malformed {model.__name__} command: {exc}") from None


def read_answer(raw: dict, expected: type[Message]) -> dict:
    """The fields of `raw` once it validates as `expected` (or as a build request, where the candidate
    may make one): anything else raises ValueError. Strictly: JSON's types as they are (no "yes" for
    true, no 1.0 for a count)."""
    model = BuildRequest if getattr(expected, "may_build", False) and "request" in raw else expected
    return model.model_validate(raw, strict=True).fields()
