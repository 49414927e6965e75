"""The model worker's scheduling (debounce, supersede, cancel, errors) and the suggestion cache."""

from __future__ import annotations

import threading

import pytest

from lookahead_lsp.completions import CompletionWorker, SuggestionCache
from lookahead_lsp.engine import CancelToken


def test_newer_job_supersedes_a_queued_one() -> None:
    worker: CompletionWorker[str] = CompletionWorker(debounce_s=0.2)
    try:
        first = worker.submit("doc", lambda cancel: "first")
        second = worker.submit("doc", lambda cancel: "second")
        other = worker.submit("other", lambda cancel: "other")
        assert first.result(timeout=5) is None
        assert second.result(timeout=5) == "second"
        assert other.result(timeout=5) == "other"
        assert worker.superseded == 1
    finally:
        worker.stop()


def test_running_job_is_cancelled_and_its_result_dropped() -> None:
    started = threading.Event()

    def slow(cancel: CancelToken) -> str:
        started.set()
        while not cancel.cancelled:
            threading.Event().wait(0.01)
        return "stale"

    worker: CompletionWorker[str] = CompletionWorker(debounce_s=0.0)
    try:
        running = worker.submit("doc", slow)
        assert started.wait(5)
        newer = worker.submit("doc", lambda cancel: "fresh", debounce=False)
        assert running.result(timeout=5) is None
        assert newer.result(timeout=5) == "fresh"
        worker.cancel("doc")  # nothing left to cancel: harmless
    finally:
        worker.stop()


def test_cancelling_one_request_leaves_the_newer_one() -> None:
    release = threading.Event()

    def blocking(cancel: CancelToken) -> str:
        release.wait(5)
        return "first"

    worker: CompletionWorker[str] = CompletionWorker(debounce_s=0.0)
    try:
        blocker = worker.submit("other", blocking)
        older = worker.submit("doc", lambda cancel: "older")
        newer = worker.submit("doc", lambda cancel: "newer")
        queued = worker.submit("third", lambda cancel: "never")
        worker.cancel_job(older)  # a late $/cancelRequest for the older request
        worker.cancel_job(queued)
        release.set()
        assert queued.result(timeout=5) is None
        assert blocker.result(timeout=5) == "first"
        assert older.result(timeout=5) is None
        assert newer.result(timeout=5) == "newer"
    finally:
        worker.stop()


def test_a_failing_job_fails_its_request_only() -> None:
    worker: CompletionWorker[str] = CompletionWorker(debounce_s=0.0)
    try:
        def boom(cancel: CancelToken) -> str:
            raise RuntimeError("model fell over")

        with pytest.raises(RuntimeError, match="fell over"):
            worker.submit("a", boom).result(timeout=5)
        assert worker.submit("a", lambda cancel: "next").result(timeout=5) == "next"
    finally:
        worker.stop()
    assert worker.submit("a", lambda cancel: "late").result(timeout=5) is None  # stopped


def test_suggestion_cache_follows_typing() -> None:
    cache = SuggestionCache(size=2)
    cache.store("a", "x = ", ")\n", "compute(1, 2")
    assert cache.lookup("a", "x = ", ")\n") == "compute(1, 2"
    assert cache.lookup("a", "x = comp", ")\n") == "ute(1, 2"
    assert cache.lookup("a", "x = compute(1, 2", ")\n") is None  # fully typed: nothing left
    assert cache.lookup("a", "x = cop", ")\n") is None  # typed something else
    assert cache.lookup("a", "x = comp", "]\n") is None  # the text after the cursor changed
    assert cache.lookup("b", "x = comp", ")\n") is None  # another document
    cache.store("a", "y = ", "", "1")
    cache.store("a", "z = ", "", "2")
    assert cache.lookup("a", "x = comp", ")\n") is None  # evicted (LRU of 2)
