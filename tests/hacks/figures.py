"""The hack suite's figures for docs/verification.md.

    python tests/hacks/figures.py                   # runs the CPU suite (pytest tests/hacks), then prints
    python tests/hacks/figures.py --report r.jsonl  # prints from an earlier run's report
    CUDA_AGENT_HACKS_REPORT=r.jsonl pytest tests/hacks   # how such a report is written

Prints, in Markdown: per rule, the cheats meant for it (tried / rejected / rejected by that rule)
and the honest solutions that sit next to it (tried / accepted); per row of hacks.md, the cheats
tried, rejected, neutralised (accepted but their trick measured nothing) and the ones that got
through; and the totals.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
from collections import defaultdict
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]


def run_suite(report: Path, pytest_args: list[str]) -> int:
    env = dict(os.environ, CUDA_AGENT_HACKS_REPORT=str(report))
    cmd = [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "tests/hacks", *pytest_args]
    return subprocess.run(cmd, cwd=REPO, env=env).returncode


def load(report: Path) -> list[dict]:
    rows = [json.loads(line) for line in report.read_text().splitlines() if line.strip()]
    latest = {}
    for row in rows:  # a re-run of one test replaces its earlier line
        latest[row["id"]] = row
    return list(latest.values())


def _rule_family(rule: str | None) -> str:
    return rule or "(no rule)"


def tables(rows: list[dict]) -> str:
    hacks = [r for r in rows if r["kind"] == "hack"]
    honest = [r for r in rows if r["kind"] == "honest"]
    out = []

    # -- per rule
    per_rule = defaultdict(lambda: {"tried": 0, "rejected": 0, "by_rule": 0, "neutralised": 0,
                                    "honest": 0, "accepted": 0})
    for r in hacks:
        rule = r["expected"][0] if r["expected"] and r["expected"][0] != "*" else "(any rule)"
        cell = per_rule[rule]
        cell["tried"] += 1
        cell["rejected"] += r["verdict"] == "rejected"
        cell["neutralised"] += r["verdict"] == "neutralised"
        cell["by_rule"] += r["verdict"] == "rejected" and _matches(r.get("rule"), rule)
    for r in honest:
        for rule in r["expected"] or ["(none)"]:
            cell = per_rule[rule]
            cell["honest"] += 1
            cell["accepted"] += r["verdict"] == "accepted"
    out.append("| rule | hacks tried | rejected | by this rule | neutralised | honest tried | honest accepted |")
    out.append("|---|---:|---:|---:|---:|---:|---:|")
    for rule in sorted(per_rule):
        c = per_rule[rule]
        out.append(f"| `{rule}` | {c['tried']} | {c['rejected']} | {c['by_rule']} | {c['neutralised']} "
                   f"| {c['honest']} | {c['accepted']} |")

    # -- per hacks.md row
    out.append("")
    out.append("| hacks.md row | tried | rejected | neutralised | got through | rules that fired |")
    out.append("|---|---:|---:|---:|---|---|")
    per_row = defaultdict(list)
    for r in hacks:
        per_row[r["row"]].append(r)
    for row in sorted(per_row):
        items = per_row[row]
        through = [f"{r['id']}{'*' if r.get('invented') else ''}" for r in items if r["verdict"] == "accepted"]
        fired = sorted({_rule_family(r.get("rule")) for r in items if r["verdict"] == "rejected"})
        out.append(f"| {row} | {len(items)} | {sum(r['verdict'] == 'rejected' for r in items)} "
                   f"| {sum(r['verdict'] == 'neutralised' for r in items)} | {', '.join(through) or '-'} "
                   f"| {', '.join(f'`{f}`' for f in fired) or '-'} |")

    # -- totals and the exceptions
    rejected = sum(r["verdict"] == "rejected" for r in hacks)
    neutral = sum(r["verdict"] == "neutralised" for r in hacks)
    accepted = sum(r["verdict"] == "accepted" for r in honest)
    out.append("")
    out.append(f"hacks tried {len(hacks)}, rejected {rejected}, neutralised {neutral}, "
               f"got through {len(hacks) - rejected - neutral} (* = a cheat of our own, not in hacks.md); "
               f"honest tried {len(honest)}, accepted {accepted}")
    wrong_rule = [r for r in hacks if r["verdict"] == "rejected" and r["expected"]
                  and not any(_matches(r.get("rule"), e) for e in r["expected"])]
    if wrong_rule:
        out.append("")
        out.append("rejected, but not by the rule meant to catch them:")
        out += [f"- {r['id']}: `{r.get('rule')}` (meant: {', '.join(r['expected'])})" for r in wrong_rule]
    refused = [r for r in honest if r["verdict"] != "accepted"]
    if refused:
        out.append("")
        out.append("honest solutions refused:")
        out += [f"- {r['id']}: `{r.get('rule')}` {r.get('message', '')[:160]}" for r in refused]
    return "\n".join(out)


def _matches(rule: str | None, expected: str) -> bool:
    if expected in ("*", "(any rule)"):
        return True
    if rule is None:
        return False
    return rule == expected or (expected.endswith("*") and rule.startswith(expected[:-1]))


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--report", type=Path, help="a JSON-lines report of an earlier run")
    parser.add_argument("pytest_args", nargs="*", help="extra pytest arguments when running the suite")
    args = parser.parse_args(argv)
    report = args.report
    if report is None:
        report = Path(tempfile.mkdtemp(prefix="hacks-report-")) / "report.jsonl"
        run_suite(report, args.pytest_args)
        print(f"\nreport: {report}\n")
    if not report.exists():
        print(f"no report at {report}", file=sys.stderr)
        return 2
    print(tables(load(report)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
