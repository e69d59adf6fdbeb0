"""RFT data that verl's SFT trainer accepts: trajectories from the agent loop (several tool calls in a
turn, one with a malformed call) and the scripted episode's, through the `train rft` filter, read
by the dataset that the composed SFT config names (verl's `create_sft_dataset`), under two chat
templates; the tokens decode back to tool calls whose arguments are JSON objects."""

import json
import re
from pathlib import Path

import pytest

pytest.importorskip("verl")
pytest.importorskip("trl")

from cuda_agent.agent.sft import SFTFilter, export_sft  # noqa: E402
from cuda_agent.agent.trajectory import Trajectory, read_jsonl  # noqa: E402
from cuda_agent.rl import stages  # noqa: E402

from .test_worker_scale import settings  # noqa: E402
from .verl_worker import ScriptServer, call, fresh_worker_process, run_v0, setup  # noqa: E402

RECORDING = Path(__file__).parents[1] / "agent" / "data" / "scripted_episode.json"
KERNEL = "__global__ void k(float* x) { x[0] = 1.f; }\n"
MULTI = [  # two and three calls in one turn
    "Writing both files." + call("write", path="kernel.cu", content=KERNEL)
    + call("write", path="model_new.py", content="FAST = 1\n"),
    call("bash", command="ls", timeout=30) + call("read", path="model_new.py") + call("glob", pattern="*.cu"),
    "Done." + call("finish", summary="done"),
]
MALFORMED = [
    '<tool_call>\n{"name": "write", "arguments": {"path": "model_new.py", "content": "FAST}\n</tool_call>',
    call("write", path="model_new.py", content="FAST = 1\n"),
    call("finish", summary="done"),
]


def templates():
    from trl.chat_template_utils import qwen2_5_chat_template, qwen3_chat_template

    return {"qwen2.5": qwen2_5_chat_template, "qwen3": qwen3_chat_template}


def rollout(tmp_path, model, monkeypatch, script) -> list[Trajectory]:
    fresh_worker_process(monkeypatch)
    s = setup(tmp_path, model, settings(tmp_path), n=1)
    run_v0(s, ScriptServer(s.tokenizer, script), n=1)
    return list(read_jsonl(s.settings.trajectories))


def scripted_episode() -> Trajectory:
    """The recorded scripted episode's trajectory (every path of an episode, malformed calls too)."""
    traj = json.loads(RECORDING.read_text())["trajectory"]
    for i, turn in enumerate(traj["turns"]):
        for j, c in enumerate(turn["tool_calls"]):
            c.setdefault("id", f"c{i}_{j}")
    for m in traj["messages"]:
        for j, c in enumerate(m.get("tool_calls") or []):
            c.setdefault("id", f"x{j}")
    return Trajectory.from_dict(traj)


def sft_dataset(parquet: Path, run: stages.Run, tokenizer):
    """What verl's SFT trainer builds from the composed `train rft` SFT config."""
    from verl.trainer.sft_trainer import create_sft_dataset

    config = stages.compose("sft_trainer_engine", stages.merged(stages.sft_overrides(run), []))
    return create_sft_dataset([str(parquet)], config.data, tokenizer, None)


def decoded_calls(text: str) -> list:
    """The `<tool_call>` blocks: parsed, or their text where it is not JSON (a malformed call as sent)."""
    out = []
    for body in re.findall(r"<tool_call>\s*(.*?)\s*</tool_call>", text, re.S):
        try:
            out.append(json.loads(body))
        except ValueError:
            out.append(body)
    return out


def trained(sample, tokenizer) -> str:
    """The text the loss covers: the model's turns."""
    return tokenizer.decode(sample["input_ids"][sample["loss_mask"].bool()])


def nulls(value) -> int:
    if isinstance(value, dict):
        return sum(nulls(v) for v in value.values())
    if isinstance(value, list):
        return sum(nulls(v) for v in value)
    return value is None


