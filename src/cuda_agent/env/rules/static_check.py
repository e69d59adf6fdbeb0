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
from dataclasses import dataclass

from cuda_agent.env.rules import allowlist as allow
from cuda_agent.env.rules import registry as rules
from cuda_agent.env.rules.python_facts import (LOADERS, SolutionFacts, bound_names, decorators, dotted, extension_name,
                                         format_fields, root_of)
from cuda_agent.tasks.parsing import parse

BROAD_EXCEPTIONS = {"Exception", "BaseException", "RuntimeError"}
# autograd.Function's static methods whose first argument is the context they may write to
CONTEXT_METHODS = {"forward", "backward", "setup_context", "jvp", "vjp"}


@dataclass
class Finding:
    rule: str          # a static rule's short name (registry.Rule.short): `[static:<rule>]` in results
    line: int
    message: str
    reject: bool = True

    def __post_init__(self):
        rules.name_of(rules.STATIC_PREFIX + self.rule)   # refuses a rule the registry does not declare

    def describe(self) -> str:
        return f"line {self.line}: {self.message} [static:{self.rule}]"


@dataclass
class _Scope:
    kind: str                  # "module", "class", "function"
    names: set[str]            # names bound in this scope
    receivers: set[str]        # names its writes may go through (self, cls, an autograd context)
    withs: int = 0             # `with` blocks open at this point of the scope


