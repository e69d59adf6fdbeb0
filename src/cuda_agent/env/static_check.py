"""A static pass over the solution's sources (AST for Python, a scan for C++/CUDA).

The solution's Python is held to an allowlist (`allowlist.py`): the modules, members, builtins and
attribute writes a kernel solution needs, and nothing that reaches the harness running in the same
process. Each finding names a rule, the line, what was refused and what to do instead. Rejections
stop the evaluation before anything runs; warnings are reported with the result. The runtime guard
(guard.py) and the link check (symbols.py) are what cannot be dodged; this pass closes the doors of
Python itself (reflection, rebinding, modules taken over) and explains intent early.
"""

from __future__ import annotations

import ast
import builtins
import re
import string
from dataclasses import dataclass

from cuda_agent.env import allowlist as allow
from cuda_agent.tasks.parsing import parse

BROAD_EXCEPTIONS = {"Exception", "BaseException", "RuntimeError"}
LOADERS = {"torch.utils.cpp_extension.load_inline", "torch.utils.cpp_extension.load"}
# autograd.Function's static methods whose first argument is the context they may write to
CONTEXT_METHODS = {"forward", "backward", "setup_context", "jvp", "vjp"}


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


def _root(node: ast.AST) -> ast.AST:
    while isinstance(node, (ast.Attribute, ast.Subscript, ast.Call)):
        node = node.func if isinstance(node, ast.Call) else node.value
    return node


def _decorators(node: ast.FunctionDef) -> set[str]:
    return {_dotted(d).split(".")[-1] for d in node.decorator_list}


def _bound_names(node: ast.AST) -> set[str]:
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


class _Solution:
    """What the whole source defines: imports, its own classes and objects, the names it binds."""

    def __init__(self, tree: ast.Module):
        self.imports: dict[str, str] = {}        # bound name -> module path (or module.member)
        self.conflicts: list[tuple[ast.AST, str, str]] = []   # (import, name, the path it had before)
        for node in ast.walk(tree):
            for name, path in _import_bindings(node):
                if self.imports.get(name, path) != path:
                    self.conflicts.append((node, name, self.imports[name]))
                self.imports.setdefault(name, path)
        self.extensions = {allow.EXTENSION}     # its own extension modules
        classes = {n.name: n for n in ast.walk(tree) if isinstance(n, ast.ClassDef)}
        bindings: dict[str, int] = {}            # name -> how many times anything binds it
        own_targets: set[int] = set()            # the targets of `name = OwnClass(...)`
        for node in ast.walk(tree):
            for name in _bindings(node):
                bindings[name] = bindings.get(name, 0) + 1
            if isinstance(node, ast.Call) and self.resolve(node.func) in LOADERS:
                name = _extension_name(node)
                if (isinstance(name, ast.Constant) and isinstance(name.value, str)
                        and allow.extension_name_problem(name.value) is None):
                    self.extensions.add(name.value)
            elif (isinstance(node, ast.Assign) and len(node.targets) == 1 and isinstance(node.targets[0], ast.Name)
                  and isinstance(node.value, ast.Call) and isinstance(node.value.func, ast.Name)
                  and node.value.func.id in classes):
                own_targets.add(id(node.targets[0]))
        self.bound = set(bindings)
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
        dotted = _dotted(node)
        root = dotted.split(".")[0]
        return self.imports[root] + dotted[len(root):] if root in self.imports else ""

    def methods(self, class_name: str) -> dict[str, ast.FunctionDef]:
        return {n.name: n for n in self.classes[class_name].body
                if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef))}

    def is_function_class(self, node: ast.ClassDef) -> bool:
        """A torch.autograd.Function of its own (its static methods take a context to write to)."""
        return any(_dotted(b).split(".")[-1] == "Function" for b in node.bases)


def _import_bindings(node: ast.AST) -> list[tuple[str, str]]:
    """(bound name, module path) for an import statement."""
    if isinstance(node, ast.Import):
        return [(a.asname, a.name) if a.asname else (a.name.split(".")[0], a.name.split(".")[0]) for a in node.names]
    if isinstance(node, ast.ImportFrom) and node.module and not node.level:
        return [(a.asname or a.name, f"{node.module}.{a.name}") for a in node.names if a.name != "*"]
    return []


