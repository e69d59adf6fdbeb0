"""Decontamination: drop a task whose AST is too similar to a KernelBench program (docs/synthesis.md).

similarity(A, B) = 1 - TED(A, B) / max(|A|, |B|), TED the Zhang-Shasha tree edit distance: a changed
operator costs one node whatever the layout, unlike a text diff. Trees are normalised (docstrings,
annotations, Load/Store contexts dropped; numbers all `Num`); identifiers, attributes, strings and
booleans stay (`relu` vs `gelu` differs). Zhang-Shasha is quadratic, so a bound screens pairs first:
similarity <= common / max(|A|, |B|), `common` the overlap of the label multisets; only pairs above
the threshold, and the best-bounded one (the nearest program, reported), are computed exactly.
"""

from __future__ import annotations

import ast
import hashlib
import os
import pickle
from collections import Counter
from dataclasses import dataclass
from pathlib import Path

from cuda_agent.tasks.parsing import parse

THRESHOLD = 0.9


@dataclass
class Tree:
    """A tree in the form Zhang-Shasha works on: postorder labels, leftmost leaves, keyroots."""

    labels: list[str]
    leftmost: list[int]
    keyroots: list[int]
    bag: Counter
    name: str = ""

    def __len__(self) -> int:
        return len(self.labels)


def _label(node: ast.AST) -> str:
    kind = type(node).__name__
    if isinstance(node, ast.Constant):
        v = node.value
        if isinstance(v, bool) or v is None:
            return f"Const:{v!r}"
        if isinstance(v, (int, float, complex)):
            return "Num"
        return f"Str:{str(v)[:40]}"
    for attr in ("id", "attr", "arg", "name", "module"):
        value = getattr(node, attr, None)
        if isinstance(value, str):
            return f"{kind}:{value}"
    return kind


def _children(node: ast.AST) -> list[ast.AST]:
    out = []
    body = getattr(node, "body", None)
    for field, value in ast.iter_fields(node):
        if field in ("ctx", "annotation", "returns", "type_comment", "type_params"):
            continue
        items = value if isinstance(value, list) else [value]
        for i, item in enumerate(items):
            if not isinstance(item, ast.AST) or isinstance(item, ast.expr_context):
                continue
            if (field == "body" and i == 0 and isinstance(item, ast.Expr) and body is value
                    and isinstance(item.value, ast.Constant) and isinstance(item.value.value, str)):
                continue   # docstring
            out.append(item)
    return out


def tree_of(code: str, name: str = "") -> Tree:
    """Parse and normalise Python source into a Tree."""
    return _build(parse(code), _children, _label, name)


def tree_from_nested(node: tuple, name: str = "") -> Tree:
    """A Tree from nested (label, [children]) tuples (for tests and non-Python trees)."""
    return _build(node, lambda n: list(n[1]), lambda n: n[0], name)


def _build(root, children, label, name: str) -> Tree:
    order: list[tuple[object, int]] = []          # (node, depth) in postorder, iteratively:
    stack = [(root, 0, iter(children(root)))]     # ASTs can be deeper than the recursion limit
    while stack:
        node, depth, it = stack[-1]
        child = next(it, None)
        if child is None:
            stack.pop()
            order.append((node, depth))
        else:
            stack.append((child, depth + 1, iter(children(child))))
    # A node's subtree is the `size` nodes ending at it in postorder, so its leftmost leaf is
    # index - size + 1. Children sit on `done` (deeper than their parent) until it is reached.
    labels, leftmost = [], []
    done: list[tuple[int, int]] = []               # (depth, subtree size)
    for index, (node, depth) in enumerate(order):
        size = 1
        while done and done[-1][0] > depth:
            size += done.pop()[1]
        done.append((depth, size))
        labels.append(label(node))
        leftmost.append(index - size + 1)
    # Keyroots: the highest node for each distinct leftmost leaf.
    highest: dict[int, int] = {}
    for index, lm in enumerate(leftmost):
        highest[lm] = index
    return Tree(labels, leftmost, sorted(highest.values()), Counter(labels), name)


