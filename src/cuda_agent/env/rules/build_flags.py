"""Which compiler and linker flags a solution may pass to `load_inline` / `load`, and which names and text its
sources may have.

Builds run in the harness's own process (the candidate asks for them), so a flag must never make
a compiler run code or read and write files of the solution's choosing: `-fplugin=`, `-B`,
`-wrapper`, `--compiler-bindir`, `@responsefile`, `-Wl,`/`-Xlinker` pass-throughs and the like
are refused. What kernels legitimately use (optimisation levels, defines, language standards,
fast math, architecture and register options, warnings, extra include paths, libraries) passes.
"""

from __future__ import annotations

import re

_SAFE = [
    r"-O[0-3sfg]?", r"-[DU][A-Za-z_][A-Za-z0-9_]*(=[^\s]*)?", r"-std=[a-z0-9+]+", r"--std=[a-z0-9+]+",
    # -W...: warnings, not -Wa, -Wl, -Wp (pass-throughs to the assembler, linker, preprocessor), whole or split at
    # their commas (`-Wa,123` is the parts `-Wa` and `123`)
    r"-g[0-3]?", r"-w", r"-W(?![lap](,|$))[A-Za-z0-9=+-]+", r"-pedantic", r"-fPIC", r"-fopenmp",
    r"-f(no-)?(fast-math|unroll-loops|strict-aliasing|math-errno|finite-math-only|omit-frame-pointer|"
    r"tree-vectorize|inline-functions|exceptions|rtti|openmp-simd|visibility-inlines-hidden)",
    r"-fvisibility=(hidden|default)", r"-ffp-contract=(fast|on|off)",
    r"-m[a-z0-9][a-z0-9=.-]*",                      # -march=native, -mavx2, -mtune=...
    r"-pthread",
    # nvcc
    r"-?-use_fast_math", r"-lineinfo", r"--?expt-relaxed-constexpr", r"--?expt-extended-lambda",
    r"--?extended-lambda", r"-?-res-usage", r"--resource-usage", r"--?restrict",
    r"-?-maxrregcount(=\d+)?", r"\d+", r"-?-ftz=(true|false)", r"-?-prec-div=(true|false)",
    r"-?-prec-sqrt=(true|false)", r"-?-fmad=(true|false)", r"--?extra-device-vectorization",
    r"-arch=(sm|compute)_\d+[a-z]?", r"--gpu-architecture=(sm|compute)_\d+[a-z]?",
    r"-gencode=?", r"arch=compute_\d+[a-z]?,code=\[?(sm|compute)_\d+[a-z]?(,(sm|compute)_\d+[a-z]?)*\]?",
    r"-gencode=arch=compute_\d+[a-z]?,code=\[?(sm|compute)_\d+[a-z]?(,(sm|compute)_\d+[a-z]?)*\]?",
    r"-Xptxas=?", r"--ptxas-options=?", r"-v", r"-dlcm=c[ag]",
    r"-t\d*", r"--threads(=\d+)?", r"-Xcompiler=?", r"--compiler-options=?",
]
_SAFE_LINK = [r"-l[A-Za-z0-9_+.:-]+", r"-L[^\s@]+", r"-pthread", r"-fopenmp"]
_SAFE_RE = re.compile("|".join(f"(?:{p})" for p in _SAFE))
_SAFE_LINK_RE = re.compile("|".join(f"(?:{p})" for p in _SAFE_LINK))


_CONTROL = re.compile(r"[\x00-\x1f\x7f]")   # NUL cannot be an argument at all; the others are no flag's
MAX_FLAGS = 256          # flags (or include paths) in one list: a command's arguments are limited in all (E2BIG)
MAX_FLAG_CHARS = 4096    # characters of one flag or include path: Linux takes at most 128 KiB an argument
MAX_SOURCES = 512        # files of one build (sources and headers), each written into the build cache
MAX_SOURCE_BYTES = 32 << 20   # their text in all
_PASS_THROUGH = ("-Xcompiler=", "--compiler-options=", "-Xptxas=", "--ptxas-options=")


class UnsafeFlag(ValueError):
    pass


