"""Scheduling completion requests onto the one model: a single worker thread, a short debounce,
newer requests for a document superseding older ones, a cap on waiting requests, work done
ahead while no request waits (idle jobs, which any request preempts), and an LRU of recent
suggestions so that typing the beginning of a suggestion is answered without the model. Both
hold a bounded amount of memory whatever the documents' sizes and number."""

from __future__ import annotations

import hashlib
import threading
import time
from collections import OrderedDict
from collections.abc import Callable, Hashable
from concurrent.futures import Future, InvalidStateError
from dataclasses import dataclass
from typing import Generic, TypeVar

from lookahead_lsp.engine import CancelToken

T = TypeVar("T")

# How much of the text after the cursor must match for a cached suggestion to apply.
_SUFFIX_KEY_CHARS = 200
# A suggestion keeps this much of the text before the cursor (compared first, cheaply) and a
# digest of all of it: an entry costs a few KiB whatever the document's size.
PREFIX_TAIL_CHARS = 4096
# Jobs waiting for the model. Each holds its document's text, and an editor waits on a handful of
# documents at most (one request each: newer ones supersede); beyond this the oldest is dropped.
MAX_QUEUED_JOBS = 8


@dataclass
class _Job(Generic[T]):
    key: str | None  # the document's; None: a chore that belongs to no document
    run: Callable[[CancelToken], T]
    cancel: CancelToken
    future: Future[T | None]
    not_before: float
    # An idle job: runs only while no request waits, and the answer to which request it computes
    # (a request asking exactly that takes it over instead of preempting it).
    idle_for: Hashable | None = None


