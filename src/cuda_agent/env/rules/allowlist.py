"""What a solution's Python (`model_new.py`) may use: the lists behind the static pass's allowlist.

A kernel solution's Python builds its extension, creates its parameters and calls its kernels. Nothing
else it could reach should be the harness that runs in the same process: no reflection, no module the
harness uses, no writes into modules or classes it did not define. `static_check.py` applies these
lists; `docs/verification.md` prints them.
"""

from __future__ import annotations

import builtins
import functools
import importlib.util
import sys
import types

from cuda_agent.env.rules import registry as rules

# Modules that may be imported (`import X`, `from X import ...`); their members are checked below.
IMPORTS = (
    "__future__", "torch", "torch.nn", "torch.nn.functional", "torch.nn.init", "torch.cuda", "torch.autograd",
    "torch.utils.cpp_extension", "math", "typing", "dataclasses", "functools", "itertools", "collections",
    "collections.abc", "os", "os.path", "pathlib", "cuda_extension",
)
# The workspace's extension; the names given to load_inline/load are extensions as well.
EXTENSION = "cuda_extension"

# Members of the listed modules, by module. Torch's operators are added from torch itself
# (`module_members`): calling them is the runtime guard's business, naming them is harmless.
MEMBERS: dict[str, frozenset[str]] = {name: frozenset(members.split()) for name, members in {
    "torch": """empty empty_like empty_strided zeros zeros_like ones ones_like full full_like tensor as_tensor
        arange randn randn_like rand rand_like randint float32 float16 bfloat16 float64 half float double int8
        int16 int32 int64 long int uint8 bool contiguous_format channels_last strided
        Tensor Size device dtype Generator no_grad inference_mode enable_grad is_tensor is_floating_point
        is_complex numel finfo iinfo get_default_dtype is_grad_enabled is_inference_mode_enabled
        are_deterministic_algorithms_enabled cuda nn autograd utils ops linalg fft special""",
    "torch.nn": """Module Parameter Buffer ModuleList ModuleDict ParameterList ParameterDict Sequential Identity
        Linear Conv1d Conv2d Conv3d ConvTranspose1d ConvTranspose2d ConvTranspose3d BatchNorm1d BatchNorm2d
        BatchNorm3d LayerNorm GroupNorm InstanceNorm2d Embedding Dropout ReLU GELU init functional""",
    "torch.cuda": """Stream Event stream current_stream default_stream synchronize is_available device_count
        current_device get_device_capability get_device_properties get_device_name CUDAGraph graph
        graph_pool_handle""",
    "torch.autograd": "Function",
    "torch.utils": "cpp_extension",
    "torch.utils.cpp_extension": "load_inline load CUDA_HOME include_paths",
    "typing": """Any Optional Union List Dict Tuple Set FrozenSet Sequence Mapping Iterable Iterator Callable
        Type TypeVar Generic Literal Final ClassVar NamedTuple Protocol TYPE_CHECKING cast overload""",
    "dataclasses": "dataclass field",
    "functools": "reduce partial wraps",
    "os": "path sep",
    "os.path": "join dirname abspath realpath basename exists isfile isdir splitext normpath",
    "pathlib": "Path PurePath",
    "__future__": "annotations",
}.items()}
# torch operators that are file IO rather than compute
TORCH_REFUSED = frozenset({"from_file"})
# Modules whose every public member that is not itself a module may be named (pure functions, classes).
PUBLIC_MEMBERS = ("math", "itertools", "collections", "collections.abc")
# torch.ops: the solution's own operator namespaces, not PyTorch's (their operators are reached through
# torch's functions, and their overload objects register Python kernels) nor the loader's methods.
TORCH_OPS_REFUSED = frozenset("aten prim prims higher_order quantized profiler load_library import_module "
                              "loaded_libraries".split())


@functools.cache
def torch_op_namespaces() -> frozenset[str]:
    """The operator namespaces PyTorch itself registers (`mkl`, `mkldnn_prepacked`, `onednn`, `static_runtime`,
    ...): their operators are PyTorch's compute, never a solution's own."""
    import torch

    return frozenset(name.split("::", 1)[0] for name in torch._C._dispatch_get_all_op_names()) | TORCH_OPS_REFUSED