def _bindings(node: ast.AST) -> list[str]:
    """The names one node binds (scopes aside)."""
    if isinstance(node, ast.Name) and isinstance(node.ctx, (ast.Store, ast.Del)):
        return [node.id]
    if isinstance(node, ast.arg):
        return [node.arg]
    if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
        return [node.name]
    if isinstance(node, (ast.Import, ast.ImportFrom)):
        return [name for name, _ in _import_bindings(node)]
    if isinstance(node, (ast.ExceptHandler, ast.MatchAs, ast.MatchStar)) and node.name:
        return [node.name]
    if isinstance(node, ast.MatchMapping) and node.rest:
        return [node.rest]
    return []


def _extension_name(call: ast.Call) -> ast.AST | None:
    for keyword in call.keywords:
        if keyword.arg == "name":
            return keyword.value
    return call.args[0] if call.args else None


def _format_fields(template: str) -> list[str]:
    """The attribute names a str.format template reads (`{0.weight}` reads `weight`)."""
    try:
        parsed = list(string.Formatter().parse(template))
        specs = [spec for _, _, spec, _ in parsed if spec and "{" in spec]
        fields = [f for _, f, _, _ in parsed if f] + [f for spec in specs
                                                      for _, f, _, _ in string.Formatter().parse(spec) if f]
    except ValueError:   # format() itself would raise on it
        return []
    return [attr for f in fields for attr in re.findall(r"\.([^.\[]+)", f)]


@dataclass
class _Scope:
    kind: str                  # "module", "class", "function"
    names: set[str]            # names bound in this scope
    receivers: set[str]        # names its writes may go through (self, cls, an autograd context)


