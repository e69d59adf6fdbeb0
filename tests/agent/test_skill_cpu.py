"""SKILL_cpu.md as a CPU workspace holds it: this machine's build line, SIMD sets and BLAS routines,
and a profiling snippet that runs as written; `./compile` says where `#pragma omp` is ignored."""

import re
import subprocess
from pathlib import Path

from cuda_agent.agent.cpu_facts import blas_routines, build_line, simd_isa
from cuda_agent.agent.skill import blas_paragraph, isa_paragraph
from cuda_agent.agent.workspace import Workspace
from cuda_agent.env.builds.compiler import toolchain
from cuda_agent.env.config import EvalConfig

from .conftest import RELU_BINDING, RELU_MODEL_NEW


def cpu_workspace(tmp_path, task, config=None) -> Workspace:
    return Workspace.create(task, tmp_path / "ws", eval_config=config or EvalConfig(backend="cpu", cache_dir=tmp_path))


def test_skill_cpu_states_this_machines_build_isa_and_blas(tmp_path, relu_task):
    skill = (cpu_workspace(tmp_path, relu_task).root / "SKILL.md").read_text()
    assert "{{" not in skill
    build = build_line()
    assert f"```\n{build}\n```" in skill and " ".join(toolchain("cpu").common_flags) in build
    assert "-fopenmp" not in build and "-march" not in build   # what the ISA and OpenMP paragraphs rest on
    flags = Path("/proc/cpuinfo").read_text() if Path("/proc/cpuinfo").is_file() else ""
    isa = simd_isa()
    assert isa   # any processor this runs on has one
    line = next(li for li in flags.splitlines() if li.split(":")[0].strip() in ("flags", "Features"))
    assert set(isa) <= set(line.split(":", 1)[1].split())   # only what the processor says it has
    paragraph = " ".join(skill[skill.index("This processor has"):].split("\n\n")[0].split())
    assert all(f"`{i}`" in paragraph for i in isa)
    assert "OMP_NUM_THREADS=1" in skill and "`#pragma omp` is ignored" in skill
    for routine in blas_routines():
        assert f"`{routine}`" in skill
    assert "at::native::*" in skill and "at::intraop_launch" in skill   # what the link check refuses


def test_isa_and_blas_paragraphs_follow_what_was_found():
    assert "no SIMD extension" in isa_paragraph([], "x86_64") and "target(" not in isa_paragraph([], "x86_64")
    text = " ".join(isa_paragraph(["sse4_2", "avx", "fma", "avx2"], "x86_64").split())
    assert 'target("avx2,fma")' in text and "avx512f" not in text and "SIGILL" in text
    assert '"avx512f"' in " ".join(isa_paragraph(["avx2", "fma", "avx512f"], "x86_64").split())
    assert "NEON" in isa_paragraph(["asimd", "sve"], "aarch64")
    assert simd_isa("processor : 0\nflags : fpu sse2 avx2 fma avx512f\n") == ["fma", "avx2", "avx512f"]
    assert simd_isa("Features : fp asimd sve\n") == ["asimd", "sve"]
    assert "write GEMMs yourself" in blas_paragraph([])
    with_sgemm = blas_paragraph(["sgemm_", "dgemm_"])
    assert 'extern "C" void sgemm_(' in with_sgemm and "column-major" in " ".join(with_sgemm.split())


def test_the_profiling_snippet_runs_as_written(tmp_path, relu_task):
    ws = cpu_workspace(tmp_path, relu_task)
    skill = (ws.root / "SKILL.md").read_text()
    cpu_part = skill[skill.index("### Profiling the reference on the CPU"):]
    snippet = re.search(r"```bash\n(.*?)```", cpu_part, re.S).group(1)
    # the agent's shell: no virtual environment on PATH, only what the snippet names
    proc = subprocess.run(["/bin/sh", "-c", snippet], cwd=ws.root, capture_output=True, text=True, timeout=300,
                          env={"PATH": "/usr/bin:/bin", "HOME": str(tmp_path)})
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert "aten::relu" in proc.stdout and "CPU total" in proc.stdout


def test_compile_warns_where_pragma_omp_is_ignored(tmp_path, relu_task, real_eval_config):
    ws = cpu_workspace(tmp_path, relu_task, real_eval_config)
    threaded = RELU_BINDING.replace("    for (int64_t i = 0", "    #pragma omp parallel for\n    for (int64_t i = 0")
    assert threaded != RELU_BINDING
    (ws.root / "kernels" / "relu_binding.cpp").write_text(threaded)
    (ws.root / "model_new.py").write_text(RELU_MODEL_NEW)
    proc = subprocess.run([str(ws.root / "compile")], cwd=ws.root, capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    lines = proc.stdout.splitlines()
    assert lines[0] == "compile: OK"
    assert ("warning: kernels/relu_binding.cpp: `#pragma omp` is ignored: the build has no -fopenmp, so this code "
            "runs on one thread; and threads cannot lower a time here: the CPU backend counts the CPU time of all "
            "of your process's threads (see SKILL.md)") in lines
    (ws.root / "kernels" / "relu_binding.cpp").write_text(RELU_BINDING)   # without it: no warning
    proc = subprocess.run([str(ws.root / "compile")], cwd=ws.root, capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0 and proc.stdout.strip() == "compile: OK", proc.stdout


OMP_INLINE = """import torch
import torch.nn as nn
from torch.utils.cpp_extension import load_inline

source = \"\"\"
torch::Tensor relu(torch::Tensor x) {
    auto y = torch::empty_like(x);
    const float* in = x.data_ptr<float>();
    float* out = y.data_ptr<float>();
    #pragma omp parallel for
    for (int64_t i = 0; i < x.numel(); ++i) out[i] = in[i] > 0.f ? in[i] : 0.f;
    return y;
}
\"\"\"
ext = load_inline("omp_relu", cpp_sources=source, functions=["relu"], extra_cflags=["-O2"])


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, x):
        return ext.relu(x)
"""


def test_compile_warns_for_load_inline_without_fopenmp(tmp_path, relu_task, real_eval_config):
    ws = cpu_workspace(tmp_path, relu_task, real_eval_config)
    (ws.root / "model_new.py").write_text(OMP_INLINE)
    proc = subprocess.run([str(ws.root / "compile")], cwd=ws.root, capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert any(line.startswith("warning: omp_relu/main.cpp: `#pragma omp` is ignored: the build has no -fopenmp")
               for line in proc.stdout.splitlines()), proc.stdout
