"""The debounce of a batch that other threads fill (the watcher's file events, the editor's text
for a folder's index): the batch's first item starts its clock, and the thread that applies
batches takes it `debounce_s` later, so that a burst of changes is applied once."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable


def wait_for_batch(
    condition: threading.Condition,
    started: Callable[[], float | None],
    stopping: Callable[[], bool],
    debounce_s: float,
    idle_s: float,
    not_before: float = 0.0,
) -> bool:
    """With `condition` held: waits up to idle_s for a batch to start (started(): the
    monotonic time of its first item, None before one), then until debounce_s after that and
    not before `not_before`; stopping() ends either wait. Whether a batch is due (False: none
    started within idle_s, or stopping)."""
    condition.wait_for(lambda: stopping() or started() is not None, timeout=idle_s)
    first = started()
    if first is None or stopping():
        return False
    due = max(first + debounce_s, not_before)
    condition.wait_for(stopping, timeout=max(due - time.monotonic(), 0.0))
    return not stopping()
