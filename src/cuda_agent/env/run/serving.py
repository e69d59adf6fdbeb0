"""The builds an evaluation makes for its candidate, in the harness (the candidate only reads the
build cache): the guard library and the device hold's, the workspace's kernels, and the extensions
the candidate asks for from inside its sandbox (load_inline / load), each checked for what it links
against before it is published and handed in (handed.py).
"""

from __future__ import annotations

import re
import time
from pathlib import Path

from cuda_agent.env.builds.handed import hand
from cuda_agent.env.rules import registry as rules
from cuda_agent.env.run.worker_run import Failed

_OPENMP = re.compile(r"^\s*#\s*pragma\s+omp\b", re.M)
MAX_BUILD_REQUESTS = 16    # load_inline/load calls one candidate may ask the harness to build
BUILDS_CLOSED = ("the harness builds extensions only while the solution loads and its model is made "
                 "(load_inline / load at import or in ModelNew.__init__), never once calls have begun: "
                 "build every extension before forward runs")


class LinkRefused(Exception):
    """A built library imports a symbol a solution may not use (symbols.py)."""


class BuildServing:
    """An evaluation's builds for its candidate (a part of evaluation._Evaluation)."""

    build_requests = 0
    refused_by = None                 # the rule that refused the last library asked for, for the compile phase
    builds_closed = False             # set once the model is made: the harness's compiles are not the calls'
    ask_deadline: float | None = None   # while a candidate's build request is served: when its time is up

    def _start_builds(self):
        """The guard library and the workspace's kernels build in the harness (never in the candidate,
        which only reads the build cache) while the workers start."""
        from concurrent.futures import ThreadPoolExecutor

        from cuda_agent.env.builds.compiler import BuildError, header_ready
        from cuda_agent.env.rules.guard import build_guard
        from cuda_agent.env.run.crash import build_crash_report

        build_root = Path(self.config.cache_dir) / "build"
        pool = ThreadPoolExecutor(max_workers=2, thread_name_prefix="build")
        guard_lib = pool.submit(build_guard, build_root)
        self.hold_lib = pool.submit(self._hold_library)
        self.crash_lib = pool.submit(build_crash_report, build_root)
        kernels = None
        if self.solution.kernel_files:
            try:
                first = not header_ready(self.backend, build_root)
            except BuildError:
                first = False   # the build itself reports the broken toolchain
            self.say("building kernels" + (" (precompiling torch headers first: once per machine, about a minute)"
                                           if first else ""))
            kernels = pool.submit(self._build, "cuda_extension", self._kernel_sources())
            self._note_openmp(self._kernel_sources(), [])
        pool.shutdown(wait=False)
        return guard_lib, kernels

    def _build(self, name: str, files: dict, **flags) -> Path:
        """Build for the solution (harness side), checking what the library links against before it is
        published (a refused one is deleted); returns the copy handed to the candidate (handed.py)."""
        from cuda_agent.env.builds.compiler import BuildError, build_extension
        from cuda_agent.env.rules.symbols import CheckLimit, ToolMissing, check_library, toolchain_imports

        build_cache = Path(self.config.cache_dir) / "build"
        exempt = toolchain_imports(self.backend, str(build_cache)) if self.config.guard else None

        def check(so: Path, objects) -> None:
            try:
                findings = check_library(so, objects, exempt)
            except ToolMissing as exc:
                raise BuildError(str(exc)) from None
            except CheckLimit as exc:   # the library's doing: too much code to check
                raise BuildError(f"checking the built library was stopped (rule {rules.BUILD_LIMIT.name}): {exc}",
                                 rule=rules.BUILD_LIMIT) from None
            if findings:
                raise LinkRefused("the built library imports what a solution may not use:\n" +
                                   "\n".join(f.describe() for f in findings[:12]))

        report = build_extension(name, files, self.backend, build_cache, max_jobs=self.config.max_jobs,
                                 timeout=self._build_time(), check=check if self.config.guard else None,
                                 sandbox=self.config.sandbox != "none", memory_gb=self.config.build_memory_gb,
                                 **flags)
        return hand(report.path, self.box)

    def _built(self, result, need_judge: bool) -> str:
        """`result()`, a harness build's library; its failure (a build error, a refused link) is the compile
        phase's, reported after a broken task's (`_task_first`)."""
        from cuda_agent.env.builds.compiler import BuildError

        try:
            return result()
        except LinkRefused as refused:
            self._task_first(need_judge)
            raise Failed("compile", str(refused), rule=rules.NATIVE_SYMBOL) from None
        except BuildError as exc:
            self._task_first(need_judge)
            raise Failed("compile", exc.summary, exc.rule) from None

    def _task_first(self, need_judge: bool) -> None:
        """Before a build's failure is reported: a broken task is reported instead (the judge's answer)."""
        if need_judge and not self.judge_set_up:
            self._judge_ready()
        self._lap("compile")

    def _build_time(self) -> float:
        """The seconds a build may take: the workspace's, `timeout_compile`; one the candidate asks for while it
        loads, what is left of its compile phase's (worker_run `_ask`), its own time and its builds' together."""
        if self.ask_deadline is None:
            return self.config.timeout_compile
        return max(0.001, self.ask_deadline - time.monotonic())

    def _serve_build(self, request: dict) -> dict:
        """Compile for the candidate (its load_inline / load calls): the shared build cache is
        written by the harness only. Sources and flags are checked like any build input. Refused once
        `builds_closed` (the model made): work the harness did during a call would be the call's,
        unmeasured."""
        from cuda_agent.env.builds.compiler import BuildError

        if self.builds_closed:
            return {"ok": False, "message": BUILDS_CLOSED}
        self.build_requests += 1
        if self.build_requests > MAX_BUILD_REQUESTS:
            return {"ok": False, "message": f"more than {MAX_BUILD_REQUESTS} extension builds in one evaluation"}
        files, name = request.get("files"), request.get("name")
        flags = {k: request.get(k) for k in ("extra_cflags", "extra_cuda_cflags", "extra_ldflags", "extra_include_paths")}
        if not (isinstance(name, str) and isinstance(files, dict)
                and all(isinstance(k, str) and isinstance(v, str) for k, v in files.items())
                and all(v is None or (isinstance(v, list) and all(isinstance(f, str) for f in v)) for v in flags.values())):
            return {"ok": False, "message": "malformed build request"}
        self._note_openmp({f"{name}/{path}": text for path, text in files.items()},
                          [*(flags["extra_cflags"] or []), *(flags["extra_cuda_cflags"] or [])])
        try:
            return {"ok": True, "path": str(self._build(name, files, **flags))}
        except LinkRefused as refused:
            self.refused_by = rules.NATIVE_SYMBOL
            return {"ok": False, "message": str(refused)}
        except BuildError as exc:
            self.refused_by = exc.rule or self.refused_by
            return {"ok": False, "message": exc.summary}

    def _note_openmp(self, files: dict[str, str], cflags: list[str]) -> None:
        """A warning where a source asks for OpenMP that its build does not enable: the compiler drops
        `#pragma omp` without a word. On the CPU backend threads would not help anyway."""
        if any("-fopenmp" in flag for flag in cflags):   # also -Xcompiler=-fopenmp
            return
        users = sorted(path for path, text in files.items() if _OPENMP.search(text))
        if users:
            why = ("; and threads cannot lower a time here: the CPU backend counts the CPU time of all of "
                   "your process's threads (see SKILL.md)" if self.backend == "cpu" else "")
            self.result.warnings.append(f"{', '.join(users)}: `#pragma omp` is ignored: the build has no "
                                        f"-fopenmp, so this code runs on one thread{why}")

    def _kernel_sources(self) -> dict[str, str]:
        from cuda_agent.tasks.solution import KERNEL_SUFFIXES

        return {path: text for path, text in sorted(self.solution.kernel_files.items())
                if path.endswith(KERNEL_SUFFIXES)}

