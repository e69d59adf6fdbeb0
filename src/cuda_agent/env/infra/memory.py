"""The memory one evaluation holds, stated once, from a task's footprint (tasks.footprint: one input
set, one output, the weights; an unknown output counts as large as the inputs, unknown weights as none).
Two processes and what passes between them hold, at their peaks (a caching allocator keeps a peak):

- the candidate: the weights, an input set and its pristine copy (a verification call checks its
  inputs bit for bit), its output and that output's snapshot taken right after the call;
- the judge: the weights, and the larger of a timed call's two draws with their outputs (eager and
  torch.compile, each on inputs of its own) and a verification call's comparison (the reference, the
  candidate's output copied into its own memory, and the comparison's temporaries, at most a part's);
- in between: on CUDA, an output larger than a staging slot (protocol.STAGING_SLOT_BYTES) in the
  judge's device slot (device_slot.py), which the candidate's snapshot is written into (counted once,
  with the judge); a smaller one in the staging file (host, shared memory). Inputs never travel on
  CUDA: each side draws its own from the call's seed.

Each reference output is computed when it is compared and let go after: the number of verification
input sets does not add up. On the CPU backend all of it is host memory. Activations inside the
forward come on top: this is a lower bound, held against the machine by capacity.py; the judge's
reserve (reserve.py) and bench's admission (bench/memory.py) are sized from it too.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from cuda_agent.env.workers.protocol import STAGING_SLOT_BYTES
from cuda_agent.tasks.footprint import Footprint

GiB = 1 << 30
COMPARE_PART = 1 * GiB               # the most a comparison's temporaries take (verify.COMPARE_CHUNK parts)
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


def on_device_slot(fp: Footprint, backend: str) -> bool:
    """Whether verification outputs of this task go through the judge's device slot (CUDA, an output
    larger than a staging slot)."""
    return backend == "cuda" and _sizes(fp)[1] > STAGING_SLOT_BYTES


def evaluation_memory(fp: Footprint, backend: str, trials: int) -> EvalMemory:
    """The model for one evaluation of a task with footprint `fp` verified on `trials` input sets
    (which do not change it: see above)."""
    inputs, out, params = _sizes(fp)
    slot = out if on_device_slot(fp, backend) else 0
    candidate = params + 2 * inputs + out + (out - slot)     # the snapshot, unless it is in the slot
    judge = params + max(2 * (inputs + out), 2 * out + min(TRANSIENT_OUTPUTS * out, COMPARE_PART)) + slot
    staging = out - slot
    if backend == "cuda":
        return EvalMemory(judge_host=0, judge_device=judge, candidate_host=0, candidate_device=candidate,
                          staging=staging, input_bytes=inputs, output_bytes=out)
    return EvalMemory(judge_host=judge, judge_device=0, candidate_host=candidate, candidate_device=0,
                      staging=staging, input_bytes=inputs, output_bytes=out)


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

