import json

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from cuda_agent.tasks import (KERNELBENCH_ENV, Solution, SolutionError, Task, TaskError, load_dataset,
                              load_solution, load_task, strip_reference_model)
from tests.env.helpers import EXAMPLES


def test_load_single_file():
    task = load_task(EXAMPLES / "model.py")
    assert task.name == "model" and "class Model" in task.code
    task.check_syntax()


def test_kernelbench_spec_by_argument_and_env(kernelbench, monkeypatch):
    task = load_task("level2/17", kernelbench)
    assert task.name == "level2/17_Conv2d_InstanceNorm_Divide"
    monkeypatch.setenv(KERNELBENCH_ENV, str(kernelbench))
    assert load_task("level1/19").code == (kernelbench / "level1" / "19_ReLU.py").read_text()


def test_kernelbench_spec_errors(kernelbench, monkeypatch):
    monkeypatch.delenv(KERNELBENCH_ENV, raising=False)
    with pytest.raises(FileNotFoundError, match="--kernelbench"):
        load_task("level1/19")
    with pytest.raises(FileNotFoundError, match="no problem 999"):
        load_task("level1/999", kernelbench)


def test_jsonl_and_parquet_datasets(tmp_path):
    code = (EXAMPLES / "model.py").read_text()
    rows = [{"code": code, "ops": ["relu"], "data_source": "torch#1"}, {"code": code.replace("512", "64")}]
    jsonl = tmp_path / "tasks.jsonl"
    jsonl.write_text("\n".join(json.dumps(r) for r in rows) + "\n")
    parquet = tmp_path / "tasks.parquet"
    pq.write_table(pa.Table.from_pylist([{"code": r["code"]} for r in rows]), parquet)
    for path in (jsonl, parquet):
        tasks = load_dataset(path)
        assert [t.code for t in tasks] == [r["code"] for r in rows]
        assert load_task(f"{path}#1").code == rows[1]["code"]
    with pytest.raises(TaskError, match="row 5 does not exist"):
        load_task(f"{jsonl}#5")


def test_malformed_dataset_rows(tmp_path):
    bad = tmp_path / "bad.jsonl"
    bad.write_text('{"code": "x = 1"}\n{"no_code": 1}\n')
    with pytest.raises(TaskError, match="row 1"):
        load_dataset(bad)
    broken = tmp_path / "broken.jsonl"
    broken.write_text('{"code": \n')
    with pytest.raises(TaskError, match="broken.jsonl:1"):
        load_dataset(broken)


def test_check_syntax_reports_missing_names_and_syntax_errors():
    with pytest.raises(TaskError, match="missing Model"):
        Task("t", "def get_inputs(): return []\ndef get_init_inputs(): return []\n").check_syntax()
    with pytest.raises(TaskError, match="syntax error at line 1"):
        Task("t", "def (:\n").check_syntax()


def test_strip_reference_model_keeps_inputs_but_not_model():
    code = (EXAMPLES / "model.py").read_text()
    stripped = strip_reference_model(code)
    assert "class Model" not in stripped and "def get_inputs" in stripped
    namespace = {}
    exec(stripped, namespace)
    assert "Model" not in namespace and namespace["get_init_inputs"]() == [1024]


def test_load_solution_forms(tmp_path):
    single = load_solution(EXAMPLES / "solution_cpu_inline.py")
    assert not single.is_workspace and "ModelNew" in single.entry_code
    workspace = load_solution(EXAMPLES / "solution_cpu")
    assert workspace.is_workspace
    assert set(workspace.kernel_files) == {"kernels/bias_relu.cpp", "kernels/bias_relu_binding.cpp"}
    assert Solution(dict(workspace.files)).digest == workspace.digest
    written = workspace.write(tmp_path / "copy")
    assert load_solution(written).files == workspace.files
    (tmp_path / "empty").mkdir()
    with pytest.raises(SolutionError, match="model_new.py"):
        load_solution(tmp_path / "empty")


def test_python_is_parsed_one_thread_at_a_time_everywhere(monkeypatch):
    """CPython 3.11 can fail `ast.parse` in two threads at once (tasks/parsing.py): ours holds a lock
    around it, and no module of the package calls `ast.parse` past it."""
    import ast
    import re
    from pathlib import Path

    from cuda_agent.tasks import parsing

    seen = []
    real = ast.parse
    monkeypatch.setattr(parsing.ast, "parse", lambda *a, **k: seen.append(parsing._LOCK.locked()) or real(*a, **k))
    assert isinstance(parsing.parse("x = 1\n"), ast.Module) and seen == [True]
    with pytest.raises(SyntaxError):
        parsing.parse("def (:\n")
    assert not parsing._LOCK.locked()
    package = Path(parsing.__file__).resolve().parents[1]
    direct = [str(p.relative_to(package)) for p in package.rglob("*.py")
              if p.name != "parsing.py" and re.search(r"\bast\.parse\(", p.read_text())]
    assert direct == []
