"""The rules registry (env/rules/registry.py): every rule a result can name is declared there, the
checks name rules by reference, and docs/verification.md's tables are its rendering."""

from __future__ import annotations

import ast
import re
import textwrap
from pathlib import Path

import pytest

from cuda_agent.env.rules import registry
from cuda_agent.env.rules.guard import Rejected
from cuda_agent.env.rules.registry import PHASES, RULES, TABLES, Rule, UnknownRule, name_of
from cuda_agent.env.rules.static_check import Finding

ROOT = Path(__file__).resolve().parents[2]
SOURCES = ROOT / "src" / "cuda_agent"
DOC = ROOT / "docs" / "verification.md"
NATIVE_GUARD = SOURCES / "env" / "rules" / "native" / "guard.cpp"

# The names results carry (EvalError.rule): RL reward data and stored attempts compare them, so a
# rename is a change of behaviour and must show here.
NAMES = frozenset("""
    too-large sandbox native-symbol asm-directive aten-override torch-op data-movement no-custom-kernel
    output-not-from-kernel behaviour-changed input-mutation output-type background-thread stream-changed
    extra-process protocol-forgery crash timeout correctness recheck-after-timing input-independent fixed-shape
    numerically-fragile output-layout forged-samples uncomparable-output clock-disagreement build-input build-limit
    static:allowlist static:introspection static:monkeypatch static:attribute-write static:extension-name
    static:reference-model static:broad-except static:threading static:ctypes static:network static:numpy
    static:custom-op static:torch-compile static:dispatch-bypass static:native-escape static:aten-override
    """.split())


def literal_rule_names(source: str, static_pass: bool = False) -> list[tuple[int, str]]:
    """(line, name) for each rule named by a string literal where a check names its rule: the first
    argument of `Rejected`, the third of `Failed`, a `rule=` keyword, a `"rule":` entry of a dict, a
    value assigned to `rule`, a comparison of `rule` / `.rule` with a string, and in the static pass a
    finding (`Finding`, `self.add`; other modules have findings of their own, which name no rule)."""
    found = []

    def literal(node) -> str | None:
        return node.value if isinstance(node, ast.Constant) and isinstance(node.value, str) else None

    def values(node) -> list[str]:   # the strings an expression can evaluate to: `a or ("b" if c else d)`
        if isinstance(node, ast.IfExp):
            return values(node.body) + values(node.orelse)
        if isinstance(node, ast.BoolOp):
            return [name for v in node.values for name in values(v)]
        return [literal(node)] if literal(node) else []   # "" names no rule

    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Call):
            func = node.func
            name = func.id if isinstance(func, ast.Name) else func.attr if isinstance(func, ast.Attribute) else ""
            first = {"Rejected": 0, "Failed": 2}.get(name)
            own_add = name == "add" and isinstance(func.value, ast.Name) and func.value.id == "self"
            if static_pass and (name == "Finding" or own_add):
                first = 0
            if first is not None and len(node.args) > first and literal(node.args[first]) is not None:
                found.append((node.lineno, literal(node.args[first])))
            found += [(node.lineno, literal(k.value)) for k in node.keywords
                      if k.arg == "rule" and literal(k.value) is not None]
        elif isinstance(node, ast.Dict):
            found += [(node.lineno, literal(v)) for k, v in zip(node.keys, node.values)
                      if k is not None and literal(k) == "rule" and literal(v) is not None]
        elif isinstance(node, ast.Assign) and any(isinstance(t, ast.Name) and t.id == "rule" for t in node.targets):
            found += [(node.lineno, name) for name in values(node.value)]
        elif isinstance(node, ast.Compare):
            left = node.left
            if ((isinstance(left, ast.Name) and left.id == "rule") or
                    (isinstance(left, ast.Attribute) and left.attr == "rule")):
                found += [(node.lineno, literal(c)) for c in node.comparators if literal(c) is not None]
    return found


def native_guard_rules() -> set[str]:
    return set(re.findall(r'note_violation\(\s*\w+\s*,\s*"([^"]+)"', NATIVE_GUARD.read_text()))


def test_the_registered_names_are_todays():
    assert set(RULES) == NAMES


