"""The static pass's allowlist over the solution's Python (AST only, no evaluation): every honest
solution in the repository passes it, and each way around the harness the red team found is refused
by its rule, on its line."""

from __future__ import annotations

import json
import textwrap
from pathlib import Path

import pytest

from cuda_agent.env.rules.allowlist import extension_name_problem
from cuda_agent.env.builds.inline import InlineBuilder
from cuda_agent.env.builds.compiler import BuildError
from cuda_agent.env.rules.static_check import check_source

ROOT = Path(__file__).resolve().parents[2]
HEADER = "import torch\nimport torch.nn as nn\nimport cuda_extension\n\n"


def rejections(source: str) -> list:
    return [f for f in check_source(source) if f.reject]


# -- honest solutions ------------------------------------------------------------------------------


def _repo_solutions():
    """Every solution source kept in the repository: files, and the honest cases of the hack suites."""
    from tests.hacks.cases import HONEST
    from tests.hacks.cases_wave import HONEST_WAVE

    for pattern in ("src/cuda_agent/examples/**/*.py", "tests/gpu/solutions/**/*.py",
                    "benchmarks/kernelbench_solutions/level*/**/*.py"):
        for path in sorted(ROOT.glob(pattern)):
            if path.name not in ("model.py", "task.py"):
                yield str(path.relative_to(ROOT)), path.read_text()
    for case in HONEST + HONEST_WAVE:
        for name, text in case.build()[1].files.items():
            if name.endswith(".py"):
                yield f"{case.id}/{name}", text
    from tests.gpu.hacks.test_gpu_wave import PUBLISHED   # the GPU suites' honest controls

    for name, build in PUBLISHED.items():
        yield f"{name}/model_new.py", build()[1].entry_code
    from tests.agent.conftest import RELU_MODEL_NEW
    yield "tests/agent/conftest.py", RELU_MODEL_NEW


def _skill_examples():
    """The ```python blocks of the agent's SKILL files that define ModelNew."""
    for path in sorted((ROOT / "src/cuda_agent/agent/assets").glob("SKILL*.md")):
        for block in path.read_text().split("```python")[1:]:
            code = block.split("```")[0]
            if "ModelNew" in code:
                yield f"{path.name}", code


def _scripted_writes():
    """model_new.py as the scripted agent episode writes it."""
    data = json.loads((ROOT / "tests/agent/data/scripted_episode.json").read_text())
    for turn in data.get("requests", []):
        for message in turn:
            for call in message.get("tool_calls") or []:
                args = json.loads(call["function"]["arguments"])
                if str(args.get("path", "")).endswith("model_new.py") and "content" in args:
                    yield "scripted_episode", args["content"]


REPO = list(_repo_solutions()) + list(_skill_examples()) + list(_scripted_writes())


def test_the_repository_holds_the_solutions_this_test_walks():
    names = [name for name, _ in REPO]
    assert len(names) >= 60
    assert any(n.startswith("benchmarks/") for n in names) and any(n.startswith("honest_") for n in names)
    assert any(n.startswith("SKILL") for n in names)


@pytest.mark.parametrize("name,source", REPO, ids=[name for name, _ in REPO])
def test_every_honest_solution_in_the_repository_passes(name, source):
    assert not rejections(source), "\n".join(f.describe() for f in rejections(source))


