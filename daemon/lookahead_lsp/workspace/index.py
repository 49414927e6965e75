"""A workspace's n-gram cache (the workspace draft source): the n-grams of the source files of
one folder, kept current as files change on disk and in the editor. Each file's own tokens are
kept so that an update removes exactly what the file added before.

Which files count: those list_source_files finds (in a git checkout the tracked files and the
untracked ones git does not ignore, elsewhere a walk honouring .gitignore), less those matching
the user's ignore patterns. A file that appears later (a disk event, an opened document) counts
when rules.py's FolderRules accept it, judged once per update; open documents are judged on
their editor text. A file whose real path leaves the folder (a symlink out of it) never counts,
whether listed, reported by an event or opened.

Memory: the index keeps its files' n-grams in memory up to half of `memory_budget` bytes (its
hash table may double once past that, and a table build takes the rest). A folder larger than
that keeps its bulk on disk: a folder table (the lookup core's mapped n-gram table,
written in the background from the saved tokens, shared by every daemon of the user) plus, in
memory, what changed since (the files the table does not hold as they are now, and the
table's part of those files to subtract). When the changes outgrow the budget, the table is
written again. A scan of a folder that does not fit writes the files past the budget straight to
the next table's store; the files near the open documents and of their languages come first.

Threads: any method may be called from any thread, and `cache` may be read at any time (the
NgramCache has its own reader/writer lock). The per-file bookkeeping (indexed_files.py) is
guarded by one lock, held briefly. Single-file updates read, tokenize and commit while holding the tokenizer lock,
so they apply one at a time, in call order. index_folder's worker processes tokenize without
it; what they return is committed only for files that no other update touched meanwhile.

One class (the module's length has that reason): the files, their counts and the table change
together under those locks, which a split into classes would spread."""

from __future__ import annotations

import hashlib
import logging
import os
import threading
import time
from contextlib import AbstractContextManager, closing, contextmanager, suppress
from dataclasses import dataclass, replace
from pathlib import Path, PurePosixPath
from typing import Callable, Iterator, Sequence

from lookahead_lsp._lookup import CacheError, FolderTable, NgramCache, WorkspaceView, build_folder_table
from lookahead_lsp.base.tokenizer import (
    POOL_MIN_BYTES,
    TokenArray,
    Tokenizer,
    tokenize_edited_text,
    tokenize_file_text,
    tokenize_files,
)
from lookahead_lsp.workspace.files import DEFAULT_MAX_BYTES, list_source_files
from lookahead_lsp.workspace.index_stats import (
    IGNORED,
    IndexProgress,
    IndexStats,
    IndexStatus,
    Outcome,
    State,
    Tally,
)
from lookahead_lsp.workspace.indexed_files import IndexedFiles
from lookahead_lsp.workspace.rules import Content, FolderRules, Stamp, regular_status, stamp_of
from lookahead_lsp.workspace.store import (
    DIGEST_BYTES,
    FileRecord,
    StoreWriter,
    load_store,
    new_generation,
    peek_generation,
    save_records,
    table_path_for,
)

_log = logging.getLogger(__name__)

MIB = 1 << 20
# The table builder needs this much at least to count a unit of the n-grams.
_MIN_BUILD_BYTES = 32 * MIB
# As many as the tokenizer's workers: the folder's background work takes two cores, at its low
# priority, and the build's memory is the same however many count.
_TABLE_THREADS = 2


