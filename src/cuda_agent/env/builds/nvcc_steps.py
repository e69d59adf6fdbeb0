"""One nvcc compile (`nvcc ... -c unit.cu -o unit.o`) run as nvcc's own steps, host and device side by side.

nvcc runs its steps one after the other: the host side (preprocess, then `cudafe++`, which splits
host from device code), the device side (preprocess, `cicc` to PTX, `ptxas`, `fatbinary`), and last
the host compile of cudafe++'s output, which includes the device side's fatbinary. Each front end
parses the whole unit (`cuda_runtime.h` and the C++ library headers it brings), so a small kernel's
compile is nearly all parsing, and the two sides could overlap. The one link between them before
the last step is the module id (a name for the unit, from its source), which cudafe++ writes and
cicc reads; cicc can compute the same id itself, so here it does, and the two ids are compared.

`plan` reads the steps from `nvcc --dryrun` (the same flags, so the same tools, options and
environment) and accepts only the usual shape of one whole-program compile for one architecture;
anything else (several architectures, a step it does not know) gets no plan, and the caller runs
nvcc as usual. `run` runs a plan: the two sides in two threads, each side's steps in one shell (in
the compiler's sandbox, where the caller gives one: build_sandbox.py), then the host compile.
"""

from __future__ import annotations

import os
import re
import shlex
import shutil
import subprocess
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

from cuda_agent.env.builds import host_headers, step

_ASSIGNMENT = re.compile(r"([A-Za-z_][A-Za-z0-9_]*)=(.*)")
_MODULE_ID = re.compile(r'--module_id_file_name ("[^"]*"|\S+)')


class StepFailed(Exception):
    """A step exited with an error; `output` is what the tools printed (nvcc prints the same)."""

    def __init__(self, output: str):
        super().__init__(output)
        self.output = output


class IdMismatch(Exception):
    """cicc computed another module id than cudafe++: the plan's object would not be nvcc's."""


@dataclass(frozen=True)
class Plan:
    env: dict[str, str]
    host: tuple[str, ...]     # preprocess, cudafe++ (shell lines, as nvcc --dryrun prints them)
    device: tuple[str, ...]   # preprocess, cicc (computing the module id itself), ptxas, fatbinary
    final: tuple[str, ...]    # the host compile, into the object
    host_id: Path             # the module id cudafe++ writes
    device_id: Path           # the one cicc writes


def _tool(line: str) -> str:
    try:
        first = shlex.split(line)[0]
    except (ValueError, IndexError):
        return ""
    return os.path.basename(first)


def _value(text: str) -> str:
    text = text.strip()
    try:
        words = shlex.split(text)
    except ValueError:
        return text
    return words[0] if len(words) == 1 else text


def plan(nvcc_cmd: list[str], cwd: Path, keep_dir: Path, timeout: float | None = None,
         env: dict[str, str] | None = None) -> Plan | None:
    """The steps of `nvcc_cmd` (a compile with `-c`), with their files in `keep_dir`, for tools run
    with `env` (None: this process's); None where the command is not one plain whole-program compile
    for one architecture. Nothing of the unit is compiled or read: nvcc only prints its steps."""
    if "-c" not in nvcc_cmd or any(flag in nvcc_cmd for flag in ("--dryrun", "-E", "-M", "-MM", "--keep")):
        return None
    command = [nvcc_cmd[0], "--dryrun", "--keep", "--keep-dir", str(keep_dir), *nvcc_cmd[1:]]
    try:
        proc = subprocess.run(command, cwd=cwd, capture_output=True, text=True, timeout=timeout, env=env)
    except (OSError, subprocess.SubprocessError):
        return None
    if proc.returncode != 0:
        return None
    env, lines = dict(os.environ if env is None else env), []
    for raw in (proc.stdout + proc.stderr).splitlines():
        if not raw.startswith("#$ "):
            continue
        line = raw[3:].strip()
        assignment = _ASSIGNMENT.fullmatch(line)
        if assignment:
            env[assignment[1]] = _value(assignment[2])
        elif line:
            lines.append(line)
    tools = [_tool(line) for line in lines]
    compiler = tools[0] if tools else ""
    if (len(lines) != 7 or tools[1:6] != ["cudafe++", compiler, "cicc", "ptxas", "fatbinary"]
            or tools[6] != compiler or " -E " not in lines[0] or " -E " not in lines[2]
            or " -c " not in lines[6]):
        return None
    host_id = _MODULE_ID.search(lines[1])
    device_id = _MODULE_ID.search(lines[3])
    if not host_id or not device_id or "--gen_module_id_file" not in lines[1] or "--gen_module_id_file" in lines[3]:
        return None
    own_id = Path(shlex.split(device_id[1])[0] + ".device")
    cicc = _MODULE_ID.sub(lambda _: f"--gen_module_id_file --module_id_file_name {shlex.quote(str(own_id))}",
                          lines[3], count=1)
    return Plan(env, (lines[0], lines[1]), (lines[2], cicc, lines[4], lines[5]), (lines[6],),
                Path(shlex.split(host_id[1])[0]), own_id)


