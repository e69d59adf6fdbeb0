"""env/'s shape: no import cycle between its modules (imports inside functions count: they only defer
the cycle to the first call), and no module longer than a reader can hold at once."""

from __future__ import annotations

import ast
from pathlib import Path

import cuda_agent.env

ENV = Path(cuda_agent.env.__file__).parent
PACKAGE = "cuda_agent.env"
MAX_LINES = 600


def _module_name(path: Path) -> str:
    parts = list(path.relative_to(ENV).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join([PACKAGE, *parts])


def _modules() -> dict[str, Path]:
    return {_module_name(path): path for path in sorted(ENV.rglob("*.py"))}


def _imported(node: ast.AST, importer: str, is_package: bool) -> list[str]:
    """The modules an import statement names: `from a.b import c` is a.b.c where c is a module."""
    if isinstance(node, ast.Import):
        return [alias.name for alias in node.names]
    if not isinstance(node, ast.ImportFrom):
        return []
    if node.level:   # relative: from the importer's package upwards
        package = importer.split(".") if is_package else importer.split(".")[:-1]
        base = ".".join(package[:len(package) - node.level + 1] + ([node.module] if node.module else []))
    else:
        base = node.module or ""
    return [base] + [f"{base}.{alias.name}" for alias in node.names]


def imports_of(tree: ast.AST, name: str, is_package: bool, modules) -> set[str]:
    """The env modules a module's source imports, wherever in it the import is written."""
    return {target for node in ast.walk(tree) for target in _imported(node, name, is_package)
            if target in modules and target != name}


def import_graph() -> dict[str, set[str]]:
    """Each env module's imports of other env modules."""
    modules = _modules()
    return {name: imports_of(ast.parse(path.read_text(), str(path)), name, path.name == "__init__.py", modules)
            for name, path in modules.items()}


def cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected components of more than one module (Tarjan), each sorted."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []

    def visit(node: str) -> None:
        index[node] = low[node] = len(index)
        stack.append(node)
        on_stack.add(node)
        for nxt in sorted(graph.get(node, ())):
            if nxt not in index:
                visit(nxt)
                low[node] = min(low[node], low[nxt])
            elif nxt in on_stack:
                low[node] = min(low[node], index[nxt])
        if low[node] == index[node]:
            component = []
            while True:
                top = stack.pop()
                on_stack.discard(top)
                component.append(top)
                if top == node:
                    break
            if len(component) > 1:
                found.append(sorted(component))

    for node in sorted(graph):
        if node not in index:
            visit(node)
    return found


def test_the_graph_sees_imports_inside_functions_and_relative_ones():
    source = ("from __future__ import annotations\n"
              "def later():\n    from cuda_agent.env.infra import spares\n"
              "class C:\n    def m(self):\n        from ..builds.compiler import BuildError\n")
    modules = {"cuda_agent.env.infra.spares", "cuda_agent.env.builds.compiler", "cuda_agent.env.run.x"}
    found = imports_of(ast.parse(source), "cuda_agent.env.run.x", False, modules)
    assert found == {"cuda_agent.env.infra.spares", "cuda_agent.env.builds.compiler"}
    assert cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]
    assert cycles({"a": {"b"}, "b": set()}) == []


def test_env_has_no_import_cycle():
    found = cycles(import_graph())
    assert not found, "import cycles in env/: " + "; ".join(" <-> ".join(c) for c in found)


def test_no_env_module_is_too_long():
    lengths = {str(path.relative_to(ENV)): len(path.read_text().splitlines()) for path in _modules().values()}
    too_long = {name: n for name, n in lengths.items() if n > MAX_LINES}
    assert not too_long, f"env modules over {MAX_LINES} lines (split them): {too_long}"


def test_each_sub_package_says_its_job_in_two_lines():
    packages = sorted(path.parent for path in ENV.glob("*/__init__.py"))
    assert len(packages) >= 7
    for package in packages:
        doc = ast.get_docstring(ast.parse((package / "__init__.py").read_text()))
        assert doc and len(doc.splitlines()) <= 2, f"env/{package.name}/__init__.py: its job, in at most two lines"


# the layers, lowest first: a package may import its own and lower ones only (bench and rl are peers)
LAYERS = {"tasks": 0, "env": 1, "agent": 2, "synth": 2, "bench": 3, "rl": 3}


def test_layers_depend_downward_only():
    """tasks imports nothing of env, env nothing of agent, synth, bench or rl (imports inside functions
    count), and so on down the layers."""
    import cuda_agent

    root = Path(cuda_agent.__file__).parent
    upward = []
    for package, level in LAYERS.items():
        for path in sorted((root / package).rglob("*.py")):
            tree = ast.parse(path.read_text(), str(path))
            for node in ast.walk(tree):
                for target in _imported(node, "", False) if not getattr(node, "level", 0) else []:
                    parts = target.split(".")
                    if parts[0] == "cuda_agent" and len(parts) > 1 and LAYERS.get(parts[1], -1) > level \
                            and parts[1] != package:
                        upward.append(f"{path.relative_to(root)}: {target}")
    assert not upward, "imports of a higher layer: " + "; ".join(sorted(set(upward)))
