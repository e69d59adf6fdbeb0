"""What makes a kernel-only edit build fast: nvcc's host and device sides side by side (nvcc_steps),
one real architecture and no PTX, and the fastest linker installed; each giving what the plain way gives."""

from __future__ import annotations

import shutil
import subprocess
import textwrap
from pathlib import Path

import pytest

from cuda_agent.env.builds import compiler, linkers, nvcc_steps
from cuda_agent.env.builds.compiler import BuildError, build_extension, fast_linker
from tests.env.helpers import EXAMPLES, HONEST_BODY, cpu_workspace, kernel

KERNEL_CU = EXAMPLES / "solution_cuda" / "kernels" / "bias_relu.cu"
needs_nvcc = pytest.mark.skipif(compiler.find_cuda_home() is None or shutil.which("objdump") is None,
                                reason="nvcc (the CUDA toolkit) and objdump compile and compare the objects")


def _nvcc_command(out: str, *extra: str) -> list[str]:
    nvcc = str(compiler.find_cuda_home() / "bin" / "nvcc")
    return [nvcc, "-O3", "--expt-relaxed-constexpr", "-std=c++20", "-Xcompiler", "-fPIC",
            "-gencode=arch=compute_90a,code=sm_90a", *extra, "-c", "bias_relu.cu", "-o", out]


def _contents(obj: Path) -> dict[str, str]:
    """An object's code, symbols and every section's bytes (not its FILE symbol: a temporary name)."""
    def tool(*args):
        return subprocess.run([*args, str(obj)], capture_output=True, text=True, check=True).stdout.split("\n", 2)[2]
    return {"code": tool("objdump", "-d"), "sections": tool("objdump", "-s"),
            "symbols": subprocess.run(["nm", str(obj)], capture_output=True, text=True, check=True).stdout}


@needs_nvcc
def test_side_by_side_steps_build_the_object_nvcc_builds(tmp_path):
    shutil.copy(KERNEL_CU, tmp_path / "bias_relu.cu")
    steps = nvcc_steps.plan(_nvcc_command(str(tmp_path / "steps.o")), tmp_path, tmp_path / "keep")
    assert steps is not None                                    # the builder's flags have the usual shape
    tools = [line.split()[0].strip('"').rsplit("/", 1)[-1] for line in steps.device]
    assert tools[1:] == ["cicc", "ptxas", "fatbinary"]
    assert "--gen_module_id_file" in steps.device[1]            # cicc names the unit itself
    (tmp_path / "keep").mkdir()
    nvcc_steps.run(steps, tmp_path)
    assert steps.host_id.read_text() == steps.device_id.read_text()
    subprocess.run(_nvcc_command(str(tmp_path / "nvcc.o")), cwd=tmp_path, check=True, capture_output=True)
    assert _contents(tmp_path / "steps.o") == _contents(tmp_path / "nvcc.o")


@needs_nvcc
def test_unusual_compiles_get_no_plan(tmp_path):
    shutil.copy(KERNEL_CU, tmp_path / "bias_relu.cu")
    two_archs = _nvcc_command("x.o", "-gencode=arch=compute_80,code=sm_80")
    assert nvcc_steps.plan(two_archs, tmp_path, tmp_path / "keep") is None      # a device side per arch
    assert nvcc_steps.plan([*_nvcc_command("x.o"), "-E"], tmp_path, tmp_path / "keep") is None


@needs_nvcc
def test_an_error_in_the_steps_reads_like_nvcc_and_leaves_no_object(tmp_path):
    source = KERNEL_CU.read_text().replace("v.x = fmaxf", "v.x = undefined_name + fmaxf")
    (tmp_path / "bias_relu.cu").write_text(source)
    line = next(i for i, text in enumerate(source.splitlines(), 1) if "undefined_name" in text)
    with pytest.raises(BuildError) as caught:
        compiler._run_nvcc(_nvcc_command(str(tmp_path / "x.o")), tmp_path, "compiling bias_relu.cu")
    assert f"bias_relu.cu({line})" in caught.value.summary and "undefined_name" in caught.value.summary
    assert not (tmp_path / "x.o").exists()
    assert caught.value.summary.startswith("compiling bias_relu.cu failed")


