"""Which files another process could have written, judged by where they lie: the mounts its own mount
namespace shows (`/proc/PID/mountinfo`, read from outside it), not by what the files say.

A path, as the process sees it (`/proc/PID/maps` lists a mapping's file so), is resolved to the mount
that shows it as the kernel would: from the root mount down, at each step into the mount on top at the
shallowest point along the path (a mount covers whatever was mounted under its point before it). The
file is then a place in that mount's file system (its device, and the mount's root folder joined with the
rest of the path); it is writable by the process when a mount it can see (not covered) and that is
read-write, per mount and per file system, shows that place: the same file system and a root folder
that holds it. So a file in the candidate's box, in its private /tmp or /dev/shm, counts as its own
whichever mount it was opened through (a read-only view of the same folder included), while the
read-only root, the system's and torch's libraries and the job's read-only `libs` folder (the
solution's own extension, built and handed by the harness) do not.

Where the process shares this one's mount namespace (an unsandboxed run) nothing is judged: every file
the user may write is then the candidate's to write, torch's own libraries included, so where a file
lies says nothing.
"""

from __future__ import annotations

import os
import re
from dataclasses import dataclass

_DELETED = " (deleted)"
_ESCAPE = re.compile(r"\\([0-7]{3})")   # mountinfo writes space, tab, newline and backslash in octal


@dataclass(frozen=True)
class Mount:
    id: int
    parent: int
    device: str      # "major:minor" of its file system
    root: str        # the folder of that file system it shows
    point: str       # where it shows it, as the process sees its file system
    writable: bool   # read-write both as a mount and as a file system


def _unescape(field: str) -> str:
    return _ESCAPE.sub(lambda m: chr(int(m.group(1), 8)), field)


def parse_mountinfo(text: str) -> list[Mount]:
    """The mounts of a /proc/PID/mountinfo text, in its order (a later mount at a point is on top)."""
    found = []
    for line in text.splitlines():
        head, _, tail = line.partition(" - ")
        fields, rest = head.split(), tail.split()
        if len(fields) < 6 or len(rest) < 3:
            continue
        per_mount, per_fs = fields[5].split(","), rest[2].split(",")
        found.append(Mount(int(fields[0]), int(fields[1]), fields[2], _unescape(fields[3]), _unescape(fields[4]),
                           "rw" in per_mount and "rw" in per_fs))
    return found


def _within(path: str, folder: str) -> bool:
    return folder == "/" or path == folder or path.startswith(folder.rstrip("/") + "/")


class WritableFiles:
    """Whether a path of one process's file system names a file that process could have written."""

    def __init__(self, mount_list: list[Mount]):
        self.mounts = mount_list
        self.children: dict[int, list[Mount]] = {}
        ids = {m.id for m in mount_list}
        for mount in mount_list:
            if mount.parent in ids and mount.parent != mount.id:
                self.children.setdefault(mount.parent, []).append(mount)
        self.roots = [m for m in mount_list if m.parent not in ids or m.parent == m.id]
        self.writable = [m for m in mount_list if m.writable and self.mount_of(m.point) is m]
        self.known: dict[str, bool] = {}

    def mount_of(self, path: str) -> Mount | None:
        """The mount that shows `path` to the process."""
        mount = next((m for m in reversed(self.roots) if m.point == "/"), None)
        while mount is not None:
            along = [m for m in self.children.get(mount.id, ()) if _within(path, m.point)]
            if not along:
                return mount
            shallowest = min(len(m.point) for m in along)
            mount = [m for m in along if len(m.point) == shallowest][-1]   # the last mounted there is on top
        return None

    def holds(self, path: str) -> bool:
        """Whether the file at `path` (as /proc/PID/maps lists it: a deleted file's last path) lies where
        the process may write; decided once per path."""
        if path not in self.known:
            self.known[path] = self._holds(path.removesuffix(_DELETED))
        return self.known[path]

    def _holds(self, path: str) -> bool:
        mount = self.mount_of(path)
        if mount is None:
            return False
        rest = path[len(mount.point):].lstrip("/") if mount.point != "/" else path.lstrip("/")
        place = mount.root.rstrip("/") + "/" + rest if rest else mount.root
        return any(w.device == mount.device and _within(place, w.root) for w in self.writable)


def writable_files(pid: int) -> WritableFiles | None:
    """The files process `pid` could have written, as its mount namespace shows them; None where it shares
    this process's namespace (unsandboxed: nothing is judged) or its mounts cannot be read."""
    try:
        if os.stat(f"/proc/{pid}/ns/mnt").st_ino == os.stat("/proc/self/ns/mnt").st_ino:
            return None
        with open(f"/proc/{pid}/mountinfo", encoding="utf-8", errors="surrogateescape") as fh:
            return WritableFiles(parse_mountinfo(fh.read()))
    except OSError:
        return None