# Builtins a solution may name. Every other builtin is refused: reflection (getattr with a computed
# name, vars, globals, type, dir, ...), code from strings (eval, exec, compile, __import__), files
# and consoles (open, input, breakpoint, help), raw memory (memoryview).
BUILTINS = frozenset("""
    abs all any ascii bin bool bytearray bytes callable chr complex dict divmod enumerate filter float format
    frozenset hash hex id int isinstance issubclass iter len list map max min next object oct ord pow print
    property range repr reversed round set slice sorted staticmethod classmethod str sum super tuple zip
    True False None NotImplemented Ellipsis getattr hasattr
""".split()) | frozenset(name for name in dir(builtins)
                         if name.endswith(("Error", "Exception", "Warning")) or name == "StopIteration")
# Refused builtins that reach around the harness (rule introspection; other refused builtins: allowlist).
REFLECTION_BUILTINS = frozenset("""eval exec compile __import__ globals locals vars setattr delattr type dir
    breakpoint""".split())
# getattr/hasattr only as a direct call with a literal public name (`getattr(self, "weight", None)`).
LITERAL_NAME_BUILTINS = frozenset({"getattr", "hasattr"})
# Module-level dunders a solution may read (`__file__` for paths next to it).
MODULE_DUNDERS = frozenset({"__name__", "__file__"})
# Dunder attributes a solution may use (`super().__init__()`, `nn.Module.__init__(self)`, a name).
ATTRIBUTE_DUNDERS = frozenset({"__init__", "__name__"})
# Special methods a solution's classes may not define: they intercept PyTorch calls, hand out an
# object of another class, or run whenever the harness collects or subclasses.
DUNDER_DEFS_REFUSED = frozenset("""__torch_function__ __torch_dispatch__ __new__ __del__ __init_subclass__
    __set_name__ __class_getitem__ __getattribute__""".split())
# Special names a solution may bind by assignment (a module's `__all__`, a class's `__slots__`, TorchScript's
# `__constants__`, a docstring). Any other (`__annotations__`, `__match_args__`, `__globals__`, ...) is what the
# interpreter or a library reads as a fact about the class or module: dataclasses compiles the source of its
# generated methods from `__annotations__`' keys (any string), pattern matching reads the attributes
# `__match_args__` names.
DUNDER_BINDINGS = frozenset({"__all__", "__slots__", "__constants__", "__doc__"})
# Attributes refused on any object: frames and tracebacks (they reach the harness's locals).
FRAME_ATTRIBUTES = frozenset("""gi_frame gi_code gi_yieldfrom cr_frame cr_code cr_await ag_frame ag_code f_back
    f_globals f_locals f_builtins f_code tb_frame tb_next mro""".split())
# Methods refused on any object: files and processes (paths are for building, not for IO; a storage's
# `from_file` creates and writes the file it maps).
IO_METHODS = frozenset("""write_text write_bytes open unlink symlink_to hardlink_to link_to readlink chmod
    touch mkdir rmdir rename iterdir glob rglob fileno from_file""".split())

# Tensor methods that take a tensor's values into numpy or Python, or compute with a Python callable
# element by element: the work of a forward done outside the solution's kernels (rule numpy).
VALUE_METHODS = frozenset({"numpy", "tolist", "apply_", "map_", "map2_"})
# functools' members that copy attributes named by their arguments (getattr / setattr with a computed name):
# only as a call on the wrapped function alone (`@functools.wraps(f)`).
COPIES_ATTRIBUTES = frozenset({"functools.wraps"})