@needs_nvcc
def test_when_the_module_ids_differ_nvcc_builds_it_whole(tmp_path, monkeypatch):
    shutil.copy(KERNEL_CU, tmp_path / "bias_relu.cu")
    ran = []

    def mismatch(steps, cwd, timeout=None, wrap=None, headers=None, scratch=None):
        ran.append(steps)
        raise nvcc_steps.IdMismatch("as if cicc had named the unit otherwise")

    monkeypatch.setattr(nvcc_steps, "run", mismatch)
    compiler._run_nvcc(_nvcc_command(str(tmp_path / "x.o")), tmp_path, "compiling bias_relu.cu")
    assert ran and (tmp_path / "x.o").exists()


@pytest.mark.parametrize("capability, flag", [((9, 0), "-gencode=arch=compute_90a,code=sm_90a"),
                                              ((8, 0), "-gencode=arch=compute_80,code=sm_80"),
                                              ((12, 0), "-gencode=arch=compute_120,code=sm_120")])
def test_kernels_are_built_for_the_device_in_the_machine_only(capability, flag, monkeypatch):
    """One real architecture, the device's own (sm_90a on Hopper, for wgmma), and no PTX for others."""
    import torch

    monkeypatch.delenv("CUDA_AGENT_CUDA_ARCH", raising=False)
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "get_device_capability", lambda *a: capability)
    assert compiler.cuda_arch_flags() == [flag]


def test_the_fastest_linker_the_compiler_links_with_is_chosen(monkeypatch):
    monkeypatch.delenv("CUDA_AGENT_LINKER", raising=False)
    installed = {"ld.lld", "ld.gold"}
    which = lambda name: f"/usr/bin/{name}" if name in installed else None   # noqa: E731
    every = lambda cxx, linker: [f"-fuse-ld={linker}"]                          # noqa: E731
    assert fast_linker("c++", which, every) == ["-fuse-ld=lld"]
    assert fast_linker("c++", which, lambda cxx, linker: None if linker == "lld" else [f"-fuse-ld={linker}", "-L/x"]) \
        == ["-fuse-ld=gold", "-L/x"]
    assert fast_linker("c++", which, lambda cxx, linker: None) == []
    assert fast_linker("c++", lambda name: None, every) == []
    monkeypatch.setenv("CUDA_AGENT_LINKER", "bfd")
    assert fast_linker("c++", which, every) == []
    monkeypatch.setenv("CUDA_AGENT_LINKER", "gold")
    assert fast_linker("c++", which, every) == ["-fuse-ld=gold"]


@pytest.mark.parametrize("beside", ["nothing", "libstdc++.a"])
@pytest.mark.skipif(not shutil.which("ld.gold") or not shutil.which("c++"), reason="gold and a C++ compiler link")
def test_a_compiler_folder_with_a_dangling_libstdcxx_link_gets_what_the_default_linker_takes(beside, tmp_path):
    """Seen on the GPU machine: the compiler's folder held a libstdc++.so link to nothing and the
    libstdc++.a beside it; ld.bfd reads past the link (to the static library there, or a shared one
    further on), gold stopped at it. Told what ld.bfd took, gold links the same."""
    static = subprocess.run(["c++", "-print-file-name=libstdc++.a"], capture_output=True, text=True).stdout.strip()
    if beside == "libstdc++.a" and not Path(static).is_file():
        pytest.skip("no static libstdc++ on this machine")
    folder = tmp_path / "gcc"
    folder.mkdir()
    (folder / "libstdc++.so").symlink_to(tmp_path / "nothing-here.so.6")
    if beside == "libstdc++.a":
        (folder / "libstdc++.a").symlink_to(static)
    wrapper = tmp_path / "c++"
    wrapper.write_text(f'#!/bin/sh\nexec c++ -B{folder}/ "$@"\n')
    wrapper.chmod(0o755)
    assert linkers.links(str(wrapper), []) and not linkers.links(str(wrapper), ["-fuse-ld=gold"])
    flags = linkers.linker_flags(str(wrapper), "gold")
    assert flags is not None and flags[0] == "-fuse-ld=gold"
    assert flags[1] == "-static-libstdc++" if beside == "libstdc++.a" else flags[1].startswith("-L")
    assert linkers.links(str(wrapper), flags)


