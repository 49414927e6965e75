"""llama.cpp loaded once, before any other native library of ours, its log routed to Python
logging, and Ctrl-C around llama.cpp calls that log.

Importing this module loads llama.cpp's shared libraries (the ggml backends with them) and
initialises its backends. The package's __init__ imports it first, so the order cannot depend on
which of our modules a program happens to import first: loaded after numpy, a CUDA build of
llama.cpp crashed in llama_model_load_from_file (a program that imports numpy before us must
import lookahead_lsp or llama_cpp first, as bench/ does)."""

from __future__ import annotations

import contextlib
import ctypes
import logging
import signal
import threading
from typing import Iterator

import llama_cpp

_LOG = logging.getLogger("lookahead_lsp.llama")


def _forward_llama_log(level: int, text: bytes | None, user_data: ctypes.c_void_p) -> None:
    if text and _LOG.isEnabledFor(logging.DEBUG):
        _LOG.debug("%s", text.decode("utf-8", "replace").rstrip("\n"))


# llama.cpp writes its log to stderr unless given a callback, and keeps the bare C function
# pointer: the ctypes object behind it must stay alive for as long as llama.cpp may log, i.e.
# the whole process (if it were garbage-collected, the next log line would crash the process).
# Hence this one module-level object, created at import and never replaced.
_LLAMA_LOG_CALLBACK = llama_cpp.llama_log_callback(_forward_llama_log)


def route_llama_log() -> None:
    # Set before every load rather than once at import: importing llama_cpp installs
    # llama-cpp-python's own stderr printer, and anything may import it after us.
    llama_cpp.llama_log_set(_LLAMA_LOG_CALLBACK, ctypes.c_void_p(0))


route_llama_log()
llama_cpp.llama_backend_init()


@contextlib.contextmanager
def interrupts_held_back() -> Iterator[None]:
    """Delays Ctrl-C until the end of a llama.cpp call that logs (and so runs the Python log
    callback): a KeyboardInterrupt raised inside a ctypes callback is printed and dropped, and
    the command would go on as if never interrupted."""
    previous = signal.getsignal(signal.SIGINT)
    if threading.current_thread() is not threading.main_thread() or previous is None:
        # Python runs signal handlers on the main thread only, never in this thread's
        # callbacks; and a handler installed outside Python (None) could not be restored.
        yield
        return
    received: list[int] = []
    signal.signal(signal.SIGINT, lambda signum, _frame: received.append(signum))
    try:
        yield
    finally:
        signal.signal(signal.SIGINT, previous)
        if received:
            signal.raise_signal(signal.SIGINT)  # now handled as it would have been
