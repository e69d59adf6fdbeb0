"""The hack suites enumerate the rules registry: every rule that can reject a candidate has a cheat in
tests/hacks or tests/gpu/hacks that expects it, and every rule a cheat expects is registered. Read from
the suites' sources (expected_rules.py): nothing is evaluated, so this runs on any machine."""

from __future__ import annotations

import textwrap

from cuda_agent.env.rules.registry import RULES
from tests.hacks.expected_rules import expectations, suite_expectations

# Rules no cheat can be written for, with the reason and where they are tested instead.
EXEMPT = {
    "too-large": "the task's tensors against the machine's memory, decided before any of the solution runs: "
                 "nothing a solution writes changes it (tests/env/test_size.py)",
    "sandbox": "the machine cannot start bubblewrap: an internal failure before any candidate exists "
               "(tests/env/test_doctor.py says what the machine lacks)",
}


def _wildcard(name: str) -> bool:
    return name.endswith("*") and any(rule.startswith(name[:-1]) for rule in RULES)


def test_every_rule_has_a_hack_case_that_expects_it():
    expected = suite_expectations()
    missing = sorted(set(RULES) - set(expected) - set(EXEMPT))
    assert not missing, f"rules no cheat of tests/hacks or tests/gpu/hacks expects: {missing}"


def test_the_exempt_rules_are_registered_and_still_without_a_case():
    assert set(EXEMPT) <= set(RULES)
    covered = {rule: where for rule, where in suite_expectations().items() if rule in EXEMPT}
    assert not covered, f"a cheat expects these now; take them out of EXEMPT: {covered}"


def test_every_rule_a_cheat_expects_is_registered():
    unknown = {rule: where for rule, where in suite_expectations().items()
               if rule not in RULES and not _wildcard(rule)}
    assert not unknown, f"expected rules the registry does not declare (a typo?): {unknown}"


def test_expectations_are_read_from_each_form_and_honest_cases_left_out():
    source = textwrap.dedent("""
        HONEST = [Case("h", "honest", build, rules=("torch-op",))]
        HACKS = [Case("c", "PyTorch fallback", build, rules=("torch-op", "static:*"))]
        CASES = {"f": ("worker", "none", ("forged-samples", "native-symbol"))}


        def test_one(result):
            assert_rejected(result, ("input-mutation",), "what")
            assert result.error.rule == "timeout"
            assert_rejected(result, rules)   # a name, not a literal: read where it is defined
        """)
    assert sorted(expectations(source)) == [(3, ["torch-op", "static:*"]), (4, ["forged-samples", "native-symbol"]),
                                            (8, ["input-mutation"]), (9, ["timeout"])]
