"""One workspace folder, kept current: its index (the workspace draft source, loaded from the
saved index, then brought in line with the files), the watcher that follows the disk, its
static cache (the repository draft source), and the folder's own
thread.

The thread indexes the folder once, fills the folder's retrieval from the files indexed (the
context prompts take from other files), starts the watcher, then applies the editor's text (and
reads ahead what retrieval will search for each document edited). The
editor's text enters through a queue that keeps the latest text per path (None: the document
was closed, back to the disk's content): recording it is all the caller's thread does, so a
keystroke costs nothing there whatever the file's size; the thread tokenizes each document once
per batch, `debounce_s` after the batch's first change. A batch re-tokenizes only the pieces an
edit changed and recounts only the n-grams it touched, yet still finds the pieces and hashes the
whole text: after a costly batch the next one waits until the thread has spent at most
EDITOR_INDEXING_SHARE of its time indexing, leaving the cores to the model while the user
types. Completions carry their document's text themselves, so only the index lags, by about the
debounce (longer in a large document)."""

from __future__ import annotations

import logging
import os
import stat
import threading
import time
from dataclasses import dataclass, replace
from pathlib import Path

from lookahead_lsp.base.debounce import wait_for_batch
from lookahead_lsp._lookup import CacheError, NgramCache, StaticCache, WorkspaceView
from lookahead_lsp.base.editor import Editor
from lookahead_lsp.base.errors import UserError
from lookahead_lsp.base.static_cache import default_store, open_static_cache
from lookahead_lsp.base.safe_reads import is_inside
from lookahead_lsp.base.priority import lower_this_thread
from lookahead_lsp.base.tokenizer import Tokenizer
from lookahead_lsp.workspace.index import IndexSettings, WorkspaceIndex, default_memory_budget
from lookahead_lsp.workspace.index_stats import IndexProgress, IndexStatus
from lookahead_lsp.workspace.retrieval import FolderRetrieval
from lookahead_lsp.workspace.store import store_path_for
from lookahead_lsp.workspace.symbol_table import SymbolTableStatus, table_budget
from lookahead_lsp.workspace.watcher import EventKind, WatcherStatus, WorkspaceWatcher

STATIC_CACHE_NAME = Path(".lookahead") / "static.cache"
# The most of the folder thread's time that re-tokenizing the editor's documents may take while
# the user types: the rest of the cores is the model's.
EDITOR_INDEXING_SHARE = 0.25
# How often the folder's thread checks, without edits, whether the index outgrew its budget.
FOLD_CHECK_S = 30.0


@dataclass(frozen=True)
class FolderSettings:
    """ignore: the user's ignore patterns; static_cache: the configured static cache file
    (None: .lookahead/static.cache in the folder); cache_dir: where the saved index goes (None: the
    default); debounce_s: how long the editor's changes collect before they are indexed;
    memory_budget: the folder's memory, in bytes (0: the default): the symbol table's part
    (symbol_table.table_budget), and the index's in-memory part the rest."""

    ignore: tuple[str, ...] = ()
    static_cache: Path | None = None
    cache_dir: Path | None = None
    debounce_s: float = 0.15
    memory_budget: int = 0


@dataclass(frozen=True)
class FolderStatus:
    """indexed: the first indexing has ended (or failed); static_cache: the file in use."""

    root: Path
    index: IndexStatus
    symbols: SymbolTableStatus
    indexed: bool
    static_cache: Path | None
    watcher: WatcherStatus


