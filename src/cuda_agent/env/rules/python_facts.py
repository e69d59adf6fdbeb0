"""What a solution's Python source defines, read from its AST for the static pass (static_check.py):
its imports, its own classes and objects, the names it binds, its extension names, and small helpers
over dotted names and scopes."""

from __future__ import annotations

import ast
import re
import string

from cuda_agent.env.rules import allowlist as allow

LOADERS = {"torch.utils.cpp_extension.load_inline", "torch.utils.cpp_extension.load"}


def dotted(node: ast.AST) -> str:
    parts = []
    while isinstance(node, ast.Attribute):
        parts.append(node.attr)
        node = node.value
    if isinstance(node, ast.Name):
        parts.append(node.id)
        return ".".join(reversed(parts))
    return ""


def root_of(node: ast.AST) -> ast.AST:
    while isinstance(node, (ast.Attribute, ast.Subscript, ast.Call)):
        node = node.func if isinstance(node, ast.Call) else node.value
    return node


def decorators(node: ast.FunctionDef) -> set[str]:
    """Its decorators' dotted names (`staticmethod`, `torch.no_grad` is "" as a call)."""
    return {dotted(d) for d in node.decorator_list}


def bound_names(node: ast.AST) -> set[str]:
    """Names a function binds in its own scope (parameters and stores; nested scopes excluded)."""
    names = set()
    if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda)):
        args = node.args
        names |= {a.arg for a in args.posonlyargs + args.args + args.kwonlyargs}
        names |= {a.arg for a in (args.vararg, args.kwarg) if a}
        body = node.body if isinstance(node.body, list) else [node.body]
    else:   # a comprehension: its targets
        return {n.id for g in node.generators for n in ast.walk(g.target) if isinstance(n, ast.Name)}
    declared = set()
    todo = list(body)
    while todo:
        child = todo.pop()
        if isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            names.add(child.name)
            todo += child.decorator_list
            continue
        if isinstance(child, (ast.Lambda, ast.ListComp, ast.SetComp, ast.DictComp, ast.GeneratorExp)):
            continue
        if isinstance(child, (ast.Global, ast.Nonlocal)):
            declared |= set(child.names)
        elif isinstance(child, ast.Name) and isinstance(child.ctx, (ast.Store, ast.Del)):
            names.add(child.id)
        elif isinstance(child, (ast.Import, ast.ImportFrom)):
            names |= {(a.asname or a.name).split(".")[0] for a in child.names}
        elif isinstance(child, ast.ExceptHandler) and child.name:
            names.add(child.name)
        elif isinstance(child, (ast.MatchAs, ast.MatchStar)) and child.name:
            names.add(child.name)
        elif isinstance(child, ast.MatchMapping) and child.rest:
            names.add(child.rest)
        todo += list(ast.iter_child_nodes(child))
    return names - declared