def check_flags(flags: list[str] | None, kind: str) -> list[str]:
    """Return `flags` unchanged, or raise `UnsafeFlag` naming the first refused one.

    `kind`: "cflags", "cuda_cflags" or "ldflags". Comma-separated values after -Xcompiler/-Xptxas
    (nvcc's pass-through form) are checked one by one."""
    pattern = _SAFE_LINK_RE if kind == "ldflags" else _SAFE_RE
    _check_list(flags, "build flags")
    for flag in flags or []:
        if not isinstance(flag, str):
            raise UnsafeFlag(f"compiler flags must be strings, got {type(flag).__name__}")
        _check_argument(flag, "build flag")
        value = flag.strip()
        for prefix in _PASS_THROUGH:
            if value.startswith(prefix):
                value = value[len(prefix):]
        # nvcc forwards comma-separated lists (-Xcompiler -O3,-fopenmp): each item must pass
        parts = [value] if kind == "ldflags" or value.startswith("arch=") else value.split(",")
        for part in parts:
            if part and not pattern.fullmatch(part):
                raise UnsafeFlag(f"the build flag {flag!r} is not allowed (flags that could run or "
                                 "redirect the compiler are refused; optimisation, defines, -std, "
                                 "fast-math, architecture and include/library flags are fine)")
    return list(flags or [])


def check_include_paths(paths: list[str] | None) -> list[str]:
    _check_list(paths, "include paths")
    for path in paths or []:
        if not isinstance(path, str) or path.startswith("-"):
            raise UnsafeFlag(f"the include path {path!r} is not allowed")
        _check_argument(path, "include path")
    return list(paths or [])


def _check_list(values: list | None, what: str) -> None:
    if values is not None and len(values) > MAX_FLAGS:
        raise UnsafeFlag(f"{len(values)} {what} given: a build takes at most {MAX_FLAGS} flags of each kind")


def _check_argument(value: str, what: str) -> None:
    """Refuses what the harness could not pass to a compiler as one argument of its command: a control character
    (NUL cannot be one), text that UTF-8 cannot hold (a lone surrogate), more than MAX_FLAG_CHARS characters."""
    shown = value if len(value) <= 60 else value[:60] + "..."
    if _CONTROL.search(value):
        raise UnsafeFlag(f"the {what} {shown!r} holds a control character (NUL, a line's end, ...)")
    try:
        value.encode("utf-8")
    except UnicodeEncodeError as exc:
        raise UnsafeFlag(f"the {what} {shown!r} is not UTF-8 text ({exc.reason} at character {exc.start})") from None
    if len(value) > MAX_FLAG_CHARS:
        raise UnsafeFlag(f"the {what} {shown!r} has {len(value)} characters: at most {MAX_FLAG_CHARS}")


def sources_problem(files: dict[str, str]) -> str | None:
    """Why a build's files are too many or too large to write (each is written into the build cache, in the
    harness's time), or None."""
    if len(files) > MAX_SOURCES:
        return f"{len(files)} source files given: a build takes at most {MAX_SOURCES} files (sources and headers)"
    size = sum(len(text) for text in files.values())
    if size > MAX_SOURCE_BYTES:
        return f"the sources hold {size} characters: a build takes at most {MAX_SOURCE_BYTES >> 20} MiB of text"
    return None


_NAME_PART = re.compile(r"[A-Za-z0-9_.+][A-Za-z0-9_.+-]*")


def source_name_problem(rel: str) -> str | None:
    """Why `rel` may not name a source of a build, or None. A unit's name is an argument of the compiler's
    command (and of the shell lines nvcc's steps run): one beginning with `-` would be an option, one beginning
    with `@` an argument file whose words become options (`@b.cpp`: the words of b.cpp); so each part of the path
    holds letters, digits and `_ . + -`, and begins with none of `-`; no part is `.` or `..`."""
    parts = rel.split("/")
    if not all(_NAME_PART.fullmatch(part) and part not in (".", "..") for part in parts):
        return (f"the source name {rel!r} is not allowed: a relative path whose parts hold letters, digits and "
                "`_ . + -` only, none beginning with `-` (a compiler reads a name beginning with `-` or `@` as an "
                "option or an argument file)")
    return None


def text_problem(rel: str, text: str) -> str | None:
    """Why the source `rel` cannot be compiled as given: it is not text that UTF-8 can hold."""
    try:
        text.encode("utf-8")
    except UnicodeEncodeError as exc:
        return f"{rel} is not UTF-8 text ({exc.reason} at character {exc.start})"
    return None
