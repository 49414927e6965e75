"""Scheduling completion requests onto the one model: a single worker thread, a short debounce,
newer requests for a document superseding older ones, and an LRU of recent suggestions so that
typing the beginning of a suggestion is answered without the model."""

from __future__ import annotations

import threading
import time
from collections import OrderedDict
from collections.abc import Callable
from concurrent.futures import Future, InvalidStateError
from dataclasses import dataclass
from typing import Generic, TypeVar

from lookahead_lsp.engine import CancelToken

T = TypeVar("T")

# How much of the text after the cursor must match for a cached suggestion to apply.
_SUFFIX_KEY_CHARS = 200


@dataclass
class _Job(Generic[T]):
    key: str
    run: Callable[[CancelToken], T]
    cancel: CancelToken
    future: Future[T | None]
    not_before: float


class CompletionWorker(Generic[T]):
    """Runs jobs one at a time on its own thread. A job waits `debounce_s` before it starts; a
    newer job with the same key supersedes the older one, which resolves to None (cancelled
    while running: its CancelToken is set and its own result, if any, is dropped)."""

    def __init__(self, debounce_s: float = 0.03) -> None:
        self.debounce_s = debounce_s
        self._lock = threading.Condition()
        self._queue: list[_Job[T]] = []
        self._running: _Job[T] | None = None
        self._stopped = False
        self.superseded = 0
        self._thread = threading.Thread(target=self._loop, name="lookahead-model", daemon=True)
        self._thread.start()

    def submit(self, key: str, run: Callable[[CancelToken], T], debounce: bool = True) -> Future[T | None]:
        """Queues run(cancel) under key; debounce=False (an explicit request) starts it as soon
        as the worker is free."""
        delay = self.debounce_s if debounce else 0.0
        job: _Job[T] = _Job(key, run, CancelToken(), Future(), time.monotonic() + delay)
        with self._lock:
            if self._stopped:
                _resolve(job.future, None)
                return job.future
            self._drop(lambda old: old.key == key)
            self._queue.append(job)
            self._lock.notify_all()
        return job.future

    def cancel(self, key: str) -> None:
        """Drops every job with this key (the document was closed)."""
        with self._lock:
            self._drop(lambda job: job.key == key)

    def cancel_job(self, future: Future[T | None]) -> None:
        """Drops the one job `submit` returned this future for, queued or running. A cancelled
        request must not take a newer request for the same document with it: the editor's
        $/cancelRequest for a keystroke can arrive after the next keystroke's request."""
        with self._lock:
            self._drop(lambda job: job.future is future)

    def stop(self) -> None:
        with self._lock:
            self._stopped = True
            for job in self._queue:
                _resolve(job.future, None)
            self._queue.clear()
            if self._running is not None:
                self._running.cancel.cancel()
            self._lock.notify_all()
        self._thread.join(timeout=10)

    def _drop(self, matches: Callable[[_Job[T]], bool]) -> None:
        """Supersedes every job that matches, queued or running (lock held)."""
        for job in [j for j in self._queue if matches(j)]:
            self._queue.remove(job)
            _resolve(job.future, None)
            self.superseded += 1
        if self._running is not None and matches(self._running):
            self._running.cancel.cancel()
            self.superseded += 1

    def _next(self) -> _Job[T] | None:
        with self._lock:
            while True:
                if self._stopped:
                    return None
                if self._queue:
                    job = self._queue[0]
                    if job.future.cancelled():  # its request went away while it waited
                        self._queue.pop(0)
                        self.superseded += 1
                        continue
                    wait = job.not_before - time.monotonic()
                    if wait <= 0:
                        self._queue.pop(0)
                        self._running = job
                        return job
                    self._lock.wait(wait)
                else:
                    self._lock.wait()

    def _loop(self) -> None:
        while (job := self._next()) is not None:
            try:
                result = job.run(job.cancel)
            except BaseException as error:  # handed to the waiting request, never lost
                with self._lock:
                    self._running = None
                try:
                    job.future.set_exception(error)
                except InvalidStateError:
                    pass
                continue
            with self._lock:
                self._running = None
            _resolve(job.future, None if job.cancel.cancelled else result)


def _resolve(future: Future[T | None], value: T | None) -> None:
    """Sets a result unless the waiting side has cancelled the future (it may do so at any
    moment, from its own thread)."""
    try:
        future.set_result(value)
    except InvalidStateError:
        pass


@dataclass(frozen=True)
class _Suggestion:
    prefix: str
    suffix_key: str
    text: str


class SuggestionCache:
    """The last few suggestions per document. A request whose text before the cursor extends a
    cached suggestion's by characters that begin that suggestion (the user typed them) is
    answered with the rest of it."""

    def __init__(self, size: int = 64) -> None:
        self.size = size
        self._entries: OrderedDict[tuple[str, str], _Suggestion] = OrderedDict()

    def store(self, uri: str, prefix: str, suffix: str, text: str) -> None:
        if not text:
            return
        key = (uri, prefix[-64:])
        self._entries[key] = _Suggestion(prefix, suffix[:_SUFFIX_KEY_CHARS], text)
        self._entries.move_to_end(key)
        while len(self._entries) > self.size:
            self._entries.popitem(last=False)

    def lookup(self, uri: str, prefix: str, suffix: str) -> str | None:
        suffix_key = suffix[:_SUFFIX_KEY_CHARS]
        for (entry_uri, _), entry in reversed(self._entries.items()):
            if entry_uri != uri or entry.suffix_key != suffix_key or not prefix.startswith(entry.prefix):
                continue
            typed = prefix[len(entry.prefix) :]
            if len(typed) < len(entry.text) and entry.text.startswith(typed):
                return entry.text[len(typed) :]
        return None

    def clear(self) -> None:
        self._entries.clear()
