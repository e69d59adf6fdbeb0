from cuda_agent.synth.dedupe import Deduper, exact_key, near_key

BASE = 'import torch\n\nclass Model(torch.nn.Module):\n    """a"""\n    def forward(self, x):\n        return torch.relu(x) * 2.0\n'


def test_exact_duplicates_ignore_docstrings_only():
    assert exact_key(BASE) == exact_key(BASE.replace('"""a"""', '"""b"""'))
    assert exact_key(BASE) != exact_key(BASE.replace("2.0", "3.0"))


def test_near_duplicates_differ_only_in_numbers():
    assert near_key(BASE) == near_key(BASE.replace("2.0", "3.0"))
    assert near_key(BASE) != near_key(BASE.replace("relu", "gelu"))


def test_deduper_keeps_the_first_and_names_it():
    d = Deduper()
    assert d.check("a", BASE)[0] is None
    assert d.check("b", BASE)[0] == "duplicate_exact"
    reason, _, _, first = d.check("c", BASE.replace("2.0", "5.0"))
    assert reason == "duplicate_near" and first == "a"
    assert d.check("d", BASE.replace("relu", "tanh"))[0] is None
