"""The baseline store (env/run/baselines.py): when a stored eager time agrees with one measured now, and
entries changed by evaluations of one task at once."""

from __future__ import annotations

import multiprocessing
from dataclasses import replace

from cuda_agent.env.run.baselines import AGREEMENT, HOST_NOISE_MS, BaselineEntry, BaselineStore, agrees


def test_eager_times_agree_within_the_fraction_or_the_hosts_noise():
    assert agrees(1.4, 1.0) and not agrees(1.0 + AGREEMENT + 0.01, 1.0)
    # a launch-bound task: 0.012 ms stored, 0.03 ms under load is the host's noise, not another machine
    assert agrees(0.03, 0.012) and agrees(0.012 + HOST_NOISE_MS, 0.012)
    assert not agrees(0.012 + HOST_NOISE_MS + 0.01, 0.012)
    assert not agrees(1.0, None) and not agrees(1.0, 0.0)


def _entry(**fields) -> BaselineEntry:
    return BaselineEntry(task="t", task_digest="d", device="cpu", torch="x", settings={},
                         eager={"median_ms": 1.0}, **fields)


def _write_compile(folder, rounds):
    store = BaselineStore(folder)
    for i in range(rounds):
        store.update("k", lambda kept: replace(kept or _entry(), compile={"median_ms": float(i)}))


def _write_graph(folder, rounds):
    store = BaselineStore(folder)
    for i in range(rounds):
        store.update("k", lambda kept: replace(kept or _entry(), graph={"median_ms": float(i)}, graph_eager_ms=1.0))


def test_updates_of_one_entry_at_once_keep_each_others_fields(tmp_path):
    """Two processes each rewriting their own fields of one entry many times: the last of each survives."""
    context = multiprocessing.get_context("fork")
    writers = [context.Process(target=_write_compile, args=(tmp_path, 200)),
               context.Process(target=_write_graph, args=(tmp_path, 200))]
    for writer in writers:
        writer.start()
    for writer in writers:
        writer.join(60)
        assert writer.exitcode == 0
    entry = BaselineStore(tmp_path).get("k")
    assert entry.compile == {"median_ms": 199.0} and entry.graph == {"median_ms": 199.0}