# Why a refused module or member is refused, said in the refusal (longest matching prefix wins).
REFUSED: dict[str, tuple[rules.Rule, str]] = {
    "threading": (rules.STATIC_THREADING, "work must end when forward returns"),
    "_thread": (rules.STATIC_THREADING, "work must end when forward returns"),
    "multiprocessing": (rules.STATIC_THREADING, "work must end when forward returns"),
    "concurrent": (rules.STATIC_THREADING, "work must end when forward returns"),
    "subprocess": (rules.STATIC_THREADING, "a kernel solution starts no processes"),
    "asyncio": (rules.STATIC_THREADING, "work must end when forward returns"),
    "os.system": (rules.STATIC_THREADING, "a kernel solution starts no processes"),
    "os.fork": (rules.STATIC_THREADING, "a kernel solution starts no processes"),
    "os.popen": (rules.STATIC_THREADING, "a kernel solution starts no processes"),
    "os.environ": (rules.STATIC_ALLOWLIST, "the harness builds your extension and owns the process's "
                                           "environment; pass compiler flags as extra_cflags / extra_cuda_cflags"),
    "torch.backends": (rules.STATIC_ALLOWLIST, "its switches change what PyTorch does in the harness's process "
                                               "too; set the math mode of your own handles (cublasSetMathMode) in C++"),
    "sys": (rules.STATIC_INTROSPECTION, "it reaches the harness's modules and frames"),
    "inspect": (rules.STATIC_INTROSPECTION, "it reaches the harness's frames"),
    "traceback": (rules.STATIC_INTROSPECTION, "it reaches the harness's frames"),
    "gc": (rules.STATIC_INTROSPECTION, "it reaches the harness's objects"),
    "importlib": (rules.STATIC_INTROSPECTION, "it loads and replaces modules"),
    "builtins": (rules.STATIC_INTROSPECTION, "it replaces functions the harness uses"),
    "__main__": (rules.STATIC_INTROSPECTION, "it is the harness's worker"),
    "cuda_agent": (rules.STATIC_INTROSPECTION, "it is the harness"),
    "torch._C": (rules.STATIC_INTROSPECTION, "it reaches the dispatcher and the guard's machinery"),
    "torch.overrides": (rules.STATIC_INTROSPECTION, "it intercepts PyTorch calls"),
    "torch.utils._python_dispatch": (rules.STATIC_INTROSPECTION, "it intercepts PyTorch calls"),
    "torch.cuda.set_stream": (rules.STATIC_ALLOWLIST, "it changes the process's current stream; use `with "
                                                      "torch.cuda.stream(s):` and join the stream before returning"),
    "torch.cuda.set_device": (rules.STATIC_ALLOWLIST, "the harness chooses the device"),
    "ctypes": (rules.STATIC_CTYPES, "native code belongs in kernels the harness builds"),
    "cffi": (rules.STATIC_CTYPES, "native code belongs in kernels the harness builds"),
    "socket": (rules.STATIC_NETWORK, "a kernel solution has no use for the network"),
    "urllib": (rules.STATIC_NETWORK, "a kernel solution has no use for the network"),
    "requests": (rules.STATIC_NETWORK, "a kernel solution has no use for the network"),
    "http": (rules.STATIC_NETWORK, "a kernel solution has no use for the network"),
    "numpy": (rules.STATIC_NUMPY, "only your kernels may compute"),
    "model": (rules.STATIC_REFERENCE_MODEL, "the reference is not yours to use"),
    "reference_task": (rules.STATIC_REFERENCE_MODEL, "the reference is not yours to use"),
    "torch.library": (rules.STATIC_CUSTOM_OP, "define operators in C++ (TORCH_LIBRARY) in a namespace of your "
                                              "own"),
    "torch.compile": (rules.STATIC_TORCH_COMPILE, "its generated kernels are not your own kernels"),
    "torch.jit": (rules.STATIC_TORCH_COMPILE, "its generated kernels are not your own kernels"),
    "torch._dynamo": (rules.STATIC_TORCH_COMPILE, "its generated kernels are not your own kernels"),
    "torch._inductor": (rules.STATIC_TORCH_COMPILE, "its generated kernels are not your own kernels"),
}

ADVICE = ("a solution's Python may import only " + ", ".join(m for m in IMPORTS if m != "__future__")
          + " and its own extensions (see SKILL.md)")

# Names an extension may not take: it is registered in sys.modules under its name.
RESERVED_EXTENSION_NAMES = frozenset({"__main__", "cuda_agent", "torch", "model", "model_new", "reference_task"})


def refusal(path: str) -> tuple[rules.Rule, str] | None:
    """(rule, why) for a refused module or member with a reason of its own, else None."""
    parts = path.split(".")
    for end in range(len(parts), 0, -1):
        hit = REFUSED.get(".".join(parts[:end]))
        if hit:
            return hit
    return None