Wrap = Callable[[list[str], Path], list[str]]   # a command as it runs (build_sandbox.Box.command)


def _chain(lines: tuple[str, ...], cwd: Path, env: dict[str, str], timeout: float | None, wrap: Wrap | None) -> None:
    """The lines one after the other in one shell, which stops at the first that fails."""
    command = ["/bin/sh", "-c", "set -e\n" + "\n".join(lines)]
    status, output = step.run(wrap(command, cwd) if wrap else command, cwd, env, timeout)
    if status != 0:
        raise StepFailed(output)


def run(steps: Plan, cwd: Path, timeout: float | None = None, wrap: Wrap | None = None,
        headers: Path | None = None, scratch: Path | None = None) -> None:
    """Run the plan: host and device sides at once, then the final compile, each command as `wrap`
    makes it (the compiler's sandbox). With `headers` (a folder of the build cache the sandbox shows) and
    `scratch` (one it writes), the final compile reads the headers' part of its source precompiled
    (host_headers.py), built beside it the second time a compile has those headers. Raises StepFailed
    with the first failing side's output (the host side's first, as nvcc would have stopped there),
    IdMismatch when the two module ids differ, subprocess.TimeoutExpired past `timeout` a side and
    step.Flooded past a step's output limit."""
    with ThreadPoolExecutor(max_workers=2) as pool:
        host = pool.submit(_chain, steps.host, cwd, steps.env, timeout, wrap)
        device = pool.submit(_chain, steps.device, cwd, steps.env, timeout, wrap)
        errors = [side.exception() for side in (host, device)]
    failed = next((error for error in errors if error is not None), None)
    if failed is not None:
        raise failed
    if steps.host_id.read_bytes() != steps.device_id.read_bytes():
        raise IdMismatch(f"{steps.host_id.read_text()!r} != {steps.device_id.read_text()!r}")
    if headers is None or scratch is None or not _final_with_header(steps, cwd, timeout, wrap, headers, scratch):
        _chain(steps.final, cwd, steps.env, timeout, wrap)


def _source(steps: Plan) -> Path | None:
    """cudafe++'s output, the final compile's source (the host side's last step names it)."""
    found = re.search(r'--gen_c_file_name ("[^"]*"|\S+)', steps.host[1])
    return Path(shlex.split(found[1])[0]) if found else None


def _final_with_header(steps: Plan, cwd: Path, timeout: float | None, wrap: Wrap | None,
                       headers: Path, scratch: Path) -> bool:
    """The final compile with its headers precompiled: the cached header where there is one, else (headers seen
    before) the plain compile while the header is built beside it for the next. False where the plain compile
    is to run."""
    source = _source(steps)
    found = host_headers.plan(steps.final[0], source, cwd) if source is not None else None
    if found is None:
        return False
    parts, final, precompile = found
    header = host_headers.ready(headers, parts.key)
    if header is not None:
        original = (cwd / source).read_bytes()
        (cwd / source).write_bytes(parts.rest)
        try:
            _chain((host_headers.using(final, source, header),), cwd, steps.env, timeout, wrap)
            return True
        except StepFailed:   # not expected (the same text): the plain compile says what is wrong
            (cwd / source).write_bytes(original)
            return False
    if not host_headers.seen_before(headers, parts.key):
        return False
    folder = host_headers.staged(scratch, parts.prefix)
    with ThreadPoolExecutor(max_workers=2) as pool:
        build = pool.submit(_chain, (shlex.join(host_headers.into(precompile, folder)),), cwd, steps.env, timeout, wrap)
        plain = pool.submit(_chain, steps.final, cwd, steps.env, timeout, wrap)
        built = build.exception() is None
        plain.result()
    if built:
        host_headers.publish(folder, headers, parts.key)
    else:
        shutil.rmtree(folder, ignore_errors=True)
    return True