@pytest.fixture(scope="module")
def rft_folder(tmp_path_factory, tiny_model):
    """`train rft`'s filter step on the agent loop's trajectories."""
    with pytest.MonkeyPatch.context() as patch:
        base = tmp_path_factory.mktemp("rft")
        multi = rollout(base / "multi", tiny_model, patch, MULTI)
        malformed = rollout(base / "malformed", tiny_model, patch, MALFORMED)
    run = stages.Run(out=base / "run", data=base / "data", model=str(tiny_model))
    folder = run.stage_dir("rft")
    folder.mkdir(parents=True)
    lines = [json.dumps(t.to_dict()) for t in multi + malformed]
    (folder / "trajectories.jsonl").write_text("\n".join(lines) + "\n")
    return run, multi, malformed


def test_a_malformed_call_is_recorded_and_filtered_out(rft_folder):
    run, multi, malformed = rft_folder
    [bad] = malformed
    assert bad.reward == 3 and bad.tool_errors() == {"invalid_arguments": 1}
    assert bad.messages[2]["tool_calls"][0]["function"]["name"] == "write"
    messages = []
    stages._filter(run.stage_dir("rft"), messages.append)
    assert messages == ["[rft] kept 1 trajectories; rejected {'invalid_tool_calls': 1}"]


@pytest.mark.parametrize("template", ["qwen2.5", "qwen3"])
def test_rft_output_loads_in_verls_sft_dataset(rft_folder, tiny_model, template):
    from transformers import AutoTokenizer

    run, [good], _ = rft_folder
    stages._filter(run.stage_dir("rft"), lambda s: None)
    tokenizer = AutoTokenizer.from_pretrained(tiny_model)
    tokenizer.chat_template = templates()[template]
    dataset = sft_dataset(run.stage_dir("rft") / "sft.parquet", run, tokenizer)
    assert len(dataset) == 1 and nulls(dataset.tools[0]) == 0
    sample = dataset[0]   # verl's own check: per-turn tokens equal the whole conversation's
    calls = decoded_calls(trained(sample, tokenizer))
    sent = [c["function"] for m in good.messages for c in m.get("tool_calls") or []]
    assert [c["name"] for c in calls] == [c["name"] for c in sent] == \
        ["write", "write", "bash", "read", "glob", "finish"]
    assert all(isinstance(c["arguments"], dict) for c in calls)
    assert [c["arguments"] for c in calls] == [json.loads(c["arguments"]) for c in sent]
    # the loss covers the model's turns (calls included), not the tool output
    assert "tool_response" not in trained(sample, tokenizer)
    assert tokenizer.decode(sample["input_ids"]).count("<tool_response>") == 6


@pytest.mark.parametrize("template", ["qwen2.5", "qwen3"])
def test_the_scripted_episode_loads_in_verls_sft_dataset(tmp_path, tiny_model, template):
    from transformers import AutoTokenizer

    traj = scripted_episode()
    assert export_sft([traj], tmp_path / "strict.parquet")["rejected"] == {"invalid_tool_calls": 1}
    run = stages.Run(out=tmp_path / "run", data=tmp_path / "data", model=str(tiny_model))
    path = tmp_path / "all.parquet"
    assert export_sft([traj], path, SFTFilter(max_invalid_calls=99))["kept"] == 1
    tokenizer = AutoTokenizer.from_pretrained(tiny_model)
    tokenizer.chat_template = templates()[template]
    dataset = sft_dataset(path, run, tokenizer)
    calls = decoded_calls(trained(dataset[0], tokenizer))
    sent = [c["function"] for m in traj.messages for c in m.get("tool_calls") or []]
    assert len(calls) == len(sent)
    for got, raw in zip(calls, sent):
        try:
            expected = json.loads(raw["arguments"])
        except ValueError:   # malformed as sent: kept as the model wrote it (rendered as text or a string)
            assert raw["arguments"] in got if isinstance(got, str) else got["arguments"] == raw["arguments"]
            continue
        assert got["arguments"] == expected
