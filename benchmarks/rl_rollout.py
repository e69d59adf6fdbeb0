"""Agent turns per second of the `cuda_agent` verl loop: 64 concurrent trajectories in one verl
`AgentLoopWorker` (v0, no Ray), a scripted token server that answers at once, and a fake evaluator
(no kernel is built or timed). What is measured is the loop's own cost per turn with the real
`KernelSession` in it: tokenisation with verl's continuous-token builder, tool parsing, the tools
on a real workspace, the trajectory record, the final re-evaluation call.

    PYTHONPATH=.:src python benchmarks/rl_rollout.py [--tasks 8 --samples 8 --turns 6]

Prints one JSON line: trajectories, agent turns (model replies), seconds, turns per second.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))


def fake_evaluator():
    from cuda_agent.env.result import EvalResult

    def judge(task, solution, config):
        return EvalResult(task=task.name, backend="cpu", compiled=True, correct=True, reward=1)

    return judge


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tasks", type=int, default=8)
    parser.add_argument("--samples", type=int, default=8, help="trajectories per task (rollout.n)")
    parser.add_argument("--turns", type=int, default=6, help="model replies per trajectory (the last: finish)")
    args = parser.parse_args()
    os.environ.setdefault("HF_HUB_OFFLINE", "1")

    from cuda_agent.rl import tiny
    from cuda_agent.rl.episode import EpisodeSettings
    from tests.rl.conftest import SESSION, corpus
    from tests.rl.verl_worker import ScriptServer, call, records, run_v0, setup

    work = Path(tempfile.mkdtemp(prefix="rl-rollout-"))
    tokenizer = tiny.build_tokenizer(corpus(), vocab_size=512)
    model = tiny.save(work / "model", tokenizer, tiny.build_model(tokenizer))
    middle = [call("write", path="model_new.py", content="x = 1\n"), call("bash", command="ls"),
              call("read", path="model_new.py"), call("compile")]
    script = [middle[i % len(middle)] for i in range(args.turns - 1)] + [call("finish", summary="done")]
    settings = EpisodeSettings(eval={"backend": "cpu"}, evaluator="benchmarks.rl_rollout:fake_evaluator",
                               session=SESSION, workspace_root=str(work / "ws"),
                               trajectories=str(work / "trajectories.jsonl"))
    s = setup(work, model, settings, tasks=args.tasks, n=args.samples, response_length=8192,
              max_turns=args.turns + 1)
    server = ScriptServer(s.tokenizer, script)
    out, seconds = run_v0(s, server, n=args.samples)
    recs = records(s)
    turns = sum(len(r["turns"]) for r in recs)
    assert len(recs) == len(out) == args.tasks * args.samples, "every trajectory writes its record"
    print(json.dumps({"trajectories": len(out), "agent_turns": turns, "server_calls": server.calls,
                      "seconds": round(seconds, 2), "turns_per_s": round(turns / seconds, 1),
                      "cpu_count": os.cpu_count()}))


if __name__ == "__main__":
    main()
