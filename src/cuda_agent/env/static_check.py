"""A static pass over the solution's Python source (AST, not regex).

Each finding names a rule and says why in one line. Rejections stop the evaluation before anything
runs; warnings are reported with the result. The runtime guard (guard.py) is the real defence;
this pass explains intent early and closes doors the runtime cannot see (e.g. code that would only
misbehave while timed).
"""

from __future__ import annotations

import ast
import re
from dataclasses import dataclass

from cuda_agent.tasks.parsing import parse

# module -> rule; importing any of these is a rejection
FORBIDDEN_IMPORTS = {
    "threading": "threading", "_thread": "threading", "multiprocessing": "threading",
    "concurrent": "threading", "subprocess": "threading", "asyncio": "threading",
    "inspect": "introspection", "gc": "introspection", "ctypes": "ctypes", "cffi": "ctypes",
    "model": "reference-model", "reference_task": "reference-model",
    "torch.overrides": "introspection", "torch.utils._python_dispatch": "introspection",
    "torch._C": "introspection", "importlib": "introspection", "sys": "introspection",
    "cuda_agent": "introspection", "torch.library": "custom-op", "socket": "network", "urllib": "network", "requests": "network",
    "http": "network", "torch._dynamo": "torch-compile", "torch._inductor": "torch-compile",
    "torch.compile": "torch-compile",
}
# attribute chains that are rejected wherever they appear
FORBIDDEN_ATTRIBUTES = {
    "sys._getframe": "introspection", "sys.modules": "introspection", "torch._C": "introspection",
    "torch.overrides": "introspection", "torch.utils._python_dispatch": "introspection",
    "os.system": "threading", "os.fork": "threading", "os.popen": "threading",
    "builtins.__import__": "introspection", "torch.library": "custom-op",
    "torch.compile": "torch-compile", "torch._dynamo": "torch-compile", "torch._inductor": "torch-compile",
}
PATCHABLE_ROOTS = {"torch", "time", "builtins", "sys", "os", "numpy", "np", "F", "nn", "cuda_extension"}
BROAD_EXCEPTIONS = {"Exception", "BaseException", "RuntimeError"}


@dataclass
class Finding:
    rule: str
    line: int
    message: str
    reject: bool = True

    def describe(self) -> str:
        return f"line {self.line}: {self.message} [static:{self.rule}]"


def _dotted(node: ast.AST) -> str:
    parts = []
    while isinstance(node, ast.Attribute):
        parts.append(node.attr)
        node = node.value
    if isinstance(node, ast.Name):
        parts.append(node.id)
        return ".".join(reversed(parts))
    return ""


class _Checker(ast.NodeVisitor):
    def __init__(self):
        self.findings: list[Finding] = []
        self.forward_depth = 0
        self.numpy_names = {"np", "numpy"}  # grows with `import numpy as x` / `from numpy import y`

    def add(self, rule: str, node: ast.AST, message: str, reject: bool = True) -> None:
        self.findings.append(Finding(rule, getattr(node, "lineno", 0), message, reject))

    # imports ----------------------------------------------------------------------------
    def _check_module(self, name: str, node: ast.AST) -> None:
        for forbidden, rule in FORBIDDEN_IMPORTS.items():
            if name == forbidden or name.startswith(forbidden + "."):
                self.add(rule, node, f"imports {name}, which a kernel solution has no use for")
                return

    def visit_Import(self, node: ast.Import) -> None:
        for alias in node.names:
            self._check_module(alias.name, node)
            if alias.name.split(".")[0] == "numpy":
                self.numpy_names.add((alias.asname or alias.name).split(".")[0])
                if self.forward_depth:
                    self.add("numpy", node, "imports numpy inside forward")

    def visit_ImportFrom(self, node: ast.ImportFrom) -> None:
        module = node.module or ""
        self._check_module(module, node)
        if module.split(".")[0] == "numpy":
            self.numpy_names.update(alias.asname or alias.name for alias in node.names)
        for alias in node.names:
            self._check_module(f"{module}.{alias.name}", node)
            if alias.name == "Model":
                self.add("reference-model", node, f"imports the reference Model from {module}")

    # classes and names --------------------------------------------------------------------
    def visit_ClassDef(self, node: ast.ClassDef) -> None:
        for base in node.bases:
            if _dotted(base).split(".")[-1] == "Model":
                self.add("reference-model", node, f"class {node.name} subclasses the reference Model")
        self.generic_visit(node)

    def visit_Name(self, node: ast.Name) -> None:
        if node.id == "Model" and isinstance(node.ctx, ast.Load):
            self.add("reference-model", node, "uses the name Model (the reference implementation)")
        if node.id in self.numpy_names and self.forward_depth:
            self.add("numpy", node, "computes with numpy inside forward: only your kernels may compute")
        if node.id in ("__import__", "eval", "exec", "globals", "vars") and isinstance(node.ctx, ast.Load):
            self.add("introspection", node, f"uses {node.id}(), which can reach around the harness")
        self.generic_visit(node)

    def visit_Attribute(self, node: ast.Attribute) -> None:
        dotted = _dotted(node)
        for forbidden, rule in FORBIDDEN_ATTRIBUTES.items():
            if dotted == forbidden or dotted.startswith(forbidden + "."):
                why = ": its generated kernels are not your own kernels" if rule == "torch-compile" else ""
                self.add(rule, node, f"uses {dotted}{why}")
                break
        if node.attr == "numpy" and self.forward_depth:
            self.add("numpy", node, "converts a tensor to numpy inside forward: only your kernels may compute")
        if node.attr in ("__subclasses__", "__globals__", "__code__", "__closure__", "f_back", "f_globals",
                         "_target", "_wrapped_cache"):
            self.add("introspection", node, f"uses .{node.attr}, which can reach around the harness")
        self.generic_visit(node)

    # monkeypatching ---------------------------------------------------------------------
    def _check_target(self, target: ast.AST, node: ast.AST) -> None:
        if isinstance(target, ast.Attribute):
            root = _dotted(target).split(".")[0]
            if root in PATCHABLE_ROOTS:
                self.add("monkeypatch", node, f"assigns {_dotted(target)}: patching library functions is not allowed")
        elif isinstance(target, (ast.Tuple, ast.List)):
            for element in target.elts:
                self._check_target(element, node)

    def visit_Assign(self, node: ast.Assign) -> None:
        for target in node.targets:
            self._check_target(target, node)
        self.generic_visit(node)

    def visit_AugAssign(self, node: ast.AugAssign) -> None:
        self._check_target(node.target, node)
        self.generic_visit(node)

    def visit_Call(self, node: ast.Call) -> None:
        if isinstance(node.func, ast.Name) and node.func.id in ("setattr", "delattr") and node.args:
            root = _dotted(node.args[0]).split(".")[0]
            if root in PATCHABLE_ROOTS:
                self.add("monkeypatch", node, f"{node.func.id}() on {_dotted(node.args[0])}: patching is not allowed")
        self.generic_visit(node)

    # forward ----------------------------------------------------------------------------
    def visit_FunctionDef(self, node: ast.FunctionDef) -> None:
        inside = node.name == "forward"
        self.forward_depth += inside
        self.generic_visit(node)
        self.forward_depth -= inside

    visit_AsyncFunctionDef = visit_FunctionDef

    def visit_Try(self, node: ast.Try) -> None:
        for handler in node.handlers:
            names = _handler_names(handler)
            broad = handler.type is None or bool(names & BROAD_EXCEPTIONS)
            if broad:
                self.add("broad-except", handler,
                         "catches broad exceptions" + (" inside forward: a fallback path around your kernel"
                                                        if self.forward_depth else ""),
                         reject=bool(self.forward_depth))
        self.generic_visit(node)

    visit_TryStar = visit_Try


