"""What the compiler's sandbox and the assembler guard add to a kernel-only edit's build (CPU backend).

Each edit of the bias+ReLU workspace's kernel (the binding cached) is built by the builder alone, in a
process of its own that first builds another small unit (untimed: a process's one-time set-up, which the
harness's long-lived processes pay once), in rounds that alternate:
  before       the builder of another checkout (`--before-src`, e.g. a worktree of the commit before the
               sandbox: no sandbox, no guard)
  guard only   this checkout's, unsandboxed (`sandbox=False`): the assembler guard alone
  now          this checkout's, as evaluations build (the sandbox and the guard)

    python benchmarks/build_cost.py [--before-src DIR/src] [--edits 5] [--cache-dir DIR]
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parents[1] / "src"
EXAMPLE = HERE / "cuda_agent" / "examples" / "bias_relu" / "solution_cpu" / "kernels"


def child(src: str, cache: str, sandbox: str, edit: int) -> None:
    sys.path.insert(0, src)
    from cuda_agent.env.builds import compiler

    extra = {} if sandbox == "default" else {"sandbox": sandbox == "on"}
    compiler.build_extension("warm", {"warm.cpp": f"int warm_{time.time_ns()} = 1;\n"}, "cpu", Path(cache), **extra)
    files = {f"kernels/{p.name}": p.read_text() for p in EXAMPLE.iterdir()}
    files["kernels/bias_relu.cpp"] += f"\n// edit {edit} {time.time_ns()}\n"   # never cached
    start = time.perf_counter()
    report = compiler.build_extension("cuda_extension", files, "cpu", Path(cache), **extra)
    wall = time.perf_counter() - start
    assert edit == 0 or report.compiled == ["kernels/bias_relu.cpp"], report.compiled   # (0: the binding too)
    print(json.dumps({"wall": wall, **report.seconds}))


def measure(src: str, cache: Path, sandbox: str, edit: int) -> dict:
    out = subprocess.run([sys.executable, __file__, "--child", src, str(cache), sandbox, str(edit)],
                         capture_output=True, text=True)
    if out.returncode != 0:
        raise SystemExit(f"the build ({src}, sandbox {sandbox}) failed:\n{out.stderr[-3000:]}")
    return json.loads(out.stdout.strip().splitlines()[-1])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--before-src", default=None, help="the src/ folder of a checkout to compare with")
    parser.add_argument("--edits", type=int, default=5)
    parser.add_argument("--cache-dir", type=Path, default=None, help="default: a fresh folder")
    parser.add_argument("--child", nargs=4, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        child(args.child[0], args.child[1], args.child[2], int(args.child[3]))
        return
    cache = args.cache_dir or Path(tempfile.mkdtemp(prefix="build-cost-"))
    variants = {"guard only": (str(HERE), "off"), "now": (str(HERE), "on")}
    if args.before_src:
        variants = {"before": (args.before_src, "default"), **variants}
    for name, (src, sandbox) in variants.items():   # each builds the binding (and the header) once
        measure(src, cache, sandbox, 0)
    rows: dict[str, list[dict]] = {name: [] for name in variants}
    for edit in range(1, args.edits + 1):
        order = list(variants)[edit % len(variants):] + list(variants)[:edit % len(variants)]
        for name in order:
            src, sandbox = variants[name]
            row = measure(src, cache, sandbox, edit)
            rows[name].append(row)
            print(f"  {name:10s} edit {edit}: {row['wall']:.3f} s  (compile {row['compile']:.3f}, "
                  f"link {row.get('link', 0):.3f})", flush=True)
    for name, runs in rows.items():
        print(f"{name:10s} median {statistics.median(r['wall'] for r in runs):.3f} s  (compile "
              f"{statistics.median(r['compile'] for r in runs):.3f}, link "
              f"{statistics.median(r.get('link', 0) for r in runs):.3f})", flush=True)


if __name__ == "__main__":
    main()