# What honest GPU solutions do in Python, written out (the GPU suites keep most of it in C++).
HONEST_PATTERNS = {
    "joined_side_stream": """
        class ModelNew(nn.Module):
            def __init__(self):
                super().__init__()
                self.side = torch.cuda.Stream()
                self.done = torch.cuda.Event()

            def forward(self, x):
                out = torch.empty_like(x)
                self.side.wait_stream(torch.cuda.current_stream())
                with torch.cuda.stream(self.side):
                    cuda_extension.relu_out(x, out)
                    self.done.record()
                torch.cuda.current_stream().wait_stream(self.side)
                return out
        """,
    "cuda_graph_of_own_kernels": """
        class ModelNew(nn.Module):
            def __init__(self):
                super().__init__()
                self.graph = None
                self._static_in = None

            def forward(self, x):
                if self.graph is None:
                    self._static_in = torch.empty_like(x)
                    self._static_out = torch.empty_like(x)
                    self.graph = torch.cuda.CUDAGraph()
                    with torch.cuda.graph(self.graph):
                        cuda_extension.relu_out(self._static_in, self._static_out)
                cuda_extension.copy_(self._static_in, x)
                self.graph.replay()
                return self._static_out
        """,
    "autograd_function_and_weight_cache": """
        import math
        from typing import Optional


        class _Relu(torch.autograd.Function):
            @staticmethod
            def forward(ctx, x):
                ctx.shape = x.shape
                ctx.save_for_backward(x)
                return cuda_extension.relu(x)

            @staticmethod
            def backward(ctx, grad):
                (x,) = ctx.saved_tensors
                return cuda_extension.relu_backward(grad, x)


        class ModelNew(nn.Module):
            def __init__(self, features: int):
                super().__init__()
                self.weight = nn.Parameter(torch.empty(features, features))
                nn.init.kaiming_uniform_(self.weight, a=math.sqrt(5))
                self._cache: Optional[torch.Tensor] = None
                self.calls = 0

            def forward(self, x):
                self.calls += 1
                if self._cache is None or self._cache.shape != self.weight.shape:
                    self._cache = cuda_extension.transpose(self.weight.detach())   # built at the first call
                y = _Relu.apply(cuda_extension.matmul(x, self._cache))
                scale = float(cuda_extension.norm(y).item())   # a Python number from a kernel's result
                return y, scale
        """,
    "load_inline_with_paths_and_workspace": """
        import os
        from pathlib import Path
        from torch.utils.cpp_extension import load_inline

        HERE = os.path.dirname(os.path.abspath(__file__))
        SOURCE = (Path(__file__).parent / "kernels" / "relu.cu").read_text() if os.path.exists(HERE) else ""
        TEMPLATE = "constexpr int BLOCK = {block};"
        ext = load_inline(name="fused_relu_ext", cpp_sources="torch::Tensor relu(torch::Tensor x);",
                          cuda_sources=TEMPLATE.format(block=256) + SOURCE, functions=["relu"],
                          extra_cuda_cflags=["-O3"], verbose=False)


        class Holder:
            pass


        class ModelNew(nn.Module):
            def __init__(self):
                super().__init__()
                self.workspace = None
                self.ext = ext
                state = Holder()
                state.ready = False
                self.state = state

            def forward(self, x):
                if self.workspace is None or self.workspace.numel() < x.numel():
                    self.workspace = torch.empty(x.numel(), dtype=torch.float32, device=x.device)
                assert isinstance(x, torch.Tensor) and x.dtype in (torch.float32, torch.float16)
                n = getattr(self, "workspace").numel()
                return self.ext.relu(x.contiguous()), n
        """,
    "custom_op_namespace_and_dataclass": """
        from dataclasses import dataclass, field
        import functools
        import itertools


        @dataclass
        class Config:
            block: int = 256
            sizes: list = field(default_factory=list)


        class ModelNew(nn.Module):
            def __init__(self, *dims):
                super().__init__()
                self.config = Config()
                self.numel = functools.reduce(lambda a, b: a * b, dims, 1)
                self.pairs = list(itertools.product(range(2), repeat=2))

            def forward(self, input):
                major, minor = torch.cuda.get_device_capability() if torch.cuda.is_available() else (0, 0)
                return torch.ops.my_kernels.fused(input, self.config.block)
        """,
    "special_names_matching_and_wrapping": """
        import dataclasses
        import functools

        __all__ = ["ModelNew"]


        @dataclasses.dataclass(frozen=True)
        class Tile:
            rows: int = 32
            cols: int = 32


        class Slots:
            __slots__ = ("tile",)

            def __init__(self, tile):
                self.tile = tile


        def logged(function):
            @functools.wraps(function)
            def wrapper(*args):
                return function(*args)
            return wrapper


        class ModelNew(nn.Module):
            \"\"\"A kernel solution's docstring.\"\"\"
            __constants__ = ["tile"]

            def __init__(self):
                super().__init__()
                self.tile = Slots(Tile())

            @logged
            def forward(self, x):
                match self.tile.tile, x.dim():
                    case Tile(rows=32, cols=cols), 2 if cols > 0:
                        return cuda_extension.relu(x)
                    case {"rows": rows}, _:
                        return cuda_extension.relu(x) * rows
                    case _:
                        raise ValueError(f"{x.dim()} dimensions")
        """,
}


