"""One writer of a session's state: what the model's worker computes reaches the counters, the
suggestion cache, the last completion and the counts of where the user went next through the
service alone (and its planner, under its lock), and never from the worker's thread (the real
model, a request, an accept, work done ahead)."""

from __future__ import annotations

import dataclasses
import sys
import tempfile
import threading
from collections.abc import Callable
from pathlib import Path
from typing import Any

from lookahead_lsp.service.next_places import PlaceCount
from lookahead_lsp.service.service import LookaheadService
from lookahead_lsp.service.status import AheadCounters, Counters
from lookahead_lsp.service.suggestions import SuggestionCache
from support.recording_client import RecordingClient
from support.waiting import wait_until

CACHE = Path(tempfile.gettempdir()) / "lookahead-lsp-test-cache"  # as the other service tests
WAIT_S = 300.0
# The modules that may change the state: the service, its planner of work ahead (called under
# its lock), and the counters' own methods.
OWNERS = {"lookahead_lsp.service.service", "lookahead_lsp.service.work_ahead", "lookahead_lsp.service.status"}


class _Writes:
    """Who changed the state: (thread, module) of each write."""

    def __init__(self) -> None:
        self.seen: set[tuple[str, str]] = set()
        self.lock = threading.Lock()

    def note(self, depth: int) -> None:
        module = sys._getframe(depth + 1).f_globals.get("__name__", "?")
        with self.lock:
            self.seen.add((threading.current_thread().name, module))


def _watched(writes: _Writes, base: type[Any]) -> type[Any]:
    class Watched(base):  # type: ignore[misc]
        def __setattr__(self, name: str, value: object) -> None:
            writes.note(1)
            super().__setattr__(name, value)

    return Watched


class _WatchedSuggestions(SuggestionCache):
    writes: _Writes

    def store(self, *args: Any, **kwargs: Any) -> None:
        self.writes.note(1)
        super().store(*args, **kwargs)

    def drop(self, uri: str) -> None:
        self.writes.note(1)
        super().drop(uri)

    def clear(self) -> None:
        self.writes.note(1)
        super().clear()


class _WatchedService(LookaheadService):
    writes: _Writes | None = None

    def __setattr__(self, name: str, value: object) -> None:
        if name == "last_completion" and self.writes is not None:
            self.writes.note(1)
        super().__setattr__(name, value)


def _until(condition: Callable[[], bool]) -> None:
    wait_until(condition, WAIT_S)


def test_what_the_model_computes_reaches_the_sessions_state_through_the_service_alone() -> None:
    writes = _Writes()
    service = _WatchedService(RecordingClient(), CACHE)
    service.configure({"maxTokens": 12, "debounceMs": 0, "draft": "none", "timeBudgetMs": None, "coldPromptMs": None})
    service.start_model()
    try:
        _until(lambda: service.status()["model_state"] != "loading")
        assert service.status()["model_state"] == "ready"
        service.counters = _watched(writes, Counters)(**dataclasses.asdict(service.counters))
        service.ahead = _watched(writes, AheadCounters)(**dataclasses.asdict(service.ahead))
        counts = service._planner.counts
        counts.accept = _watched(writes, PlaceCount)(**dataclasses.asdict(counts.accept))
        counts.enter = _watched(writes, PlaceCount)(**dataclasses.asdict(counts.enter))
        suggestions = _WatchedSuggestions()
        suggestions.writes = writes
        service.suggestions = suggestions
        service.writes = writes
        writes.seen.clear()

        text = "def area(width, height):\n    return"
        uri = "file:///shapes.py"
        service.open_document(uri, None, text)
        shown = service.complete(uri, None, text, len(text), "python", invoked=True).result(timeout=WAIT_S)
        assert shown is not None and shown.source == "model" and shown.text
        # While the suggestion is read, its continuation is decoded ahead; accepting it is
        # answered from there.
        accepted = text + shown.text
        _until(lambda: service.suggestions.lookup(uri, accepted, "") is not None)
        next_one = service.complete(uri, None, accepted, len(accepted), "python", invoked=True).result(timeout=WAIT_S)
        assert next_one is not None and next_one.source == "cache"
        service.cursor_rests(uri, None, text, 4, "python")
        _until(lambda: service.status()["ahead"]["runs"] >= 2)
        service.close_document(uri, None)
    finally:
        service.shutdown()

    threads = {thread for thread, _ in writes.seen}
    modules = {module for _, module in writes.seen}
    assert "lookahead-model" not in threads, f"the model's worker wrote the session's state: {sorted(writes.seen)}"
    assert modules <= OWNERS, f"state written from {sorted(modules - OWNERS)}"
    # The test saw the writes it is about: the model's answers applied off the worker.
    assert any(thread.startswith("lookahead-session") for thread in threads), sorted(writes.seen)
    assert any(module == "lookahead_lsp.service.work_ahead" for module in modules), "no accept was counted"