def tree_edit_distance(a: Tree, b: Tree) -> int:
    """Zhang-Shasha ordered tree edit distance with unit costs."""
    la, lb = a.leftmost, b.leftmost
    ta, tb = a.labels, b.labels
    treedist = [[0] * len(b) for _ in range(len(a))]
    for i in a.keyroots:
        li = la[i]
        for j in b.keyroots:
            lj = lb[j]
            rows, cols = i - li + 2, j - lj + 2
            fd = [[0] * cols for _ in range(rows)]
            for x in range(1, rows):
                fd[x][0] = x
            row0 = fd[0]
            for y in range(1, cols):
                row0[y] = y
            for x in range(1, rows):
                ia = li + x - 1
                lia = la[ia]
                fx, fprev = fd[x], fd[x - 1]
                td_row = treedist[ia]
                label = ta[ia]
                for y in range(1, cols):
                    jb = lj + y - 1
                    if lia == li and lb[jb] == lj:
                        cost = fprev[y - 1] + (label != tb[jb])
                        d = min(fprev[y] + 1, fx[y - 1] + 1, cost)
                        fx[y] = d
                        td_row[jb] = d
                    else:
                        fx[y] = min(fprev[y] + 1, fx[y - 1] + 1,
                                    fd[lia - li][lb[jb] - lj] + td_row[jb])
    return treedist[len(a) - 1][len(b) - 1]


def similarity(a: Tree, b: Tree) -> float:
    if not len(a) and not len(b):
        return 1.0
    return 1.0 - tree_edit_distance(a, b) / max(len(a), len(b))


def similarity_bound(a: Tree, b: Tree) -> float:
    """An upper bound on similarity(a, b) from the label multisets (see module docstring)."""
    common = sum((a.bag & b.bag).values())
    return common / max(len(a), len(b), 1)


# ---------------------------------------------------------------------------------------------
# KernelBench reference set

_MEMO: dict[str, list[Tree]] = {}


def _fingerprint(files: list[Path]) -> str:
    h = hashlib.sha256()
    for f in files:
        st = f.stat()
        h.update(f"{f.name}:{st.st_size}:{st.st_mtime_ns}".encode())
    return h.hexdigest()[:16]


def kernelbench_trees(root: str | os.PathLike, cache_dir: str | os.PathLike | None = None) -> list[Tree]:
    """Parsed, normalised trees of every levelN/*.py under `root`, cached in memory and on disk."""
    root = Path(root)
    files = sorted(root.glob("level*/*.py"))
    if not files:
        raise FileNotFoundError(f"no KernelBench problems (levelN/*.py) under {root}")
    key = _fingerprint(files)
    if key in _MEMO:
        return _MEMO[key]
    cache = Path(cache_dir) / f"kernelbench_trees_{key}.pkl" if cache_dir else None
    if cache is not None and cache.is_file():
        trees = pickle.loads(cache.read_bytes())
    else:
        trees = []
        for f in files:
            try:
                trees.append(tree_of(f.read_text(), name=f"{f.parent.name}/{f.name}"))
            except SyntaxError:
                continue
        if cache is not None:
            cache.parent.mkdir(parents=True, exist_ok=True)
            tmp = cache.with_suffix(".tmp")
            tmp.write_bytes(pickle.dumps(trees))
            tmp.replace(cache)
    _MEMO[key] = trees
    return trees


@dataclass
class Match:
    similarity: float      # exact similarity to `nearest` (the best-bounded program)
    nearest: str
    contaminated: bool     # some program's exact similarity exceeds the threshold
    exact_pairs: int       # how many pairs needed Zhang-Shasha


def nearest_kernelbench(code: str, references: list[Tree], threshold: float = THRESHOLD) -> Match:
    tree = tree_of(code)
    bounded = sorted(((similarity_bound(tree, ref), i) for i, ref in enumerate(references)), reverse=True)
    best, best_name, exact = -1.0, "", 0
    for rank, (bound, i) in enumerate(bounded):
        if rank > 0 and bound <= threshold:
            break     # sorted: no later program can exceed the threshold either
        if bound <= best:
            continue
        sim = similarity(tree, references[i])
        exact += 1
        if sim > best:
            best, best_name = sim, references[i].name
        if best > threshold:
            break
    return Match(similarity=round(best, 4), nearest=best_name, contaminated=best > threshold, exact_pairs=exact)
