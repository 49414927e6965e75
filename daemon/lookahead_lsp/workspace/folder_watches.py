"""A watch on each folder of a workspace that can hold indexed files, and on no other: not on
node_modules, .git, build outputs or .gitignored folders, which in a large project hold almost
all of its folders and could use up the user's inotify watches (which the editor needs too).

The set follows the folder: a folder created or moved in is watched together with the folders
inside it (and the files already in them are reported, as they were written before the watch),
one deleted or moved away is no longer watched, and a changed .gitignore or a kernel queue
overflow brings the set in line with the folder again."""

from __future__ import annotations

import errno
import logging
import os
import threading
from pathlib import Path
from typing import Callable

from lookahead_lsp.workspace import inotify
from lookahead_lsp.workspace.index import WorkspaceIndex

_log = logging.getLogger(__name__)

# Writes, creations, deletions and renames of the entries of a watched folder, and the end of
# the folder itself; no symlink is followed and only folders are watched.
_MASK = (
    inotify.IN_CREATE
    | inotify.IN_MODIFY
    | inotify.IN_CLOSE_WRITE
    | inotify.IN_DELETE
    | inotify.IN_MOVED_FROM
    | inotify.IN_MOVED_TO
    | inotify.IN_DELETE_SELF
    | inotify.IN_MOVE_SELF
    | inotify.IN_ONLYDIR
    | inotify.IN_DONT_FOLLOW
    | inotify.IN_EXCL_UNLINK
)
_GONE = inotify.IN_DELETE | inotify.IN_MOVED_FROM
_ARRIVED = inotify.IN_CREATE | inotify.IN_MOVED_TO
# A folder that vanished, was replaced by a file or a symlink, or cannot be read: nothing to
# index there, and no reason to stop watching the rest.
_SKIPPABLE = frozenset({errno.ENOENT, errno.ENOTDIR, errno.EACCES, errno.EPERM, errno.ELOOP})


class WatchingEnded(Exception):
    """The events cannot be followed any more; the message says why."""