def default_memory_budget() -> int:
    """A sixteenth of this machine's memory, at most 512 MiB: a laptop keeps most of its memory
    for the editor and the model."""
    try:
        total = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    except (ValueError, OSError):
        total = 8 << 30
    return max(64 * MIB, min(512 * MIB, total // 16))


@dataclass(frozen=True, kw_only=True)
class IndexSettings:
    """What an index leaves out on top of files.py's rules: files matching `ignore`
    (gitignore-style patterns relative to the root, from the user's configuration) and files
    over `max_bytes`."""

    ignore: Sequence[str] = ()
    max_bytes: int = DEFAULT_MAX_BYTES
    memory_budget: int = 0  # bytes for the in-memory part; 0: default_memory_budget()

    def budget(self) -> int:
        return self.memory_budget or default_memory_budget()


class WorkspaceIndex:
    """The n-grams of one workspace folder's source files, in `cache`."""

    def __init__(
        self,
        n_vocab: int,
        *,
        root: Path | str | None = None,
        tokenizer: Tokenizer | None = None,
        tokenizer_lock: AbstractContextManager[object] | None = None,
        settings: IndexSettings | None = None,
    ) -> None:
        """root: the folder indexed; tokenizer: the one single-file updates and small scans
        use. Either may be left for the first index_folder call to set. tokenizer_lock guards
        the tokenizer (a Tokenizer is not thread-safe): pass the lock the rest of the program
        uses for it when it is shared (the daemon's folders share one); by default the index
        assumes the tokenizer is its own."""
        self.settings = settings or IndexSettings()
        self._root: Path | None = None
        self._rules: FolderRules | None = None
        if root is not None:
            self._set_root(_absolute(root))
        self._tokenizer = tokenizer
        self._tokenizer_lock = tokenizer_lock or threading.Lock()
        self._lock = threading.Lock()
        self._scan_lock = threading.Lock()
        self._files = IndexedFiles(NgramCache(n_vocab))
        self._state: State = "ready"
        # Where the saved index goes (load() sets it): without it the index stays in memory.
        self._storage: tuple[Path, int] | None = None
        self._table: FolderTable | None = None
        self._view: NgramCache | WorkspaceView = self._files.cache
        self._spool: StoreWriter | None = None
        self._preferred: list[Path] = []
        # Per open document, its last text's pieces and their tokens (tokenize_edited_text);
        # guarded by the tokenizer lock, like every single-file update.
        self._editor_pieces: dict[Path, dict[bytes, TokenArray]] = {}
        self._disk_listener: Callable[[Path, bool], None] | None = None

    @property
    def cache(self) -> NgramCache:
        """The in-memory n-grams: every file's without a folder table, else the changes."""
        return self._files.cache

    def drafting(self) -> NgramCache | WorkspaceView:
        """What drafting reads: the cache, or the folder table with the changes on top."""
        with self._lock:
            return self._view

    def set_disk_listener(self, listener: Callable[[Path, bool], None] | None) -> None:
        """listener(path, held) after each file is brought in line with the disk once indexed
        (a disk event, a document closed): held, whether the index holds the file now (its
        editor text, for an open document). Called on the thread that applied the change."""
        self._disk_listener = listener

    def indexed_paths(self) -> list[Path]:
        """Every file the index holds, those nearest the open documents first as a scan takes
        them (what fills a budget first), by name otherwise."""
        with self._lock:
            paths = sorted({*self._files.records, *self._files.spooled})
            nearness = self._scan_order()
        if nearness is not None:
            paths.sort(key=nearness)
        return paths

    @property
    def root(self) -> Path | None:
        """The folder indexed (absolute), once known."""
        return self._root

    def status(self) -> IndexStatus:
        with self._lock:
            table = self._table.header if self._table is not None else None
            return IndexStatus(
                self._state, len(self._files.records) + len(self._files.spooled),
                self._files.n_tokens + sum(self._files.spooled.values()),
                self.cache.n_keys + (table["n_keys"] if table else 0), len(self._files.open),
                memory_bytes=self._files.memory_bytes(), budget_bytes=self.settings.budget(),
                table_files=len(self._files.table_records), table_bytes=table["file_size"] if table else 0,
            )

    def index_folder(
        self,
        root: Path | str | None = None,
        tokenizer: Tokenizer | None = None,
        jobs: int = 2,
        progress: Callable[[IndexProgress], None] | None = None,
        cancelled: Callable[[], bool] | None = None,
    ) -> IndexStats:
        """Brings the index in line with the folder's source files: tokenizes those not indexed
        or whose (size, mtime) changed (on `jobs` worker processes when they hold at least
        POOL_MIN_BYTES, else here with the index's tokenizer), and removes indexed files no
        longer listed. Open documents are left alone. root and tokenizer default to the index's
        and set them when it has none; others raise ValueError. progress is called before
        tokenizing and after each file; cancelled is polled between files and stops the scan
        (what was done stays). One scan runs at a time; a second call waits."""
        root, tokenizer = self._bind(root, tokenizer)
        with self._indexing():
            return self._scan(root, tokenizer, jobs, progress, cancelled or _never)

    def apply_disk_change(self, path: Path | str) -> Outcome:
        """Re-reads one file after a change on disk. A file that vanished, cannot be read, or
        is no longer source (binary, oversized, generated, ignored) is removed. Paths outside
        the root and open documents are ignored."""
        key = self._key(path)
        if key is None:
            return "ignored"
        with self._tokenizer_lock:
            return self._refresh(key)

    def apply_disk_delete(self, path: Path | str) -> list[Outcome]:
        """After a deletion (of a file or a folder): re-reads the path and every indexed file
        under it; what is gone is removed. The disk decides, so a stale event does no harm."""
        key = self._key(path)
        if key is None:
            return []
        with self._tokenizer_lock:
            return [self._refresh(each) for each in self._locked_at_or_under(key)]

    def apply_disk_move(self, source: Path | str, destination: Path | str) -> list[Outcome]:
        """A file or folder renamed: the source as deleted, the destination as changed."""
        return self.apply_disk_delete(source) + [self.apply_disk_change(destination)]

    def open_document(self, path: Path | str, text: str) -> Outcome:
        """The file's n-grams become those of the editor text (files.py's content rules apply
        to the text); disk events for it are ignored until close_document."""
        key = self._key(path)
        if key is None:
            return "ignored"
        with self._tokenizer_lock:
            with self._lock:
                self._files.open.add(key)
            rules = self._require_rules()
            with self._lock:
                known = key in self._files.records
            return self._commit(key, rules.editor_content(key, _relative(rules.root, key), text, known), editor=True)

    def change_document(self, path: Path | str, text: str) -> Outcome:
        """As open_document: the editor text changed."""
        return self.open_document(path, text)

    def close_document(self, path: Path | str) -> Outcome:
        """Back to the file on disk: re-read, or removed when it is gone or not source."""
        key = self._key(path)
        if key is None:
            return "ignored"
        with self._tokenizer_lock:
            with self._lock:
                self._files.open.discard(key)
            self._editor_pieces.pop(key, None)
            return self._refresh(key)

    def excludes_folder(self, path: Path | str) -> bool:
        """Whether no file in the folder at path can count by its path: outside the root, in or
        being a version control or generated folder, matched by the ignore patterns, or
        excluded by a .gitignore."""
        rules = self._require_rules()
        key = self._key(path)
        return key is None or rules.excludes_folder(_relative(rules.root, key))

    def source_folders(self, under: Path | str | None = None) -> set[Path]:
        """The folders that can hold files to index: the root (or `under`, unless
        excludes_folder) and the folders below it that the walk of list_source_files enters
        and the ignore patterns leave; for the root also the folders of the files indexed now
        (git may track files in a .gitignored folder)."""
        rules = self._require_rules()
        root = rules.root
        if under is not None and self.excludes_folder(under):
            return set()
        start = PurePosixPath() if under is None else _relative(root, _absolute(under))
        folders = rules.source_folders(start)
        if under is None:
            with self._lock:
                folders.update(self._files.folders_under(root))
        return folders

    def save(self, store_path: Path, fingerprint: int) -> int:
        """Writes every indexed file's tokens and stamps to store_path (see store.py), for a
        later load; fingerprint is the tokenizer's. Returns the number of files written.
        With a folder table the file is the table's already and is left as it is: the files
        changed since are found changed again at the next start. OSError when it cannot be
        written."""
        root = self._require_root()
        with self._lock:
            if self._table is not None:
                return 0
            records = {
                _relative(root, key): record
                for key, record in self._files.records.items()
                if key.is_relative_to(root)
            }
        save_records(store_path, fingerprint, records)
        return len(records)

    def load(self, store_path: Path, fingerprint: int) -> int:
        """Adds the files saved at store_path (for this tokenizer) that the index does not hold
        yet; a missing or unusable file adds nothing (logged). When a folder table goes with
        them, drafting reads the table from the moment it is mapped, before the saved index is
        checked (which reads all of it). Call index_folder afterwards: it re-tokenizes only the
        files changed since. Returns the number of files added."""
        root = self._require_root()
        self._storage = (store_path, fingerprint)
        generation = peek_generation(store_path, fingerprint)
        table = self._open_table(store_path, fingerprint, generation) if generation else None
        if table is not None:
            with self._lock:
                self._table = table
                self._view = WorkspaceView(self._files.cache, self._files.removed, table)
        loaded = load_store(store_path, fingerprint, self.cache.n_vocab)
        if table is not None:
            if loaded.generation == generation:
                saved = {root / relative: record for relative, record in loaded.records.items()}
                with self._indexing(), self._lock:
                    self._install(table, saved, {**saved, **self._files.records})
                return len(saved)
            with self._lock:  # replaced meanwhile, or unusable: the files load into memory
                self._table, self._view = None, self._files.cache
        added = 0
        with self._indexing():
            for relative, record in loaded.records.items():
                key = root / relative
                with self._lock:
                    if key not in self._files.records and key not in self._files.open:
                        self._files.put(key, record)
                        added += 1
        return added

    def set_memory_budget(self, budget: int) -> None:
        """A new budget for the in-memory part (the daemon shares its budget out again among
        its folders): one it no longer fits goes to disk at the next fold_if_over_budget."""
        with self._lock:
            self.settings = replace(self.settings, memory_budget=budget)

    def fold_if_over_budget(self) -> bool:
        """Writes a new folder table when the in-memory part outgrew the budget; whether it
        did. Call it off the event loop (it takes seconds to minutes on a large folder)."""
        with self._lock:
            over = self._storage is not None and self._full()
        if not over:
            return False
        with self._indexing():
            return self._fold()

    def prefer(self, paths: Sequence[Path]) -> None:
        """Scans index the files near these (open documents) first, and those of their kinds."""
        with self._lock:
            self._preferred = [_absolute(path) for path in paths]

    def _scan_order(self) -> Callable[[Path], tuple[int, bool, str]] | None:
        """The sort key of the order files are taken in (the lock held): nearest the open
        documents (and those prefer named) first; None while there are none."""
        preferred = self._preferred + sorted(self._files.open)
        return (lambda path: _nearness(path, preferred)) if preferred else None

    # The bulk on disk

    def _open_table(self, store_path: Path, fingerprint: int, generation: int) -> FolderTable | None:
        try:
            return FolderTable.open(str(table_path_for(store_path, generation)), self.cache.n_vocab, fingerprint)
        except CacheError as error:
            _log.warning("workspace table not used, indexing in memory: %s", error)
            return None

    def _fold(self) -> bool:
        """Writes every current file (but the open documents) to a new store and builds its folder
        table, then drafts from that table (the caller holds the scan lock)."""
        assert self._storage is not None
        store_path, fingerprint = self._storage
        root = self._require_root()
        with self._lock:
            spool, self._spool = self._spool, None
            snapshot = {
                key: record for key, record in self._files.records.items()
                if key not in self._files.open and key not in self._files.spooled
            }
            spooled = set(self._files.spooled)
        writer = spool or StoreWriter(store_path, fingerprint, new_generation())
        try:
            for key, record in snapshot.items():
                writer.add(_relative(root, key), record)
            writer.commit()
        except BaseException:
            writer.abandon()
            raise
        loaded = load_store(store_path, fingerprint, self.cache.n_vocab)
        if loaded.generation != writer.generation:
            return False  # replaced meanwhile by another daemon's: the next start maps that one
        table_path = table_path_for(store_path, writer.generation)
        build_folder_table(
            [record.tokens for record in loaded.records.values()], str(table_path), self.cache.n_vocab,
            fingerprint, memory_limit=max(_MIN_BUILD_BYTES, self.settings.budget() - self._locked_memory()),
            release_pages=True, threads=_TABLE_THREADS,
        )
        loaded.release_pages()
        table = FolderTable.open(str(table_path), self.cache.n_vocab, fingerprint)
        saved = {root / relative: record for relative, record in loaded.records.items()}
        with self._tokenizer_lock, self._lock:
            current = dict(self._files.records)
            for key, record in saved.items():
                # Still as written: a spooled file no update replaced since, or the same record.
                if (key in spooled and key in self._files.spooled) or (
                    key in snapshot and current.get(key) is snapshot[key]
                ):
                    current[key] = record
            old = self._table
            self._install(table, saved, current)
        if old is not None and old.path != str(table_path):
            with suppress(OSError):
                os.unlink(old.path)
        return True

    def _locked_memory(self) -> int:
        with self._lock:
            return self._files.memory_bytes()

    def _install(self, table: FolderTable, saved: dict[Path, FileRecord], current: dict[Path, FileRecord]) -> None:
        """Drafting reads `table` from now on (the caller holds the lock)."""
        self._files.adopt_table(saved, current)
        self._table = table
        self._view = WorkspaceView(self._files.cache, self._files.removed, table)

    # Scanning a folder

    @contextmanager
    def _indexing(self) -> Iterator[None]:
        """One bulk operation at a time, with the state "indexing" while it runs."""
        with self._scan_lock:
            with self._lock:
                self._state = "indexing"
            try:
                yield
            finally:
                with self._lock:
                    self._files.claims.clear()
                    self._state = "ready"

    def _scan(
        self,
        root: Path,
        tokenizer: Tokenizer,
        jobs: int,
        progress: Callable[[IndexProgress], None] | None,
        cancelled: Callable[[], bool],
    ) -> IndexStats:
        started = time.monotonic()
        # Claimed before listing: a file that another update indexes while the folder is
        # listed loses its claim and so is not removed for being missing from the list.
        with self._lock:
            self._files.claims = set(self._files.records)
        # Untracked files too: the watcher indexes a new file before anyone runs `git add`, and
        # a rescan must not drop it again.
        listing = list_source_files(root, max_bytes=self.settings.max_bytes, untracked=True)
        stats = IndexStats(skipped=dict(listing.skipped))
        files = self._unignored(root, listing.files, stats)
        stats.files = len(files)
        todo = self._plan(files, stats)
        with self._lock:
            nearness = self._scan_order()
        if nearness is not None:
            todo.sort(key=lambda item: nearness(item[0]))
        tally = Tally(stats, todo, progress)
        try:
            if jobs > 1 and tally.bytes_total >= POOL_MIN_BYTES:
                self._tokenize_in_pool(tokenizer.model_path, jobs, tally, cancelled)
            else:
                self._tokenize_here(tally, cancelled)
            with self._lock:
                fold = self._storage is not None and (self._spool is not None or self._full())
            if fold and not stats.cancelled:
                tally.writing()
                self._fold()
        finally:
            with self._lock:
                spool, self._spool = self._spool, None
                self._files.spooled.clear()
            if spool is not None:
                spool.abandon()
        stats.seconds = time.monotonic() - started
        return stats

    def _unignored(self, root: Path, files: list[Path], stats: IndexStats) -> list[Path]:
        rules = self._require_rules()
        kept = [path for path in files if not rules.user_ignores(_relative(root, path))]
        if len(kept) < len(files):
            stats.skipped[IGNORED] = len(files) - len(kept)
        return kept

    def _plan(
        self, files: list[Path], stats: IndexStats
    ) -> list[tuple[Path, int, Stamp | None]]:
        """Removes claimed files no longer listed; returns (path, size, trusted stamp) of the
        listed files to tokenize, claimed, and counts the others as unchanged."""
        checked_ns = time.time_ns()
        statuses = {path: regular_status(path) for path in files}
        with self._lock:
            return self._files.plan(statuses, checked_ns, stats)

    def _tokenize_here(self, tally: Tally, cancelled: Callable[[], bool]) -> None:
        for path, size, _ in tally.todo:
            if cancelled():
                tally.stats.cancelled = True
                return
            with self._tokenizer_lock:
                # Listed files passed .gitignore already (or git tracks them).
                outcome = self._refresh(path, listed=True)
            tally.done(outcome, size)

    def _tokenize_in_pool(
        self, model_path: Path, jobs: int, tally: Tally, cancelled: Callable[[], bool]
    ) -> None:
        planned = {path: (size, stamp) for path, size, stamp in tally.todo}
        paths = list(planned)
        with closing(tokenize_files(model_path, paths, jobs)) as results:
            for path, tokens, _ in results:
                size, stamp = planned[path]
                tally.done(self._commit_scanned(path, tokens, stamp), size)
                if cancelled():
                    tally.stats.cancelled = True
                    return

    def _commit_scanned(
        self, path: Path, tokens: TokenArray | None, stamp: Stamp | None
    ) -> Outcome:
        with self._lock:
            if tokens is not None and path in self._files.claims and path not in self._files.open:
                spool = self._spool_if_full()
                if spool is not None:
                    record = FileRecord(tokens, stamp, None)
                    spool.add(_relative(self._require_root(), path), record)
                    self._files.claims.discard(path)
                    self._files.spooled[path] = len(tokens)  # its tokens are on disk only
                    return "updated"
            return self._files.commit_scanned(path, tokens, stamp)

    def _full(self) -> bool:
        """Whether the in-memory part reached half the budget (the lock held): its hash table
        may double once more, and a table build takes what is left."""
        return self._files.memory_bytes() > self.settings.budget() // 2

    def _spool_if_full(self) -> StoreWriter | None:
        """The store the scan writes files to once the in-memory part is full (the lock held)."""
        if self._spool is None and self._storage is not None and self._full():
            store_path, fingerprint = self._storage
            self._spool = StoreWriter(store_path, fingerprint, new_generation())
        return self._spool

    # Single-file updates (the caller holds the tokenizer lock)

    def _refresh(self, key: Path, listed: bool = False) -> Outcome:
        """Brings one file in line with the disk, unless it is open in the editor; then tells
        the listener (set_disk_listener) whether the index holds the file."""
        outcome = self._refresh_file(key, listed)
        listener = self._disk_listener
        if listener is not None:
            with self._lock:
                held = key in self._files.records or key in self._files.spooled
            listener(key, held)
        return outcome

    def _refresh_file(self, key: Path, listed: bool) -> Outcome:
        with self._lock:
            if key in self._files.open:
                return "ignored"
            record = self._files.records.get(key)
        if record is not None and record.stamp is not None:
            status = regular_status(key)
            if status is not None and stamp_of(status) == record.stamp:
                return "unchanged"
        rules = self._require_rules()
        known = listed or record is not None
        return self._commit(key, rules.disk_content(key, _relative(rules.root, key), known))

    def _commit(self, key: Path, content: Content | None, editor: bool = False) -> Outcome:
        """Indexes content as the file's (None: removes the file); skips tokenizing when the
        index holds the same bytes already. The editor's text reuses the tokens of the pieces
        its last version shared."""
        if content is None:
            self._editor_pieces.pop(key, None)
            with self._lock:
                return "removed" if self._files.drop(key) else "ignored"
        digest = hashlib.blake2b(content.data, digest_size=DIGEST_BYTES).digest()
        with self._lock:
            record = self._files.records.get(key)
            if record is not None and record.digest == digest:
                self._files.records[key] = replace(record, stamp=content.stamp)
                self._files.claims.discard(key)
                return "unchanged"
        if editor:
            known = self._editor_pieces.get(key, {})
            tokens, self._editor_pieces[key] = tokenize_edited_text(self._require_tokenizer(), content.data, known)
        else:
            tokens = tokenize_file_text(self._require_tokenizer(), content.data)
        with self._lock:
            self._files.put(key, FileRecord(tokens, content.stamp, digest))
        return "updated"

    def _locked_at_or_under(self, key: Path) -> list[Path]:
        with self._lock:
            return self._files.at_or_under(key)

    # Settings and rules

    def _bind(self, root: Path | str | None, tokenizer: Tokenizer | None) -> tuple[Path, Tokenizer]:
        with self._lock:
            if root is not None:
                absolute = _absolute(root)
                if self._root is None:
                    self._set_root(absolute)
                elif absolute != self._root:
                    raise ValueError(f"this index covers {self._root}, not {absolute}")
            if tokenizer is not None:
                if self._tokenizer is None:
                    self._tokenizer = tokenizer
                elif tokenizer is not self._tokenizer:
                    raise ValueError("this index was given another tokenizer")
        return self._require_root(), self._require_tokenizer()

    def _set_root(self, root: Path) -> None:
        self._root = root
        self._rules = FolderRules(root, self.settings.ignore, self.settings.max_bytes)

    def _require_root(self) -> Path:
        return self._require_rules().root

    def _require_rules(self) -> FolderRules:
        if self._rules is None:
            raise ValueError("the index has no root folder yet")
        return self._rules

    def _require_tokenizer(self) -> Tokenizer:
        if self._tokenizer is None:
            raise ValueError("the index has no tokenizer yet")
        return self._tokenizer

    def _key(self, path: Path | str) -> Path | None:
        """The index's key for path (its absolute form), or None outside the root."""
        absolute = _absolute(path)
        return absolute if absolute.is_relative_to(self._require_root()) else None


def _absolute(path: Path | str) -> Path:
    # Not resolve(): a symlinked file keeps the name it has inside the folder.
    return Path(os.path.abspath(path))


def _relative(root: Path, key: Path) -> PurePosixPath:
    return PurePosixPath(key.relative_to(root).as_posix())


def _nearness(path: Path, preferred: list[Path]) -> tuple[int, bool, str]:
    """Sorts files by how many folders they share with the closest preferred file (more first),
    then those of a preferred file's kind (suffix) first."""
    shared = max(_shared_parts(path.parent.parts, other.parent.parts) for other in preferred)
    return -shared, path.suffix not in {other.suffix for other in preferred}, str(path)


def _shared_parts(a: tuple[str, ...], b: tuple[str, ...]) -> int:
    n = 0
    for x, y in zip(a, b):
        if x != y:
            break
        n += 1
    return n


def _never() -> bool:
    return False
