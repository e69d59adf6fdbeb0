"""The assembler guard's reading (builds/as_guard.py, native/as_guard.c): every spelling under which GNU as
would run a refused directive is refused (as reads directive names in any case, joins a name across a C
comment or adjacent quoted strings, and statements after `;` or a label), and the assembly an honest
compile makes, strings and paths with such words in them included, goes on to the real assembler."""

from __future__ import annotations

import shutil
import subprocess

import pytest

from cuda_agent.env.builds import as_guard

FILE = '"/etc/hostname"'
REFUSED = {
    "plain": f".incbin {FILE}",
    "upper case": f".INCBIN {FILE}",
    "mixed case": f".IncBin {FILE}",
    "after a statement": f"nop; .incbin {FILE}",
    "after a label": f"here:.incbin {FILE}",
    "after a comment": f"/* c */ .incbin {FILE}",
    "comment inside the name": f".inc/* c */bin {FILE}",
    "quoted name": f'".incbin" {FILE}',
    "quoted parts": f'".inc" "bin" {FILE}',
    "escaped characters": f'"\\056inc\\x62in" {FILE}',
    "after a carriage return": f"nop\r.incbin {FILE}",
    "include": f".include {FILE}",
    "macro": ".macro embed name\n.\\name \"/etc/hostname\"\n.endm\nembed incbin",
    "irp": ".irp name,incbin\n.\\name \"/etc/hostname\"\n.endr",
    "irpc": ".irpc c,i\n.\\c\\()ncbin \"/etc/hostname\"\n.endr",
    "irep": ".irep name,incbin\n.endr",
    "rept": ".rept 1\nnop\n.endr",
    "rep": ".rep 1\nnop\n.endr",
    "altmacro": ".altmacro",
    "purgem": ".purgem embed",
    "mri": ".mri 1",
}
HONEST = {
    "a string naming the directives": '.section .rodata\n.string "use .incbin or .include or .macro"\n.text\nnop',
    "a path with such a folder": '.file "/home/me/.repos/.include/k.cpp"\n.text\nnop',
    "a string ending in a dot before a rep": '.section .rodata\n.string "done."\n.text\nrep stosq',
    "the rep prefix": ".text\nrep movsb\nrepz ret",
}


@pytest.fixture(scope="module")
def guard(tmp_path_factory):
    _, folder = as_guard.guard_flags(tmp_path_factory.mktemp("cache"), "c++")
    return folder / "as"


def _assemble(guard, tmp_path, text: str) -> subprocess.CompletedProcess:
    (tmp_path / "unit.s").write_text(text + "\n")
    return subprocess.run([str(guard), "--64", "-o", str(tmp_path / "unit.o"), str(tmp_path / "unit.s")],
                          capture_output=True, text=True)


@pytest.mark.parametrize("spelling", sorted(REFUSED))
def test_every_spelling_gas_would_run_is_refused(spelling, guard, tmp_path):
    ran = _assemble(guard, tmp_path, REFUSED[spelling])
    assert ran.returncode != 0 and as_guard.refusal(ran.stderr), ran.stderr
    assert not (tmp_path / "unit.o").exists()


@pytest.mark.parametrize("case", sorted(HONEST))
def test_honest_assembly_goes_on_to_the_assembler(case, guard, tmp_path):
    ran = _assemble(guard, tmp_path, HONEST[case])
    assert ran.returncode == 0 and (tmp_path / "unit.o").exists(), ran.stderr


def test_assembly_it_cannot_read_first_is_refused(guard, tmp_path):
    piped = subprocess.run([str(guard), "--64", "-o", str(tmp_path / "unit.o")], input=".incbin \"/etc/hostname\"\n",
                           capture_output=True, text=True)
    assert piped.returncode != 0 and "standard input" in as_guard.refusal(piped.stderr)
    (tmp_path / "args").write_text(str(tmp_path / "unit.s"))
    by_file = subprocess.run([str(guard), f"@{tmp_path / 'args'}"], capture_output=True, text=True)
    assert by_file.returncode != 0 and as_guard.refusal(by_file.stderr)


@pytest.mark.skipif(not shutil.which("as"), reason="GNU as is the assembler the guard stands before")
def test_a_gnu_assembler_would_run_the_refused_spellings(tmp_path):
    """The refused list is what gas does, not a guess: the plain assembler embeds the file through the
    spellings that are not plain `.incbin`."""
    for spelling in ("upper case", "comment inside the name", "macro", "irp", "irpc", "after a label"):
        (tmp_path / "unit.s").write_text(REFUSED[spelling].replace("/etc/hostname", str(tmp_path / "data")) + "\n")
        (tmp_path / "data").write_bytes(b"EMBEDDED-7f3a")
        subprocess.run(["as", "--64", "-o", str(tmp_path / "unit.o"), str(tmp_path / "unit.s")], check=True)
        assert b"EMBEDDED-7f3a" in (tmp_path / "unit.o").read_bytes(), spelling
