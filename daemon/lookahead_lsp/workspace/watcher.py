"""Keeps a WorkspaceIndex current with its folder: file system events and events forwarded by
the editor (LSP workspace/didChangeWatchedFiles, through notify) go into one debounced queue,
and each batch is applied to the index on the watcher's own thread.

On Linux the file system events come from inotify watches on the folders that can hold indexed
files only (folder_watches.py); elsewhere from watchdog's observer of the whole folder
(tree_observer.py). When watching cannot start or
go on (the user's inotify watch limit is reached, the folder is deleted) the watcher polls: it
rescans the folder every poll_s, and `status` says so and why. The editor's events still apply
at once either way.

A batch is collected for `debounce_s` from its first event and coalesced per path: a path
deleted at any point in the window is applied as deleted (which re-reads the path and anything
indexed under it, so it covers a later re-creation too), otherwise as changed; a move counts as
the source deleted and the destination changed. The same change reported by both sources
therefore costs one update when both land in one window, and in different windows the second
finds the file's stamp or content unchanged and tokenizes nothing.

When events may have been lost (an overflow of the kernel's queue, an event thread died,
applying a batch failed) the watcher rescans the folder with index_folder, which re-tokenizes
only what changed."""

from __future__ import annotations

import logging
import os
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Literal

from lookahead_lsp.base.debounce import wait_for_batch
from lookahead_lsp.workspace import inotify
from lookahead_lsp.workspace.folder_watches import FolderWatches, describe
from lookahead_lsp.workspace.index import WorkspaceIndex
from lookahead_lsp.workspace.index_stats import IndexStats, Outcome
from lookahead_lsp.workspace.tree_observer import TreeObserver

# LSP's FileChangeType, by name.
EventKind = Literal["created", "changed", "deleted"]
Mode = Literal["watching", "polling", "stopped"]
_Action = Literal["change", "delete"]

# How often a polling watcher rescans. A rescan lists the folder and compares each listed
# file's size and mtime, reading only what changed: cheap enough to repeat every few seconds,
# and polling is only the fallback for the files nobody reports (the editor's events and
# open documents still apply at once), so a change by another program may wait this long.
POLL_INTERVAL_S = 10.0

_log = logging.getLogger(__name__)

@dataclass(frozen=True, kw_only=True)
class WatcherSettings:
    """debounce_s: how long a batch collects events from its first one; health_check_s: how
    often an idle watcher checks that its event source still works (and whether a poll is
    due); poll_s: how often a polling watcher rescans; inotify: watch single folders with
    inotify where the system has it (False: watchdog's observer of the whole folder, as on
    systems without inotify)."""

    debounce_s: float = 0.15
    health_check_s: float = 1.0
    poll_s: float = POLL_INTERVAL_S
    inotify: bool = True


@dataclass(frozen=True)
class WatcherStatus:
    """mode: "watching" (file system events arrive), "polling" (they cannot: the folder is
    rescanned every poll_s; reason says why) or "stopped" (not started, or stopped). folders:
    how many folders hold a watch; None when watchdog watches the whole folder."""

    mode: Mode
    reason: str = ""
    folders: int | None = None


@dataclass
class BatchReport:
    """What one applied batch did: `paths` distinct paths after coalescing, and the outcome
    counts of the files they touched; `rescan` holds the stats of a rescan instead."""

    paths: int = 0
    updated: int = 0
    unchanged: int = 0
    removed: int = 0
    ignored: int = 0
    rescan: IndexStats | None = None

    def count(self, outcome: Outcome) -> None:
        if outcome == "updated":
            self.updated += 1
        elif outcome == "unchanged":
            self.unchanged += 1
        elif outcome == "removed":
            self.removed += 1
        else:
            self.ignored += 1