class WorkspaceFolder:
    """A folder indexed with `tokenizer`, whose vocabulary fingerprint is `fingerprint`.
    tokenizer_lock guards the tokenizer, shared by every folder. start() once, stop() once."""

    def __init__(
        self,
        root: Path,
        tokenizer: Tokenizer,
        tokenizer_lock: threading.Lock,
        fingerprint: int,
        client: Editor,
        settings: FolderSettings,
    ) -> None:
        self.root = root
        self.tokenizer = tokenizer
        self._fingerprint = fingerprint
        self._client = client
        self._settings = settings
        index_budget, symbols_budget = _budgets(settings.memory_budget)
        self.index = WorkspaceIndex(
            tokenizer.n_vocab,
            root=root,
            tokenizer_lock=tokenizer_lock,
            settings=IndexSettings(ignore=settings.ignore, memory_budget=index_budget),
        )
        # Context for prompts from the folder's files on disk (retrieval.py): filled from the
        # index's files once it has indexed them, then kept current by its disk changes.
        self.retrieval = FolderRetrieval(root, memory_budget=symbols_budget)
        self._watcher: WorkspaceWatcher | None = None
        self._thread = threading.Thread(target=self._run, name=f"folder {root.name}", daemon=True)
        self._indexed = threading.Event()
        # The editor's latest text per path, and when the batch's first one came.
        self._condition = threading.Condition()
        self._edits: dict[Path, str | None] = {}
        self._batch_started: float | None = None
        self._next_batch_at = 0.0  # the share's bound, from the last batch's cost
        self._stopping = False
        # The static cache is (re)opened off the event loop (verify reads it all) before
        # indexing or the next completion needs it: at first, after a settings change, when
        # its file changed on disk.
        self._static_lock = threading.Lock()
        self._static: StaticCache | None = None
        self._static_path: Path | None = None
        self._static_stale = True
        self._static_stamp: tuple[int, int, int, int] | None = None

    # -- lifecycle -----------------------------------------------------------------------------

    def start(self) -> None:
        self._thread.start()

    def stop(self, save: bool) -> None:
        """Stops the thread and the watcher (editor text not yet indexed is dropped) and saves
        the index when `save`."""
        with self._condition:
            self._stopping = True
            self._condition.notify_all()
        if self._thread.is_alive():
            self._thread.join()
        if self._watcher is not None:
            self._watcher.stop()
        if save:
            try:
                self.index.save(store_path_for(self.root, self._settings.cache_dir), self._fingerprint)
            except OSError as error:
                self._client.log(logging.WARNING, f"cannot save the index of {self.root}: {error}")
        # Not closed: a completion may still draft with it; the last reference frees it.
        self._static = None

    # -- events --------------------------------------------------------------------------------

    def editor_text(self, path: Path, text: str | None) -> None:
        """The editor's text of a document in the folder (None: closed, back to the disk's
        content). Only recorded here; the folder's thread indexes it."""
        with self._condition:
            if self._stopping:
                return
            self._edits[path] = text
            if self._batch_started is None:
                self._batch_started = time.monotonic()
                self._condition.notify_all()

    def disk_event(self, path: Path, kind: EventKind) -> None:
        """A file event the editor reported (workspace/didChangeWatchedFiles)."""
        if self._watcher is not None:
            self._watcher.notify(path, kind)

    def set_memory_budget(self, budget: int) -> None:
        """The folder's new budget (the index's and the symbol table's): the index meets it at
        the thread's next check, FOLD_CHECK_S at the latest; the table with the files that
        change after it."""
        index, symbols = _budgets(budget)
        self.index.set_memory_budget(index)
        self.retrieval.set_memory_budget(symbols)

    def set_static_cache(self, configured: Path | None) -> None:
        """The static cache setting changed: the static cache is reopened before its next
        use."""
        with self._static_lock:
            self._settings = replace(self._settings, static_cache=configured)
            self._static_stale = True

    # -- readers -------------------------------------------------------------------------------

    def caches(self) -> tuple[NgramCache | WorkspaceView, StaticCache | None]:
        """The folder's workspace and static caches for drafting. It may open the
        static cache again (reading it all): call it off the event loop."""
        self._refresh_static_cache()
        return self.index.drafting(), self._static

    def status(self) -> FolderStatus:
        watcher = self._watcher.status if self._watcher is not None else WatcherStatus("stopped")
        static = self._static_path if self._static is not None else None
        return FolderStatus(
            self.root, self.index.status(), self.retrieval.status(), self._indexed.is_set(), static, watcher
        )

    # -- the folder's thread -------------------------------------------------------------------

    def _run(self) -> None:
        lower_this_thread()  # indexing, and writing a folder table above all
        self._client.status_changed()  # indexing began
        try:
            self._index_once()
        except (OSError, UserError, ValueError, RuntimeError) as error:
            self._client.show(logging.WARNING, f"lookahead-lsp: cannot index {self.root}: {error}")
        finally:
            self._indexed.set()
            self._client.status_changed()  # indexed, and the watcher started
        while (edits := self._next_edits()) is not None:
            started = time.monotonic()
            self._apply(edits)
            self._fold_if_over_budget()
            ended = time.monotonic()
            self._next_batch_at = ended + (ended - started) * (1 / EDITOR_INDEXING_SHARE - 1)

    def _index_once(self) -> None:
        token = f"lookahead-index-{id(self)}"
        self._refresh_static_cache()
        self.index.load(store_path_for(self.root, self._settings.cache_dir), self._fingerprint)
        title = f"Indexing {self.root.name}"
        self._client.progress(token, title, "listing files", 0, False)

        def report(p: IndexProgress) -> None:
            percent = 100 * p.bytes_done // p.bytes_total if p.bytes_total else 100
            if p.phase == "writing":
                self._client.progress(token, title, "writing the index to disk", percent, False)
            else:
                self._client.progress(token, title, f"{p.files_done}/{p.files_total} files", percent, False)

        with self._condition:
            self.index.prefer([path for path, text in self._edits.items() if text is not None])
        stats = self.index.index_folder(tokenizer=self.tokenizer, progress=report, cancelled=self._is_stopping)
        status = self.index.status()
        self._client.progress(token, title, f"{status.files} files, {status.tokens} tokens", 100, True)
        self._client.log(
            logging.INFO,
            f"indexed {self.root}: {status.files} files ({stats.tokenized} tokenized, "
            f"{stats.unchanged} unchanged) in {stats.seconds:.1f} s",
        )
        if self._is_stopping():
            return
        self.index.set_disk_listener(self._disk_changed)
        self.retrieval.rebuild(self.index.indexed_paths(), self._is_stopping)
        # Documents opened meanwhile: the editor's text wins over the disk's.
        with self._condition:
            edits, self._edits, self._batch_started = self._edits, {}, None
        self._apply(edits)
        watcher = WorkspaceWatcher(self.index, on_mode=self._client.status_changed)
        watcher.start()
        self._watcher = watcher

    def _disk_changed(self, path: Path, held: bool) -> None:
        if held:
            self.retrieval.update(path)
        else:
            self.retrieval.remove(path)

    def _next_edits(self) -> dict[Path, str | None] | None:
        """The next batch of editor text, `debounce_s` after its first change; None when
        stopping; empty after FOLD_CHECK_S without one (the watcher's changes count too)."""
        with self._condition:
            started, stopping = (lambda: self._batch_started), (lambda: self._stopping)
            due = wait_for_batch(
                self._condition, started, stopping, self._settings.debounce_s, FOLD_CHECK_S, self._next_batch_at
            )
            if self._stopping:
                return None
            if not due:
                return {}
            edits, self._edits, self._batch_started = self._edits, {}, None
            return edits

    def _apply(self, edits: dict[Path, str | None]) -> None:
        for path, text in edits.items():
            if self._is_stopping():
                return
            try:
                if text is None:
                    self.index.close_document(path)
                else:
                    self.index.change_document(path, text)
                    self.retrieval.prepare(path)
            except Exception as error:  # the thread outlives any one document
                self._client.log(logging.WARNING, f"index not updated for {path}: {error}")

    def _fold_if_over_budget(self) -> None:
        """Changes (the editor's, the watcher's) that outgrew the memory budget go to disk."""
        try:
            if self.index.fold_if_over_budget():
                self._client.status_changed()
        except (OSError, CacheError, ValueError) as error:
            self._client.log(logging.WARNING, f"cannot write the index of {self.root} to disk: {error}")

    def _is_stopping(self) -> bool:
        return self._stopping

    # -- the static cache ----------------------------------------------------------------------

    def _refresh_static_cache(self) -> None:
        """(Re)opens the static cache when it is stale or its file changed on disk (one that
        was missing or refused included)."""
        with self._static_lock:
            path = self._settings.static_cache or self.root / STATIC_CACHE_NAME
            if self._static is not None:
                changed = self._static.changed_on_disk()
            else:
                changed = _file_stamp(path) != self._static_stamp
            reopen = self._static_stale or changed
            if reopen:
                self._static_stale = False
                self._open_static_cache(path)
        if reopen:
            self._client.status_changed()

    def _open_static_cache(self, path: Path) -> None:
        """Opens and verifies the static cache before drafting uses it. The one it replaces is
        not closed: a completion may still hold it."""
        self._static, self._static_path, self._static_stamp = None, None, None
        try:
            info = path.stat()
        except FileNotFoundError:
            if self._settings.static_cache is not None:
                self._client.show(logging.WARNING, f"lookahead-lsp: static cache not found: {path}")
            return
        except OSError as error:
            self._client.show(logging.WARNING, f"lookahead-lsp: static cache not used: {path}: {error.strerror}")
            return
        self._static_stamp = _stamp(info)
        # The folder's own cache must be the folder's: a .lookahead symlink out of it would
        # draft from whatever file it names.
        if self._settings.static_cache is None and not is_inside(os.path.realpath(path), os.path.realpath(self.root)):
            self._client.show(logging.WARNING, f"lookahead-lsp: static cache not used: {path} leads out of the folder")
            return
        if not stat.S_ISREG(info.st_mode):  # a FIFO would block the open, a device never end
            self._client.show(logging.WARNING, f"lookahead-lsp: static cache not used: {path} is not a regular file")
            return
        try:
            opened = open_static_cache(
                path, self.tokenizer.n_vocab, self._fingerprint, store=default_store(self._settings.cache_dir)
            )
        except CacheError as error:
            self._client.show(logging.WARNING, f"lookahead-lsp: static cache not used: {error}")
            return
        self._static, self._static_path = opened.cache, path


def _budgets(memory_budget: int) -> tuple[int, int]:
    """A folder's memory budget (0: the default) as the index's part and the symbol table's."""
    total = memory_budget or default_memory_budget()
    symbols = table_budget(total)
    return total - symbols, symbols


def _stamp(info: os.stat_result) -> tuple[int, int, int, int]:
    return info.st_dev, info.st_ino, info.st_size, info.st_mtime_ns


def _file_stamp(path: Path) -> tuple[int, int, int, int] | None:
    try:
        return _stamp(path.stat())
    except OSError:
        return None
