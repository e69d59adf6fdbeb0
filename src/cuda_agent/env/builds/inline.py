"""Drop-in replacements for `torch.utils.cpp_extension.load_inline` / `load` that use our cached,
incremental builder. Installed into the candidate's process before its module is executed, so
KernelBench-style single-file solutions build fast without any change to their source.

The candidate does not compile: `build` hands the sources to the harness (worker.remote_build),
which builds and checks them, and answers with the path of the library it handed the candidate
(handed.py); the candidate never sees the build cache itself."""

from __future__ import annotations

from pathlib import Path
from typing import Callable

from cuda_agent.env.rules.allowlist import extension_name_problem
from cuda_agent.env.builds.compiler import BuildError, load_module
from cuda_agent.env.rules.guard import ExtensionProxy

# build(name, files, extra_cflags=, extra_cuda_cflags=, extra_ldflags=, extra_include_paths=) -> .so
BuildFn = Callable[..., Path]


class InlineBuilder:
    def __init__(self, build: BuildFn):
        self.build = build
        self.built: list[str] = []        # extension names built in this process
        self.modules: dict[str, object] = {}

    def load_inline(self, name, cpp_sources, cuda_sources=None, sycl_sources=None, functions=None,
                    extra_cflags=None, extra_cuda_cflags=None, extra_sycl_cflags=None,
                    extra_ldflags=None, extra_include_paths=None, build_directory=None,
                    verbose=False, with_cuda=None, with_sycl=None, is_python_module=True,
                    with_pytorch_error_handling=True, keep_intermediates=True, use_pch=False,
                    no_implicit_headers=False, **_ignored):
        cpp_sources = [cpp_sources] if isinstance(cpp_sources, str) else list(cpp_sources or [])
        cuda_sources = [cuda_sources] if isinstance(cuda_sources, str) else list(cuda_sources or [])
        if not no_implicit_headers:
            cpp_sources.insert(0, "#include <torch/extension.h>")
        if functions is not None:
            if isinstance(functions, str):
                functions = [functions]
            if isinstance(functions, list):
                functions = {f: f for f in functions}
            wrap = "torch::wrap_pybind_function({0})" if with_pytorch_error_handling else "{0}"
            cpp_sources.append("PYBIND11_MODULE(TORCH_EXTENSION_NAME, m) {")
            cpp_sources += [f'm.def("{fn}", {wrap.format(fn)}, "{doc}");' for fn, doc in functions.items()]
            cpp_sources.append("}")
        files = {"main.cpp": "\n".join(cpp_sources)}
        if cuda_sources:
            if not no_implicit_headers:
                cuda_sources[:0] = ["#include <torch/types.h>", "#include <cuda.h>", "#include <cuda_runtime.h>"]
            files["cuda.cu"] = "\n".join(cuda_sources)
        return self._build(name, files, extra_cflags, extra_cuda_cflags, extra_ldflags, extra_include_paths)

    def load(self, name, sources, extra_cflags=None, extra_cuda_cflags=None, extra_sycl_cflags=None,
             extra_ldflags=None, extra_include_paths=None, build_directory=None, verbose=False,
             with_cuda=None, with_sycl=None, is_python_module=True, is_standalone=False,
             keep_intermediates=True, **_ignored):
        sources = [sources] if isinstance(sources, str) else list(sources)
        files = {}
        for src in sources:
            path = Path(src)
            files[path.name] = path.read_text()
            # headers next to the sources, so #include "x.cuh" resolves inside the cache folder
            for header in path.parent.glob("*"):
                if header.suffix in (".h", ".hpp", ".cuh", ".inl") and header.name not in files:
                    files[header.name] = header.read_text()
        return self._build(name, files, extra_cflags, extra_cuda_cflags, extra_ldflags, extra_include_paths)

    def _build(self, name, files, extra_cflags, extra_cuda_cflags, extra_ldflags, extra_include_paths):
        if name in self.modules:  # same name built twice in one process: reuse, like torch does
            return self.modules[name]
        # an extension is registered in sys.modules under its name: never in place of a module
        # (native code could reach this with a name the static pass never saw)
        problem = extension_name_problem(name, loaded=True)
        if problem:
            raise BuildError(problem)
        path = self.build(name, files, extra_cflags=extra_cflags, extra_cuda_cflags=extra_cuda_cflags,
                          extra_ldflags=extra_ldflags, extra_include_paths=extra_include_paths)
        return self.add(name, load_module(name, path))

    def add(self, name: str, module) -> ExtensionProxy:
        """Record a loaded extension; calls into it are counted from now on."""
        proxy = ExtensionProxy(module)
        self.built.append(name)
        self.modules[name] = proxy
        return proxy

    def install_counting_only(self) -> None:
        """Keep torch's own loaders (fresh build folder, full rebuild) but count extension calls."""
        import torch.utils.cpp_extension as cpp

        original_inline, original_load = cpp.load_inline, cpp.load

        def counted(loader):
            def wrapper(*args, **kwargs):
                module = loader(*args, **kwargs)
                self.built.append(getattr(module, "__name__", "extension"))
                return ExtensionProxy(module)
            return wrapper

        cpp.load_inline, cpp.load = counted(original_inline), counted(original_load)

    def install(self) -> None:
        """Route torch's JIT extension loaders through this builder (in this process only)."""
        import torch.utils.cpp_extension as cpp

        cpp.load_inline = self.load_inline
        cpp.load = self.load
