"""How many threads the model's passes use: the cores other programs leave free.

llama.cpp's threads wait for each other at every layer by spinning, so a thread that shares its
core with a busy program stalls all the others: with one of two cores taken by a compile, two
threads decode at less than half the speed of one. Before each completion the engine takes the
cores busy with other work since the last look (the whole machine's busy time from /proc/stat
minus this process's own from /proc/self/stat) and runs on what is left, at least one thread.
A thread count the user set is kept as it is."""

from __future__ import annotations

import os
import time
from dataclasses import dataclass
from pathlib import Path

# Shorter windows than this say more about scheduling noise than about load: the last choice
# stands until one is over.
_MIN_WINDOW_S = 0.25
# Other work must hold this much of a core before a thread gives way to it.
_BUSY_CORE_SHARE = 0.5
_CLOCK_TICKS = os.sysconf("SC_CLK_TCK") if hasattr(os, "sysconf") else 100


@dataclass(frozen=True)
class CpuSample:
    at: float  # time.monotonic()
    busy_s: float  # CPU seconds every core spent busy since boot
    own_s: float  # CPU seconds this process used


def cores() -> int:
    """The cores this process may run on."""
    try:
        return len(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        return os.cpu_count() or 1


def sample(stat: Path = Path("/proc/stat"), own: Path = Path("/proc/self/stat")) -> CpuSample | None:
    """None where /proc cannot tell (not Linux)."""
    try:
        fields = stat.read_text().split("\n", 1)[0].split()
        own_fields = own.read_text().rsplit(")", 1)[1].split()
    except (OSError, IndexError):
        return None
    if len(fields) < 8 or fields[0] != "cpu" or len(own_fields) < 13:
        return None
    # user nice system idle iowait irq softirq steal: busy is all but idle and iowait.
    values = [int(v) for v in fields[1:9]]
    busy = sum(values) - values[3] - values[4]
    # After ")" the fields start at the state (field 3): utime and stime are fields 14 and 15.
    own_ticks = int(own_fields[11]) + int(own_fields[12])
    return CpuSample(time.monotonic(), busy / _CLOCK_TICKS, own_ticks / _CLOCK_TICKS)


def busy_elsewhere(before: CpuSample, after: CpuSample) -> float:
    """Cores other programs kept busy, on average, between two samples."""
    elapsed = after.at - before.at
    if elapsed <= 0:
        return 0.0
    others = (after.busy_s - before.busy_s) - (after.own_s - before.own_s)
    return max(0.0, others / elapsed)


class ThreadChooser:
    """The thread count for the next completion; `fixed` (the user's setting) overrides."""

    def __init__(self, fixed: int | None, n_cores: int | None = None, since: CpuSample | None = None) -> None:
        """since: the load is measured from then (the engine's start, so that loading the
        model counts as a look at the machine)."""
        self.fixed = fixed
        self.cores = n_cores or cores()
        self._last = since or sample()
        self._measured = False
        self.current = fixed or self.cores

    def choose(self) -> int:
        if self.fixed is not None:
            return self.current
        now = sample()
        if now is None or self._last is None:
            return self.current
        if now.at - self._last.at < _MIN_WINDOW_S:
            if self._measured:
                return self.current
            # The first choice waits for a window (a one-shot `complete` asks at once): a
            # quarter second costs less than a whole run on a core another program holds.
            time.sleep(_MIN_WINDOW_S - (now.at - self._last.at))
            now = sample()
            if now is None:
                return self.current
        self._measured = True
        taken = busy_elsewhere(self._last, now)
        self._last = now
        # Each core other work holds at least half of is left to it.
        given_up = int(taken + (1 - _BUSY_CORE_SHARE))
        self.current = max(1, min(self.cores, self.cores - given_up))
        return self.current
