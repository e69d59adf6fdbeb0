"""Published figures (KernelBench levels 1-3, overall), printed beside a run's own row in reports.

From the CUDA Agent paper (arXiv 2602.24286) as summarised in the project brief. The published
system's "faster than eager" and "GM vs eager" figures could not be confirmed in the abstract or the
project summary, so they are left out (None) rather than quoted as results.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class PublishedRow:
    label: str
    pass_rate: float | None
    faster_eager: float | None
    faster_compile: float | None
    gm_vs_eager: float | None
    gm_vs_compile: float | None


PUBLISHED = (
    PublishedRow("CUDA Agent (published)", 0.988, None, 0.968, None, 2.11),
    PublishedRow("strongest general model in the paper's table (published)", 0.952, 0.904, 0.664, 1.99, 1.46),
)

PUBLISHED_NOTE = ("Published figures are quoted from the CUDA Agent paper (arXiv 2602.24286), not measured "
                  "here; they were measured with the paper's own harness and hardware. Per level, faster than "
                  "torch.compile: 100 % (L1), 100 % (L2), 92 % (L3, abstract; 90 % in the body); L3 pass 94 %, "
                  "GM 1.52x. Blank cells: figures we could not confirm.")