@pytest.mark.skipif(not any(shutil.which(f"ld.{name}") for name in linkers.LINKERS) or not shutil.which("readelf"),
                    reason="no faster linker installed: the default one links")
def test_the_fast_linker_links_what_the_default_one_links(cache_dir, tmp_path, monkeypatch):
    import dataclasses
    import sys
    import uuid

    from cuda_agent.env.rules.symbols import undefined_symbols

    files = cpu_workspace(kernel(HONEST_BODY + f"\n// {uuid.uuid4().hex}\n")).kernel_files
    fast = build_extension("cuda_extension", files, "cpu", cache_dir / "build")
    tc = compiler.toolchain("cpu")
    assert tc.linker and tc.linker[0].startswith("-fuse-ld=")
    monkeypatch.setattr(compiler, "toolchain", lambda backend: dataclasses.replace(tc, linker=()))
    default = build_extension("cuda_extension", files, "cpu", cache_dir / "build")
    assert default.path != fast.path                             # libraries are keyed by their linker
    assert sorted(undefined_symbols(fast.path)) == sorted(undefined_symbols(default.path))

    def needed(library):
        dynamic = subprocess.run(["readelf", "-d", str(library)], capture_output=True, text=True).stdout
        return sorted(line.split("[")[1] for line in dynamic.splitlines() if "(NEEDED)" in line)
    assert needed(fast.path) == needed(default.path)
    code = textwrap.dedent(f"""
        import torch
        from cuda_agent.env.builds.compiler import load_module
        ext = load_module("cuda_extension", {str(fast.path)!r})
        print(ext.bias_relu(torch.tensor([[-1.0, 2.0]]), torch.tensor([0.5, -3.0])).tolist())
    """)
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[[0.0, 0.0]]"


def _built(tmp_path: Path, name: str, body: str, shared: bool) -> Path:
    (tmp_path / f"{name}.cpp").write_text(f'extern "C" long {name}(long x) {{ {body} }}\n')
    out = f"{name}.so" if shared else f"{name}.o"
    subprocess.run(["c++", "-O2", "-fPIC", *(["-shared"] if shared else ["-c"]), f"{name}.cpp", "-o", out],
                   cwd=tmp_path, check=True)
    return tmp_path / out


@pytest.mark.parametrize("shared", [True, False], ids=["library", "object"])
@pytest.mark.skipif(not shutil.which("objdump") or not shutil.which("c++"),
                    reason="c++ and objdump build and read code")
def test_the_syscall_scan_disassembles_only_the_code_whose_bytes_could_hold_one(shared, tmp_path, monkeypatch):
    """The link check's scan for system call instructions reads the code's bytes first: code without
    their encodings is not disassembled (the slow part for a large library); in a library only the
    functions holding an encoding are, so bytes that merely look like one (an immediate) are no
    instruction and a real one is found; an object file with an encoding is disassembled whole."""
    from cuda_agent.env.rules import symbols

    real_popen = subprocess.Popen
    disassembled = []

    def popen(cmd, *args, **kwargs):
        if "objdump" in str(cmd[0]):
            disassembled.append([c for c in cmd[1:] if c.startswith("--st")])
        return real_popen(cmd, *args, **kwargs)

    monkeypatch.setattr(symbols.subprocess, "Popen", popen)
    for name, insn in (("via_syscall", "syscall"), ("via_sysenter", "sysenter"), ("via_int80", "int $0x80")):
        disassembled.clear()
        assert symbols.has_syscall_instruction(_built(tmp_path, name, f'asm volatile("{insn}"); return x;', shared))
        assert len(disassembled) == 1 and bool(disassembled[0]) == shared, disassembled   # a window in a library
    if shared and shutil.which("strip"):   # no function symbols: the section holding the bytes is read
        stripped = _built(tmp_path, "stripped", 'asm volatile("syscall"); return x;', shared)
        subprocess.run(["strip", str(stripped)], check=True)
        disassembled.clear()
        assert symbols.has_syscall_instruction(stripped) and len(disassembled) == 1 and disassembled[0]
    look_alike = _built(tmp_path, "look_alike", 'long y; asm volatile("mov $0x050f, %0" : "=r"(y)); return x + y;',
                        shared)
    assert b"\x0f\x05" in look_alike.read_bytes()
    disassembled.clear()
    assert not symbols.has_syscall_instruction(look_alike) and len(disassembled) == 1
    disassembled.clear()
    assert not symbols.has_syscall_instruction(_built(tmp_path, "clean", "return x * 3 + 1;", shared))
    assert disassembled == []
    not_elf = tmp_path / "not_elf.o"
    not_elf.write_bytes(b"\x0f\x05 is not an ELF file")
    symbols.has_syscall_instruction(not_elf)
    assert disassembled == [[]]                      # a file it cannot read as ELF goes to objdump whole


