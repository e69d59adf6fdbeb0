"""Exact and near-duplicate detection.

- exact: the same program once docstrings are gone (hash of the normalised AST with literals);
- near: the same program up to numeric literals (hash of the tree that decontamination compares,
  where every number is `Num`): the same operators, arguments and structure at other sizes or
  other hyper-parameter values. A kernel written for one solves the other, so only the first
  (in candidate order) is kept.
"""

from __future__ import annotations

import ast
import hashlib

from cuda_agent.synth.decontaminate import Tree, tree_of
from cuda_agent.tasks.parsing import parse


def _digest(text: str) -> str:
    return hashlib.sha256(text.encode()).hexdigest()[:20]


def exact_key(code: str) -> str:
    tree = parse(code)
    for node in ast.walk(tree):   # docstrings do not make a different task
        body = getattr(node, "body", None)
        if (isinstance(body, list) and body and isinstance(body[0], ast.Expr)
                and isinstance(body[0].value, ast.Constant) and isinstance(body[0].value.value, str)):
            body.pop(0)
    return _digest(ast.dump(tree))


def near_key(code: str, tree: Tree | None = None) -> str:
    tree = tree or tree_of(code)
    return _digest("\x1f".join(tree.labels) + "|" + ",".join(map(str, tree.leftmost)))


class Deduper:
    """Remembers the keys seen so far; `check` says whether a new program repeats one."""

    def __init__(self):
        self.exact: dict[str, str] = {}
        self.near: dict[str, str] = {}

    def add(self, ident: str, exact: str, near: str) -> None:
        self.exact.setdefault(exact, ident)
        self.near.setdefault(near, ident)

    def check(self, ident: str, code: str, tree: Tree | None = None) -> tuple[str | None, str, str, str]:
        """(reason or None, exact key, near key, id of the earlier task it repeats)."""
        ek, nk = exact_key(code), near_key(code, tree)
        if ek in self.exact:
            return "duplicate_exact", ek, nk, self.exact[ek]
        if nk in self.near:
            return "duplicate_near", ek, nk, self.near[nk]
        self.add(ident, ek, nk)
        return None, ek, nk, ""