def _public_non_modules(module: types.ModuleType) -> frozenset[str]:
    return frozenset(n for n in dir(module)
                     if not n.startswith("_") and not isinstance(getattr(module, n, None), types.ModuleType))


@functools.cache
def module_members(module: str) -> frozenset[str]:
    """The members of an importable module that may be named; torch's are read from torch itself."""
    listed = MEMBERS.get(module, frozenset())
    if module in PUBLIC_MEMBERS:
        return listed | _public_non_modules(importlib.import_module(module))
    if module == "torch":
        import torch
        import torch.functional

        ops = {n for n in dir(torch._C._VariableFunctions) if not n.startswith("_") and hasattr(torch, n)}
        kinds = (torch.dtype, torch.memory_format, torch.layout)
        constants = {n for n in dir(torch) if not n.startswith("_") and isinstance(getattr(torch, n, None), kinds)}
        return (listed | ops | set(torch.functional.__all__) | constants) - TORCH_REFUSED
    if module in ("torch.linalg", "torch.fft", "torch.special"):
        return _public_non_modules(importlib.import_module(module))
    if module == "torch.nn":
        import torch.nn as nn

        layers = {n for n in dir(nn) if isinstance(getattr(nn, n), type)
                  and (issubclass(getattr(nn, n), nn.Module) or n in ("Parameter", "Buffer"))}
        return frozenset(layers | {"init", "functional"})
    if module == "torch.nn.init":
        import torch.nn.init as init

        return frozenset(n for n in dir(init) if not n.startswith("_")
                         and getattr(getattr(init, n), "__module__", None) == "torch.nn.init")
    if module == "torch.nn.functional":
        import torch.nn.functional as F

        return frozenset(n for n in dir(F) if not n.startswith("_") and callable(getattr(F, n))
                         and not isinstance(getattr(F, n), type) and n != "boolean_dispatch"
                         and not n.startswith(("has_torch_function", "handle_torch_function"))
                         and getattr(getattr(F, n), "__module__", None) not in ("torch.overrides", "typing"))
    return listed


# Namespaces: names that are modules (usable only as `module.member`, never as values).
NAMESPACES = frozenset(IMPORTS) | {"torch.utils", "torch.ops", "torch.linalg", "torch.fft", "torch.special"}


def member_allowed(path: str) -> bool | None:
    """Whether a dotted path below an allowed module may be named: True (a listed member or below
    one), False (refused), None (a namespace: allowed only as the base of a longer path)."""
    if path in NAMESPACES:
        return None
    parts = path.split(".")
    if parts[0] == EXTENSION:
        return True
    if parts[:2] == ["torch", "ops"]:
        if len(parts) == 3 and parts[2] not in torch_op_namespaces():
            return None
        return len(parts) > 3 and parts[2] not in torch_op_namespaces()
    for end in range(len(parts) - 1, 0, -1):   # the longest namespace that holds this path
        namespace = ".".join(parts[:end])
        if namespace in NAMESPACES:   # (the listed names first: most solutions never need torch imported)
            return parts[end] in MEMBERS.get(namespace, ()) or parts[end] in module_members(namespace)
    return False


def extension_name_problem(name: object, loaded: bool = False) -> str | None:
    """Why `name` may not name an extension module (it would take the place of a module in
    sys.modules), or None. `loaded`: modules this process has loaded count too (in the candidate's
    process, where extensions are registered; the harness builds extensions it never loads)."""
    if not isinstance(name, str) or not name.isidentifier():
        return f"extension name {name!r} is not a Python identifier"
    if name == EXTENSION:
        return None
    if (name in RESERVED_EXTENSION_NAMES or name in sys.stdlib_module_names or name in sys.builtin_module_names
            or (loaded and name in sys.modules)):
        return f"extension name {name!r} is the name of a module; give your extension a name of its own"
    try:
        found = importlib.util.find_spec(name) is not None
    except (ImportError, ValueError):
        found = True
    if found:
        return f"extension name {name!r} is the name of an importable module; give your extension a name of its own"
    return None