class FolderWatches:
    """The watches of one WorkspaceIndex's folders (index.source_folders) in one inotify
    instance, read on their own thread. Each event becomes changed(path, deleted); lost()
    when events were lost (a rescan is due); ended(reason) when watching cannot go on (the
    watch limit reached, the folder deleted), after which no more calls come."""

    def __init__(
        self,
        index: WorkspaceIndex,
        changed: Callable[[Path, bool], None],
        lost: Callable[[], None],
        ended: Callable[[str], None],
    ) -> None:
        if index.root is None:
            raise ValueError("the index has no root folder")
        self._index = index
        self._root = index.root
        self._changed = changed
        self._lost = lost
        self._ended = ended
        self._inotify: inotify.Inotify | None = None
        self._folders: dict[int, Path] = {}
        self._watches: dict[Path, int] = {}
        self._thread: threading.Thread | None = None

    @property
    def count(self) -> int:
        """How many folders are watched."""
        return len(self._folders)

    def start(self) -> None:
        """Watches the folders and starts reading; OSError when that cannot be done (the
        user's inotify instance or watch limit reached, the folder missing)."""
        self._inotify = inotify.Inotify()
        try:
            self._sync()
        except OSError:
            self._close()
            raise
        self._thread = threading.Thread(
            target=self._run, name=f"inotify {self._root.name}", daemon=True
        )
        self._thread.start()

    def stop(self) -> None:
        """Ends reading and every watch. Idempotent."""
        if self._inotify is None:
            return
        if self._thread is not None:
            self._inotify.wake()
            if self._thread is not threading.current_thread():
                self._thread.join()
        self._close()

    def _close(self) -> None:
        if self._inotify is not None:
            self._inotify.close()
            self._inotify = None
        self._folders.clear()
        self._watches.clear()

    # The reading thread

    def _run(self) -> None:
        assert self._inotify is not None
        try:
            while (events := self._inotify.read()) is not None:
                for event in events:
                    self._handle(event)
        except WatchingEnded as ending:
            self._end(str(ending))
        except OSError as error:
            self._end(describe(error))
        except Exception as error:  # this thread is all there is to follow the folder
            _log.exception("following the events of %s failed", self._root)
            self._end(f"following events failed: {error}")

    def _end(self, reason: str) -> None:
        """Gives the watches back at once (the limit is shared with the user's other
        programs); the instance closes in stop()."""
        assert self._inotify is not None
        for wd in list(self._folders):
            self._inotify.remove_watch(wd)
        self._folders.clear()
        self._watches.clear()
        self._ended(reason)

    def _handle(self, event: inotify.Event) -> None:
        if event.mask & inotify.IN_Q_OVERFLOW:
            self._lost()
            self._sync()  # folders created meanwhile are not watched yet
            return
        folder = self._folders.get(event.wd)
        if event.mask & inotify.IN_IGNORED:
            self._forget(event.wd)
            if folder == self._root:
                raise WatchingEnded(f"{self._root} was moved or deleted")
            return
        if folder is None:  # a watch ended meanwhile
            return
        if not event.name:  # the watched folder itself: its parent's watch reports it
            if folder == self._root and event.mask & (
                inotify.IN_DELETE_SELF | inotify.IN_MOVE_SELF
            ):
                raise WatchingEnded(f"{self._root} was moved or deleted")
            return
        path = folder / os.fsdecode(event.name)
        gone = bool(event.mask & _GONE)
        if event.mask & inotify.IN_ISDIR:
            if gone:
                self._unwatch(path)
                self._changed(path, True)
            elif event.mask & _ARRIVED:
                self._watch_new(path)
            return
        self._changed(path, gone)
        if event.name == b".gitignore":
            # Which folders can hold indexed files may have changed, and which files count.
            self._sync()
            self._lost()

    # The set of watches

    def _sync(self) -> None:
        """Watches exactly the folders that can hold indexed files now."""
        wanted = self._index.source_folders()
        for folder in [folder for folder in self._watches if folder not in wanted]:
            self._unwatch(folder)
        for folder in sorted(wanted):
            if folder not in self._watches:
                self._watch(folder)

    def _watch_new(self, folder: Path) -> None:
        """A folder created or moved in: watched with those inside it, and the files already
        in them reported (they may have been written before the watch was in place)."""
        for each in sorted(self._index.source_folders(folder)):
            if not self._watch(each):
                continue
            try:
                entries = list(os.scandir(each))
            except OSError:  # vanished meanwhile: its deletion is reported
                continue
            for entry in entries:
                if not entry.is_dir(follow_symlinks=False):
                    self._changed(Path(entry.path), False)

    def _watch(self, folder: Path) -> bool:
        """Whether folder is watched now; OSError (but for a folder below the root that
        vanished or cannot be read) when watching cannot go on."""
        assert self._inotify is not None
        try:
            wd = self._inotify.add_watch(folder, _MASK)
        except OSError as error:
            if folder != self._root and error.errno in _SKIPPABLE:
                return False
            raise
        # A folder renamed within the tree keeps its watch (the same descriptor comes back).
        old = self._folders.get(wd)
        if old is not None:
            self._watches.pop(old, None)
        self._folders[wd] = folder
        self._watches[folder] = wd
        return True

    def _unwatch(self, folder: Path) -> None:
        """Ends the watches of folder and of the folders below it."""
        assert self._inotify is not None
        for each in [each for each in self._watches if each.is_relative_to(folder)]:
            wd = self._watches.pop(each)
            self._folders.pop(wd, None)
            self._inotify.remove_watch(wd)

    def _forget(self, wd: int) -> None:
        folder = self._folders.pop(wd, None)
        if folder is not None and self._watches.get(folder) == wd:
            del self._watches[folder]


def describe(error: OSError) -> str:
    """Why watching failed, in the user's terms."""
    if error.errno == errno.ENOSPC:
        return "the inotify watch limit is reached (sysctl fs.inotify.max_user_watches)"
    if error.errno == errno.EMFILE:
        return "the inotify instance limit is reached (sysctl fs.inotify.max_user_instances)"
    return f"cannot watch: {error.strerror or error}" + (
        f": {error.filename}" if error.filename else ""
    )