@pytest.mark.parametrize("shared", [True, False], ids=["library", "object"])
@pytest.mark.skipif(not shutil.which("objdump") or not shutil.which("c++"),
                    reason="c++ and objdump build and read code")
def test_code_too_large_to_scan_is_refused_unread(shared, tmp_path, monkeypatch):
    """Disassembly prints about 140 bytes of text a byte of `nop`: past MAX_CODE_CHECKED bytes of code to
    disassemble, the check refuses (CheckLimit, the build's failure) without running objdump."""
    from cuda_agent.env.rules import symbols

    monkeypatch.setattr(symbols, "MAX_CODE_CHECKED", 1 << 20)
    body = 'asm volatile(".fill 2097152, 1, 0x90\\n mov $0x50f, %%eax" ::: "eax"); return x;'
    flooded = _built(tmp_path, "flooded", body, shared)
    monkeypatch.setattr(symbols.subprocess, "Popen", None)   # never started
    with pytest.raises(symbols.CheckLimit, match="2 MiB of code"):
        symbols.has_syscall_instruction(flooded)


@pytest.mark.skipif(not shutil.which("objdump") or not shutil.which("nm"), reason="binutils reads the objects")
def test_line_tables_add_lines_and_change_no_code_nor_what_the_link_check_sees(tmp_path):
    """The line tables of units without torch headers (compiler.LINE_TABLES, for a crash's file:line)
    leave the code as it was, and the link-level check reads the same imports and no system call in
    their sections."""
    from cuda_agent.env.rules.symbols import has_syscall_instruction, undefined_symbols

    tc = compiler.toolchain("cpu")
    assert tc.line_tables == compiler.LINE_TABLES and not set(tc.line_tables) & set(tc.common_flags)
    (tmp_path / "k.cpp").write_text(kernel(HONEST_BODY + "static char buffer[64];\nmemset(buffer, 0, 64);\n"))
    for name, flags in (("plain.o", tc.common_flags), ("lines.o", (*tc.common_flags, *tc.line_tables))):
        subprocess.run([tc.cxx, *flags, "-c", "k.cpp", "-o", name], cwd=tmp_path, check=True)
    sections = subprocess.run(["objdump", "-h", str(tmp_path / "lines.o")], capture_output=True, text=True).stdout
    assert ".debug_line" in sections
    assert _contents(tmp_path / "lines.o")["code"] == _contents(tmp_path / "plain.o")["code"]
    assert undefined_symbols(tmp_path / "lines.o", False) == undefined_symbols(tmp_path / "plain.o", False)
    assert not has_syscall_instruction(tmp_path / "lines.o")


@pytest.mark.skipif(not shutil.which("objdump"), reason="binutils reads the objects")
def test_only_units_without_torch_headers_carry_line_tables(cache_dir):
    """The kernel file's object has line tables; the binding's (torch's headers, its precompiled header)
    has none; the objects are keyed by their commands, so each is built with its own flags."""
    report = build_extension("cuda_extension", cpu_workspace().kernel_files, "cpu", cache_dir / "build")
    objects = dict(zip(sorted(cpu_workspace().kernel_files), report.objects))

    def sections(obj: Path) -> str:
        return subprocess.run(["objdump", "-h", str(obj)], capture_output=True, text=True, check=True).stdout
    assert ".debug_line" in sections(objects["kernels/bias_relu.cpp"])
    assert ".debug_line" not in sections(objects["kernels/bias_relu_binding.cpp"])
