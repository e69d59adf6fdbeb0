"""Zhang-Shasha tree edit distance, the similarity bound, and KernelBench decontamination."""

from __future__ import annotations

import itertools
import random

from cuda_agent.synth import decontaminate as dc


def T(label, *children):
    return (label, list(children))


def test_zhang_shasha_textbook_example():
    a = dc.tree_from_nested(T("f", T("d", T("a"), T("c", T("b"))), T("e")))
    b = dc.tree_from_nested(T("f", T("c", T("d", T("a"), T("b"))), T("e")))
    assert dc.tree_edit_distance(a, b) == 2
    assert dc.tree_edit_distance(b, a) == 2
    assert dc.tree_edit_distance(a, a) == 0


def test_unit_costs_for_relabel_insert_delete():
    a = dc.tree_from_nested(T("r", T("x"), T("y")))
    assert dc.tree_edit_distance(a, dc.tree_from_nested(T("r", T("x"), T("z")))) == 1    # relabel
    assert dc.tree_edit_distance(a, dc.tree_from_nested(T("r", T("x")))) == 1           # delete
    assert dc.tree_edit_distance(a, dc.tree_from_nested(T("r", T("x"), T("y"), T("w")))) == 1
    assert dc.tree_edit_distance(a, dc.tree_from_nested(T("q"))) == 3


def test_normalisation_ignores_docstrings_numbers_and_annotations():
    a = 'def f(x: int) -> int:\n    """doc"""\n    return g(x, 128)\n'
    b = "def f(x):\n    return g(x, 7)\n"
    c = "def f(x):\n    return h(x, 7)\n"
    assert dc.similarity(dc.tree_of(a), dc.tree_of(b)) == 1.0
    assert dc.similarity(dc.tree_of(b), dc.tree_of(c)) < 1.0


def test_bound_never_underestimates_and_distance_is_a_metric(kernelbench):
    refs = dc.kernelbench_trees(kernelbench)
    rng = random.Random(0)
    small = [t for t in refs if len(t) < 90]
    sample = rng.sample(small, 6)
    for a, b in itertools.combinations(sample, 2):
        s = dc.similarity(a, b)
        assert dc.similarity_bound(a, b) >= s - 1e-12
        assert dc.tree_edit_distance(a, b) == dc.tree_edit_distance(b, a)
    for a, b, c in itertools.combinations(sample[:4], 3):
        assert dc.tree_edit_distance(a, c) <= dc.tree_edit_distance(a, b) + dc.tree_edit_distance(b, c)


def test_kernelbench_programs_and_light_edits_are_caught(kernelbench):
    refs = dc.kernelbench_trees(kernelbench)
    assert len(refs) == 250
    source = next((kernelbench / "level2").glob("17_*.py")).read_text()
    assert dc.nearest_kernelbench(source, refs).contaminated
    edited = source.replace("128", "96").replace("divide_by", "scale").replace("x / self", "x * self")
    match = dc.nearest_kernelbench(edited, refs)
    assert match.contaminated and match.nearest.startswith("level2/17_")
    assert 0.9 < match.similarity < 1.0


def test_a_different_program_is_not_contaminated(kernelbench):
    refs = dc.kernelbench_trees(kernelbench)
    code = ("import torch\n\nclass Model(torch.nn.Module):\n    def forward(self, x, y):\n"
            "        return torch.cumsum(torch.atan2(x, y), dim=2).amax(1)\n\n"
            "def get_inputs():\n    return [torch.randn(4, 8, 16), torch.randn(4, 8, 16)]\n\n"
            "def get_init_inputs():\n    return []\n")
    match = dc.nearest_kernelbench(code, refs)
    assert not match.contaminated and match.similarity < 0.9 and match.nearest


def test_trees_are_cached_in_memory_and_on_disk(kernelbench, tmp_path):
    dc._MEMO.clear()
    first = dc.kernelbench_trees(kernelbench, cache_dir=tmp_path)
    assert list(tmp_path.glob("kernelbench_trees_*.pkl"))
    assert dc.kernelbench_trees(kernelbench) is first          # memo hit
    dc._MEMO.clear()
    again = dc.kernelbench_trees(kernelbench, cache_dir=tmp_path)   # from the pickle
    assert [t.labels for t in again] == [t.labels for t in first]