class WorkspaceWatcher:
    """Watches the root of a WorkspaceIndex (which must have its root and tokenizer) and feeds
    it. Call start() after or while the index is first built, stop() when done."""

    def __init__(
        self,
        index: WorkspaceIndex,
        settings: WatcherSettings | None = None,
        on_batch: Callable[[BatchReport], None] | None = None,
        on_mode: Callable[[], None] | None = None,
    ) -> None:
        """on_batch is called on the watcher's thread after each applied batch; on_mode after
        the watcher switched to polling (on the thread that found out)."""
        if index.root is None:
            raise ValueError("the index has no root folder")
        self._index = index
        self._root = index.root
        self._settings = settings or WatcherSettings()
        self._on_batch = on_batch
        self._on_mode = on_mode
        self._condition = threading.Condition()
        self._pending: dict[Path, _Action] = {}
        self._rescan = False
        self._batch_started: float | None = None
        self._stopping = False
        self._mode: Mode = "stopped"
        self._reason = ""
        self._last_rescan = time.monotonic()
        self._watches: FolderWatches | None = None
        self._observer: TreeObserver | None = None
        self._thread: threading.Thread | None = None

    @property
    def watching(self) -> bool:
        """Whether file system events are being received (notify works regardless)."""
        return self.status.mode == "watching"

    @property
    def status(self) -> WatcherStatus:
        with self._condition:
            if self._watches is not None:
                folders: int | None = self._watches.count
            else:
                folders = None if self._observer is not None else 0
            return WatcherStatus(self._mode, self._reason, folders)

    def start(self) -> None:
        """Starts watching, or polling when the folder cannot be watched (see status)."""
        with self._condition:
            if self._thread is not None or self._stopping:
                raise RuntimeError("a watcher starts once")
            self._thread = threading.Thread(
                target=self._run, name=f"watch {self._root.name}", daemon=True
            )
        try:
            self._start_events()
        except OSError as error:
            self._poll_instead(describe(error))
        self._thread.start()

    def stop(self) -> None:
        """Stops watching and waits for the threads; events not yet applied are dropped. A
        rescan in progress is cancelled between files. Idempotent."""
        with self._condition:
            self._stopping = True
            self._mode, self._reason = "stopped", ""
            self._condition.notify_all()
            observer, self._observer = self._observer, None
            watches, self._watches = self._watches, None
        if observer is not None:
            observer.stop()
        if watches is not None:
            watches.stop()
        if self._thread is not None and self._thread is not threading.current_thread():
            self._thread.join()

    def notify(self, path: Path | str, kind: EventKind) -> None:
        """An event from another source (the editor's file watcher), queued with the rest."""
        self._queue(Path(os.path.abspath(path)), "delete" if kind == "deleted" else "change")

    def request_rescan(self) -> None:
        """Rescans the folder in the next batch instead of applying single events."""
        with self._condition:
            self._rescan = True
            self._open_batch()

    # Event sources

    def _start_events(self) -> None:
        """Starts following file system events; OSError when that cannot be done."""
        if self._settings.inotify and inotify.available():
            watches = FolderWatches(self._index, self._on_change, self.request_rescan, self._ended)
            watches.start()
            with self._condition:
                self._watches, self._mode, self._reason = watches, "watching", ""
            return
        observer = self._start_observer()
        with self._condition:
            self._observer, self._mode, self._reason = observer, "watching", ""

    def _poll_instead(self, reason: str) -> None:
        _log.warning(
            "not watching %s (%s): rescanning it every %g s", self._root, reason,
            self._settings.poll_s,
        )  # fmt: skip
        with self._condition:
            if self._stopping:
                return
            self._mode, self._reason = "polling", reason
        if self._on_mode is not None:
            self._on_mode()

    def _ended(self, reason: str) -> None:
        """The inotify watches gave up (on their own thread): poll, after a rescan now, as
        events may have been lost."""
        self._poll_instead(reason)
        self.request_rescan()

    # Queueing (any thread)

    def _on_change(self, path: Path, deleted: bool) -> None:
        self._queue(path, "delete" if deleted else "change")

    def _queue(self, path: Path, action: _Action) -> None:
        # Whether the path counts is decided once, when the index applies it (rules.py).
        with self._condition:
            if self._pending.get(path) != "delete":
                self._pending[path] = action
            self._open_batch()

    def _open_batch(self) -> None:
        """Starts the debounce clock with a batch's first event (condition held)."""
        if self._batch_started is None:
            self._batch_started = time.monotonic()
            self._condition.notify_all()

    # The watcher's thread

    def _run(self) -> None:
        while (batch := self._next_batch()) is not None:
            pending, rescan = batch
            if pending or rescan:
                self._apply(pending, rescan)
            self._check_health()

    def _next_batch(self) -> tuple[dict[Path, _Action], bool] | None:
        """The next debounced batch; an empty one after an idle health-check interval; None
        when stopping."""
        with self._condition:
            started, stopping = (lambda: self._batch_started), (lambda: self._stopping)
            wait_for_batch(self._condition, started, stopping, self._settings.debounce_s, self._settings.health_check_s)
            if self._stopping:
                return None
            batch = (self._pending, self._rescan)
            self._pending, self._rescan, self._batch_started = {}, False, None
            return batch

    def _apply(self, pending: dict[Path, _Action], rescan: bool) -> None:
        report = BatchReport(paths=len(pending))
        try:
            if rescan:
                report.rescan = self._index.index_folder(cancelled=self._is_stopping)
                # Polls are timed from the end of a rescan: one that takes longer than poll_s
                # does not make the next start at once.
                self._last_rescan = time.monotonic()
            else:
                self._apply_events(pending, report)
        except Exception:  # the thread must outlive any one batch; the index may be off now
            _log.exception("updating the index of %s failed", self._root)
            if not rescan:
                self.request_rescan()
            return
        self._report(report)

    def _apply_events(self, pending: dict[Path, _Action], report: BatchReport) -> None:
        for path, action in pending.items():
            if self._is_stopping():
                return
            if action == "delete":
                outcomes = self._index.apply_disk_delete(path)
            else:
                outcomes = [self._index.apply_disk_change(path)]
            for outcome in outcomes:
                report.count(outcome)

    def _report(self, report: BatchReport) -> None:
        if self._on_batch is None:
            return
        try:
            self._on_batch(report)
        except Exception:  # the caller's hook must not end the watcher's thread
            _log.exception("the batch callback failed")

    def _check_health(self) -> None:
        """Rescans when polling and one is due; closes inotify watches that gave up; restarts
        watchdog when one of its threads died (events were lost: rescan)."""
        with self._condition:
            mode, watches, observer = self._mode, self._watches, self._observer
            if mode == "polling":
                self._watches = None
        if mode == "polling":
            if watches is not None:
                watches.stop()
            if time.monotonic() - self._last_rescan >= self._settings.poll_s:
                self.request_rescan()
            return
        if observer is None or observer.healthy:
            return
        _log.warning("file watching of %s stopped; restarting it and rescanning", self._root)
        observer.stop()
        try:
            replacement: TreeObserver | None = self._start_observer()
        except OSError as error:
            replacement = None
            self._poll_instead(describe(error))
        with self._condition:
            if self._stopping:
                if replacement is not None:
                    replacement.stop()
                return
            self._observer = replacement
        self.request_rescan()

    def _start_observer(self) -> TreeObserver:
        observer = TreeObserver(self._root, self._on_change, self.request_rescan)
        observer.start()
        return observer

    def _is_stopping(self) -> bool:
        return self._stopping
