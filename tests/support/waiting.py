"""Waiting in a test for what the code under test does on threads of its own (a model loading,
a folder indexing, work done ahead), with a bound: a condition that is never reached fails the
test instead of hanging it."""

from __future__ import annotations

import time
from collections.abc import Callable


def wait_until(check: Callable[[], bool], timeout_s: float, every_s: float = 0.05) -> None:
    deadline = time.monotonic() + timeout_s
    while not check():
        assert time.monotonic() < deadline, "condition not reached in time"
        time.sleep(every_s)
