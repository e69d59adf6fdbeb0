"""The rules the hack suites expect to reject their cheats, read from the suites' sources (no case is
built or run, so the GPU suite is read on any machine).

A cheat expects a rule where it says so: a hack `Case(..., rules=(...))` (not an honest one, whose
rules are those it must not trip), the rules given to `assert_rejected(result, (...))`, the rule
tuples of the suites' tables of cheats (`CASES`, `HACKS`: the last element of each entry), and a
verdict's rule compared with a name (`result.error.rule == "timeout"`).
Wildcards (`static:*`, `*`) expect no rule in particular. The labels `record(expected=...)` gives
the figures are not read: some name what neutralised a cheat, not a rule that rejected it.
"""

from __future__ import annotations

import ast
from pathlib import Path

TESTS = Path(__file__).resolve().parents[1]
SUITES = (TESTS / "hacks", TESTS / "gpu" / "hacks")
TABLES = ("CASES", "HACKS")


def _strings(node: ast.AST) -> list[str] | None:
    """The strings of a literal tuple, list or set of strings; None for anything else."""
    if isinstance(node, (ast.Tuple, ast.List, ast.Set)) and all(
            isinstance(e, ast.Constant) and isinstance(e.value, str) for e in node.elts):
        return [e.value for e in node.elts]
    return None


def _name(func: ast.AST) -> str:
    return func.id if isinstance(func, ast.Name) else func.attr if isinstance(func, ast.Attribute) else ""


def _honest_case(call: ast.Call) -> bool:
    return (_name(call.func) == "Case" and len(call.args) > 1 and isinstance(call.args[1], ast.Constant)
            and call.args[1].value == "honest")


def expectations(source: str) -> list[tuple[int, list[str]]]:
    """(line, rules) for every expectation of a cheat in one suite file."""
    found = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Call):
            name = _name(node.func)
            if name == "Case" and not _honest_case(node):
                found += [(node.lineno, _strings(k.value)) for k in node.keywords if k.arg == "rules"]
            elif name == "assert_rejected" and len(node.args) > 1:
                found.append((node.lineno, _strings(node.args[1])))
        elif (isinstance(node, ast.Compare) and isinstance(node.left, ast.Attribute) and node.left.attr == "rule"
              and isinstance(node.ops[0], ast.Eq) and isinstance(node.comparators[0], ast.Constant)
              and isinstance(node.comparators[0].value, str)):
            found.append((node.lineno, [node.comparators[0].value]))
        elif (isinstance(node, ast.Assign) and isinstance(node.value, ast.Dict)
              and any(isinstance(t, ast.Name) and t.id in TABLES for t in node.targets)):
            for entry in node.value.values:
                if isinstance(entry, ast.Tuple) and entry.elts:
                    found.append((entry.lineno, _strings(entry.elts[-1])))
    return [(line, rules) for line, rules in found if rules is not None]


def suite_expectations() -> dict[str, list[str]]:
    """Every rule some cheat of the suites expects, with where (file:line), wildcards included."""
    where: dict[str, list[str]] = {}
    for suite in SUITES:
        for path in sorted(suite.glob("*.py")):
            for line, rules in expectations(path.read_text()):
                for rule in rules:
                    where.setdefault(rule, []).append(f"{path.relative_to(TESTS)}:{line}")
    return where
