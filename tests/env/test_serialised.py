"""Results and settings are serialised and validated by the library: round trips keep every field and
type, and a malformed record is refused, not half-built."""

import json
import math

import pytest

from cuda_agent.env import EvalConfig
from cuda_agent.env.result import EvalError, EvalResult, Timing


def test_a_result_survives_json_with_its_nested_types_and_an_infinite_error():
    result = EvalResult(task="t", backend="cpu", correct=False, error=EvalError("verify", "wrong", "correctness"),
                        timings={"kernel": Timing(1.0, 1.1, 0.1, 0.9, 1.3, 30)}, max_abs_error=[0.5, math.inf],
                        warnings=["w"], phase_seconds={"verify": 0.5})
    again = EvalResult.from_dict(json.loads(json.dumps(result.to_dict())))
    assert again == result
    assert isinstance(again.error, EvalError) and isinstance(again.timings["kernel"], Timing)
    assert again.max_abs_error[1] == math.inf


def test_a_malformed_result_is_refused():
    with pytest.raises(ValueError):
        EvalResult.from_dict({"task": "t", "backend": "cpu", "timings": {"kernel": {"median_ms": "fast"}}})


def test_settings_round_trip_and_run_their_checks_on_the_way_in(tmp_path):
    config = EvalConfig(backend="cpu", seed=7, cache_dir=tmp_path)
    data = config.to_dict()
    assert json.loads(json.dumps(data)) == data and data["cache_dir"] == str(tmp_path)
    assert EvalConfig.from_dict(data) == config
    with pytest.raises(ValueError, match="atol"):
        EvalConfig.from_dict({**data, "atol": -1})