class _Checker(ast.NodeVisitor):
    """One walk over the source: imports, names, attributes, writes, calls and blocks, each checked
    against the lists of allowlist.py where it occurs (scopes tracked for locals and receivers)."""

    def __init__(self, tree: ast.Module):
        self.findings: list[Finding] = []
        self.solution = SolutionFacts(tree)
        self.parents: dict[int, ast.AST] = {id(c): n for n in ast.walk(tree) for c in ast.iter_child_nodes(n)}
        self.scopes = [_Scope("module", set(), set())]
        self.forward_depth = 0
        self.classes: list[ast.ClassDef] = []
        self.refused_imports: set[str] = set()
        for node, name, before in self.solution.conflicts:
            self.add(rules.STATIC_MONKEYPATCH, node,
                     f"binds {name} to another module than {before}: one name, one module")

    def add(self, rule: rules.Rule, node: ast.AST, message: str, reject: bool = True) -> None:
        self.findings.append(Finding(rule.short, getattr(node, "lineno", 0), message, reject))

    def refuse(self, path: str, node: ast.AST, what: str, instead: str) -> None:
        """A refusal for something off the list, with its own reason where it has one."""
        rule, why = allow.refusal(path) or (rules.STATIC_ALLOWLIST, "")
        self.add(rule, node, "; ".join(part for part in (f"{what}{': ' + why if why else ''}", instead) if part))

    def parent(self, node: ast.AST) -> ast.AST | None:
        return self.parents.get(id(node))

    # imports ----------------------------------------------------------------------------
    def _module_allowed(self, module: str) -> bool:
        return module in allow.IMPORTS or module in self.solution.extensions

    def _refuse_import(self, name: str, path: str, node: ast.AST, what: str, instead: str) -> None:
        self.refused_imports.add(name)
        self.refuse(path, node, what, instead)

    def _import_aliases(self, node) -> None:
        for alias in node.names:
            if alias.asname and _special(alias.asname):
                self._binds(alias.asname, node)

    def visit_Import(self, node: ast.Import) -> None:
        self._import_aliases(node)
        for alias in node.names:
            if not self._module_allowed(alias.name):
                bound = alias.asname or alias.name.split(".")[0]
                self._refuse_import(bound, alias.name, node, f"imports {alias.name}", allow.ADVICE)

    def visit_ImportFrom(self, node: ast.ImportFrom) -> None:
        self._import_aliases(node)
        module = node.module or ""
        if node.level or not module:
            self.add(rules.STATIC_ALLOWLIST, node, "a relative import: " + allow.ADVICE)
            return
        for alias in node.names:
            path, bound = f"{module}.{alias.name}", alias.asname or alias.name
            if alias.name == "*":
                self.add(rules.STATIC_ALLOWLIST, node, f"imports * from {module}: name what you use")
            elif alias.name == "Model":
                self.add(rules.STATIC_REFERENCE_MODEL, node, f"imports the reference Model from {module}")
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
            if dotted(base).split(".")[-1] == "Model":
                self.add(rules.STATIC_REFERENCE_MODEL, node, f"class {node.name} subclasses the reference Model")
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
        if "staticmethod" in decorators(node):
            own = self.classes[-1]
            return {args[0].arg} if self.solution.is_function_class(own) and node.name in CONTEXT_METHODS else set()
        return {args[0].arg}

    def visit_FunctionDef(self, node) -> None:
        if not isinstance(node, ast.Lambda):
            self._binds(node.name, node)
            for child in node.decorator_list + ([node.returns] if node.returns else []):
                self.visit(child)
        self.visit(node.args)
        names = bound_names(node)
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
        self.scopes.append(_Scope("function", bound_names(node), self.scopes[-1].receivers))
        self.generic_visit(node)
        self.scopes.pop()

    visit_ListComp = visit_SetComp = visit_DictComp = visit_GeneratorExp = _comprehension

    def visit_arguments(self, node: ast.arguments) -> None:
        for default in node.defaults + [d for d in node.kw_defaults if d]:
            self.visit(default)
        for arg in node.posonlyargs + node.args + node.kwonlyargs + [a for a in (node.vararg, node.kwarg) if a]:
            self._binds(arg.arg, arg, receiver=False)   # a parameter binds in the new scope, not this one
            if arg.annotation:
                self.visit(arg.annotation)

    def _binds(self, name: str, node: ast.AST, receiver: bool = True) -> None:
        """A name bound by an assignment, a parameter, a def: never an imported name or a receiver, and a
        special name (`__x__`) only by a def or as one of the few a module or class sets by hand."""
        if name in ("staticmethod", "classmethod"):   # what a method's receiver is depends on them
            self.add(rules.STATIC_ALLOWLIST, node, f"rebinds {name}: the builtin decides what a method receives")
        elif name in allow.DUNDER_DEFS_REFUSED:
            self.add(rules.STATIC_INTROSPECTION, node,
                     f"defines {name}: a solution's classes may not intercept PyTorch "
                     "calls or the harness's handling of objects")
        elif (_special(name) and name not in allow.DUNDER_BINDINGS
              and not isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef))):
            self.add(rules.STATIC_INTROSPECTION, node,
                     f"assigns {name}: special names are the interpreter's and libraries' facts about a class or "
                     "module (dataclasses compiles code from __annotations__, matching reads __match_args__); "
                     "define methods with def, annotate fields as `name: type`")
        elif name in self.solution.imports:
            self.add(rules.STATIC_MONKEYPATCH, node,
                     f"rebinds {name}, an imported name: keep imported names as imported")
        elif receiver and name in self.scopes[-1].receivers:
            self.add(rules.STATIC_ATTRIBUTE_WRITE, node,
                     f"rebinds {name}: a method's receiver stays what it was called on")

    def visit_ExceptHandler(self, node) -> None:
        if node.name:
            self._binds(node.name, node)
        self.generic_visit(node)

    visit_MatchAs = visit_MatchStar = visit_ExceptHandler

    def visit_MatchClass(self, node: ast.MatchClass) -> None:
        """`case C(name=pattern)` reads the subject's attribute `name`: held to the rules of `subject.name`."""
        for attr in node.kwd_attrs:
            refused = self._attribute_refusal(attr, own=False)
            if refused:
                self.add(refused[0], node, f"a class pattern reads .{attr}: {refused[1]}")
        self.generic_visit(node)

    def visit_MatchMapping(self, node: ast.MatchMapping) -> None:
        if node.rest:
            self._binds(node.rest, node)
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
            self.add(rules.STATIC_REFERENCE_MODEL, node, "uses the name Model (the reference implementation)")
        elif name in self.solution.imports:
            self._check_path(self.solution.imports[name], node)
        elif name in self.solution.classes and self.solution.is_function_class(self.solution.classes[name]):
            self._check_function_class(node)
        elif self._local(name) or name in allow.MODULE_DUNDERS:
            pass
        elif hasattr(builtins, name) and name not in allow.BUILTINS:
            rule = rules.STATIC_INTROSPECTION if name in allow.REFLECTION_BUILTINS else rules.STATIC_ALLOWLIST
            self.add(rule, node, f"uses {name}(), which a kernel solution does not need and which can reach "
                                 "around the harness; see SKILL.md for what model_new.py may use")
        elif name in allow.LITERAL_NAME_BUILTINS:
            self._check_literal_name(name, node)
        elif name.startswith("__") and name not in allow.MODULE_DUNDERS:
            self.add(rules.STATIC_INTROSPECTION, node, f"uses {name}: only __name__ and __file__ may be read")
        elif name not in self.solution.bound and name not in allow.BUILTINS and name not in allow.MODULE_DUNDERS:
            self.add(rules.STATIC_ALLOWLIST, node,
                     f"uses {name}, which the solution never defines and is not an allowed builtin")

    def _check_function_class(self, node: ast.Name) -> None:
        """An autograd Function of its own: called through .apply (its static methods take the context
        they write to, which a direct call could make any object)."""
        parent = self.parent(node)
        if not ((isinstance(parent, ast.Attribute) and parent.value is node and parent.attr == "apply")
                or isinstance(parent, ast.ClassDef)):
            self.add(rules.STATIC_ATTRIBUTE_WRITE, node,
                     f"uses {node.id} other than as {node.id}.apply(...): an autograd "
                     "Function is called through apply")

    def _check_literal_name(self, name: str, node: ast.Name) -> None:
        call = self.parent(node)
        literal = (isinstance(call, ast.Call) and call.func is node and len(call.args) >= 2
                   and isinstance(call.args[1], ast.Constant) and isinstance(call.args[1].value, str))
        if not literal:
            self.add(rules.STATIC_INTROSPECTION, node, f"{name}() with a computed name: write the attribute out "
                                                       f"(obj.name), or call {name}(obj, \"name\") with a literal")
        elif (call.args[1].value.startswith("_") or self._attribute_refusal(call.args[1].value, own=False)
              or call.args[1].value in ("format", "format_map")):
            self.add(rules.STATIC_INTROSPECTION, node,
                     f"{name}() of {call.args[1].value!r}: an attribute a solution may not "
                     f"name directly is not reached through {name}() either")

    # attributes -------------------------------------------------------------------------
    def _check_path(self, path: str, node: ast.AST) -> None:
        """A module, or a member below one, named where `node` ends its dotted path."""
        parent = self.parent(node)
        if isinstance(parent, ast.Attribute) and parent.value is node:
            return   # the longer path is checked where it ends
        root = root_of(node)
        if path.split(".")[0] in self.solution.extensions or getattr(root, "id", None) in self.refused_imports:
            return
        allowed = self._member(path)
        if path in LOADERS and not (isinstance(parent, ast.Call) and parent.func is node):
            self.add(rules.STATIC_EXTENSION_NAME, node, f"{path.split('.')[-1]} used other than in a direct call: "
                                                        "call it as load_inline(name=\"...\", ...)")
        elif path in allow.COPIES_ATTRIBUTES and not (
                isinstance(parent, ast.Call) and parent.func is node and len(parent.args) == 1
                and not isinstance(parent.args[0], ast.Starred) and not parent.keywords):
            self.add(rules.STATIC_INTROSPECTION, node,
                     f"{path.split('.')[-1]} other than as {path.split('.')[-1]}(function): the attributes it copies "
                     "(assigned=, updated=) are read and written by name, special ones included")
        elif allowed is None:
            self.add(rules.STATIC_ALLOWLIST, node,
                     f"uses the module {path} as a value: name its members where you use them "
                     f"({path}.member)")
        elif allowed is False:   # (a refusal with a reason of its own says what to do instead)
            self.refuse(path, node, f"uses {path}", "" if allow.refusal(path) else
                        "that member is not on the list a solution may use (see SKILL.md); do the work in your kernels")

    def _attribute_refusal(self, attr: str, own: bool) -> tuple[rules.Rule, str] | None:
        """(rule, why) where reading `.attr` is refused, however it is reached (`obj.attr`, a literal getattr,
        a class pattern); `own`: the object is the solution's own (a receiver, its class or object)."""
        if attr.startswith("__") and attr.endswith("__"):
            if attr not in allow.ATTRIBUTE_DUNDERS:
                return rules.STATIC_INTROSPECTION, "special attributes reach around the harness"
        elif attr.startswith("_") and not own:
            return (rules.STATIC_INTROSPECTION,
                    "private attributes are off limits except on self and the solution's own classes")
        elif attr in allow.FRAME_ATTRIBUTES:
            return rules.STATIC_INTROSPECTION, "frames and tracebacks reach the harness's state"
        elif attr in allow.IO_METHODS:
            return rules.STATIC_ALLOWLIST, "a solution builds paths, it does not work on files"
        elif attr in allow.VALUE_METHODS:
            return rules.STATIC_NUMPY, ("it takes a tensor's values into numpy or Python, or computes them with a "
                                        "Python function: only your kernels may compute")
        return None

    def visit_Attribute(self, node: ast.Attribute) -> None:
        attr, base = node.attr, node.value
        root = root_of(node)
        root_name = root.id if isinstance(root, ast.Name) else None
        # a public function of its own extension: its names are the solution's to choose
        extension = isinstance(base, ast.Name) and base.id in self.solution.extension_names and not attr.startswith("_")
        refused = None if extension else self._attribute_refusal(attr, self._own(base))
        if refused:
            self.add(refused[0], node, f"uses .{attr}: {refused[1]}")
        elif attr in ("format", "format_map") and not extension:
            self._check_format(node)
        if isinstance(base, ast.Name) and base.id in self.solution.classes and base.id not in self.solution.imports:
            self._check_class_member(base.id, attr, node)
        if isinstance(node.ctx, (ast.Store, ast.Del)):
            self._check_write(node, root_name)
        if root_name in self.solution.imports and dotted(node):
            full = self.solution.imports[root_name] + dotted(node)[len(root_name):]
            if isinstance(node.ctx, ast.Load):
                self._check_path(full, node)
            if not isinstance(base, ast.Name):   # the root name itself is no value here: not visited
                self.visit(base)
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
        kinds = decorators(method)
        static = "staticmethod" in kinds and not (self.solution.is_function_class(self.solution.classes[class_name])
                                                  and attr in CONTEXT_METHODS)
        if not (static or "classmethod" in kinds):
            self.add(rules.STATIC_ATTRIBUTE_WRITE, node,
                     f"calls {class_name}.{attr} through the class: call methods on an "
                     "instance (self.method(...)); autograd Functions through .apply")

    def _check_write(self, node: ast.Attribute, root_name: str | None) -> None:
        """One level below the solution's own objects only: `self.weight.requires_grad = x` is a
        method away (`requires_grad_`), and a deeper target may be an object it did not create."""
        target = dotted(node) or ast.unparse(node)
        if root_name in self.solution.imports:
            why = allow.refusal(self.solution.resolve(node) or target)
            self.add(rules.STATIC_MONKEYPATCH, node,
                     f"assigns {target}: a module's or library's attributes are not yours "
                     f"to replace{'; ' + why[1] if why else ''}")
        elif not (isinstance(node.value, ast.Name) and self._own(node.value)):
            self.add(rules.STATIC_ATTRIBUTE_WRITE, node,
                     f"assigns {target}: a solution assigns only self.<name> (or cls, an "
                     "autograd context, an object of its own classes); call a method "
                     "for anything deeper")

    def _check_format(self, node: ast.Attribute) -> None:
        base = node.value
        template = (base.value if isinstance(base, ast.Constant) and isinstance(base.value, str)
                    else self.solution.strings.get(base.id) if isinstance(base, ast.Name) else None)
        if template is None:
            self.add(rules.STATIC_INTROSPECTION, node,
                     f".{node.attr}() on a string the pass cannot read (format fields reach "
                     "attributes): use an f-string or a literal template")
            return
        for attr in format_fields(template):
            if attr.startswith("_") or attr in allow.FRAME_ATTRIBUTES:
                self.add(rules.STATIC_INTROSPECTION, node,
                         f"a format field reads .{attr}: special attributes are off limits")

    # calls ------------------------------------------------------------------------------
    def visit_Call(self, node: ast.Call) -> None:
        path = self.solution.resolve(node.func)
        if path in LOADERS:
            name = extension_name(node)
            if not (isinstance(name, ast.Constant) and isinstance(name.value, str)):
                self.add(rules.STATIC_EXTENSION_NAME, node, f"{path.split('.')[-1]}() without a literal name: write "
                                                            "name=\"my_ext\" as a string literal")
            else:
                problem = allow.extension_name_problem(name.value)
                if problem:
                    self.add(rules.STATIC_EXTENSION_NAME, node, problem)
        self.generic_visit(node)

    # context managers -------------------------------------------------------------------
    def visit_With(self, node) -> None:
        for item in node.items:
            self.visit(item)
        self.scopes[-1].withs += 1
        for child in node.body:
            self.visit(child)
        self.scopes[-1].withs -= 1

    visit_AsyncWith = visit_With

    def visit_Yield(self, node) -> None:
        if self.scopes[-1].withs:
            self.add(rules.STATIC_ALLOWLIST, node,
                     "suspends a generator inside a `with` block: its context (a stream, "
                     "no_grad, a graph capture) would stay in place for the whole process; "
                     "leave the block before yielding")
        self.generic_visit(node)

    visit_YieldFrom = visit_Await = visit_Yield

    # exceptions -------------------------------------------------------------------------
    def visit_Try(self, node: ast.Try) -> None:
        for handler in node.handlers:
            names = _handler_names(handler)
            broad = handler.type is None or bool(names & BROAD_EXCEPTIONS)
            if broad:
                self.add(rules.STATIC_BROAD_EXCEPT, handler,
                         "catches broad exceptions" + (" inside forward: a fallback path around your kernel"
                                                        if self.forward_depth else ""),
                         reject=bool(self.forward_depth))
        self.generic_visit(node)

    visit_TryStar = visit_Try


