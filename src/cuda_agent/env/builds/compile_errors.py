"""A compiler's output reduced to what an LLM reads first: the first errors with file:line and the source line
under each, not template noise."""

from __future__ import annotations

import re

_ERROR_LINE = re.compile(
    r"(error|undefined reference|undefined symbol|fatal|multiple definition|cannot find)", re.I)


def summarize_compiler_output(text: str, max_errors: int = 6, max_chars: int = 2500) -> str:
    """The first errors with file:line and the source line under each, not template noise."""
    lines = text.splitlines()
    picked: list[str] = []
    errors = 0
    for i, line in enumerate(lines):
        if not _ERROR_LINE.search(line) or line.lstrip().startswith("In file included"):
            continue
        errors += 1
        if errors > max_errors:
            break
        picked.append(line.strip())
        # gcc/nvcc print the offending source line (and a caret) right after the message
        for follow in lines[i + 1:i + 3]:
            if follow.strip() and not _ERROR_LINE.search(follow) and ("|" in follow or follow.strip() == "^"
                                                                      or follow.startswith("  ")):
                picked.append("    " + follow.strip())
    if not picked:
        picked = [ln for ln in lines if ln.strip()][-15:]
    total = sum(1 for ln in lines if re.search(r"\berror\b", ln))
    summary = "\n".join(picked)
    if total > max_errors:
        summary += f"\n... ({total} error lines in all; fix the first ones first)"
    return summary[:max_chars]
