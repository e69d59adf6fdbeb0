"""An evaluation's use of the baseline store (baselines.py): a stored torch.compile time is found
before the candidate loads, trusted only while this evaluation's eager time agrees with the eager
time stored beside it, else re-timed; what an evaluation timed paired is stored for the next.
"""

from __future__ import annotations

from cuda_agent.env.measure.hold import call_times
from cuda_agent.env.result import Timing
from cuda_agent.env.run.baselines import BaselineStore, agrees, keep_graph_fields, task_entry, task_key
from cuda_agent.env.run.schedule import fresh_seed
from cuda_agent.env.workers import messages as msg


class StoredBaselines:
    """An evaluation's baseline store use (a part of evaluation._Evaluation)."""

    stored = None   # (key, entry) when a stored compile time is used
    compile_error: str | None = None

    def _store_key(self) -> str:
        return task_key(self.task, self.result.device, self.config, self.backend)

    def _stored_baseline(self):
        key = self._store_key()
        entry = BaselineStore(self.config.cache_dir).get(key)
        return (key, entry) if entry is not None and (entry.compile or entry.compile_error) else None

    def _store_baseline(self, eager: Timing, compile_timing: Timing | None) -> None:
        entry = task_entry(self.task, self.result.device, self.config, self.backend, eager, compile_timing,
                           self.compile_error)
        BaselineStore(self.config.cache_dir).update(self._store_key(), lambda kept: keep_graph_fields(entry, kept))

    def _use_stored(self, eager: Timing) -> None:
        """A stored compile time, trusted only while this evaluation's eager time agrees with the
        eager time stored beside it; otherwise torch.compile is timed afresh (paired with eager)."""
        key, entry = self.stored
        if entry.compile is None:
            return
        if agrees(eager.median_ms, entry.eager_ms):
            ratio = eager.median_ms / entry.eager_ms   # the machine's drift since, applied to both
            self.result.compile_ms = entry.compile_ms * ratio
            self.result.timings["compile"] = Timing(**{**entry.compile, "median_ms": self.result.compile_ms})
            self.result.baseline_source = "stored"
            return
        self.say("re-timing the torch.compile baseline (the stored one no longer agrees)")
        self.judge.channel.send(msg.Compile())
        answer = self._ask(self.judge, self.config.timeout_reference, "profile")
        if not answer["ok"]:
            self.compile_error = answer["error"]
            self._store_baseline(eager, None)
            return
        pairs = []
        for _ in range(max(5, len(self.rounds))):   # the judge holds the device for its timed runs
            self.judge.channel.send(msg.JudgeCall(seed=fresh_seed(), transform=None, time=True, compile=True))
            pairs.append(self._ask(self.judge, self.config.timeout_reference, "profile"))
        fresh_eager = Timing.from_samples(call_times([p["eager_ms"] for p in pairs],
                                                     [p.get("eager_host_ms") for p in pairs]))
        fresh_compile = Timing.from_samples(call_times([p["compile_ms"] for p in pairs],
                                                       [p.get("compile_host_ms") for p in pairs]))
        # the candidate was paired with this run's eager: scale the fresh compile time to it
        self.result.compile_ms = fresh_compile.median_ms * eager.median_ms / fresh_eager.median_ms
        self.result.timings["compile"] = Timing(**{**fresh_compile.__dict__, "median_ms": self.result.compile_ms})
        self.result.baseline_source = "re-timed"
        self._store_baseline(fresh_eager, fresh_compile)