def _handler_names(handler: ast.ExceptHandler) -> set[str]:
    if handler.type is None:
        return set()
    nodes = handler.type.elts if isinstance(handler.type, ast.Tuple) else [handler.type]
    return {_dotted(n).split(".")[-1] for n in nodes}


# C++/CUDA sources: ways around the guard, said early with a reason (the link-level check in
# symbols.py is what cannot be dodged; this scan only explains).
_CPP_FORBIDDEN = {
    r"ExcludeDispatchKeyGuard|ExcludeDispatchKeySet|IncludeDispatchKeyGuard|AutoDispatchBelow|"
    r"DispatchKeySet|_AutoDispatch|tls_set_dispatch_key": "dispatch-bypass",
    r"\bdlopen\b|\bdlsym\b|\bpopen\b|\bsystem\s*\(|\bfork\s*\(|\bexecv": "native-escape",
    r"TORCH_LIBRARY(_IMPL|_FRAGMENT)?\s*\(\s*aten\b": "aten-override",
}
_CPP_COMMENT_OR_STRING = re.compile(r'//[^\n]*|/\*.*?\*/|"(?:\\.|[^"\\\n])*"', re.S)


def _code_only(source: str) -> str:
    """C++ source with comments and string literals blanked (line numbers kept)."""
    return _CPP_COMMENT_OR_STRING.sub(lambda m: "\n" * m.group(0).count("\n"), source)


def native_sources_in_python(source: str) -> str:
    """The string literals of a Python file (where single-file solutions keep their C++), one per line
    group; comments and the Python code itself are not C++ and are not scanned."""
    try:
        tree = parse(source)
    except SyntaxError:
        return ""
    return "\n".join(node.value for node in ast.walk(tree)
                     if isinstance(node, ast.Constant) and isinstance(node.value, str))


def check_native_source(source: str, filename: str) -> list[Finding]:
    """Reject C++/CUDA constructs that step around the runtime guard (comments and strings ignored)."""
    findings = []
    for lineno, code in enumerate(_code_only(source).splitlines(), 1):
        for pattern, rule in _CPP_FORBIDDEN.items():
            match = re.search(pattern, code)
            if match:
                why = ("registers a kernel for a PyTorch operator: register yours in a namespace of your own"
                       if rule == "aten-override" else "steps around the harness's checks")
                findings.append(Finding(rule, lineno, f"{filename} uses {match.group(0)}, which {why}"))
    return findings


def check_source(source: str, filename: str = "model_new.py") -> list[Finding]:
    """All findings for one Python source; a syntax error is left to the compile step."""
    try:
        tree = parse(source, filename=filename)
    except SyntaxError:
        return []
    checker = _Checker()
    checker.visit(tree)
    return checker.findings