@pytest.mark.parametrize("name", HONEST_PATTERNS)
def test_honest_python_patterns_pass(name):
    source = HEADER + textwrap.dedent(HONEST_PATTERNS[name])
    assert not rejections(source), "\n".join(f.describe() for f in rejections(source))


# -- cheats ------------------------------------------------------------------------------------------
# (rule, line of the first refusal in the body below the header, source body)

CHEATS = {
    # the worker module and the harness's classes
    "import_main": ("introspection", 1, "import __main__\n__main__.Worker.call = lambda *a: None\n"),
    "from_main_import": ("introspection", 1, "from __main__ import Worker\n"),
    "import_harness": ("introspection", 1, "import cuda_agent.env.workers.candidate as w\n"),
    "import_builtins": ("introspection", 1, "import builtins\n"),
    # frames and stacks
    "traceback_walk_stack": ("introspection", 1, "import traceback\nframes = list(traceback.walk_stack(None))\n"),
    "generator_frame": ("introspection", 3, "def g():\n    yield 1\nf = g().gi_frame.f_back\n"),
    "exception_traceback": ("introspection", 4,
                            "try:\n    raise ValueError\nexcept ValueError as e:\n    t = e.__traceback__\n"),
    "sys_modules_swap": ("introspection", 1, "import sys\nsys.modules['random'] = None\n"),
    "importlib_module": ("introspection", 1, "import importlib\nm = importlib.import_module('ti' + 'me')\n"),
    # a standard-library function the harness uses, rebound
    "random_rebound": ("monkeypatch", 2, "import random\nrandom.random = lambda: 0.5\n"),
    "time_rebound_via_setattr": ("introspection", 2, "import time\nsetattr(time, 'perf_counter', lambda: 0.0)\n"),
    # an extension named like a module
    "extension_named_random": ("extension-name", 2,
                               "from torch.utils.cpp_extension import load_inline\n"
                               "ext = load_inline(name='random', cpp_sources='', functions=[])\n"),
    "extension_named_main": ("extension-name", 2,
                             "import torch.utils.cpp_extension as c\nc.load_inline('__main__', cpp_sources='')\n"),
    "extension_computed_name": ("extension-name", 2,
                                "from torch.utils.cpp_extension import load\n"
                                "ext = load(name='ra' + 'ndom', sources=['k.cu'])\n"),
    "loader_aliased": ("extension-name", 2,
                       "from torch.utils.cpp_extension import load_inline\nbuild = load_inline\n"),
    # harness functions rebound through an alias
    "alias_setattr": ("introspection", 2, "import torch as _T\nsetattr(_T, 'rand', lambda *a: None)\n"),
    "alias_assign": ("monkeypatch", 2, "import torch as _T\n_T.rand = lambda *a: None\n"),
    "class_method_patch": ("monkeypatch", 1, "torch.Tensor.sum = lambda self: self\n"),
    "module_in_a_variable": ("attribute-write", 2, "cuda = torch.cuda\ncuda.synchronize = None\n"),
    "module_through_self": ("attribute-write", 4,
                            "class A(nn.Module):\n    def __init__(self):\n        self.t = torch.Tensor\n"
                            "        self.t.add = None\n"),
    "foreign_self_through_class": ("attribute-write", 4,
                                   "class A:\n    def set(self, v):\n        self.add = v\n"
                                   "A.set(torch.Tensor, None)\n"),
    "rebinding_an_import": ("monkeypatch", 1, "torch = None\n"),
    "match_capture_rebinding": ("monkeypatch", 2, "match 1:\n    case torch:\n        pass\n"),
    "fake_classmethod": ("allowlist", 1, "def classmethod(f):\n    return f\n"),
    "global_rebinding": ("monkeypatch", 3, "def f():\n    global nn\n    nn = None\n"),
    "write_on_a_parameter": ("attribute-write", 2, "def patch(m):\n    m.rand = None\n"),
    "torch_function_override": ("introspection", 2,
                                "class T(torch.Tensor):\n    __torch_function__ = None\n"),
    "new_hands_out_a_foreign_class": ("introspection", 2,
                                      "class H:\n    def __new__(cls):\n        return torch.Tensor\n"),
    "function_context_forged": ("attribute-write", 5,
                                "class F(torch.autograd.Function):\n    @staticmethod\n"
                                "    def forward(ctx, x):\n        ctx.add = x\n"
                                "F().forward(torch.Tensor, None)\n"),
    # process-wide state
    "set_stream": ("allowlist", 1, "torch.cuda.set_stream(torch.cuda.Stream())\n"),
    "stream_left_set_by_a_generator": ("allowlist", 3,
                                       "def hold(s):\n    with torch.cuda.stream(s):\n        yield\n"),
    "from_file": ("allowlist", 1, "t = torch.from_file('/proc/self/maps', size=10)\n"),
    "manual_seed": ("allowlist", 1, "torch.manual_seed(0)\n"),
    "tf32_flag": ("monkeypatch", 1, "torch.backends.cuda.matmul.allow_tf32 = True\n"),
    "torch_c": ("introspection", 1, "g = torch._C._get_tracing_state\n"),
    "torch_library": ("custom-op", 1, "lib = torch.library.Library('aten', 'IMPL')\n"),
    "torch_compile": ("torch-compile", 1, "f = torch.compile(lambda x: x)\n"),
    "torch_jit": ("torch-compile", 1, "f = torch.jit.script\n"),
    "torch_ops_load_library": ("allowlist", 1, "torch.ops.load_library('x.so')\n"),
    "torch_ops_aten_overload": ("allowlist", 1, "k = torch.ops.aten.add.default.py_impl\n"),
    # reflection
    "getattr_computed": ("introspection", 1, "m = getattr(torch, 'c' + 'uda')\n"),
    "getattr_private_literal": ("introspection", 3, "class A:\n    pass\nx = getattr(A(), '_secret')\n"),
    "getattr_io_literal": ("introspection", 2, "from pathlib import Path\nw = getattr(Path('x'), 'write_text')\n"),
    "globals_call": ("introspection", 1, "g = globals()\n"),
    "vars_call": ("introspection", 1, "v = vars(torch)\n"),
    "dunder_dict": ("introspection", 1, "d = torch.__dict__\n"),
    "subclasses_chain": ("introspection", 1, "s = ().__class__.__bases__[0].__subclasses__()\n"),
    "function_globals": ("introspection", 3, "def f():\n    pass\ng = f.__globals__\n"),
    "builtins_name": ("introspection", 1, "b = __builtins__\n"),
    "type_call": ("introspection", 1, "T = type(torch.ones(1))\n"),
    "eval_call": ("introspection", 1, "eval('1')\n"),
    "format_field_reads_globals": ("introspection", 3,
                                   "def f():\n    pass\ns = '{0.__globals__}'.format(f)\n"),
    "format_on_a_computed_template": ("introspection", 1, "s = str.format('{0}', 1)\n"),
    "open_file": ("allowlist", 1, "fh = open('/proc/self/maps')\n"),
    "path_io": ("allowlist", 2, "from pathlib import Path\nPath('x').write_text('y')\n"),
    "storage_from_file": ("allowlist", 1, "s = torch.ones(1).untyped_storage().from_file('x', True, 64)\n"),
    "os_environ": ("allowlist", 2, "import os\nos.environ['CUDA_VISIBLE_DEVICES'] = '1'\n"),
    "private_on_extension": ("introspection", 1, "raw = cuda_extension._target\n"),
    # what a kernel solution never needs
    "threading": ("threading", 1, "import threading\n"),
    "numpy": ("numpy", 1, "import numpy as np\n"),
    "ctypes": ("ctypes", 1, "import ctypes\n"),
    "reference": ("reference-model", 1, "from model import Model\n"),
    "star_import": ("allowlist", 1, "from torch import *\n"),
    "typing_eval": ("allowlist", 1, "from typing import get_type_hints\n"),
    # special names bound by hand: dataclasses compiles code from __annotations__' keys
    "dataclass_annotations": ("introspection", 3, "import dataclasses\nclass F:\n"
                              "    __annotations__ = {'a)\\n import os #': int}\nF = dataclasses.dataclass(F)\n"),
    "match_args_bound": ("introspection", 2, "class P:\n    __match_args__ = ('__globals__',)\n"),
    "special_name_by_walrus": ("introspection", 1, "print(__builtins__ := 1)\n"),
    "special_name_by_import": ("introspection", 1, "from math import pi as __annotations__\n"),
    # attributes read by name inside a library call or a pattern
    "wraps_assigned": ("introspection", 4, "import functools\ndef f():\n    pass\n"
                       "functools.wraps(f, assigned=('__globals__',))(f)\n"),
    "wraps_as_a_value": ("introspection", 2, "import functools\nw = functools.partial(functools.wraps)\n"),
    "class_pattern_reads_globals": ("introspection", 4, "def f():\n    pass\nmatch f:\n"
                                    "    case object(__globals__=g):\n        pass\n"),
    "class_pattern_reads_a_frame": ("introspection", 2, "match 1:\n    case object(gi_frame=f):\n        pass\n"),
    # a tensor's values into numpy or Python, anywhere
    "numpy_outside_forward": ("numpy", 2, "def helper(x):\n    return x.numpy()\n"),
    "numpy_through_getattr": ("introspection", 2, "def forward(x):\n    return getattr(x, 'numpy')()\n"),
    "tolist": ("numpy", 1, "values = torch.ones(3).tolist()\n"),
    "python_elementwise": ("numpy", 1, "torch.ones(3).map_(torch.ones(3), lambda a, b: a + b)\n"),
    "python_apply": ("numpy", 1, "torch.ones(3).apply_(abs)\n"),
    # PyTorch's own operator namespaces are not the solution's
    "torch_ops_pytorch_namespace": ("allowlist", 1, "y = torch.ops.mkldnn_prepacked.conv2d_run\n"),
    "torch_ops_mkl": ("allowlist", 1, "y = torch.ops.mkl\n"),
}