class SolutionFacts:
    """What the whole source defines: imports, its own classes and objects, the names it binds."""

    def __init__(self, tree: ast.Module):
        self.imports: dict[str, str] = {}        # bound name -> module path (or module.member)
        self.conflicts: list[tuple[ast.AST, str, str]] = []   # (import, name, the path it had before)
        for node in ast.walk(tree):
            for name, path in import_bindings(node):
                if self.imports.get(name, path) != path:
                    self.conflicts.append((node, name, self.imports[name]))
                self.imports.setdefault(name, path)
        self.extensions = {allow.EXTENSION}     # its own extension modules
        classes = {n.name: n for n in ast.walk(tree) if isinstance(n, ast.ClassDef)}
        bindings: dict[str, int] = {}            # name -> how many times anything binds it
        own_targets: set[int] = set()            # the targets of `name = OwnClass(...)`
        loaded: set[str] = set()                 # names bound to what load_inline / load returned
        for node in ast.walk(tree):
            for name in bindings_of(node):
                bindings[name] = bindings.get(name, 0) + 1
            if (isinstance(node, ast.Assign) and len(node.targets) == 1 and isinstance(node.targets[0], ast.Name)
                    and isinstance(node.value, ast.Call) and self.resolve(node.value.func) in LOADERS):
                loaded.add(node.targets[0].id)   # `ext = load_inline(...)`: the module it built
            if isinstance(node, ast.Call) and self.resolve(node.func) in LOADERS:
                name = extension_name(node)
                if (isinstance(name, ast.Constant) and isinstance(name.value, str)
                        and allow.extension_name_problem(name.value) is None):
                    self.extensions.add(name.value)
            elif (isinstance(node, ast.Assign) and len(node.targets) == 1 and isinstance(node.targets[0], ast.Name)
                  and isinstance(node.value, ast.Call) and isinstance(node.value.func, ast.Name)
                  and node.value.func.id in classes):
                own_targets.add(id(node.targets[0]))
        self.bound = set(bindings)
        # names that are one of its own extension modules: imported by its name, or bound once to a loader's result
        self.extension_names = {name for name, path in self.imports.items() if path in self.extensions} | \
            {name for name in loaded if bindings.get(name) == 1}
        # its own classes and objects: names bound only by their class statement / `name = OwnClass(...)`
        self.classes = {name: node for name, node in classes.items() if bindings.get(name) == 1}
        own_counts: dict[str, int] = {}
        for node in ast.walk(tree):
            if id(node) in own_targets:
                own_counts[node.id] = own_counts.get(node.id, 0) + 1
        self.objects = {name for name, count in own_counts.items() if bindings.get(name) == count}
        # module-level names bound once to a string literal (templates for str.format)
        self.strings = {n.targets[0].id: n.value.value for n in tree.body
                        if isinstance(n, ast.Assign) and len(n.targets) == 1 and isinstance(n.targets[0], ast.Name)
                        and isinstance(n.value, ast.Constant) and isinstance(n.value.value, str)
                        and bindings.get(n.targets[0].id) == 1}

    def resolve(self, node: ast.AST) -> str:
        """The dotted path of a name or attribute chain rooted at an import, else ""."""
        path = dotted(node)
        root = path.split(".")[0]
        return self.imports[root] + path[len(root):] if root in self.imports else ""

    def methods(self, class_name: str) -> dict[str, ast.FunctionDef]:
        return {n.name: n for n in self.classes[class_name].body
                if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef))}

    def is_function_class(self, node: ast.ClassDef) -> bool:
        """A torch.autograd.Function of its own (its static methods take a context to write to)."""
        return any(dotted(b).split(".")[-1] == "Function" for b in node.bases)


def import_bindings(node: ast.AST) -> list[tuple[str, str]]:
    """(bound name, module path) for an import statement."""
    if isinstance(node, ast.Import):
        return [(a.asname, a.name) if a.asname else (a.name.split(".")[0], a.name.split(".")[0]) for a in node.names]
    if isinstance(node, ast.ImportFrom) and node.module and not node.level:
        return [(a.asname or a.name, f"{node.module}.{a.name}") for a in node.names if a.name != "*"]
    return []


def bindings_of(node: ast.AST) -> list[str]:
    """The names one node binds (scopes aside)."""
    if isinstance(node, ast.Name) and isinstance(node.ctx, (ast.Store, ast.Del)):
        return [node.id]
    if isinstance(node, ast.arg):
        return [node.arg]
    if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
        return [node.name]
    if isinstance(node, (ast.Import, ast.ImportFrom)):
        return [name for name, _ in import_bindings(node)]
    if isinstance(node, (ast.ExceptHandler, ast.MatchAs, ast.MatchStar)) and node.name:
        return [node.name]
    if isinstance(node, ast.MatchMapping) and node.rest:
        return [node.rest]
    return []


def extension_name(call: ast.Call) -> ast.AST | None:
    for keyword in call.keywords:
        if keyword.arg == "name":
            return keyword.value
    return call.args[0] if call.args else None


def format_fields(template: str) -> list[str]:
    """The attribute names a str.format template reads (`{0.weight}` reads `weight`)."""
    try:
        parsed = list(string.Formatter().parse(template))
        specs = [spec for _, _, spec, _ in parsed if spec and "{" in spec]
        fields = [f for _, f, _, _ in parsed if f] + [f for spec in specs
                                                      for _, f, _, _ in string.Formatter().parse(spec) if f]
    except ValueError:   # format() itself would raise on it
        return []
    return [attr for f in fields for attr in re.findall(r"\.([^.\[]+)", f)]
