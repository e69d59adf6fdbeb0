"""Task selection (levels, --tasks specs, datasets) and finding solutions in the layouts users have."""

import json

import pytest

from cuda_agent.bench.selection import SelectionError, parse_task_spec, select_tasks
from cuda_agent.bench.solutions import find_solutions
from tests.bench.helpers import ELEMENTWISE, make_kernelbench


def test_task_specs():
    assert parse_task_spec("level1/1-3,level2/5, level1/7,level3") == {
        "level1": {1, 2, 3, 7}, "level2": {5}, "level3": None}
    assert parse_task_spec("level3,level3/2") == {"level3": None}
    for bad in ("level1/3-1", "level1/x", "a b"):
        with pytest.raises(SelectionError):
            parse_task_spec(bad)


def test_levels_tasks_and_datasets(tmp_path):
    kb = make_kernelbench(tmp_path / "kb")
    every = select_tasks(kernelbench=kb)
    assert [t.key for t in every] == ["level1/1", "level1/2", "level1/3", "level2/1", "level2/2"]
    assert every[0].task.name == "level1/1_BiasReLU" and every[0].group == "level1" and every[0].number == 1
    # a spec alone names the levels it needs; ranges past the end are fine
    assert [t.key for t in select_tasks(kernelbench=kb, tasks="level1/2-9,level2/1")] == \
        ["level1/2", "level1/3", "level2/1"]
    assert [t.key for t in select_tasks(kernelbench=kb, levels=[2])] == ["level2/1", "level2/2"]

    data = tmp_path / "val.jsonl"
    data.write_text("\n".join(json.dumps({"code": ELEMENTWISE.format(op=op)}) for op in ("relu", "tanh", "exp")))
    rows = select_tasks(dataset=data)
    assert [t.key for t in rows] == ["val/0", "val/1", "val/2"]
    mixed = select_tasks(kernelbench=kb, dataset=data, tasks="val/1-2,level2/1")
    assert [t.key for t in mixed] == ["level2/1", "val/1", "val/2"]

    with pytest.raises(SelectionError, match="level4"):
        select_tasks(kernelbench=kb, tasks="level1/1,level4/1")
    with pytest.raises(SelectionError, match="--kernelbench"):
        select_tasks(levels=[1])
    with pytest.raises(SelectionError, match="no task selected"):
        select_tasks(kernelbench=kb, tasks="level1/50-60")


def test_solution_layouts(tmp_path):
    kb = make_kernelbench(tmp_path / "kb")
    tasks = select_tasks(kernelbench=kb)
    root = tmp_path / "solutions"
    (root / "level1").mkdir(parents=True)
    (root / "level1" / "1.py").write_text("# single file")
    (root / "level1" / "2").mkdir()                     # workspace folder
    (root / "level1" / "2" / "model_new.py").write_text("# workspace")
    (root / "level1" / "3_Sigmoid.py").write_text("# named like the problem")
    (root / "level1" / "notes.txt").write_text("ignored")
    (root / "level1" / "77.py").write_text("# a task not selected")
    for sample in (1, 0):                               # KernelBench's runs/NAME layout
        (root / f"level_2_problem_1_sample_{sample}_kernel.py").write_text(f"# sample {sample}")
    found = find_solutions(root, tasks)
    assert sorted(found) == ["level1/1", "level1/2", "level1/3", "level2/1"]
    assert [r.label for r in found["level2/1"]] == ["sample 0", "sample 1"]
    assert found["level1/2"][0].load().files["model_new.py"] == "# workspace"
    assert found["level1/3"][0].load().entry_code == "# named like the problem"

    (root / "level2" / "2").mkdir(parents=True)         # malformed: a folder without model_new.py
    [ref] = find_solutions(root, tasks)["level2/2"]
    with pytest.raises(ValueError, match="without model_new.py"):
        ref.load()
    with pytest.raises(FileNotFoundError):
        find_solutions(tmp_path / "nowhere", tasks)
