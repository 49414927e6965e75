"""Work that must not compete with the model for the cores: indexing (the tokenizer workers, each
folder's thread) runs at a lower priority, so that a completion asked for meanwhile gets the
cores it needs and indexing takes what is left."""

from __future__ import annotations

import os
import threading

# The niceness indexing work runs at, at least (0 to 19; higher yields more). A daemon started
# nicer than that keeps its own.
INDEXING_NICENESS = 10


def lower_this_process() -> None:
    _lower(0)


def lower_this_thread() -> None:
    """Linux takes a thread id for PRIO_PROCESS: only the calling thread yields (and the threads
    and processes it starts)."""
    _lower(threading.get_native_id())


def _lower(who: int) -> None:
    try:
        niceness = max(os.getpriority(os.PRIO_PROCESS, who), INDEXING_NICENESS)
        os.setpriority(os.PRIO_PROCESS, who, niceness)
    except (AttributeError, OSError):
        pass  # another system: the work keeps the process's priority
