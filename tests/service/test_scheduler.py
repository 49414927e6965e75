"""The model worker's scheduling: debounce, supersede, cancel, errors, the queue's cap, work ahead
and its takeover, and the states a job goes through."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from concurrent.futures import Future

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from lookahead_lsp.service.scheduler import MAX_QUEUED_JOBS, CompletionWorker, InvalidTransition, JobState, advance
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


def _blocking(started: threading.Event, release: threading.Event) -> Callable[[CancelToken], str]:
    def run(cancel: CancelToken) -> str:
        started.set()
        return "done" if release.wait(10) else "timeout"

    return run


def _answer(text: str) -> Callable[[CancelToken], str]:
    """A job that answers `text` at once."""
    return lambda cancel: text


def test_the_queue_holds_at_most_its_cap() -> None:
    started, release = threading.Event(), threading.Event()
    worker: CompletionWorker[str] = CompletionWorker(debounce_s=0.0)
    try:
        blocker = worker.submit("blocker", _blocking(started, release))
        assert started.wait(5)
        futures = []
        most = 0
        for i in range(1000):
            futures.append(worker.submit(f"doc{i % 40}", _answer(f"job {i}")))
            most = max(most, worker.queued)
        assert most == MAX_QUEUED_JOBS
        # The oldest waiting jobs were dropped (answered None at once), the newest wait.
        assert all(f.done() and f.result() is None for f in futures[: -MAX_QUEUED_JOBS])
        release.set()
        assert blocker.result(timeout=5) == "done"
        assert [f.result(timeout=5) for f in futures[-MAX_QUEUED_JOBS:]] == [
            f"job {i}" for i in range(1000 - MAX_QUEUED_JOBS, 1000)
        ]
    finally:
        release.set()
        worker.stop()


def test_a_chore_is_never_dropped_for_room_nor_superseded_by_another() -> None:
    started, release = threading.Event(), threading.Event()
    worker: CompletionWorker[str] = CompletionWorker(debounce_s=0.0, max_queued=2)
    try:
        worker.submit("blocker", _blocking(started, release))
        assert started.wait(5)
        chores = [worker.submit_chore(_answer(f"freed {i}")) for i in range(2)]
        later = [worker.submit(f"doc{i}", _answer(f"job {i}")) for i in range(5)]
        assert worker.queued == 3
        release.set()
        assert [f.result(timeout=5) for f in chores] == ["freed 0", "freed 1"]
        assert [f.result(timeout=5) for f in later] == [None, None, None, None, "job 4"]
    finally:
        release.set()
        worker.stop()


def _until_cancelled(started: threading.Event, text: str) -> Callable[[CancelToken], str]:
    """A job that runs until it is cancelled (as the engine stops between passes)."""

    def run(cancel: CancelToken) -> str:
        started.set()
        while not cancel.cancelled:
            threading.Event().wait(0.005)
        return text

    return run


def test_work_ahead_waits_for_the_requests_and_runs_when_none_waits() -> None:
    started, release = threading.Event(), threading.Event()
    worker: CompletionWorker[str] = CompletionWorker(debounce_s=0.0)
    try:
        request = worker.submit("doc", _blocking(started, release))
        assert started.wait(5)
        ahead = worker.submit_ahead("doc", "answer", _answer("ahead"))
        threading.Event().wait(0.05)
        assert not ahead.done(), "work ahead started while a request ran"
        release.set()
        assert request.result(timeout=5) == "done"
        assert ahead.result(timeout=5) == "ahead"
    finally:
        release.set()
        worker.stop()


def test_a_request_stops_running_work_ahead_and_drops_waiting_work_ahead() -> None:
    started = threading.Event()
    worker: CompletionWorker[str] = CompletionWorker(debounce_s=0.0)
    try:
        running = worker.submit_ahead("doc", "a", _until_cancelled(started, "stopped"))
        assert started.wait(5)
        request = worker.submit("other", _answer("now"), debounce=False)
        assert request.result(timeout=5) == "now"
        assert running.result(timeout=5) is None  # cancelled: its result is not an answer
        waiting = worker.submit_ahead("other", "b", _answer("never"), delay_s=5.0)
        assert worker.submit("other", _answer("again"), debounce=False).result(timeout=5) == "again"
        assert waiting.result(timeout=5) is None
        assert worker.ahead_preempted == 2
        assert worker.superseded == 0, "work ahead given up is not a request superseded"
    finally:
        worker.stop()


def test_newer_work_ahead_stops_the_work_ahead_running_unless_that_queues_it() -> None:
    """The user moved on (a cursor report in another file): the idle time goes to the newer
    work. Work ahead that queues more work ahead as it ends (the warming of a prompt after work
    done ahead) is not stopped by it."""
    started = threading.Event()
    worker: CompletionWorker[str] = CompletionWorker(debounce_s=0.0)
    try:
        running = worker.submit_ahead("doc", "a", _until_cancelled(started, "stopped"))
        assert started.wait(5)
        newer = worker.submit_ahead("other", "b", _answer("newer"))
        assert running.result(timeout=5) is None
        assert newer.result(timeout=5) == "newer"
        followed: list[Future[str | None]] = []

        def queues_more(cancel: CancelToken) -> str:
            followed.append(worker.submit_ahead("doc", "d", _answer("followed")))
            return "stopped" if cancel.cancelled else "done"

        assert worker.submit_ahead("doc", "c", queues_more).result(timeout=5) == "done"
        assert followed[0].result(timeout=5) == "followed"
    finally:
        worker.stop()


def test_a_request_for_the_answer_being_computed_ahead_takes_it_over() -> None:
    started, release = threading.Event(), threading.Event()
    worker: CompletionWorker[str] = CompletionWorker(debounce_s=0.0)
    try:
        ahead = worker.submit_ahead("doc", ("doc", 42), _blocking(started, release))
        assert started.wait(5)
        assert worker.submit_ahead("doc", ("doc", 42), _answer("twice")) is ahead, "the same work queued twice"
        assert worker.adopt(("doc", 41)) is None
        taken = worker.adopt(("doc", 42))
        assert taken is ahead
        # Taken over, it is a request's job: other documents' requests wait for it.
        other = worker.submit("other", _answer("next"), debounce=False)
        release.set()
        assert taken.result(timeout=5) == "done"
        assert other.result(timeout=5) == "next"
        # A waiting job of work ahead taken over runs as the next request.
        started.clear()
        release.clear()
        blocker = worker.submit("blocker", _blocking(started, release))
        assert started.wait(5)
        queued = worker.submit_ahead("doc", ("doc", 43), _answer("waited"))
        assert worker.adopt(("doc", 43)) is queued
        release.set()
        assert blocker.result(timeout=5) == "done"
        assert queued.result(timeout=5) == "waited"
    finally:
        release.set()
        worker.stop()


def test_closing_a_document_stops_its_work_ahead() -> None:
    started = threading.Event()
    worker: CompletionWorker[str] = CompletionWorker(debounce_s=0.0)
    try:
        running = worker.submit_ahead("doc", "a", _until_cancelled(started, "stopped"))
        assert started.wait(5)
        worker.cancel("doc")
        assert running.result(timeout=5) is None
    finally:
        worker.stop()


def test_delayed_work_ahead_waits_its_delay() -> None:
    worker: CompletionWorker[str] = CompletionWorker(debounce_s=0.0)
    try:
        later = worker.submit_ahead("doc", "a", _answer("later"), delay_s=0.4)
        threading.Event().wait(0.15)
        assert not later.done()
        assert later.result(timeout=5) == "later"
    finally:
        worker.stop()


def test_taking_over_work_ahead_supersedes_the_documents_older_request() -> None:
    started = threading.Event()
    worker: CompletionWorker[str] = CompletionWorker(debounce_s=0.0)
    try:
        older = worker.submit("doc", _until_cancelled(started, "stale"), debounce=False)
        assert started.wait(5)
        worker.submit_ahead("doc", ("doc", 7), _answer("ahead"), delay_s=5.0)
        taken = worker.adopt(("doc", 7))
        assert taken is not None
        assert older.result(timeout=5) is None, "the older request was not superseded"
        assert taken.result(timeout=5) == "ahead"
    finally:
        worker.stop()


def test_a_job_moves_only_forward_and_a_cancelled_one_never_reports() -> None:
    assert advance(JobState.QUEUED, JobState.RUNNING) is JobState.RUNNING
    assert advance(JobState.RUNNING, JobState.DONE) is JobState.DONE
    for final in (JobState.DONE, JobState.CANCELLED):
        for to in JobState:
            with pytest.raises(InvalidTransition):
                advance(final, to)
    with pytest.raises(InvalidTransition):
        advance(JobState.QUEUED, JobState.DONE)  # a job that never ran has no result


def test_a_job_that_fails_after_it_was_superseded_answers_nothing() -> None:
    started = threading.Event()

    def fails_once_stopped(cancel: CancelToken) -> str:
        started.set()
        while not cancel.cancelled:
            threading.Event().wait(0.01)
        raise RuntimeError("stopped mid-pass")

    worker: CompletionWorker[str] = CompletionWorker(debounce_s=0.0)
    try:
        older = worker.submit("doc", fails_once_stopped, debounce=False)
        assert started.wait(5)
        newer = worker.submit("doc", _answer("fresh"), debounce=False)
        assert older.result(timeout=5) is None
        assert newer.result(timeout=5) == "fresh"
    finally:
        worker.stop()


_OPERATIONS = st.lists(
    st.tuples(
        st.sampled_from(["submit", "submit_now", "ahead", "adopt", "cancel_doc", "cancel_job", "drop_ahead", "pause"]),
        st.sampled_from(["a", "b"]),
        st.integers(0, 2),  # the answer a job of work ahead computes, or the job to cancel
        st.sampled_from([0.0, 0.01, 0.05]),  # how long the job runs
    ),
    max_size=12,
)


@settings(max_examples=120, deadline=None)
@given(_OPERATIONS)
def test_whatever_the_order_of_operations_every_job_ends_and_the_worker_goes_on(
    operations: list[tuple[str, str, int, float]],
) -> None:
    worker: CompletionWorker[str] = CompletionWorker(debounce_s=0.001)
    futures: list[Future[str | None]] = []

    def job(seconds: float, text: str) -> Callable[[CancelToken], str]:
        def run(cancel: CancelToken) -> str:
            time.sleep(seconds)
            return text

        return run

    try:
        for operation, doc, n, seconds in operations:
            if operation in ("submit", "submit_now"):
                futures.append(worker.submit(doc, job(seconds, f"{doc}{n}"), debounce=operation == "submit"))
            elif operation == "ahead":
                futures.append(worker.submit_ahead(doc, (doc, n), job(seconds, f"ahead {doc}{n}")))
            elif operation == "adopt":
                taken = worker.adopt((doc, n))
                if taken is not None:
                    futures.append(taken)
            elif operation == "cancel_doc":
                worker.cancel(doc)
            elif operation == "cancel_job" and futures:
                worker.cancel_job(futures[n % len(futures)])
            elif operation == "drop_ahead":
                worker.drop_ahead()
            elif operation == "pause":  # the worker picks up what waits
                time.sleep(seconds)
        # Every job ends: with its own text, or None where it was superseded or dropped.
        for future in futures:
            assert future.result(timeout=5) in (None, *(f"{p}{d}{i}" for p in ("", "ahead ") for d in "ab" for i in range(3)))
        # The worker took no wrong turn on the way: it still answers.
        assert worker.submit("c", _answer("still here"), debounce=False).result(timeout=5) == "still here"
    finally:
        worker.stop()


def test_work_that_follows_other_work_ahead_gives_way_to_newer_work_ahead() -> None:
    """The next place after a suggestion is queued once the work before it is done: where the
    user's newer report has queued work ahead meanwhile, that work stays."""
    started = threading.Event()
    worker: CompletionWorker[str] = CompletionWorker(debounce_s=0.0)
    try:
        newer = worker.submit_ahead("doc", "where the cursor went", _until_cancelled(started, "newer"))
        assert started.wait(5)
        follow_up = worker.submit_ahead("doc", "the next line", _answer("follow-up"), if_free=True)
        assert follow_up.result(timeout=5) is None
        assert not newer.done(), "the follow-up stopped the newer work"
        worker.drop_ahead()
        assert newer.result(timeout=5) is None
        assert worker.submit_ahead("doc", "the next line", _answer("follow-up"), if_free=True).result(timeout=5) == "follow-up"
    finally:
        worker.stop()
