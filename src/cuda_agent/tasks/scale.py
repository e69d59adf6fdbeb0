"""Shrink a task's inputs (for CPU runs of GPU-sized tasks) while keeping the shapes' structure.

KernelBench tasks set their sizes as module-level integers (`batch_size = 4096`, `dim = 393216`) that
`get_inputs()` reads; `scale_task(task, 0.125)` multiplies them and rewrites them in the source, so
ranks, dtypes, layouts and the model stay as they were. Only sizes that build nothing but inputs are
touched (a constant `get_init_inputs()` or `Model` also reads shapes the weights too). Scaled sizes
keep their alignment (a multiple of 8 stays one) and stay at 16 or more, so convolutions and poolings
still have room.
"""

from __future__ import annotations

import ast
import math
import operator
from dataclasses import dataclass, replace

from cuda_agent.tasks.footprint import measure_footprint
from cuda_agent.tasks.parsing import parse
from cuda_agent.tasks.task import Task, TaskError

MIN_SIZE = 16
MAX_ALIGN = 16
_OPS = {ast.Add: operator.add, ast.Sub: operator.sub, ast.Mult: operator.mul, ast.FloorDiv: operator.floordiv,
        ast.Pow: operator.pow, ast.LShift: operator.lshift, ast.Mod: operator.mod}


@dataclass(frozen=True)
class Scaled:
    task: Task
    sizes: dict[str, tuple[int, int]]     # name -> (before, after)

    def describe(self) -> str:
        return ", ".join(f"{name} {old} -> {new}" for name, (old, new) in self.sizes.items())


def _literal_int(node: ast.AST) -> int | None:
    """The value of an integer expression made of literals only (`2048 * 2`), else None."""
    if isinstance(node, ast.Constant) and type(node.value) is int:
        return node.value
    if isinstance(node, ast.BinOp) and type(node.op) in _OPS:
        left, right = _literal_int(node.left), _literal_int(node.right)
        if left is not None and right is not None:
            try:
                return _OPS[type(node.op)](left, right)
            except (ArithmeticError, ValueError):
                return None
    if isinstance(node, ast.UnaryOp) and isinstance(node.op, ast.USub):
        value = _literal_int(node.operand)
        return None if value is None else -value
    return None


def _names_read(node: ast.AST) -> set[str]:
    return {n.id for n in ast.walk(node) if isinstance(n, ast.Name) and isinstance(n.ctx, ast.Load)}


def _module_definitions(tree: ast.Module) -> dict[str, list[ast.AST]]:
    """Module-level name -> the statements that bind it."""
    defs: dict[str, list[ast.AST]] = {}
    for stmt in tree.body:
        if isinstance(stmt, (ast.FunctionDef, ast.ClassDef, ast.AsyncFunctionDef)):
            defs.setdefault(stmt.name, []).append(stmt)
        elif isinstance(stmt, (ast.Assign, ast.AnnAssign, ast.AugAssign)):
            targets = stmt.targets if isinstance(stmt, ast.Assign) else [stmt.target]
            for target in targets:
                for name in ast.walk(target):
                    if isinstance(name, ast.Name):
                        defs.setdefault(name.id, []).append(stmt)
    return defs


def _closure(roots: set[str], defs: dict[str, list[ast.AST]]) -> set[str]:
    """`roots` and every module-level name they read, transitively."""
    seen: set[str] = set()
    todo = list(roots)
    while todo:
        name = todo.pop()
        if name in seen:
            continue
        seen.add(name)
        for stmt in defs.get(name, []):
            value = stmt if isinstance(stmt, (ast.FunctionDef, ast.ClassDef, ast.AsyncFunctionDef)) else stmt.value
            if value is not None:
                todo.extend(_names_read(value) - seen)
    return seen