def test_every_rule_has_a_known_phase_a_one_line_meaning_and_its_explanation():
    for rule in RULES.values():
        assert rule.phase in PHASES, rule.name
        assert rule.meaning and "\n" not in rule.meaning and len(rule.meaning) <= 100, rule.name
        assert rule.check and rule.catches, rule.name
    assert {phase for phases in TABLES.values() for phase in phases} == set(PHASES)   # every rule in a table


def test_no_check_names_its_rule_by_a_string():
    literals = {f"{path.relative_to(SOURCES)}:{line}": name
                for path in sorted((SOURCES / "env").rglob("*.py")) if path.name != "registry.py"
                for line, name in literal_rule_names(path.read_text(), static_pass=path.name == "static_check.py")}
    assert not literals, f"name these rules by reference (registry.X): {literals}"


def test_the_scan_finds_rules_named_by_strings():
    source = textwrap.dedent("""
        raise Rejected("made-up", "message")
        raise Failed("verify", "message", "also-made-up")
        raise Failed("verify", "message", rule="third")
        reply = {"ok": False, "rule": "fourth"}
        if rule == "fifth":
            self.add("sixth", node, "message")
        rule = built.get("rule") or ("seventh" if refused else None)
        raise Rejected(rules.INPUT_MUTATION, "by reference: not a literal")
        """)
    assert [name for _, name in sorted(literal_rule_names(source, static_pass=True))] == [
        "made-up", "also-made-up", "third", "fourth", "fifth", "sixth", "seventh"]


def test_the_static_pass_tables_hold_rules():
    from cuda_agent.env.rules import allowlist, static_check

    assert all(isinstance(rule, Rule) and name_of(rule) for rule, _ in allowlist.REFUSED.values())
    assert all(isinstance(rule, Rule) and name_of(rule) for rule in static_check._CPP_FORBIDDEN.values())


def test_the_native_guard_reports_registered_rules():
    reported = native_guard_rules()
    assert reported and reported <= set(RULES), reported


def test_every_rule_is_raised_somewhere():
    constants = {value.name: key for key, value in vars(registry).items() if isinstance(value, Rule)}
    assert sorted(constants) == sorted(RULES)   # one constant per rule
    referenced = {m for path in SOURCES.rglob("*.py") if path.name != "registry.py"
                  for m in re.findall(r"\brules\.([A-Z][A-Z_]+)\b", path.read_text())}
    unused = sorted(name for name, key in constants.items()
                    if key not in referenced and name not in native_guard_rules())
    assert not unused, f"registered rules no check raises: {unused}"


def test_the_constructors_refuse_a_rule_nobody_declared():
    assert Rejected(registry.INPUT_MUTATION, "m").rule == "input-mutation"
    assert Rejected("torch-op", "m").rule == "torch-op"   # as the native guard reports it
    assert Finding("allowlist", 3, "m").describe().endswith("[static:allowlist]")
    assert name_of(None) is None
    with pytest.raises(UnknownRule):
        Rejected("torch-ops", "a typo")
    with pytest.raises(UnknownRule):
        Finding("allow-list", 3, "m")
    with pytest.raises(UnknownRule):   # a Rule made outside the registry, under a registered name
        name_of(Rule("torch-op", "call", "", "", ""))


def test_the_listing_gives_each_rule_its_phase_and_meaning():
    lines = registry.listing().splitlines()
    assert len(lines) == len(RULES)
    for line, rule in zip(lines, RULES.values()):
        assert line.split()[:2] == [rule.name, rule.phase] and line.endswith(rule.meaning)


def test_a_rule_no_check_has_in_a_workers_answer_is_a_forged_answer():
    assert registry.reported("torch-op") == "torch-op"
    assert registry.reported(registry.CRASH) == "crash"
    assert registry.reported(None) is None
    assert registry.reported("anything-else") == "protocol-forgery"


def test_the_docs_tables_are_the_registry_rendered():
    doc = DOC.read_text()
    assert registry.tables_in(doc) == {table: registry.render_table(table) for table in TABLES}
    assert registry.with_tables(doc) == doc
    rendered = "\n".join(registry.tables_in(doc).values())
    for rule in RULES:
        assert rendered.count(f"| `{rule}` |") == 1, rule


def test_the_rendering_notices_a_table_that_disagrees():
    doc = DOC.read_text()
    stale = doc.replace("| `torch-op` | call |", "| `torch-op` | load |")
    assert stale != doc and registry.tables_in(stale)["runtime"] != registry.render_table("runtime")
    assert registry.with_tables(stale) == doc
