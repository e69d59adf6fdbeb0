"""The device hold: timing a forward pass by the GPU's work alone, not the host's path to it.

A timed call is queued behind a hold (native/hold.cu, NVBench's "blocking kernel"): a kernel that fills
every SM and spins until the host opens a gate in pinned memory. The host queues the start event, the
forward and the end event behind it, then opens the gate, so the events measure the forward's device
work back to back, without the host's cold and load-dependent path to its first launch. Each call counts
the larger of its device time and its side's host floor (`call_times`: a low quantile of the side's
times to queue a forward), so a launch-bound forward is not flattered and the neighbours' noise is left out.

- The host waits until all of the hold's blocks are resident before calling the forward, so work sent
  to another stream cannot run before the clock starts.
- A forward that waits for the device inside (`.item()`, a synchronize) would wait for the gate: the
  hold gives up after `timeout_s` and the call is timed unheld (`Timer`). docs/environment.md has more.
"""

from __future__ import annotations

import ctypes
from pathlib import Path

from cuda_agent.env.measure.stats import order_quantile, quantile_precision

HOLD_SOURCE = Path(__file__).parent / "native" / "hold.cu"
HOST_QUANTILE = 0.1           # which of a side's host times stands for its host path (call_times)
HOLD_TIMEOUT_S = 0.05         # longer than any honest forward takes to queue its work, short enough to waste little
RESIDENT_LIMIT_S = 0.02       # how long the host waits for the hold to fill the GPU before calling the forward


def build_hold(cache_dir: Path) -> Path:
    """The hold's library, built once per toolchain and GPU architecture by the harness."""
    from cuda_agent.env.builds.compiler import build_native_library

    return build_native_library("cuda_agent_hold", HOLD_SOURCE.read_text(), Path(cache_dir), cuda=True)


class HoldError(RuntimeError):
    """The hold could not be set up on this GPU (the caller times without it)."""


class DeviceHold:
    """The hold of the current CUDA device. Bound when the worker starts, before any candidate code."""

    def __init__(self, library: Path | str, timeout_s: float = HOLD_TIMEOUT_S):
        lib = ctypes.CDLL(str(library))
        lib.cah_hold.argtypes = [ctypes.c_void_p, ctypes.c_uint64]
        lib.cah_wait_resident.argtypes = [ctypes.c_uint64]
        code = lib.cah_init()
        if code != 0:
            raise HoldError(f"the device hold could not be set up (CUDA error {code})")
        # the entry points, bound now: candidate code that rebinds the module's names changes nothing here
        self._hold, self._wait, self._release = lib.cah_hold, lib.cah_wait_resident, lib.cah_release
        self._timed_out = lib.cah_timed_out
        self.blocks, self.threads = lib.cah_blocks(), lib.cah_threads()
        self.timeout_ns = int(timeout_s * 1e9)
        self.resident = True     # whether the last hold filled the GPU before the forward was called

    def hold(self, stream_handle: int) -> None:
        code = self._hold(stream_handle, self.timeout_ns)
        if code != 0:
            raise HoldError(f"the device hold could not be launched (CUDA error {code})")
        self.resident = bool(self._wait(int(RESIDENT_LIMIT_S * 1e9)))

    def release(self) -> None:
        self._release()

    def timed_out(self) -> bool:
        return bool(self._timed_out())


class Timer:
    """How one side of an evaluation (the candidate, or the judge's references) times its calls: held
    while the hold works for its forward, unheld once `PATIENCE` calls in a row had to be let go by
    the timeout (a forward that waits for the device inside). A smaller patience would unhold honest
    forwards: a lazily loaded kernel's first launch waits for the device, and so does each output the
    caching allocator has no block for yet (cudaMalloc synchronises), up to eight in a judge's batch.
    Unheld is never faster for the same call: it adds the host's path to the launch."""

    PATIENCE = 12

    def __init__(self, hold: DeviceHold | None):
        self.hold = hold
        self.mode = "held" if hold is not None else "unheld"
        self.timeouts_in_a_row = 0

    def active_hold(self) -> DeviceHold | None:
        return self.hold if self.mode == "held" else None

    def note(self, hold_used: DeviceHold | None) -> None:
        """After a call timed with `hold_used` (None: unheld)."""
        if hold_used is None:
            return
        self.timeouts_in_a_row = self.timeouts_in_a_row + 1 if hold_used.timed_out() else 0
        if self.timeouts_in_a_row >= self.PATIENCE:
            self.mode = "unheld"


def host_floor(host_ms: list[float | None]) -> float | None:
    """The host's time to queue a side's forward: the `HOST_QUANTILE` order statistic of its held
    calls' host times, the value whose interval `floor_precise` checks (None: no held call)."""
    values = sorted(h for h in host_ms if h is not None)
    return order_quantile(values, HOST_QUANTILE) if values else None


def call_times(device_ms: list[float | None], host_ms: list[float | None]) -> list[float | None]:
    """Each call's time, from its measures (time_once): a held call counts the larger of its device
    time and the side's host floor; an unheld call (host None) its own events' time, the host's path
    already in it; a missing measure stays None."""
    floor = host_floor(host_ms)
    return [d if d is None or h is None or floor is None else max(d, floor) for d, h in zip(device_ms, host_ms)]


def floor_precise(device_ms: list[float | None], host_ms: list[float | None], precision: float) -> bool:
    """Whether a side's host floor is known well enough to stop timing: always, unless it decides the
    side's median (a forward bound by its launches), in which case its own interval (stats) must be
    within `precision` too; the calls' times, each the floor then, agree whatever the floor's error."""
    floor, devices = host_floor(host_ms), [d for d in device_ms if d is not None]
    if floor is None or not devices or floor < sorted(devices)[len(devices) // 2]:
        return True
    return quantile_precision([h for h in host_ms if h is not None], HOST_QUANTILE) <= precision


def load_hold(path: str | None) -> DeviceHold | None:
    """The hold from the library the harness built (None on the CPU backend or when it is off). A hold
    that cannot be set up on this GPU leaves the worker timing unheld."""
    if not path:
        return None
    try:
        return DeviceHold(path)
    except (OSError, HoldError):
        return None
