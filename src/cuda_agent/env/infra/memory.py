"""The memory one evaluation holds, stated once, from a task's footprint (tasks.footprint: one input
set, one output, the weights; an unknown output counts as large as the inputs, unknown weights as none).
Two processes and the staging between them hold, at the same time:

- the judge: the weights, an input set, every reference output (on a GPU up to
  REFERENCE_OUTPUTS_ON_GPU of them, the rest in host memory), a fresh reference output to compare a
  timed call with, and the candidate's output loaded from staging;
- the candidate: the weights, an input set and its output;
- staging: the candidate's output on its way to the judge, in RAM-backed shared memory (host).

On the CPU backend all of it is host memory. Activations inside the forward come on top: this is a
lower bound, held against the machine by capacity.py; the judge's reserve (reserve.py) and bench's
admission (bench/memory.py) are sized from it too.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from cuda_agent.tasks.footprint import Footprint

GiB = 1 << 30
REFERENCE_OUTPUTS_ON_GPU = 4 * GiB   # the judge moves reference outputs beyond this to host memory
TRANSIENT_OUTPUTS = 4                # outputs' worth beside a judge's batch: intermediates, a comparison's
CONTEXTS = 1 * GiB                   # the judge's and the candidate's CUDA contexts
POISON_FILL = 2 * GiB                # the most guard.poison_allocator fills with NaN
MEASUREMENT_EXTRA = 1 * GiB          # a baseline measurement's CUDA context and workspaces


@dataclass(frozen=True)
class EvalMemory:
    """Bytes one evaluation of a task holds at once, by holder and by memory (host or device)."""

    judge_host: int
    judge_device: int
    candidate_host: int
    candidate_device: int
    staging: int              # host: shared memory between the two
    input_bytes: int          # one input set, and one output, for the judge's reserve
    output_bytes: int

    @property
    def host(self) -> int:
        return self.judge_host + self.candidate_host + self.staging

    @property
    def device(self) -> int:
        return self.judge_device + self.candidate_device

    @property
    def admission(self) -> int:
        """What bench reserves on a GPU for this evaluation: its device bytes, two CUDA contexts and
        the candidate's poisoned allocator fill."""
        return self.device + CONTEXTS + POISON_FILL

    def reserve(self, batch: int, group_bytes: int) -> int:
        """What the judge's batch of timed calls holds at once: the inputs drawn for the group (up to
        `group_bytes` of them, at most `batch` calls), each call's reference output, and room for
        intermediates; 0 without inputs. A batch paired with torch.compile draws twice per call: what
        it needs beyond this is asked of CUDA as it comes."""
        if not self.input_bytes:
            return 0
        calls = max(1, min(batch, math.ceil(group_bytes / self.input_bytes)))
        return calls * (self.input_bytes + self.output_bytes) + TRANSIENT_OUTPUTS * self.output_bytes


def _sizes(fp: Footprint) -> tuple[int, int, int]:
    """(inputs, output, weights), the unknowns filled in as the model counts them."""
    output = fp.output_bytes if fp.output_bytes is not None else fp.input_bytes
    return fp.input_bytes, output, fp.param_bytes or 0


def evaluation_memory(fp: Footprint, backend: str, trials: int) -> EvalMemory:
    """The model for one evaluation of a task with footprint `fp` verified on `trials` input sets."""
    inputs, out, params = _sizes(fp)
    held = trials * out                                      # the judge's reference outputs
    judge = params + inputs + 2 * out                        # + a fresh reference output, the loaded copy
    candidate = params + inputs + out
    if backend == "cuda":
        on_gpu = min(held, REFERENCE_OUTPUTS_ON_GPU)
        return EvalMemory(judge_host=held - on_gpu, judge_device=judge + on_gpu, candidate_host=0,
                          candidate_device=candidate, staging=out, input_bytes=inputs, output_bytes=out)
    return EvalMemory(judge_host=judge + held, judge_device=0, candidate_host=candidate, candidate_device=0,
                      staging=out, input_bytes=inputs, output_bytes=out)


def measurement_memory(fp: Footprint) -> int:
    """Device bytes a baseline measurement (a judge alone) holds: the weights, an input set, the eager
    and the torch.compile output, plus a CUDA context and workspaces."""
    inputs, out, params = _sizes(fp)
    return params + inputs + 2 * out + MEASUREMENT_EXTRA


def from_job(footprint: dict | None) -> EvalMemory | None:
    """The model from a judge job's footprint ({"input_bytes", "output_bytes"}, as `job_footprint`
    the evaluation writes it), None when unknown. Only the reserve reads it: trials and weights do not matter there."""
    if not footprint or not footprint.get("input_bytes"):
        return None
    fp = Footprint(footprint["input_bytes"], footprint.get("output_bytes"), None)
    return evaluation_memory(fp, "cuda", trials=0)

