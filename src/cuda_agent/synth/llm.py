"""Optional LLM composer: an OpenAI-compatible model writes the chain, the pipeline checks it.

The rule-based composer (`compose.py`) is the default and needs no model. This one draws the same
operators (same family weights) and asks a model to chain them into a KernelBench-style program,
the way the published dataset was made. Whatever comes back is held to the same bar: it must
parse, define Model/get_inputs/get_init_inputs and a top-level `batch_size`, use every operator it
was given, and pass a shape check on meta tensors, run in a child process (the model's code never
runs in the synthesis's); otherwise the candidate is dropped (`compose_failed`). The model is called
through `cuda_agent.llm`'s client (`openai` is imported only when this composer is used).
"""

from __future__ import annotations

import ast
import os
import random
import re

from cuda_agent.env.infra.task_child import measured
from cuda_agent.llm import ChatClient, make_client
from cuda_agent.synth.catalog import Catalog
from cuda_agent.synth.compose import FIRST_FAMILY_WEIGHTS, NEXT_FAMILY_WEIGHTS, ComposeError, _pick_op
from cuda_agent.tasks import Task, TaskError
from cuda_agent.tasks.parsing import parse

SYSTEM = """You write small PyTorch programs in the KernelBench format. Reply with one Python code block.
The program must define:
- `class Model(nn.Module)` whose forward applies the given operators in the given order, each to the
  previous result (extra tensors may be parameters or extra inputs);
- a top-level integer `batch_size`, used as the first dimension of the main input;
- `get_inputs()` returning a list of input tensors made with torch.randn, and `get_init_inputs()`
  returning a list (may be empty).
No randomness inside forward (no dropout, no rand*), no in-place ops, float32 only, shapes small
enough to run on a laptop. Import only torch, torch.nn as nn, torch.nn.functional as F."""

TEMPERATURE = 0.7     # varied chains from the same operators
MAX_TOKENS = 2048

_BLOCK = re.compile(r"```(?:python)?\s*\n(.*?)```", re.S)


def extract_code(text: str) -> str:
    match = _BLOCK.search(text or "")
    return (match.group(1) if match else text or "").strip() + "\n"


def uses(code: str, name: str) -> bool:
    """Whether `name` (nn.Conv2d, F.gelu, torch.cumsum) appears as an attribute access in code."""
    space, _, attr = name.partition(".")
    spaces = {"nn": ("nn", "torch.nn"), "F": ("F", "torch.nn.functional", "nn.functional"),
              "torch": ("torch",)}[space]
    for node in ast.walk(parse(code)):
        if isinstance(node, ast.Attribute) and node.attr == attr:
            if ast.unparse(node.value) in spaces:
                return True
    return False


def meta_shape_check(task: Task) -> None:
    """Build the model and run forward on meta tensors (no real compute) in a child process
    (tasks/shapes.py through env/infra/task_child.py, once per code): the model's code never runs in
    the synthesis's process, so one that exits, crashes or hangs costs its candidate only. Raises
    ComposeError."""
    try:
        checked = measured("shape", task, backend="cpu")   # the CPU backend's fork server: no GPU, warmed
    except TaskError as exc:   # it exited, crashed or did not finish
        raise ComposeError(f"shape check failed: {exc}") from None
    if checked.error is not None:
        raise ComposeError(f"shape check failed: {checked.error}")
    if not checked.returns_tensor:
        raise ComposeError("forward does not return a tensor")


class LLMComposer:
    """`client`: a `cuda_agent.llm.ChatClient` (`make_client` picks it); its sampling settings are the
    client's, the seed of each call is the candidate's."""

    def __init__(self, client: ChatClient, catalog: Catalog):
        self.client, self.catalog = client, catalog

    @classmethod
    def from_env(cls, catalog: Catalog, model: str | None = None, base_url: str | None = None) -> "LLMComposer":
        """The composer `synth --composer llm` runs: `model` (else $CUDA_AGENT_SYNTH_MODEL) at the
        OpenAI-compatible endpoint `base_url` (else $OPENAI_BASE_URL), key in $OPENAI_API_KEY."""
        model = model or os.environ.get("CUDA_AGENT_SYNTH_MODEL")
        if not model:
            raise ValueError("--composer llm needs --llm-model (or $CUDA_AGENT_SYNTH_MODEL)")
        try:
            client = make_client(model, base_url=base_url, temperature=TEMPERATURE, max_tokens=MAX_TOKENS)
        except ImportError as exc:
            raise ValueError("--composer llm needs the `openai` package (pip install openai)") from exc
        return cls(client, catalog)

    def pick_ops(self, k: int, rng: random.Random) -> list[str]:
        names = []
        for position in range(k):
            op = _pick_op(self.catalog.ops, FIRST_FAMILY_WEIGHTS if position == 0 else NEXT_FAMILY_WEIGHTS,
                          None, rng, allow_view=position > 0)
            names.append(op.name)
        return names

    def prompt(self, ops: list[str]) -> str:
        by_name = self.catalog.by_name()
        lines = ["Chain these operators, in this order:"]
        for i, name in enumerate(ops, 1):
            params = ", ".join(p.name + ("" if p.required else "=...") for p in by_name[name].params)
            lines.append(f"{i}. {name}({params})")
        return "\n".join(lines)

    def compose(self, k: int, rng: random.Random) -> tuple[str, list[str]]:
        ops = self.pick_ops(k, rng)
        messages = [{"role": "system", "content": SYSTEM}, {"role": "user", "content": self.prompt(ops)}]
        try:
            text = self.client.complete(messages, [], seed=rng.randrange(2 ** 31)).message["content"]
        except Exception as exc:  # noqa: BLE001 - network, quota, server errors (ClientError), a local model's
            raise ComposeError(f"LLM call failed: {type(exc).__name__}: {exc}") from None
        code = extract_code(text)
        task = Task("llm", code)
        try:
            task.check_syntax()
        except (TaskError, SyntaxError) as exc:
            raise ComposeError(str(exc)) from None
        if not re.search(r"^batch_size\s*=\s*\d+\s*$", code, re.M):
            raise ComposeError("no top-level `batch_size = <int>`")
        missing = [op for op in ops if not uses(code, op)]
        if missing:
            raise ComposeError(f"does not use {', '.join(missing)}")
        meta_shape_check(task)
        return code, ops
