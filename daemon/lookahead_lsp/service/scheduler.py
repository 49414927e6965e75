"""Scheduling completion requests onto the one model: a single worker thread, a short debounce,
newer requests for a document superseding older ones, a cap on waiting requests, and work done
ahead while no request waits (jobs ahead, which any request preempts). A job's state is explicit
(JobState) and moves only along _TRANSITIONS. The worker holds a bounded number of jobs
whatever the documents' sizes and number."""

from __future__ import annotations

import enum
import threading
import time
from collections.abc import Callable, Hashable
from concurrent.futures import Future, InvalidStateError
from dataclasses import dataclass, field
from typing import Generic, TypeVar

from lookahead_lsp.engine import CancelToken

T = TypeVar("T")

# Jobs waiting for the model. Each holds its document's text, and an editor waits on a handful of
# documents at most (one request each: newer ones supersede); beyond this the oldest is dropped.
MAX_QUEUED_JOBS = 8


class JobState(enum.Enum):
    QUEUED = "queued"  # waiting: in the queue, or as the job ahead
    RUNNING = "running"
    DONE = "done"  # its result (or its error) handed to its future
    CANCELLED = "cancelled"  # superseded, dropped, preempted or stopped: its future gets None


# Where a job may go from each state. A cancelled job never becomes done: whatever its run
# returns after the cancel is dropped.
_TRANSITIONS: dict[JobState, frozenset[JobState]] = {
    JobState.QUEUED: frozenset({JobState.RUNNING, JobState.CANCELLED}),
    JobState.RUNNING: frozenset({JobState.DONE, JobState.CANCELLED}),
    JobState.DONE: frozenset(),
    JobState.CANCELLED: frozenset(),
}


class InvalidTransition(RuntimeError):
    pass


def advance(state: JobState, to: JobState) -> JobState:
    """`to`, if a job in `state` may go there."""
    if to not in _TRANSITIONS[state]:
        raise InvalidTransition(f"a {state.value} job cannot become {to.value}")
    return to


@dataclass
class _Job(Generic[T]):
    key: str | None  # the document's; None: a chore that belongs to no document
    run: Callable[[CancelToken], T]
    future: Future[T | None]
    not_before: float
    # A job ahead (work ahead): it runs only while no request waits; the answer to which request
    # it computes (a request asking exactly that takes it over instead of preempting it).
    ahead_of: Hashable | None = None
    cancel: CancelToken = field(default_factory=CancelToken)
    # Set once a request has taken the job ahead over (adopt): it then stops at that request's
    # answer. The job's run is handed the same event when it is built (submit_ahead).
    awaited: threading.Event = field(default_factory=threading.Event)
    state: JobState = JobState.QUEUED

    def move(self, to: JobState) -> None:
        self.state = advance(self.state, to)

    @property
    def ahead_and_running(self) -> bool:
        return self.ahead_of is not None and self.state is JobState.RUNNING