@pytest.mark.parametrize("name", CHEATS)
def test_each_way_around_the_harness_is_refused_by_its_rule_on_its_line(name):
    rule, line, body = CHEATS[name]
    source = HEADER + body
    found = rejections(source)
    assert found, f"{name} passed the static pass"
    first = found[0]
    assert first.rule == rule, "\n".join(f.describe() for f in found)
    assert first.line == line + HEADER.count("\n"), first.describe()
    assert first.describe().startswith(f"line {first.line}: ") and first.describe().endswith(f"[static:{rule}]")


def test_a_refusal_says_what_to_do_instead():
    (finding, *_) = rejections(HEADER + "import random\n")
    assert finding.rule == "allowlist" and "may import only torch" in finding.message and "SKILL.md" in finding.message
    (finding, *_) = rejections(HEADER + "torch.cuda.set_stream(torch.cuda.Stream())\n")
    assert "with torch.cuda.stream(s):" in finding.message
    (finding, *_) = rejections(HEADER + "torch.backends.cuda.matmul.allow_tf32 = True\n")
    assert finding.rule == "monkeypatch" and "cublasSetMathMode" in finding.message
    (finding, *_) = rejections(HEADER + "import os\nos.environ['TORCH_CUDA_ARCH_LIST'] = '9.0'\n")
    assert finding.rule == "allowlist" and "extra_cuda_cflags" in finding.message


