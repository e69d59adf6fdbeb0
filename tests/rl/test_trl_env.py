"""The episode as a TRL environment: tool methods whose schemas are the agent's tools, and a real
episode through them (install a prepared kernel, finish, reward from the CPU environment)."""

import pytest

pytest.importorskip("trl")

from cuda_agent.agent.tools import AGENT_TOOLS  # noqa: E402
from cuda_agent.rl import sanity  # noqa: E402
from cuda_agent.rl.episode import EpisodeSettings  # noqa: E402
from cuda_agent.rl.trl_env import ENDED, environment_class, prompt_row, tool_schemas  # noqa: E402

from .conftest import SESSION  # noqa: E402


def test_methods_carry_the_agent_tool_schemas():
    env_cls = environment_class(EpisodeSettings(session=SESSION))
    by_name = {s["function"]["name"]: s["function"] for s in tool_schemas(env_cls)}
    assert sorted(by_name) == sorted(t.name for t in AGENT_TOOLS)
    for tool in AGENT_TOOLS:
        ours, trl = tool.parameters, by_name[tool.name]["parameters"]
        assert set(trl.get("properties", {})) == set(ours["properties"]) and by_name[tool.name]["description"]
        assert sorted(trl.get("required", [])) == sorted(ours["required"])
        for name, prop in ours["properties"].items():
            assert trl["properties"][name]["type"] == prop["type"]


def test_an_episode_through_the_environment(tmp_path, cache_dir):
    conf = sanity.settings("cpu", tmp_path, SESSION, str(cache_dir))
    env_cls = environment_class(conf, base=sanity.CandidatesEnvironment)
    row = prompt_row(sanity.task(), conf)
    assert [m["role"] for m in row["prompt"]] == ["system", "user"] and "bias_relu_x8" in row["prompt"][1]["content"]
    env = env_cls()
    env.reset(**row)
    assert (env.workspace / "candidates" / "c" / "kernels" / "bias_relu.cpp").is_file()
    assert "exit code 0" in env.bash(command=sanity.install("c"))
    assert env.finish(summary="done").startswith("Finished")
    assert env.bash(command="ls") == ENDED
    workspace = env.workspace
    assert env.get_reward() == 2.0 and not workspace.exists()
    assert sanity.CandidatesEnvironment.episodes[-1] == {"label": "c", "reward": 2.0, "calls": ["bash", "finish"]}
