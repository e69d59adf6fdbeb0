"""Which files a sandboxed process could have written (measure/mounts.py), judged by where they lie, and the
symbolizer's label for code there (`[writable]`, which op_samples counts against the candidate): a file of its
box, deleted or not, of its private /tmp or /dev/shm is its own; the job's read-only `libs` folder (its own
extension, handed by the harness) and the system's libraries are not; an unsandboxed process is not judged."""

from __future__ import annotations

import mmap
import os
import subprocess
import sys
from pathlib import Path

import pytest

from cuda_agent.env.measure.mounts import WritableFiles, parse_mountinfo, writable_files
from cuda_agent.env.measure.symbolize import WRITABLE, Symbolizer
from cuda_agent.env.rules.op_samples import unattributable
from tests.env.test_symbolize import _elf_header

# the shape of a candidate's sandbox (bubblewrap): the host's root read-only, /dev and /tmp private (the
# /dev/shm of the host's /dev covered by the new /dev), the cache covered, the job's libs read-only and its
# box (with a space in its path) read-write, and a read-only view of the job's folder elsewhere
SANDBOX = """\
109 43 254:0 / / ro,nosuid,nodev,relatime - ext4 /dev/vda rw,discard
124 109 0:6 / /dev ro,nosuid,nodev,relatime - devtmpfs devtmpfs rw,mode=755
125 124 0:23 / /dev/shm rw,relatime - tmpfs tmpfs rw
126 125 0:27 / /dev/shm ro,nosuid,nodev,relatime - tmpfs tmpfs rw
129 124 0:47 / /dev rw,nosuid,nodev,relatime - tmpfs tmpfs rw,mode=755
131 129 0:6 /zero /dev/zero rw,nosuid,relatime - devtmpfs devtmpfs rw,mode=755
137 109 0:49 / /proc rw,nosuid,nodev,noexec,relatime - proc proc rw
140 109 0:50 / /tmp rw,nosuid,nodev,relatime - tmpfs tmpfs rw,mode=755
141 109 0:51 / /opt/harness/cache rw,nosuid,nodev,relatime - tmpfs tmpfs rw,mode=755
142 141 254:0 /opt/harness/cache/jobs/j/libs /opt/harness/cache/jobs/j/libs ro,nosuid,nodev,relatime - ext4 /dev/vda rw,discard
143 141 254:0 /opt/harness/cache/jobs/j/my\\040box /opt/harness/cache/jobs/j/my\\040box rw,nosuid,nodev,relatime - ext4 /dev/vda rw
144 109 254:0 /opt/harness/cache/jobs /mnt/view ro,nosuid,nodev,relatime - ext4 /dev/vda rw,discard
145 109 254:0 /srv /srv rw,nosuid,nodev,relatime - ext4 /dev/vda ro
"""


def test_a_file_is_the_processes_where_a_writable_mount_shows_it():
    files = WritableFiles(parse_mountinfo(SANDBOX))
    own = ["/opt/harness/cache/jobs/j/my box/.code", "/opt/harness/cache/jobs/j/my box/sub/x.so (deleted)", "/tmp/x.so",
           "/dev/shm/x.so",            # in the new /dev (a tmpfs), not the covered /dev/shm under the old one
           "/mnt/view/j/my box/.code",  # the box's file through a read-only view: the box shows it writable
           "/dev/zero (deleted)"]
    not_own = ["/usr/lib/x86_64-linux-gnu/libc.so.6", "/opt/harness/cache/jobs/j/libs/ext/ext.so", "/mnt/view/j/libs/e.so",
               "/mnt/view/j/my boxes/x.so", "/srv/x.so",   # a file system mounted read-only
               "/opt/harness/cache/jobs/j/libs/ext/ext.so (deleted)"]
    assert {p: files.holds(p) for p in own + not_own} == {**{p: True for p in own}, **{p: False for p in not_own}}


CHILD = """
import ctypes, mmap, os, sys
libc = ctypes.CDLL(None)
libc.mmap.restype = ctypes.c_void_p
libc.mmap.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int, ctypes.c_int, ctypes.c_int, ctypes.c_long]
def mapped(path, delete=False, offset=0):
    if not os.path.exists(path):
        with open(path, "wb") as fh:
            fh.write(b"\\xc3" * mmap.PAGESIZE)
    fd = os.open(path, os.O_RDONLY)
    at = libc.mmap(None, mmap.PAGESIZE, mmap.PROT_READ | mmap.PROT_EXEC, mmap.MAP_PRIVATE, fd, offset)
    os.close(fd)
    if delete:
        os.unlink(path)
    return at
places = [mapped(sys.argv[1] + "/code.bin"), mapped(sys.argv[1] + "/gone.bin", delete=True), mapped("/tmp/t.bin"),
          mapped("/dev/shm/s.bin"), mapped(sys.argv[2], offset=mmap.PAGESIZE),
          ctypes.cast(libc.qsort, ctypes.c_void_p).value]
print(*places, flush=True)
sys.stdin.read()
"""


@pytest.mark.skipif(sys.platform != "linux", reason="Linux mount namespaces")
def test_code_in_a_file_the_sandboxed_process_could_write_is_labelled_so(tmp_path):
    from cuda_agent.env import EvalConfig
    from cuda_agent.env.builds.handed import handed_dir
    from cuda_agent.env.infra.sandbox import descendants, sandbox_available, sandbox_prefix

    if not sandbox_available()[0]:
        pytest.skip("bubblewrap is needed")
    box = tmp_path / "job" / "box"
    box.mkdir(parents=True)
    handed = handed_dir(box) / "ext" / "ext.so"   # where the harness hands the solution's extension
    handed.parent.mkdir(parents=True)
    handed.write_bytes(_elf_header(loads=True).ljust(mmap.PAGESIZE, b"\0") + b"\xc3" * mmap.PAGESIZE)
    wrap = sandbox_prefix(EvalConfig(sandbox="bwrap", cache_dir=tmp_path / "cache"), box)
    child = subprocess.Popen([*wrap, sys.executable, "-c", CHILD, str(box), str(handed)], stdin=subprocess.PIPE,
                             stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        places = [int(v) for v in child.stdout.readline().split()]
        assert len(places) == 6, child.stderr.read()
        [pid] = [p for p in descendants(child.pid) if "code.bin" in Path(f"/proc/{p}/maps").read_text()]
        found = Symbolizer(pid).resolve(places)
        unjudged = Symbolizer(pid, judge_files=False).resolve(places[:1])   # torch's load_inline builds in its box
    finally:
        child.stdin.close()
        child.wait(timeout=30)
    assert [library for library, _ in found[:5]] == [
        WRITABLE + "code.bin", WRITABLE + "gone.bin (deleted)", WRITABLE + "t.bin", WRITABLE + "s.bin",
        "ext.so"]   # the handed folder is read-only: its file read as the library it is
    assert found[5][0].startswith("libc") and found[5][1] == "qsort"
    assert [unattributable(library) for library, _ in found] == [True] * 4 + [False] * 2   # counted against it
    assert unjudged[0][0] == "[not ELF] code.bin"


def test_an_unsandboxed_process_is_not_judged(tmp_path):
    """It shares the harness's mount namespace: every file its user may write would be its own, torch's
    libraries included, so none is labelled (its box's files are read as any library is)."""
    assert writable_files(os.getpid()) is None
    assert Symbolizer(os.getpid()).writable is None
