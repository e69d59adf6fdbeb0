import json

from cuda_agent.agent.context import MARK, NOTE, ContextBudget, compact, estimate_tokens


def conversation(turns: int, output_chars: int = 4000) -> list[dict]:
    msgs = [{"role": "system", "content": "RULES " * 50}, {"role": "user", "content": "TASK " * 100}]
    for i in range(turns):
        args = json.dumps({"path": f"k{i}.cpp", "content": f"// file {i}\n" + "x" * output_chars})
        tool_call = {"id": f"c{i}", "type": "function", "function": {"name": "write", "arguments": args}}
        msgs.append({"role": "assistant", "content": f"step {i}", "tool_calls": [tool_call]})
        msgs.append({"role": "tool", "tool_call_id": f"c{i}", "content": f"output {i}\n" + "y" * output_chars})
    return msgs


def test_under_budget_nothing_changes():
    msgs = conversation(3)
    before = json.dumps(msgs)
    assert compact(msgs, ContextBudget(max_tokens=100_000)) == 0
    assert json.dumps(msgs) == before


def test_old_tool_outputs_are_shortened_first_and_recent_turns_kept():
    msgs = conversation(20)
    budget = ContextBudget(max_tokens=estimate_tokens(msgs) + 8000, keep_recent=4)
    head, recent = json.dumps(msgs[:2]), json.dumps(msgs[-4:])
    changed = compact(msgs, budget)
    assert changed > 0
    assert estimate_tokens(msgs) <= budget.max_tokens * budget.target
    assert json.dumps(msgs[:2]) == head and json.dumps(msgs[-4:]) == recent
    assert MARK in msgs[3]["content"] and msgs[3]["content"].startswith("output 0")
    assert len(msgs) == 42   # no turn had to be dropped


def test_arguments_stay_valid_json_and_turns_are_dropped_last():
    msgs = conversation(30, output_chars=20_000) + conversation(2, output_chars=100)[2:]
    budget = ContextBudget(max_tokens=4_000, keep_recent=4, shorten_to=200)
    compact(msgs, budget)
    assert estimate_tokens(msgs) <= budget.max_tokens * budget.target
    assert msgs[0]["role"] == "system" and msgs[1]["content"].startswith("TASK")
    assert msgs[2]["role"] == "user" and msgs[2]["content"].startswith(NOTE)
    ids = set()
    for m in msgs:
        for c in m.get("tool_calls") or []:
            json.loads(c["function"]["arguments"])
            ids.add(c["id"])
        if m["role"] == "tool":
            assert m["tool_call_id"] in ids   # every kept result still follows its call
    assert msgs[3]["role"] == "assistant"
    # compacting again keeps a single note, with an updated count
    msgs += conversation(10, output_chars=20_000)[2:] + conversation(2, output_chars=100)[2:]
    compact(msgs, budget)
    assert estimate_tokens(msgs) <= budget.max_tokens * budget.target
    assert sum(1 for m in msgs if (m.get("content") or "").startswith(NOTE)) == 1
