"""What a solution's sources reach while the harness builds them. The compiler runs as the harness,
outside the candidate's sandbox, so a source can name any file the harness's user may read: an
`#include` of it shows its lines in the compile error the policy reads, and an assembler `.incbin`
puts its bytes into the extension (another solution's sources from the build cache, the harness's
files, or a library's machine code, which the outside sampler would then count as the solution's own)."""

from __future__ import annotations

import pytest

from cuda_agent.env.builds.compiler import BuildError, build_extension


@pytest.mark.xfail(strict=False, reason=(
    "open: the build is not sandboxed; `#include` of a host file prints its lines in the compile error "
    "(and `.incbin` embeds any host file in the library: a host file read back at run time was shown "
    "by hand on this machine)"))
def test_a_source_cannot_read_files_outside_its_own_folder(tmp_path):
    secret = tmp_path / "harness_secret.txt"
    secret.write_text("HARNESS-SECRET-7f3a\n")
    with pytest.raises(BuildError) as failed:
        build_extension("cuda_extension", {"k.cpp": f'#include "{secret}"\n'}, "cpu", tmp_path / "cache")
    assert "HARNESS-SECRET-7f3a" not in str(failed.value)
