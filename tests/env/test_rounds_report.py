"""benchmarks/rounds_report.py reads pool_throughput's logs right: which side made calls slow, whether
start-ups did, and what the stop rule would have reported (data made here, no GPU)."""

import importlib.util
import json
from pathlib import Path

import pytest

SCRIPT = Path(__file__).resolve().parents[2] / "benchmarks" / "rounds_report.py"


@pytest.fixture(scope="module")
def rounds_report():
    spec = importlib.util.spec_from_file_location("rounds_report", SCRIPT)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def evaluation(device: list[float], host: list[float], start: float) -> dict:
    return {"rounds": [{"kernel": d, "kernel_host": h, "wall": 1.0, "sent": start + i * 0.01}
                       for i, (d, h) in enumerate(zip(device, host))], "null_walls": []}


def test_the_report_splits_slow_calls_by_side_and_by_start_ups(rounds_report, tmp_path):
    steady, device = [0.1] * 40, [0.1] * 40
    device[5] = device[6] = 0.2                      # two slow device times, in the third evaluation, sent
                                                     # during a start-up
    noisy_host = [0.05 + 0.01 * (i % 7) for i in range(40)]
    log = tmp_path / "small-concurrent.rounds.jsonl"
    log.write_text("\n".join(json.dumps(evaluation(d, noisy_host, 100.0 * k))
                             for k, d in enumerate((steady, steady, device))) + "\n")
    lock = tmp_path / "lock.log"
    lock.write_text("1 startup.candidate O 200.035 200.035 200.065\n"
                    "1 harness.profile.timed X 200.0 200.0 200.001\n")
    row = rounds_report.report(log, rounds_report.setup_windows(lock), precision=0.0075)
    assert row["evaluations"] == 3 and row["calls"] == 120 and row["slow_share"] == pytest.approx(2 / 120, abs=1e-3)
    over = sum(h > d for d_list in (steady, steady, device) for h, d in zip(noisy_host, d_list)) / 120
    assert row["host_over_device_share"] == pytest.approx(over, abs=1e-3)
    # calls 4-6 of the third evaluation overlap the start-up window (sent at 200.04-200.06, 1 ms each)
    assert row["during_setup"] == {"calls": 3, "slow_share": 0.667}
    assert row["apart"]["slow_share"] == 0.0
    assert row["medians_spread"] == 0.0 and row["replayed_spread"] == 0.0


def test_the_replay_stops_where_the_rule_would_and_keeps_timing_an_imprecise_floor(rounds_report):
    steady = evaluation([0.1] * 100, [0.05] * 100, 0.0)["rounds"]
    assert rounds_report.replay(steady, 0.0075) == pytest.approx(0.1)
    # launch-bound (the floor decides): its first 30 host times spread wide, the later ones tight
    host = [0.3 + 0.1 * (i % 5) for i in range(30)] + [0.31] * 70
    launch_bound = evaluation([0.02] * 100, host, 0.0)["rounds"]
    with_check = rounds_report.replay(launch_bound, 0.0075)
    without = rounds_report.replay(launch_bound, 0.0075, floor_check=False)
    assert without == pytest.approx(0.3) and with_check == pytest.approx(0.31)