def test_names_of_its_own_shadow_refused_builtins_only_inside_functions():
    local = HEADER + "def f(input, type=None):\n    return input, type\n"
    assert not rejections(local)
    module_level = HEADER + "if False:\n    exec = print\nexec('1')\n"   # the builtin is behind it
    assert [f.rule for f in rejections(module_level)] == ["introspection"]


# -- extension names -------------------------------------------------------------------------------


@pytest.mark.parametrize("name", ["random", "os", "__main__", "torch", "cuda_agent", "model", "numpy", "time"])
def test_an_extension_may_not_take_a_modules_name(name):
    assert extension_name_problem(name)


@pytest.mark.parametrize("name", ["cuda_extension", "fused_relu_ext", "bias_relu_cuda"])
def test_an_extension_name_of_its_own_is_fine(name):
    assert extension_name_problem(name) is None


def test_the_inline_builder_refuses_a_modules_name_before_building():
    asked = []
    builder = InlineBuilder(lambda name, files, **flags: asked.append(name))
    with pytest.raises(BuildError, match="name of a module"):
        builder.load_inline(name="random", cpp_sources="")
    with pytest.raises(BuildError, match="name of a module"):
        builder.load(name="json", sources=[])
    assert asked == []   # nothing went to the harness


def test_the_harness_refuses_to_build_a_modules_name(tmp_path):
    from cuda_agent.env.builds.compiler import build_extension

    with pytest.raises(BuildError, match="name of a module"):
        build_extension("random", {"main.cpp": "int x;"}, "cpu", tmp_path)


