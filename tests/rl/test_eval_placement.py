"""The evaluation service of an RL stage, on a local Ray cluster: actors only on the nodes that
advertise the evaluation resource, each on its own physical GPU (made its only visible one), and
shared by name between the clients of every rollout worker."""

import pytest

ray = pytest.importorskip("ray")

from cuda_agent.env.config import EvalConfig  # noqa: E402
from cuda_agent.env.infra.service import EvalService  # noqa: E402
from cuda_agent.rl.episode import EpisodeSettings, evaluator  # noqa: E402


@pytest.fixture
def cluster():
    ray.init(num_cpus=2, resources={"cuda_agent_eval_gpu": 2}, include_dashboard=False, log_to_driver=False)
    yield
    ray.shutdown()


def test_actors_on_evaluation_gpus_shared_by_name(cluster, cache_dir):
    config = EvalConfig(backend="cpu", cache_dir=cache_dir)
    first = EvalService("auto", config, gpu_resource="cuda_agent_eval_gpu", devices=[6, 7], name="run-eval",
                        cache_dir=str(cache_dir))
    assert sorted(d["gpu"] for d in first.describe()) == ["6", "7"]
    assert ray.available_resources().get("cuda_agent_eval_gpu", 0) == 0
    # another rollout worker's client, through the stage's settings: the same two actors
    settings = EpisodeSettings(eval={"backend": "cpu", "cache_dir": str(cache_dir)},
                               service={"gpu_resource": "cuda_agent_eval_gpu", "devices": [6, 7],
                                        "name": "run-eval", "cache_dir": str(cache_dir)})
    second = evaluator(None, settings.service_key())
    assert [a._actor_id for a in second.actors] == [a._actor_id for a in first.actors]
    with pytest.raises(RuntimeError, match="other_resource"):   # no node offers that resource
        EvalService("auto", config, gpu_resource="other_resource")
