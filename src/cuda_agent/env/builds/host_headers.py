"""A precompiled header for nvcc's last step, the host compile of cudafe++'s output.

cudafe++ writes the unit preprocessed: `cuda_runtime.h` and the C++ library headers it brings (some
40,000 lines), then the unit's own code. The host compiler spends most of that step parsing the headers,
and a kernel-only edit changes none of them. So the text up to the unit's own code (the "prefix": every
line before the unit's last return from a header) is compiled into a g++ precompiled header, kept in the
build cache under the digest of its text and of the step's command, the second time a compile has that
text (the first only marks it seen: headers that change with every edit never pay for one); the step then
compiles the rest with `-include` of it. Same text, same flags: the same code and sections (the rest keeps
cudafe++'s file name, so even the debug line table's name of the compiled file).

gcc itself checks that a precompiled header fits the command (compiler version, flags) and reads the
header's text instead where it does not, so a stale one changes nothing but the time. Where the text has
no clear prefix, or anything here fails, the step runs as nvcc wrote it.
"""

from __future__ import annotations

import hashlib
import re
import shlex
import shutil
import tempfile
from dataclasses import dataclass
from pathlib import Path

_MARKER = re.compile(rb'^# \d+ "((?:[^"\\]|\\.)*)"', re.MULTILINE)
HEADER = "prefix.h"
# below this the header's parse is not worth a precompiled header's 20 MB
MIN_PREFIX = 64 << 10
# above this (a unit of huge constant tables?) the source is not read into the harness's memory to be cut
MAX_SOURCE = 64 << 20


@dataclass(frozen=True)
class Split:
    prefix: bytes     # the headers' text, as cudafe++ wrote it
    rest: bytes       # the unit's own code after them
    key: str          # the digest of the prefix and the command that compiles it


def split(text: bytes) -> tuple[bytes, bytes] | None:
    """cudafe++'s output cut where the unit's own code starts for good (after its last header), or None."""
    stub = re.findall(rb'^#include "([^"]*)"', text, re.MULTILINE)   # the stub's, last (markers name it too)
    markers = [m for m in _MARKER.finditer(text) if not stub or m[1] != stub[-1]]
    if not markers:
        return None
    main = markers[0][1]
    last_header = max((i for i, m in enumerate(markers) if m[1] != main), default=None)
    if last_header is None or last_header + 1 >= len(markers):
        return None
    cut = markers[last_header + 1].start()
    if cut < MIN_PREFIX or text[cut:].count(b"#include") > 1:
        return None   # the rest includes the stub (`#include "unit.cudafe1.stub.c"`) and nothing else
    return text[:cut], text[cut:]


def _words(final: str, source: Path) -> tuple[list[str], int, int] | None:
    """The final step's words, with the places of its source and of its `-o`; None where unusual."""
    try:
        words = shlex.split(final)
    except ValueError:
        return None
    sources = [i for i, w in enumerate(words) if Path(w) == source]
    if len(sources) != 1 or words.count("-o") != 1 or words.count("-c") != 1 or "-include" in words:
        return None
    out = words.index("-o")
    if out + 1 >= len(words) or "-x" not in words or words[words.index("-x") + 1:][:1] != ["c++"]:
        return None
    return words, sources[0], out


def plan(final: str, source: Path, cwd: Path) -> tuple[Split, str, list[str]] | None:
    """For the final step `final` compiling `source` (cudafe++'s output, relative to `cwd`): its split,
    and the command that precompiles a header (as words, its header and output named HEADER and
    HEADER.gch: `into` puts them in a folder); None where this step gets none."""
    found = _words(final, source)
    if found is None:
        return None
    words, at, out = found
    try:
        if (cwd / source).stat().st_size > MAX_SOURCE:
            return None
        parts = split((cwd / source).read_bytes())
    except OSError:
        return None
    if parts is None:
        return None
    header = list(words)
    header[words.index("-x") + 1] = "c++-header"
    header[out + 1] = HEADER + ".gch"
    header[at] = HEADER
    header.remove("-c")
    digest = hashlib.sha256(parts[0] + b"\0" + shlex.join(header).encode()).hexdigest()[:24]
    return Split(parts[0], parts[1], digest), final, header


def into(precompile: list[str], folder: Path) -> list[str]:
    """The precompiling command (plan's) with its header and output in `folder` (run from the unit's folder,
    whose relative include paths it keeps)."""
    names = {HEADER: str(folder / HEADER), HEADER + ".gch": str(folder / HEADER) + ".gch"}
    return [names.get(word, word) for word in precompile]


def using(final: str, source: Path, header: Path) -> str:
    """The final step, compiling `source` with `-include header` first."""
    words = shlex.split(final)
    at = next(i for i, w in enumerate(words) if Path(w) == source)
    return shlex.join([*words[:at], "-include", str(header), *words[at:]])


def staged(scratch: Path, prefix: bytes) -> Path:
    """A new folder in `scratch` holding the header's text, where its precompiled form is built."""
    folder = Path(tempfile.mkdtemp(prefix="host-header-", dir=scratch))
    (folder / HEADER).write_bytes(prefix)
    return folder


def publish(folder: Path, cache: Path, key: str) -> None:
    """Moves a built header's folder into the cache as `key` (another build's, landed first, stays)."""
    if not (folder / (HEADER + ".gch")).is_file():
        shutil.rmtree(folder, ignore_errors=True)
        return
    try:
        folder.rename(cache / key)
    except OSError:
        shutil.rmtree(folder, ignore_errors=True)


def seen_before(cache: Path, key: str) -> bool:
    """Whether a compile had the headers of `key` before (then they are worth precompiling: a unit whose
    headers change with every edit, an edited header of its own, never pays for one); marks them seen."""
    mark = cache / f"{key}.seen"
    if mark.exists():
        return True
    try:
        mark.touch()
    except OSError:
        pass
    return False


def ready(cache: Path, key: str) -> Path | None:
    """The cached header of `key` (its text; the precompiled form beside it), or None."""
    header = cache / key / HEADER
    return header if (cache / key / (HEADER + ".gch")).is_file() and header.is_file() else None