class _Checker(ast.NodeVisitor):
    def __init__(self, tree: ast.Module):
        self.findings: list[Finding] = []
        self.solution = _Solution(tree)
        self.parents: dict[int, ast.AST] = {id(c): n for n in ast.walk(tree) for c in ast.iter_child_nodes(n)}
        self.scopes = [_Scope("module", set(), set())]
        self.forward_depth = 0
        self.classes: list[ast.ClassDef] = []
        self.refused_imports: set[str] = set()
        for node, name, before in self.solution.conflicts:
            self.add("monkeypatch", node, f"binds {name} to another module than {before}: one name, one module")

    def add(self, rule: str, node: ast.AST, message: str, reject: bool = True) -> None:
        self.findings.append(Finding(rule, getattr(node, "lineno", 0), message, reject))

    def refuse(self, path: str, node: ast.AST, what: str, instead: str) -> None:
        """A refusal for something off the list, with its own reason where it has one."""
        rule, why = allow.refusal(path) or ("allowlist", "")
        self.add(rule, node, f"{what}{': ' + why if why else ''}; {instead}")

    def parent(self, node: ast.AST) -> ast.AST | None:
        return self.parents.get(id(node))

    # imports ----------------------------------------------------------------------------
    def _module_allowed(self, module: str) -> bool:
        return module in allow.IMPORTS or module in self.solution.extensions

    def _refuse_import(self, name: str, path: str, node: ast.AST, what: str, instead: str) -> None:
        self.refused_imports.add(name)
        self.refuse(path, node, what, instead)

    def visit_Import(self, node: ast.Import) -> None:
        for alias in node.names:
            if not self._module_allowed(alias.name):
                bound = alias.asname or alias.name.split(".")[0]
                self._refuse_import(bound, alias.name, node, f"imports {alias.name}", allow.ADVICE)

    def visit_ImportFrom(self, node: ast.ImportFrom) -> None:
        module = node.module or ""
        if node.level or not module:
            self.add("allowlist", node, "a relative import: " + allow.ADVICE)
            return
        for alias in node.names:
            path, bound = f"{module}.{alias.name}", alias.asname or alias.name
            if alias.name == "*":
                self.add("allowlist", node, f"imports * from {module}: name what you use")
            elif alias.name == "Model":
                self.add("reference-model", node, f"imports the reference Model from {module}")
            elif not self._module_allowed(module) and module not in allow.NAMESPACES:
                self._refuse_import(bound, module, node, f"imports from {module}", allow.ADVICE)
            elif not (self._module_allowed(path) or self._member(path) is not False):
                self._refuse_import(bound, path, node, f"imports {alias.name} from {module}",
                                    f"{module} offers no such member to a solution (see SKILL.md)")

    def _member(self, path: str) -> bool | None:
        if path.split(".")[0] in self.solution.extensions:
            return True
        return allow.member_allowed(path)

    # scopes -----------------------------------------------------------------------------
    def visit_ClassDef(self, node: ast.ClassDef) -> None:
        for base in node.bases:
            if _dotted(base).split(".")[-1] == "Model":
                self.add("reference-model", node, f"class {node.name} subclasses the reference Model")
        self._binds(node.name, node)
        for child in node.decorator_list + node.bases + node.keywords:
            self.visit(child)
        self.classes.append(node)
        self.scopes.append(_Scope("class", set(), set()))
        for child in node.body:
            self.visit(child)
        self.scopes.pop()
        self.classes.pop()

    def _receivers(self, node) -> set[str]:
        """The receiver a method may write through: self, a classmethod's cls, an autograd context."""
        in_class = self.scopes[-1].kind == "class"
        args = node.args.posonlyargs + node.args.args
        if not in_class or not args or isinstance(node, ast.Lambda):
            return set()
        decorators = _decorators(node)
        if "staticmethod" in decorators:
            own = self.classes[-1]
            return {args[0].arg} if self.solution.is_function_class(own) and node.name in CONTEXT_METHODS else set()
        return {args[0].arg}

    def visit_FunctionDef(self, node) -> None:
        if not isinstance(node, ast.Lambda):
            self._binds(node.name, node)
            for child in node.decorator_list + ([node.returns] if node.returns else []):
                self.visit(child)
        self.visit(node.args)
        names = _bound_names(node)
        outer = {r for r in self.scopes[-1].receivers if r not in names}
        receivers = outer | self._receivers(node)
        inside = getattr(node, "name", "") == "forward"
        self.forward_depth += inside
        self.scopes.append(_Scope("function", names, receivers))
        for child in (node.body if isinstance(node.body, list) else [node.body]):
            self.visit(child)
        self.scopes.pop()
        self.forward_depth -= inside

    visit_AsyncFunctionDef = visit_Lambda = visit_FunctionDef

    def _comprehension(self, node) -> None:
        self.scopes.append(_Scope("function", _bound_names(node), self.scopes[-1].receivers))
        self.generic_visit(node)
        self.scopes.pop()

    visit_ListComp = visit_SetComp = visit_DictComp = visit_GeneratorExp = _comprehension

    def visit_arguments(self, node: ast.arguments) -> None:
        for default in node.defaults + [d for d in node.kw_defaults if d]:
            self.visit(default)
        for arg in node.posonlyargs + node.args + node.kwonlyargs + [a for a in (node.vararg, node.kwarg) if a]:
            self._binds(arg.arg, arg)
            if arg.annotation:
                self.visit(arg.annotation)

    def _binds(self, name: str, node: ast.AST) -> None:
        """A name bound by an assignment, a parameter, a def: never an imported name or a receiver."""
        if name in self.solution.imports:
            self.add("monkeypatch", node, f"rebinds {name}, an imported name: keep imported names as imported")
        elif name in self.scopes[-1].receivers:
            self.add("attribute-write", node, f"rebinds {name}: a method's receiver stays what it was called on")

    def visit_ExceptHandler(self, node: ast.ExceptHandler) -> None:
        if node.name:
            self._binds(node.name, node)
        self.generic_visit(node)

    # names ------------------------------------------------------------------------------
    def _local(self, name: str) -> bool:
        """Whether `name` is a function's own (a parameter, a local, a closure's): no builtin behind it."""
        scopes = self.scopes[1:]
        if scopes and scopes[-1].kind == "class":
            scopes = scopes[:-1]   # a class body reads its own names, then the module's
        return any(s.kind == "function" and name in s.names for s in scopes)

    def visit_Name(self, node: ast.Name) -> None:
        name = node.id
        if not isinstance(node.ctx, ast.Load):
            self._binds(name, node)
            return
        if name == "Model":
            self.add("reference-model", node, "uses the name Model (the reference implementation)")
        elif name in self.solution.imports:
            self._check_path(self.solution.imports[name], node)
        elif self._local(name) or name in allow.MODULE_DUNDERS:
            pass
        elif hasattr(builtins, name) and name not in allow.BUILTINS:
            rule = "introspection" if name in ("eval", "exec", "compile", "__import__", "globals", "locals",
                                               "vars", "setattr", "delattr", "type", "dir", "breakpoint") else "allowlist"
            self.add(rule, node, f"uses {name}(), which a kernel solution does not need and which can reach "
                                 "around the harness; see SKILL.md for what model_new.py may use")
        elif name in allow.LITERAL_NAME_BUILTINS:
            self._check_literal_name(name, node)
        elif name.startswith("__") and name not in allow.MODULE_DUNDERS:
            self.add("introspection", node, f"uses {name}: only __name__ and __file__ may be read")
        elif name not in self.solution.bound and name not in allow.BUILTINS and name not in allow.MODULE_DUNDERS:
            self.add("allowlist", node, f"uses {name}, which the solution never defines and is not an allowed builtin")

    def _check_literal_name(self, name: str, node: ast.Name) -> None:
        call = self.parent(node)
        literal = (isinstance(call, ast.Call) and call.func is node and len(call.args) >= 2
                   and isinstance(call.args[1], ast.Constant) and isinstance(call.args[1].value, str))
        if not literal:
            self.add("introspection", node, f"{name}() with a computed name: write the attribute out "
                                            f"(obj.name), or call {name}(obj, \"name\") with a literal")
        elif call.args[1].value.startswith("_") or call.args[1].value in allow.FRAME_ATTRIBUTES:
            self.add("introspection", node, f"{name}() of {call.args[1].value!r}: private and special "
                                            "attributes are off limits")

    # attributes -------------------------------------------------------------------------
    def _check_path(self, path: str, node: ast.AST) -> None:
        """A module, or a member below one, named where `node` ends its dotted path."""
        parent = self.parent(node)
        if isinstance(parent, ast.Attribute) and parent.value is node:
            return   # the longer path is checked where it ends
        root = _root(node)
        if path.split(".")[0] in self.solution.extensions or getattr(root, "id", None) in self.refused_imports:
            return
        allowed = self._member(path)
        if path in LOADERS and not (isinstance(parent, ast.Call) and parent.func is node):
            self.add("extension-name", node, f"{path.split('.')[-1]} used other than in a direct call: "
                                             "call it as load_inline(name=\"...\", ...)")
        elif allowed is None:
            self.add("allowlist", node, f"uses the module {path} as a value: name its members where you use them "
                                        f"({path}.member)")
        elif allowed is False:
            self.refuse(path, node, f"uses {path}", "that member is not on the list a solution may use "
                                                     "(see SKILL.md); do the work in your kernels")

    def visit_Attribute(self, node: ast.Attribute) -> None:
        attr, base = node.attr, node.value
        root = _root(node)
        root_name = root.id if isinstance(root, ast.Name) else None
        if attr.startswith("__") and attr.endswith("__"):
            if attr not in allow.ATTRIBUTE_DUNDERS:
                self.add("introspection", node, f"uses .{attr}: special attributes reach around the harness")
        elif attr.startswith("_") and not self._own(base):
            self.add("introspection", node, f"uses .{attr}: private attributes are off limits except on "
                                            "self and the solution's own classes")
        elif attr in allow.FRAME_ATTRIBUTES:
            self.add("introspection", node, f"uses .{attr}: frames and tracebacks reach the harness's state")
        elif attr in allow.IO_METHODS:
            self.add("allowlist", node, f"uses .{attr}(): a solution builds paths, it does not work on files")
        elif attr in ("format", "format_map"):
            self._check_format(node)
        elif attr == "numpy" and self.forward_depth:
            self.add("numpy", node, "converts a tensor to numpy inside forward: only your kernels may compute")
        if isinstance(base, ast.Name) and base.id in self.solution.classes and base.id not in self.solution.imports:
            self._check_class_member(base.id, attr, node)
        if isinstance(node.ctx, (ast.Store, ast.Del)):
            self._check_write(node, root_name)
        if root_name in self.solution.imports and _dotted(node):
            full = self.solution.imports[root_name] + _dotted(node)[len(root_name):]
            if isinstance(node.ctx, ast.Load):
                self._check_path(full, node)
            self.visit(base) if not isinstance(base, ast.Name) else None
            return
        self.generic_visit(node)

    def _own(self, base: ast.AST) -> bool:
        """Whether `base` is the solution's own: a receiver, an object or a class it defines."""
        if not isinstance(base, ast.Name):
            return False
        return (base.id in self.scopes[-1].receivers or base.id in self.solution.objects
                or (base.id in self.solution.classes and base.id not in self.solution.imports))

    def _check_class_member(self, class_name: str, attr: str, node: ast.Attribute) -> None:
        """A method of its own class through the class: it would run with any object as `self`."""
        method = self.solution.methods(class_name).get(attr)
        if method is None:
            return
        kinds = _decorators(method)
        static = "staticmethod" in kinds and not (self.solution.is_function_class(self.solution.classes[class_name])
                                                  and attr in CONTEXT_METHODS)
        if not (static or "classmethod" in kinds):
            self.add("attribute-write", node, f"calls {class_name}.{attr} through the class: call methods on an "
                                              "instance (self.method(...)); autograd Functions through .apply")

    def _check_write(self, node: ast.Attribute, root_name: str | None) -> None:
        target = _dotted(node) or ast.unparse(node)
        if root_name in self.solution.imports:
            self.add("monkeypatch", node, f"assigns {target}: a module's or library's attributes are not yours "
                                          "to replace")
        elif not (isinstance(node.value, ast.Name) and self._own(node.value)):
            self.add("attribute-write", node, f"assigns {target}: a solution assigns only self.<name> (or cls, an "
                                              "autograd context, an object of its own classes); call a method "
                                              "for anything deeper")

    def _check_format(self, node: ast.Attribute) -> None:
        base = node.value
        template = (base.value if isinstance(base, ast.Constant) and isinstance(base.value, str)
                    else self.solution.strings.get(base.id) if isinstance(base, ast.Name) else None)
        if template is None:
            self.add("introspection", node, f".{node.attr}() on a string the pass cannot read (format fields reach "
                                            "attributes): use an f-string or a literal template")
            return
        for attr in _format_fields(template):
            if attr.startswith("_") or attr in allow.FRAME_ATTRIBUTES:
                self.add("introspection", node, f"a format field reads .{attr}: special attributes are off limits")

    # calls ------------------------------------------------------------------------------
    def visit_Call(self, node: ast.Call) -> None:
        path = self.solution.resolve(node.func)
        if path in LOADERS:
            name = _extension_name(node)
            if not (isinstance(name, ast.Constant) and isinstance(name.value, str)):
                self.add("extension-name", node, f"{path.split('.')[-1]}() without a literal name: write "
                                                 "name=\"my_ext\" as a string literal")
            else:
                problem = allow.extension_name_problem(name.value)
                if problem:
                    self.add("extension-name", node, problem)
        self.generic_visit(node)

    # exceptions -------------------------------------------------------------------------
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
    """All findings for one Python source, the most specific first (a bare `allowlist` refusal after
    one that says why); a syntax error is left to the compile step."""
    try:
        tree = parse(source, filename=filename)
    except SyntaxError:
        return []
    checker = _Checker(tree)
    checker.visit(tree)
    return sorted(checker.findings, key=lambda f: (f.rule == "allowlist", f.line))