def input_sizes(code: str) -> dict[str, tuple[int, ast.AST]]:
    """The module-level integer constants that only `get_inputs()` reads, alone or in a tuple
    (`input_shape = (4096,)`): label (`dim`, `input_shape[0]`) -> (value, its node)."""
    tree = parse(code)
    defs = _module_definitions(tree)
    if "get_inputs" not in defs:
        raise TaskError("the task has no get_inputs() to scale")
    used_by_inputs = _closure({"get_inputs"}, defs) - {"get_inputs"}
    shapes_model = _closure({"get_init_inputs", "Model"}, defs)
    sizes = {}
    for name in sorted(used_by_inputs - shapes_model):
        stmts = defs.get(name, [])
        if len(stmts) != 1 or not isinstance(stmts[0], ast.Assign):
            continue   # a name bound twice, annotated or augmented: not a plain size
        value = stmts[0].value
        elements = ([(f"{name}[{i}]", e) for i, e in enumerate(value.elts)]
                    if isinstance(value, (ast.Tuple, ast.List)) else [(name, value)])
        for label, node in elements:
            number = _literal_int(node)
            if number is not None and number > 1:
                sizes[label] = (number, node)
    return sizes


def scaled_size(size: int, factor: float) -> int:
    """`size * factor`, keeping its alignment (up to 16) and no smaller than 16 (or itself)."""
    align = math.gcd(size, MAX_ALIGN)
    new = max(align, round(size * factor / align) * align)
    return min(size, max(new, min(size, MIN_SIZE)))


def scale_task(task: Task, factor: float, measure=measure_footprint) -> Scaled:
    """`task` with its input sizes multiplied by `factor` (0 < factor <= 1). Raises TaskError when
    the task has nothing to scale, or when its forward ran on the meta device before scaling and
    no longer does after (sizes that had to agree no longer do), or when its code cannot be measured
    there. `measure` runs a task on meta (a harness passes env/infra/task_child.py's
    `estimate_footprint`, which runs it in a child; by default, in this process)."""
    if not 0 < factor <= 1:
        raise ValueError(f"--scale must be above 0 and at most 1, not {factor:g}")
    try:
        sizes = input_sizes(task.code)
    except SyntaxError as exc:
        raise TaskError(f"task {task.name}: syntax error at line {exc.lineno}: {exc.msg}") from None
    if not sizes:
        raise TaskError(f"task {task.name} has no module-level size constant that only get_inputs() reads, "
                        "so --scale cannot shrink it")
    changes = {name: (old, scaled_size(old, factor)) for name, (old, _) in sizes.items()}
    changes = {name: sizes_ for name, sizes_ in changes.items() if sizes_[0] != sizes_[1]}
    lines = task.code.splitlines(keepends=True)
    nodes = {id(sizes[name][1]): (sizes[name][1], new) for name, (_, new) in changes.items()}  # height = width = 128
    # Replace value expressions from the last to the first so earlier offsets stay valid.
    for node, new in sorted(nodes.values(), key=lambda item: (item[0].lineno, item[0].col_offset), reverse=True):
        start, end = node.lineno - 1, node.end_lineno - 1
        head = lines[start][:_byte_to_char(lines[start], node.col_offset)]
        tail = lines[end][_byte_to_char(lines[end], node.end_col_offset):]
        lines[start:end + 1] = [head + str(new) + tail]
    scaled = replace(task, name=f"{task.name} (scale {factor:g})", code="".join(lines))
    _check_still_runs(task, scaled, measure)
    return Scaled(scaled, changes)


def _check_still_runs(original: Task, scaled: Task, measure) -> None:
    before = measure(original)
    if before is None or not before.forward_ran:
        return   # meta cannot tell; the evaluation will
    after = measure(scaled)
    if after is None or not after.forward_ran:
        raise TaskError(f"scaling {original.name} breaks it (its input sizes must agree in a way --scale cannot "
                        "see); evaluate it at full size on a bigger machine, or edit its sizes by hand")


def _byte_to_char(line: str, byte_offset: int) -> int:
    """ast gives UTF-8 byte offsets; strings are indexed by character."""
    return len(line.encode()[:byte_offset].decode(errors="ignore"))
