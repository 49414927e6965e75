"""watchdog's observer of a whole folder tree: the watcher's event source where inotify watches
per folder are not used (macOS's FSEvents and Windows watch a tree at once, at no cost per
folder). Its events are reduced to (path, deleted); a warning it logs (a kernel queue overflow:
events lost) or a thread of it that died is reported so that the watcher rescans."""

from __future__ import annotations

import logging
import os
from pathlib import Path
from typing import Callable

from watchdog.events import (
    DirDeletedEvent,
    DirMovedEvent,
    FileClosedEvent,
    FileCreatedEvent,
    FileDeletedEvent,
    FileModifiedEvent,
    FileMovedEvent,
    FileSystemEvent,
    FileSystemEventHandler,
    FileSystemMovedEvent,
)
from watchdog.observers import Observer
from watchdog.observers.api import BaseObserver

# The events worth a look: writes, creations, deletions and renames. A folder created or moved
# in yields events for the files inside it; a folder deleted or moved away only its own.
_EVENT_FILTER: list[type[FileSystemEvent]] = [
    FileCreatedEvent,
    FileModifiedEvent,
    FileClosedEvent,
    FileDeletedEvent,
    FileMovedEvent,
    DirDeletedEvent,
    DirMovedEvent,
]


class TreeObserver:
    """on_change(path, deleted) and on_trouble() are called on watchdog's threads."""

    def __init__(self, root: Path, on_change: Callable[[Path, bool], None], on_trouble: Callable[[], None]) -> None:
        self._root = root
        self._on_change = on_change
        self._trouble = _TroubleHandler(on_trouble)
        self._observer: BaseObserver = Observer()

    def start(self) -> None:
        """OSError when the tree cannot be watched."""
        try:
            self._observer.schedule(_Handler(self._event), str(self._root), recursive=True, event_filter=_EVENT_FILTER)
            self._observer.start()
        except BaseException:
            self._stop_threads()
            raise
        logging.getLogger("watchdog").addHandler(self._trouble)

    @property
    def healthy(self) -> bool:
        observer = self._observer
        return observer.is_alive() and all(emitter.is_alive() for emitter in observer.emitters)

    def stop(self) -> None:
        logging.getLogger("watchdog").removeHandler(self._trouble)
        self._stop_threads()

    def _stop_threads(self) -> None:
        self._observer.stop()
        if self._observer.is_alive():
            self._observer.join()

    def _event(self, event: FileSystemEvent) -> None:
        source = Path(os.fsdecode(event.src_path))
        if isinstance(event, FileSystemMovedEvent):
            self._on_change(source, True)
            self._on_change(Path(os.fsdecode(event.dest_path)), False)
        else:
            self._on_change(source, isinstance(event, (FileDeletedEvent, DirDeletedEvent)))


class _Handler(FileSystemEventHandler):
    def __init__(self, on_event: Callable[[FileSystemEvent], None]) -> None:
        self._on_event = on_event

    def on_any_event(self, event: FileSystemEvent) -> None:
        # Runs on watchdog's thread, which an exception would end: queueing never raises.
        self._on_event(event)


class _TroubleHandler(logging.Handler):
    """watchdog reports a kernel queue overflow (events lost) only as a logged warning; this
    handler on its logger turns any warning or error of its observers into on_trouble()."""

    def __init__(self, on_trouble: Callable[[], None]) -> None:
        super().__init__(level=logging.WARNING)
        self._on_trouble = on_trouble

    def emit(self, record: logging.LogRecord) -> None:
        if record.name.startswith("watchdog.observers"):
            self._on_trouble()
