"""Whether a candidate's outputs follow its inputs the way the reference's do (the strict protocol's
`input-independent` rule): values at fixed positions across the verification sets.
"""

from __future__ import annotations

from typing import Any

import torch

from cuda_agent.env.rules.verify import SAMPLES_PER_TENSOR, scalars_in, tensors_in
# -- outputs that follow their inputs (strict) --------------------------------------------------------


def _as_tensors(value: Any) -> list[torch.Tensor]:
    """The output's tensors, or its Python numbers as one tensor when it has no tensor."""
    tensors = tensors_in(value)
    if tensors:
        return tensors
    numbers = [float(v) for v in scalars_in(value)]
    return [torch.tensor(numbers, dtype=torch.float64)] if numbers else []


class Dependence:
    """Collects, per verification input set, the reference's and the candidate's values at fixed
    positions, and judges whether the candidate's outputs move with the inputs like the reference's.

    A candidate whose outputs stay put while the reference's move (a constant answer that lies
    within tolerance because the task's output barely varies), or whose error is not small against
    the reference's own spread across the sets, is rejected (rule `input-independent`)."""

    MAX_ERROR_SHARE = 0.5   # error over the reference's spread, median across sets

    def __init__(self, count: int = SAMPLES_PER_TENSOR, seed: int = 0):
        self.count, self.seed = count, seed
        self.positions: torch.Tensor | None = None
        self.refs: list[torch.Tensor] = []
        self.cands: list[torch.Tensor] = []
        self.later: list[float] = []

    def add(self, ref: Any, cand: Any) -> None:
        r, c = _as_tensors(ref), _as_tensors(cand)
        if not r or not c or r[0].shape != c[0].shape or not r[0].is_floating_point() or r[0].numel() == 0:
            return
        flat_r, flat_c = r[0].detach().reshape(-1), c[0].detach().to(r[0].device).reshape(-1)
        if self.positions is None:
            n = flat_r.numel()
            gen = torch.Generator(device="cpu").manual_seed(self.seed)
            self.positions = (torch.arange(n) if n <= self.count else torch.randint(0, n, (self.count,), generator=gen))
        pos = self.positions.to(flat_r.device)
        self.refs.append(flat_r[pos].to(torch.float64).cpu())
        self.cands.append(flat_c[pos].to(torch.float64).cpu())

    def add_later(self, error: float) -> None:
        """The largest error of a later call (timed, warm-up or spot) whose output was compared whole:
        judged against the same spread as verification's (`later_verdict`)."""
        self.later.append(error)

    def later_verdict(self) -> str | None:
        """Whether the later calls' errors stay small against the reference's spread across the
        verification sets: an estimate that is honest for verification and approximate afterwards (an
        error within tolerance, but as large as the output's own variation) is rejected."""
        spreads = self._spreads()
        if not spreads or not self.later:
            return None
        spread = sorted(spreads)[len(spreads) // 2]
        shares = sorted(error / spread for error in self.later)
        median = shares[len(shares) // 2]
        if median > self.MAX_ERROR_SHARE:
            return (f"after verification the output's error is {median:.0%} of how much the reference's output "
                    "changes between input sets: an estimate, not the result (compute it exactly on every call)")
        return None

    def _spreads(self) -> list[float]:
        n = len(self.refs)
        if n < 2:
            return []
        spreads = [max(float((self.refs[i] - self.refs[j]).abs().nan_to_num(0).max()) for j in range(n) if j != i)
                   for i in range(n)]
        return [s for s in spreads if s > 0]

    def verdict(self) -> str | None:
        """None when the candidate follows its inputs, else the message for the agent."""
        n = len(self.refs)
        if n < 2:
            return None
        shares = []
        cand_moves = False
        for i in range(n):
            spread = max(float((self.refs[i] - self.refs[j]).abs().nan_to_num(0).max()) for j in range(n) if j != i)
            if spread <= 0:
                continue
            error = float((self.cands[i] - self.refs[i]).abs().nan_to_num(0).max())
            shares.append(error / spread)
            cand_moves |= any(not torch.equal(self.cands[i], self.cands[j]) for j in range(n) if j != i)
        if not shares:
            return None   # the reference's own outputs do not move either: nothing to judge
        if not cand_moves:
            return ("the output is the same for every input set while the reference's changes: it does not "
                    "depend on the inputs (a constant answer that happens to lie within tolerance?)")
        shares.sort()
        median = shares[len(shares) // 2]
        if median > self.MAX_ERROR_SHARE:
            return (f"the output's error is {median:.0%} of how much the reference's output changes between "
                    "input sets: it does not follow the inputs the way the reference does (compute the actual "
                    "result; an estimate or an input-independent value is not accepted)")
        return None