def _special(name: str) -> bool:
    return len(name) > 4 and name.startswith("__") and name.endswith("__")


def _handler_names(handler: ast.ExceptHandler) -> set[str]:
    if handler.type is None:
        return set()
    nodes = handler.type.elts if isinstance(handler.type, ast.Tuple) else [handler.type]
    return {dotted(n).split(".")[-1] for n in nodes}


# C++/CUDA sources: ways around the guard, said early with a reason (the link-level check in
# symbols.py is what cannot be dodged; this scan only explains).
_CPP_FORBIDDEN = {
    r"ExcludeDispatchKeyGuard|ExcludeDispatchKeySet|IncludeDispatchKeyGuard|AutoDispatchBelow|"
    r"DispatchKeySet|_AutoDispatch|tls_set_dispatch_key": rules.STATIC_DISPATCH_BYPASS,
    r"\bdlopen\b|\bdlsym\b|\bpopen\b|\bsystem\s*\(|\bfork\s*\(|\bexecv": rules.STATIC_NATIVE_ESCAPE,
    r"TORCH_LIBRARY(_IMPL|_FRAGMENT)?\s*\(\s*aten\b": rules.STATIC_ATEN_OVERRIDE,
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
                       if rule is rules.STATIC_ATEN_OVERRIDE else "steps around the harness's checks")
                findings.append(Finding(rule.short, lineno, f"{filename} uses {match.group(0)}, which {why}"))
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
    return sorted(checker.findings, key=lambda f: (f.rule == rules.STATIC_ALLOWLIST.short, f.line))