class CompletionWorker(Generic[T]):
    """Runs jobs one at a time on its own thread. A job waits `debounce_s` before it starts; a
    newer job with the same key supersedes the older one, which resolves to None (cancelled
    while running: its CancelToken is set and its own result, if any, is dropped). At most
    `max_queued` jobs wait: a new one beyond that drops the oldest waiting one (to None).

    One idle job may wait besides (a newer one replaces it, and stops one running). It starts
    only when no other job waits, and a job submitted while it waits or runs drops it (cancelled while running: the
    engine stops within one model pass), unless that job asks for the very answer the idle job
    computes (`adopt`)."""

    def __init__(self, debounce_s: float = 0.03, max_queued: int = MAX_QUEUED_JOBS) -> None:
        self.debounce_s = debounce_s
        self.max_queued = max_queued
        self._lock = threading.Condition()
        self._queue: list[_Job[T]] = []
        self._running: _Job[T] | None = None
        self._idle: _Job[T] | None = None
        self._stopped = False
        self.superseded = 0
        self.idle_preempted = 0  # idle jobs dropped or stopped for a request
        self._thread = threading.Thread(target=self._loop, name="lookahead-model", daemon=True)
        self._thread.start()

    def submit(
        self, key: str, run: Callable[[CancelToken], T], debounce: bool = True, debounce_s: float | None = None
    ) -> Future[T | None]:
        """Queues run(cancel) for the document `key`, to start after debounce_s (by default the
        worker's debounce_s); debounce=False (an explicit request) starts it as soon as the
        worker is free."""
        delay = (self.debounce_s if debounce_s is None else debounce_s) if debounce else 0.0
        return self._enqueue(_Job(key, run, CancelToken(), Future(), time.monotonic() + delay))

    def submit_chore(self, run: Callable[[CancelToken], T]) -> Future[T | None]:
        """Queues a job that belongs to no document and must run (freeing a replaced model on
        the thread that used it): nothing supersedes it, it is never dropped for room, and it
        waits for no debounce."""
        return self._enqueue(_Job(None, run, CancelToken(), Future(), time.monotonic()))

    def submit_idle(
        self, key: str, answer: Hashable, run: Callable[[CancelToken], T], delay_s: float = 0.0
    ) -> Future[T | None]:
        """Queues run(cancel), the computation of `answer`, for when no other job waits, not
        before delay_s from now. It replaces the idle job waiting and stops the one running
        (what the user did since decides what idle time is for), unless that one is queueing
        it."""
        job = _Job(key, run, CancelToken(), Future(), time.monotonic() + delay_s, idle_for=answer)
        with self._lock:
            for same in (self._running, self._idle):
                if same is not None and same.idle_for == answer and not same.cancel.cancelled:
                    return same.future
            if self._stopped:
                resolve(job.future, None)
                return job.future
            if self._idle is not None:
                resolve(self._idle.future, None)
            running = self._running
            on_worker = threading.current_thread() is self._thread
            if running is not None and running.idle_for is not None and not on_worker:
                running.cancel.cancel()
            self._idle = job
            self._lock.notify_all()
        return job.future

    def adopt(self, answer: Hashable) -> Future[T | None] | None:
        """The future of the idle job that computes `answer`, waiting or running, which from
        now on counts as a request's job (only a newer request for its document supersedes it);
        None if no idle job does."""
        with self._lock:
            running = self._running
            if running is not None and running.idle_for == answer and not running.cancel.cancelled:
                running.idle_for = None
                running.cancel.await_answer()
                # As a new request would, it supersedes its document's older ones.
                self._drop(lambda other: other.key == running.key and other is not running)
                return running.future
            waiting = self._idle
            if waiting is not None and waiting.idle_for == answer:
                self._idle = None
                waiting.idle_for = None
                waiting.cancel.await_answer()
                waiting.not_before = time.monotonic()
                self._drop(lambda other: other.key == waiting.key)
                self._queue.insert(0, waiting)
                self._lock.notify_all()
                return waiting.future
        return None

    def _preempt_idle(self) -> None:
        """A request came: the idle work gives way (lock held)."""
        if self._idle is not None:
            resolve(self._idle.future, None)
            self._idle = None
            self.idle_preempted += 1
        running = self._running
        if running is not None and running.idle_for is not None and not running.cancel.cancelled:
            running.cancel.cancel()
            self.idle_preempted += 1

    def _enqueue(self, job: _Job[T]) -> Future[T | None]:
        with self._lock:
            if self._stopped:
                resolve(job.future, None)
                return job.future
            self._preempt_idle()
            if job.key is not None:
                self._drop(lambda old: old.key == job.key)
            self._make_room()
            self._queue.append(job)
            self._lock.notify_all()
        return job.future

    @property
    def queued(self) -> int:
        """Jobs waiting (the running one not counted)."""
        with self._lock:
            return len(self._queue)

    def cancel(self, key: str) -> None:
        """Drops every job with this key (the document was closed), idle ones included."""
        with self._lock:
            self._drop(lambda job: job.key == key)
            if self._idle is not None and self._idle.key == key:
                resolve(self._idle.future, None)
                self._idle = None
            running = self._running
            if running is not None and running.idle_for is not None and running.key == key:
                running.cancel.cancel()

    def drop_idle(self) -> None:
        """Drops the idle work, waiting or running (what it computes is no longer wanted)."""
        with self._lock:
            self._preempt_idle()

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
                resolve(job.future, None)
            self._queue.clear()
            if self._idle is not None:
                resolve(self._idle.future, None)
                self._idle = None
            if self._running is not None:
                self._running.cancel.cancel()
            self._lock.notify_all()
        self._thread.join(timeout=10)

    def _drop(self, matches: Callable[[_Job[T]], bool]) -> None:
        """Supersedes every job that matches, queued or running (lock held)."""
        for job in [j for j in self._queue if matches(j)]:
            self._queue.remove(job)
            resolve(job.future, None)
            self.superseded += 1
        running = self._running
        if running is not None and running.idle_for is None and matches(running):
            running.cancel.cancel()
            self.superseded += 1

    def _make_room(self) -> None:
        """Drops the oldest waiting jobs that may be dropped until one more fits (lock held)."""
        droppable = [job for job in self._queue if job.key is not None]
        while droppable and len(self._queue) >= self.max_queued:
            oldest = droppable.pop(0)
            self._queue.remove(oldest)
            resolve(oldest.future, None)
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
                elif self._idle is not None:
                    wait = self._idle.not_before - time.monotonic()
                    if wait <= 0:
                        job, self._idle = self._idle, None
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
            resolve(job.future, None if job.cancel.cancelled else result)


def resolve(future: Future[T | None], value: T | None) -> None:
    """Sets a result unless the waiting side has cancelled the future (it may do so at any
    moment, from its own thread)."""
    try:
        future.set_result(value)
    except InvalidStateError:
        pass


def chain(source: Future[T | None], target: Future[T | None]) -> None:
    """target gets source's outcome when it comes (target may have been cancelled meanwhile)."""

    def copy(f: Future[T | None]) -> None:
        if f.cancelled():
            resolve(target, None)
        elif (error := f.exception()) is not None:
            if not target.done():
                try:
                    target.set_exception(error)
                except InvalidStateError:
                    pass
        else:
            resolve(target, f.result())

    source.add_done_callback(copy)


