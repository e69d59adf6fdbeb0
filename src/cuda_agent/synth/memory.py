"""Memory facts about a filter worker and its host, read from /proc and the cgroup files (Linux).

Each reader returns None where the file is missing or unreadable (another OS, a container that hides
it), so callers report what is known and nothing else.
"""

from __future__ import annotations

from pathlib import Path

CGROUP_V2 = Path("/sys/fs/cgroup")
CGROUP_V1 = Path("/sys/fs/cgroup/memory")


def _read(path: Path | str) -> str | None:
    try:
        return Path(path).read_text()
    except (OSError, ValueError):
        return None


def _field_kb(text: str | None, name: str) -> int | None:
    """The `name:  123 kB` line of a /proc status or meminfo text, in kB."""
    for line in (text or "").splitlines():
        if line.startswith(name + ":"):
            try:
                return int(line.split()[1])
            except (IndexError, ValueError):
                return None
    return None


def _mb(kb: int | None) -> float | None:
    return None if kb is None else round(kb / 1024, 1)


def rss_mb(pid: int | str = "self") -> float | None:
    """Resident memory of a process now (VmRSS), in MiB."""
    return _mb(_field_kb(_read(f"/proc/{pid}/status"), "VmRSS"))


def peak_rss_mb(pid: int | str = "self") -> float | None:
    """The process's resident high-water mark (VmHWM) since it started or since `reset_peak_rss`, in MiB."""
    return _mb(_field_kb(_read(f"/proc/{pid}/status"), "VmHWM"))


def reset_peak_rss() -> bool:
    """Restart this process's VmHWM from its current RSS (Linux 4.0+); False where not allowed."""
    try:
        Path("/proc/self/clear_refs").write_text("5")
        return True
    except OSError:
        return False


def host_memory_mb() -> dict:
    """MemTotal, MemAvailable and Shmem (tmpfs and shared memory: not freed by killing a process) in MiB."""
    text = _read("/proc/meminfo")
    return {key: _mb(_field_kb(text, key)) for key in ("MemTotal", "MemAvailable", "Shmem")}


def _number(text: str | None) -> int | None:
    try:
        return int(text.strip()) if text is not None else None
    except ValueError:
        return None   # cgroup v2 writes "max" for no limit


def cgroup_memory() -> dict:
    """This container's memory cgroup: bytes in use, its limit (None: none) and the OOM kills it has
    seen (cgroup v2, else v1); {} where neither can be read."""
    events = _read(CGROUP_V2 / "memory.events")
    if events is not None:
        limit = _number(_read(CGROUP_V2 / "memory.max"))
        return {"current": _number(_read(CGROUP_V2 / "memory.current")), "limit": limit,
                "oom_kill": _event(events, "oom_kill")}
    control = _read(CGROUP_V1 / "memory.oom_control")
    if control is not None:
        limit = _number(_read(CGROUP_V1 / "memory.limit_in_bytes"))
        return {"current": _number(_read(CGROUP_V1 / "memory.usage_in_bytes")),
                "limit": limit if limit is not None and limit < 2**62 else None,   # v1's "unlimited"
                "oom_kill": _event(control, "oom_kill")}
    return {}


def _event(text: str, name: str) -> int | None:
    for line in text.splitlines():
        key, _, value = line.partition(" ")
        if key == name:
            return _number(value)
    return None


def memory_limit_mb() -> float | None:
    """What the host's processes can use together: the cgroup limit where there is one, else MemTotal."""
    limit = cgroup_memory().get("limit")
    total = host_memory_mb()["MemTotal"]
    if limit is not None:
        return round(min(limit / 2**20, total or float("inf")), 1)
    return total
