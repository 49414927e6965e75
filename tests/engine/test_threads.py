"""The model's thread count follows the load: /proc is read as Linux writes it, and a program
keeping a core busy takes a thread away from the next completion; a count the user set stays."""

from __future__ import annotations

import subprocess
import sys
import time
from pathlib import Path

import pytest

from lookahead_lsp.engine.threads import CpuSample, ThreadChooser, busy_elsewhere, cores, sample

_STAT = "cpu  {user} 0 {system} {idle} 7 0 3 0 0 0\ncpu0 1 2 3 4 5 6 7 8 9 10\nintr 1 2 3\n"
# A process's stat line: the name in parentheses may hold spaces and parentheses itself.
_OWN = "4242 (python (worker) x) S 1 4242 4242 0 -1 4194304 100 0 0 0 {utime} {stime} 0 0 20 0 3 0 1\n"


def _write(tmp: Path, user: int, system: int, idle: int, utime: int, stime: int) -> tuple[Path, Path]:
    stat, own = tmp / "stat", tmp / "own"
    stat.write_text(_STAT.format(user=user, system=system, idle=idle))
    own.write_text(_OWN.format(utime=utime, stime=stime))
    return stat, own


def _spinning() -> subprocess.Popen[bytes]:
    """A process keeping a core busy, returned once it has spun for a quarter of a second of CPU
    time (it is then the load the chooser sees)."""
    busy = subprocess.Popen([sys.executable, "-c", "while True: pass"])
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        spun = sample(own=Path(f"/proc/{busy.pid}/stat"))
        if spun is not None and spun.own_s >= 0.25:
            return busy
        time.sleep(0.02)
    busy.kill()
    raise AssertionError("the busy process never ran")


def test_proc_is_read_as_linux_writes_it(tmp_path: Path) -> None:
    stat, own = _write(tmp_path, user=300, system=100, idle=1000, utime=50, stime=10)
    got = sample(stat, own)
    assert got is not None
    ticks = got.busy_s / (300 + 100 + 3)  # user + system + softirq; idle and iowait are not busy
    assert got.own_s == pytest.approx(60 * ticks)


def test_unreadable_or_foreign_proc_means_no_sample(tmp_path: Path) -> None:
    (tmp_path / "stat").write_text("not a stat file\n")
    (tmp_path / "own").write_text("1 (x) S\n")
    assert sample(tmp_path / "stat", tmp_path / "own") is None
    assert sample(tmp_path / "missing", tmp_path / "own") is None


def test_busy_elsewhere_leaves_out_this_process() -> None:
    before = CpuSample(at=10.0, busy_s=100.0, own_s=20.0)
    after = CpuSample(at=12.0, busy_s=104.0, own_s=22.0)  # 4 s busy in 2 s, 2 s of them ours
    assert busy_elsewhere(before, after) == pytest.approx(1.0)
    assert busy_elsewhere(after, after) == 0.0


def test_a_set_thread_count_is_kept() -> None:
    assert ThreadChooser(3, n_cores=2).choose() == 3


@pytest.mark.skipif(not sys.platform.startswith("linux") or cores() < 2, reason="needs /proc and two cores")
def test_a_busy_core_takes_a_thread_away() -> None:
    chooser = ThreadChooser(None)
    busy = _spinning()
    try:
        assert chooser.choose() <= chooser.cores - 1
    finally:
        busy.kill()
        busy.wait()


@pytest.mark.skipif(not sys.platform.startswith("linux") or cores() < 2, reason="needs /proc and two cores")
def test_a_choice_asked_for_at_once_still_gives_up_a_busy_core() -> None:
    """As `lookahead-lsp complete` asks, right after loading the model."""
    busy = _spinning()
    try:
        chooser = ThreadChooser(None)
        assert chooser.choose() <= chooser.cores - 1
    finally:
        busy.kill()
        busy.wait()