@dataclass(frozen=True)
class CacheHit:
    text: str
    # A continuation the model decoded ahead, without stop rules (what follows the typed part of
    # it): the caller cuts it for the request, see stopping.shown_from_continuation.
    continuation: bool = False
    ended: bool = False  # that continuation ended at the model's end of generation
    typed: bool = False  # some of it was typed since


def answer_key(uri: str, prefix: str, suffix: str) -> tuple[str, int, bytes, str]:
    """What identifies the answer to a request (an idle job computing it, a request taking it over)."""
    return (uri, len(prefix), _digest(prefix), suffix[:_SUFFIX_KEY_CHARS])


@dataclass(frozen=True)
class _Suggestion:
    uri: str
    prefix_chars: int  # the length of the text before the cursor it was computed for
    prefix_tail: str  # that text's last PREFIX_TAIL_CHARS characters
    prefix_digest: bytes  # and a digest of all of it
    suffix_key: str
    text: str
    continuation: bool  # decoded ahead without stop rules, to be cut for each request
    ended: bool  # a continuation the model ended

    @property
    def retained_chars(self) -> int:
        return len(self.uri) + len(self.prefix_tail) + len(self.prefix_digest) + len(self.suffix_key) + len(self.text)


class SuggestionCache:
    """The last few suggestions, any documents. A request whose text before the cursor extends a
    cached suggestion's by characters that begin that suggestion (the user typed them) is
    answered with the rest of it. Stored by the model's worker and read by the server: every
    method takes the lock."""

    def __init__(self, size: int = 64) -> None:
        self.size = size
        self._entries: OrderedDict[tuple[str, int, bytes], _Suggestion] = OrderedDict()
        self._lock = threading.Lock()

    def store(
        self, uri: str, prefix: str, suffix: str, text: str, continuation: bool = False, ended: bool = False
    ) -> None:
        """A suggestion shown at (prefix, suffix); or, continuation=True, what the model decoded
        there without stop rules (ended: it ended it), which also answers the requests whose
        text before the cursor has all of it typed."""
        if not text:
            return
        entry = _Suggestion(
            uri,
            len(prefix),
            prefix[-PREFIX_TAIL_CHARS:],
            _digest(prefix),
            suffix[:_SUFFIX_KEY_CHARS],
            text,
            continuation,
            ended,
        )
        key = (uri, entry.prefix_chars, entry.prefix_digest)
        with self._lock:
            self._entries[key] = entry
            self._entries.move_to_end(key)
            while len(self._entries) > self.size:
                self._entries.popitem(last=False)

    def lookup(self, uri: str, prefix: str, suffix: str) -> CacheHit | None:
        suffix_key = suffix[:_SUFFIX_KEY_CHARS]
        with self._lock:
            candidates = [e for e in reversed(self._entries.values()) if e.uri == uri and e.suffix_key == suffix_key]
        for entry in candidates:
            if len(prefix) < entry.prefix_chars:
                continue
            typed = prefix[entry.prefix_chars :]
            room = len(entry.text) + entry.continuation  # a continuation may be typed in full
            if len(typed) >= room or not entry.text.startswith(typed):
                continue
            # The cheap check first; the digest only for a candidate that passed it.
            if prefix.endswith(entry.prefix_tail, 0, entry.prefix_chars) and (
                _digest(prefix[: entry.prefix_chars]) == entry.prefix_digest
            ):
                return CacheHit(entry.text[len(typed) :], entry.continuation, entry.ended, bool(typed))
        return None

    def drop(self, uri: str) -> None:
        """Forgets the document's suggestions (it was closed)."""
        with self._lock:
            for key in [key for key in self._entries if key[0] == uri]:
                del self._entries[key]

    def clear(self) -> None:
        """Forgets every suggestion (the settings that shaped them changed)."""
        with self._lock:
            self._entries.clear()

    def retained_chars(self) -> int:
        """Characters (and digest bytes) the entries hold: bounded by size entries of a few
        KiB plus their suggestion and URI, whatever the documents' sizes."""
        with self._lock:
            return sum(entry.retained_chars for entry in self._entries.values())


def _digest(text: str) -> bytes:
    # surrogatepass: the editor's text may hold a lone surrogate, which plain UTF-8 refuses.
    return hashlib.blake2b(text.encode("utf-8", "surrogatepass"), digest_size=16).digest()