class CompletionWorker(Generic[T]):
    """Runs jobs one at a time on its own thread. A job waits `debounce_s` before it starts; a
    newer job with the same key supersedes the older one, which resolves to None (cancelled
    while running: its CancelToken is set and its own result, if any, is dropped). At most
    `max_queued` jobs wait: a new one beyond that drops the oldest waiting one (to None).

    One job ahead may wait besides (a newer one replaces it, and stops one running). It starts
    only when no other job waits, and a job submitted while it waits or runs drops it (cancelled
    while running: the engine stops within one model pass), unless that job asks for the very
    answer the job ahead computes (`adopt`)."""

    def __init__(self, debounce_s: float = 0.03, max_queued: int = MAX_QUEUED_JOBS) -> None:
        self.debounce_s = debounce_s
        self.max_queued = max_queued
        self._lock = threading.Condition()
        self._queue: list[_Job[T]] = []
        self._running: _Job[T] | None = None
        self._ahead: _Job[T] | None = None
        self._stopped = False
        self.superseded = 0
        self.ahead_preempted = 0  # jobs ahead dropped or stopped for a request
        self._thread = threading.Thread(target=self._loop, name="lookahead-model", daemon=True)
        self._thread.start()

    def submit(
        self, key: str, run: Callable[[CancelToken], T], debounce: bool = True, debounce_s: float | None = None
    ) -> Future[T | None]:
        """Queues run(cancel) for the document `key`, to start after debounce_s (by default the
        worker's debounce_s); debounce=False (an explicit request) starts it as soon as the
        worker is free."""
        delay = (self.debounce_s if debounce_s is None else debounce_s) if debounce else 0.0
        return self._enqueue(_Job(key, run, Future(), time.monotonic() + delay))

    def submit_chore(self, run: Callable[[CancelToken], T]) -> Future[T | None]:
        """Queues a job that belongs to no document and must run (freeing a replaced model on
        the thread that used it): nothing supersedes it, it is never dropped for room, and it
        waits for no debounce."""
        return self._enqueue(_Job(None, run, Future(), time.monotonic()))

    def submit_ahead(
        self,
        key: str,
        answer: Hashable,
        run: Callable[[CancelToken], T],
        delay_s: float = 0.0,
        if_free: bool = False,
        awaited: threading.Event | None = None,
    ) -> Future[T | None]:
        """Queues run(cancel), the computation of `answer`, for when no other job waits, not
        before delay_s from now. It replaces the job ahead waiting and stops the one running
        (what the user did since decides what idle time is for); if_free (work that follows
        other work ahead): it is dropped instead where work ahead waits or runs. awaited: set
        once a request takes the job over."""
        job = _Job(key, run, Future(), time.monotonic() + delay_s, ahead_of=answer, awaited=awaited or threading.Event())
        with self._lock:
            for same in (self._running, self._ahead):
                if same is not None and same.ahead_of == answer and same.state is not JobState.CANCELLED:
                    return same.future
            # A job that queues more work ahead as it ends does not stop itself.
            running = None if threading.current_thread() is self._thread else self._running
            running_ahead = running is not None and running.ahead_and_running
            if self._stopped or (if_free and (self._ahead is not None or running_ahead)):
                _discard(job)
                return job.future
            if self._ahead is not None:
                _discard(self._ahead)
            if running is not None and running_ahead:
                _stop(running)
            self._ahead = job
            self._lock.notify_all()
        return job.future

    def adopt(self, answer: Hashable) -> Future[T | None] | None:
        """The future of the job ahead that computes `answer`, waiting or running, which from
        now on counts as a request's job (only a newer request for its document supersedes it);
        None if no job ahead does."""
        with self._lock:
            running = self._running
            if running is not None and running.ahead_of == answer and running.state is JobState.RUNNING:
                running.ahead_of = None
                running.awaited.set()
                # As a new request would, it supersedes its document's older ones.
                self._drop(lambda other: other.key == running.key and other is not running)
                return running.future
            waiting = self._ahead
            if waiting is not None and waiting.ahead_of == answer:
                self._ahead = None
                waiting.ahead_of = None
                waiting.awaited.set()
                waiting.not_before = time.monotonic()
                self._drop(lambda other: other.key == waiting.key)
                self._queue.insert(0, waiting)
                self._lock.notify_all()
                return waiting.future
        return None

    def _preempt_ahead(self) -> None:
        """A request came: the work ahead gives way (lock held)."""
        if self._ahead is not None:
            _discard(self._ahead)
            self._ahead = None
            self.ahead_preempted += 1
        running = self._running
        if running is not None and running.ahead_and_running:
            _stop(running)
            self.ahead_preempted += 1

    def _enqueue(self, job: _Job[T]) -> Future[T | None]:
        with self._lock:
            if self._stopped:
                _discard(job)
                return job.future
            self._preempt_ahead()
            if job.key is not None:
                self._drop(lambda old: old.key == job.key)
            self._make_room()
            self._queue.append(job)
            self._lock.notify_all()
        return job.future

    @property
    def ahead_running(self) -> bool:
        """Whether work ahead runs now."""
        with self._lock:
            return self._running is not None and self._running.ahead_and_running

    @property
    def queued(self) -> int:
        """Jobs waiting (the running one not counted)."""
        with self._lock:
            return len(self._queue)

    def cancel(self, key: str) -> None:
        """Drops every job with this key (the document was closed), work ahead included."""
        with self._lock:
            self._drop(lambda job: job.key == key)
            if self._ahead is not None and self._ahead.key == key:
                _discard(self._ahead)
                self._ahead = None
            running = self._running
            if running is not None and running.ahead_of is not None and running.key == key:
                _stop(running)

    def drop_ahead(self) -> None:
        """Drops the work ahead, waiting or running (what it computes is no longer wanted)."""
        with self._lock:
            self._preempt_ahead()

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
                _discard(job)
            self._queue.clear()
            if self._ahead is not None:
                _discard(self._ahead)
                self._ahead = None
            if self._running is not None:
                _stop(self._running)
            self._lock.notify_all()
        self._thread.join(timeout=10)

    def _drop(self, matches: Callable[[_Job[T]], bool]) -> None:
        """Supersedes every job that matches, queued or running (lock held)."""
        for job in [j for j in self._queue if matches(j)]:
            self._queue.remove(job)
            _discard(job)
            self.superseded += 1
        running = self._running
        if running is not None and running.ahead_of is None and running.state is JobState.RUNNING and matches(running):
            _stop(running)
            self.superseded += 1

    def _make_room(self) -> None:
        """Drops the oldest waiting jobs that may be dropped until one more fits (lock held)."""
        droppable = [job for job in self._queue if job.key is not None]
        while droppable and len(self._queue) >= self.max_queued:
            oldest = droppable.pop(0)
            self._queue.remove(oldest)
            _discard(oldest)
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
                        job.move(JobState.CANCELLED)
                        self.superseded += 1
                        continue
                    wait = job.not_before - time.monotonic()
                    if wait <= 0:
                        self._queue.pop(0)
                        job.move(JobState.RUNNING)
                        self._running = job
                        return job
                    self._lock.wait(wait)
                elif self._ahead is not None:
                    wait = self._ahead.not_before - time.monotonic()
                    if wait <= 0:
                        job, self._ahead = self._ahead, None
                        job.move(JobState.RUNNING)
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
                if not self._finish(job):
                    resolve(job.future, None)
                    continue
                try:
                    job.future.set_exception(error)
                except InvalidStateError:
                    pass
                continue
            resolve(job.future, result if self._finish(job) else None)

    def _finish(self, job: _Job[T]) -> bool:
        """The job's run returned: whether it is done (else it was cancelled meanwhile, and its
        future gets None)."""
        with self._lock:
            self._running = None
            if job.state is JobState.CANCELLED:
                return False
            job.move(JobState.DONE)
            return True


def _discard(job: _Job[T]) -> None:
    """A job that never ran is dropped (lock held)."""
    job.move(JobState.CANCELLED)
    resolve(job.future, None)


def _stop(job: _Job[T]) -> None:
    """The running job is told to stop, if it was not yet; what it returns is dropped (lock
    held)."""
    if job.state is JobState.RUNNING:
        job.move(JobState.CANCELLED)
        job.cancel.cancel()


def resolve(future: Future[T | None], value: T | None) -> None:
    """Sets a result unless the waiting side has cancelled the future (it may do so at any
    moment, from its own thread)."""
    try:
        future.set_result(value)
    except InvalidStateError:
        pass