def test_the_agents_starter_keeps_only_the_tasks_imports_a_solution_may_use():
    from cuda_agent.agent.workspace import starter_model_new

    task = ("import torch\nimport torch.nn as nn\nimport numpy as np\nimport math\nfrom einops import rearrange\n\n"
            "class Model(nn.Module):\n    def __init__(self, n):\n        super().__init__()\n        self.n = n\n\n"
            "    def forward(self, x):\n        return x * math.sqrt(self.n)\n")
    starter = starter_model_new(task)
    assert "\nimport math\n" in starter and "# import numpy as np" in starter and "# from einops" in starter
    assert not rejections(starter), "\n".join(f.describe() for f in rejections(starter))


def test_the_docs_list_what_the_code_allows():
    from cuda_agent.env.rules import allowlist

    docs = (ROOT / "docs/verification.md").read_text()
    section = docs[docs.index("## The solution's Python: an allowlist"):docs.index("## What remains open")]
    words = set(section.replace("`", " ").replace("/", " ").replace(",", " ").replace(".", " ").split())
    for module in allowlist.IMPORTS:
        assert f"`{module}`" in section, module
    for module, members in allowlist.MEMBERS.items():
        assert members <= words, (module, members - words)
    builtins_listed = {b for b in allowlist.BUILTINS if not b.endswith(("Error", "Exception", "Warning"))}
    assert builtins_listed - {"True", "False", "None", "NotImplemented", "Ellipsis", "StopIteration"} <= words
    assert allowlist.DUNDER_DEFS_REFUSED | allowlist.REFLECTION_BUILTINS <= words


def test_the_functions_of_its_own_extension_may_have_any_public_name():
    """`touch` or `open` name a file method on a path, but the solution's own kernels are its to name."""
    source = textwrap.dedent("""
        import torch
        import torch.nn as nn
        import cuda_extension
        from torch.utils.cpp_extension import load_inline

        fused = load_inline(name="fused_ext", cpp_sources="", functions=["touch"])


        class ModelNew(nn.Module):
            def forward(self, a):
                cuda_extension.touch(a)
                return fused.open(a)
        """)
    assert not [f for f in check_source(source) if f.reject]
    private = source.replace("fused.open(a)", "fused._open(a)")
    assert any(f.rule == "introspection" for f in check_source(private) if f.reject)
