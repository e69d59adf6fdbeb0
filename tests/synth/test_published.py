"""The datasheet's comparison with the published set, and the five published filters' counts."""

from __future__ import annotations

import csv

from cuda_agent.synth.published import beside_published, filter_counts, write_decontamination


def _row(source, eager):
    return {"data_source": source, "eager_ms": eager}


def test_the_mix_and_the_fused_share_are_read_off_the_written_rows():
    rows = [_row("torch#1", 1.5)] + [_row("torch#2", 3.0)] * 6 + [_row("torch#3", 40.0)] * 2 + [_row("transformers", 9.0)]
    text = "\n".join(beside_published(rows, (1.0, 100.0), 0.9, random_ops_excluded=7))
    assert "| torch#2 | 83.8 % | 60.0 % |" in text
    assert "| torch#1 | 3.4 % | 10.0 % |" in text
    assert "| fused (2 to 5 operators) | 95.4 % | 80.0 % |" in text   # 8 of 10: neither torch#1 nor transformers
    assert "1 to 100 ms (written: 1.5 to 40 ms)" in text
    assert "excluded (7 in the catalog)" in text


def test_each_published_filter_counts_the_drops_it_stands_for():
    candidates = [{"status": "dropped", "reason": "kernelbench_similar"}] * 3 + [{"status": "queued", "reason": ""}] * 9
    results = ([{"ok": False, "reason": "runtime_below_window"}] * 4 + [{"ok": False, "reason": "constant_output"}] * 2
               + [{"ok": False, "reason": "compile_mismatch"}] + [{"ok": False, "reason": "device_busy"}]
               + [{"ok": True, "reason": ""}])
    text = "\n".join(filter_counts(candidates, results))
    assert "| eager runtime in the window | 4 |" in text
    assert "| outputs not constant or numerically indistinguishable | 2 |" in text
    assert "| runs in eager and under torch.compile | 1 |" in text
    assert "| AST similarity to KernelBench at most the threshold | 3 |" in text
    assert "Not a filter's verdict: 1 candidates" in text


def test_the_decontamination_report_lists_every_candidate_checked(tmp_path):
    candidates = [{"id": "a", "kb_similarity": 0.95, "kb_nearest": "level1/19_ReLU.py", "reason": "kernelbench_similar"},
                  {"id": "b", "kb_similarity": 0.41, "kb_nearest": "level2/12_Gemm.py"},
                  {"id": "c", "reason": "duplicate_exact"}]   # dropped before decontamination
    assert write_decontamination(tmp_path / "d.csv", candidates) == 2
    rows = list(csv.DictReader((tmp_path / "d.csv").open()))
    assert [(r["id"], r["dropped"]) for r in rows] == [("a", "1"), ("b", "0")]
    assert rows[0]["kb_nearest"] == "level1/19_ReLU.py"
