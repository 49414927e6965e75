"""A workspace's dynamic n-gram cache: the n-grams of the source files of one folder, kept
current as files change on disk and in the editor. Each file's own tokens are kept so that an
update removes exactly what the file added before.

Which files count: those list_source_files finds (in a git checkout the tracked files and the
untracked ones git does not ignore, elsewhere a walk honouring .gitignore), less those matching
the user's ignore patterns. A file that appears later (a disk event, an opened document) counts
when files.py's rules accept it and no .gitignore between the root and the file excludes it;
open documents are judged on their editor text. A file whose real path leaves the folder (a
symlink out of it) never counts, whether listed, reported by an event or opened.

Threads: any method may be called from any thread, and `cache` may be read at any time (the
NgramCache has its own reader/writer lock). The per-file bookkeeping is guarded by one lock,
held briefly. Single-file updates read, tokenize and commit while holding the tokenizer lock,
so they apply one at a time, in call order. index_folder's worker processes tokenize without
it; what they return is committed only for files that no other update touched meanwhile."""

from __future__ import annotations

import hashlib
import os
import stat
import threading
import time
from collections import Counter
from contextlib import AbstractContextManager, closing, contextmanager
from dataclasses import dataclass, field, replace
from pathlib import Path, PurePosixPath
from typing import Callable, Iterator, Literal, Sequence

import pathspec

from lookahead_lsp._lookup import NgramCache
from lookahead_lsp.tokenizer import (
    POOL_MIN_BYTES,
    TokenArray,
    Tokenizer,
    tokenize_file_text,
    tokenize_files,
)
from lookahead_lsp.workspace.files import (
    DEFAULT_MAX_BYTES,
    Unindexable,
    gitignored,
    has_generated_marker,
    is_generated_path,
    is_inside,
    is_skipped_folder_name,
    list_source_files,
    read_source,
    walk_unignored,
)
from lookahead_lsp.workspace.store import DIGEST_BYTES, FileRecord, load_records, save_records

Outcome = Literal["updated", "unchanged", "removed", "ignored"]
State = Literal["indexing", "ready"]

# The skipped-files reason for files matching the user's ignore patterns.
IGNORED = "ignored"
# A file's (size, mtime) vouches for the content read only when the mtime was this much older
# than the read: file systems stamp with a coarse clock (milliseconds, whole seconds on some), so
# a write just after the read could leave both unchanged. Newer files are compared by digest.
RACY_NS = 2_000_000_000
# As files.py: a NUL byte this early means binary.
_SNIFF_BYTES = 8192


@dataclass(frozen=True, kw_only=True)
class IndexSettings:
    """What an index leaves out on top of files.py's rules: files matching `ignore`
    (gitignore-style patterns relative to the root, from the user's configuration) and files
    over `max_bytes`."""

    ignore: Sequence[str] = ()
    max_bytes: int = DEFAULT_MAX_BYTES


@dataclass(frozen=True)
class IndexProgress:
    """How far index_folder's tokenizing has come: files and bytes of those to tokenize."""

    files_done: int
    files_total: int
    bytes_done: int
    bytes_total: int


@dataclass
class IndexStats:
    """What one index_folder call did. `files`: source files listed (after the ignore
    patterns); of those `tokenized` were read and tokenized, `unchanged` kept as they were
    (same stamp or content as indexed); `removed`: files dropped from the index (gone, no
    longer source, unreadable); `skipped`: files left out by reason, as SourceFiles.skipped
    plus IGNORED."""

    files: int = 0
    tokenized: int = 0
    unchanged: int = 0
    removed: int = 0
    bytes_tokenized: int = 0
    skipped: dict[str, int] = field(default_factory=dict)
    cancelled: bool = False
    seconds: float = 0.0


@dataclass(frozen=True)
class IndexStatus:
    """A snapshot of the index: its state, how many files and tokens it holds, its n-gram
    keys (cache.n_keys) and how many documents are open in the editor."""

    state: State
    files: int
    tokens: int
    ngrams: int
    open_documents: int


@dataclass(frozen=True)
class _Content:
    """Bytes to index and the disk stamp that vouches for them (None: editor text or racy)."""

    data: bytes
    stamp: tuple[int, int] | None


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
        uses for it when it is shared, e.g. with the engine; by default the index assumes the
        tokenizer is its own."""
        self.cache = NgramCache(n_vocab)
        self.settings = settings or IndexSettings()
        self._ignore = pathspec.GitIgnoreSpec.from_lines(list(self.settings.ignore))
        self._root = _absolute(root) if root is not None else None
        self._tokenizer = tokenizer
        self._tokenizer_lock = tokenizer_lock or threading.Lock()
        self._lock = threading.Lock()
        self._scan_lock = threading.Lock()
        self._files: dict[Path, FileRecord] = {}
        # Folders holding indexed files, with how many: a deleted folder's files are found
        # without visiting every file on each deletion.
        self._folders: Counter[Path] = Counter()
        self._open: set[Path] = set()
        # Files whose pending result from index_folder's workers may still be committed: any
        # other update of a file withdraws its claim.
        self._claims: set[Path] = set()
        self._n_tokens = 0
        self._state: State = "ready"

    @property
    def root(self) -> Path | None:
        """The folder indexed (absolute), once known."""
        return self._root

    def status(self) -> IndexStatus:
        with self._lock:
            return IndexStatus(
                self._state, len(self._files), self._n_tokens, self.cache.n_keys, len(self._open)
            )

    def set_file(self, path: Path | str, tokens: TokenArray) -> None:
        """The file's n-grams are now those of `tokens` (its old ones removed first)."""
        with self._lock:
            self._put(_absolute(path), FileRecord(tokens, None, None))

    def remove_file(self, path: Path | str) -> None:
        with self._lock:
            self._drop(_absolute(path))

    def add_folder(self, root: Path, tokenizer: Tokenizer, jobs: int = 2) -> int:
        """index_folder(root, tokenizer, jobs); returns the number of files indexed."""
        stats = self.index_folder(root, tokenizer, jobs)
        return stats.tokenized + stats.unchanged

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
            return [self._refresh(each) for each in self._at_or_under(key)]

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
                self._open.add(key)
            return self._commit(key, self._editor_content(key, text))

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
                self._open.discard(key)
            return self._refresh(key)

    def excludes(self, path: Path | str) -> bool:
        """Whether the path alone rules the file out: outside the root, in a version control
        or generated folder, a generated name, or matched by the ignore patterns."""
        root = self._require_root()
        absolute = _absolute(path)
        if not absolute.is_relative_to(root):
            return True
        return self._path_excluded(_relative(root, absolute))

    def excludes_folder(self, path: Path | str) -> bool:
        """Whether no file in the folder at path can count by its path: outside the root, in or
        being a version control or generated folder, matched by the ignore patterns, or
        excluded by a .gitignore."""
        root = self._require_root()
        absolute = _absolute(path)
        if not absolute.is_relative_to(root):
            return True
        relative = _relative(root, absolute)
        if not relative.parts:
            return False
        if any(is_skipped_folder_name(part) for part in relative.parts):
            return True
        return self._folder_ignored(relative) or gitignored(root, relative, is_dir=True)

    def source_folders(self, under: Path | str | None = None) -> set[Path]:
        """The folders that can hold files to index: the root (or `under`, unless
        excludes_folder) and the folders below it that the walk of list_source_files enters
        and the ignore patterns leave; for the root also the folders of the files indexed now
        (git may track files in a .gitignored folder)."""
        root = self._require_root()
        if under is not None and self.excludes_folder(under):
            return set()
        start = PurePosixPath() if under is None else _relative(root, _absolute(under))
        folders = {root / start}
        left_out: set[PurePosixPath] = set()
        for relative, _ in walk_unignored(root, start, with_files=False):
            if relative.parent in left_out or self._folder_ignored(relative):
                left_out.add(relative)
            else:
                folders.add(root / relative)
        if under is None:
            with self._lock:
                folders.update(folder for folder in self._folders if folder.is_relative_to(root))
        return folders

    def save(self, store_path: Path, fingerprint: int) -> int:
        """Writes every indexed file's tokens and stamps to store_path (see store.py), for a
        later load; fingerprint is the tokenizer's. Returns the number of files written.
        OSError when it cannot be written."""
        root = self._require_root()
        with self._lock:
            records = {
                _relative(root, key): record
                for key, record in self._files.items()
                if key.is_relative_to(root)
            }
        save_records(store_path, fingerprint, records)
        return len(records)

    def load(self, store_path: Path, fingerprint: int) -> int:
        """Adds the files saved at store_path (for this tokenizer) that the index does not hold
        yet; a missing or unusable file adds nothing (logged). Call index_folder afterwards: it
        re-tokenizes only the files changed since. Returns the number of files added."""
        root = self._require_root()
        records = load_records(store_path, fingerprint, self.cache.n_vocab)
        added = 0
        with self._indexing():
            for relative, record in records.items():
                key = root / relative
                with self._lock:
                    if key not in self._files and key not in self._open:
                        self._put(key, record)
                        added += 1
        return added

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
                    self._claims.clear()
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
            self._claims = set(self._files)
        # Untracked files too: the watcher indexes a new file before anyone runs `git add`, and
        # a rescan must not drop it again.
        listing = list_source_files(root, max_bytes=self.settings.max_bytes, untracked=True)
        stats = IndexStats(skipped=dict(listing.skipped))
        files = self._unignored(root, listing.files, stats)
        stats.files = len(files)
        todo = self._plan(files, stats)
        tally = _Tally(stats, todo, progress)
        if jobs > 1 and tally.bytes_total >= POOL_MIN_BYTES:
            self._tokenize_in_pool(tokenizer.model_path, jobs, tally, cancelled)
        else:
            self._tokenize_here(tally, cancelled)
        stats.seconds = time.monotonic() - started
        return stats

    def _unignored(self, root: Path, files: list[Path], stats: IndexStats) -> list[Path]:
        kept = [
            path for path in files if not self._ignore.match_file(_relative(root, path).as_posix())
        ]
        if len(kept) < len(files):
            stats.skipped[IGNORED] = len(files) - len(kept)
        return kept

    def _plan(
        self, files: list[Path], stats: IndexStats
    ) -> list[tuple[Path, int, tuple[int, int] | None]]:
        """Removes claimed files no longer listed; returns (path, size, trusted stamp) of the
        listed files to tokenize, claimed, and counts the others as unchanged."""
        checked_ns = time.time_ns()
        statuses = {path: _stat(path) for path in files}
        listed = set(files)
        todo = []
        with self._lock:
            for key in [key for key in self._claims if key not in listed]:
                if key not in self._open and self._drop(key):
                    stats.removed += 1
            for path, status in statuses.items():
                if path in self._open:
                    continue
                record = self._files.get(path)
                if record is not None and status is not None and record.stamp == _stamp(status):
                    stats.unchanged += 1
                    continue
                size = status.st_size if status is not None else 0
                stamp = _trusted_stamp(status, checked_ns) if status is not None else None
                todo.append((path, size, stamp))
                self._claims.add(path)
        return todo

    def _tokenize_here(self, tally: _Tally, cancelled: Callable[[], bool]) -> None:
        for path, size, _ in tally.todo:
            if cancelled():
                tally.stats.cancelled = True
                return
            with self._tokenizer_lock:
                # Listed files passed .gitignore already (or git tracks them).
                outcome = self._refresh(path, listed=True)
            tally.done(outcome, size)

    def _tokenize_in_pool(
        self, model_path: Path, jobs: int, tally: _Tally, cancelled: Callable[[], bool]
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
        self, path: Path, tokens: TokenArray | None, stamp: tuple[int, int] | None
    ) -> Outcome:
        with self._lock:
            if path not in self._claims or path in self._open:
                return "ignored"
            if tokens is None:  # vanished or unreadable since listed
                return "removed" if self._drop(path) else "ignored"
            # The workers return tokens only, so the digest of what they read is unknown.
            self._put(path, FileRecord(tokens, stamp, None))
            return "updated"

    # Single-file updates (the caller holds the tokenizer lock)

    def _refresh(self, key: Path, listed: bool = False) -> Outcome:
        """Brings one file in line with the disk, unless it is open in the editor."""
        with self._lock:
            if key in self._open:
                return "ignored"
            record = self._files.get(key)
        if record is not None and record.stamp is not None:
            status = _stat(key)
            if status is not None and _stamp(status) == record.stamp:
                return "unchanged"
        return self._commit(key, self._disk_content(key, known=listed or record is not None))

    def _disk_content(self, key: Path, known: bool) -> _Content | None:
        """The file's bytes when it is source, else None. Files not indexed before must also
        pass the .gitignore files (an untracked build output in a git checkout would not)."""
        root = self._require_root()
        relative = _relative(root, key)
        if self._path_excluded(relative):
            return None
        if not known and gitignored(root, relative):
            return None
        checked_ns = time.time_ns()
        try:
            # The status comes from the opened file, before reading: a write in between
            # leaves a stamp that differs later.
            data, status = read_source(key, os.path.realpath(root), self.settings.max_bytes)
        except Unindexable:
            return None
        head = data[:_SNIFF_BYTES]
        if b"\0" in head or has_generated_marker(head):
            return None
        return _Content(data, _trusted_stamp(status, checked_ns))

    def _editor_content(self, key: Path, text: str) -> _Content | None:
        root = self._require_root()
        relative = _relative(root, key)
        with self._lock:
            known = key in self._files
        if self._path_excluded(relative) or (not known and gitignored(root, relative)):
            return None
        # A document reached through a symlink out of the folder is not the folder's.
        if not is_inside(os.path.realpath(key), os.path.realpath(root)):
            return None
        # Lone surrogates can arrive in JSON strings; they are not worth failing over.
        data = text.encode("utf-8", errors="replace")
        head = data[:_SNIFF_BYTES]
        if len(data) > self.settings.max_bytes or b"\0" in head or has_generated_marker(head):
            return None
        return _Content(data, None)

    def _commit(self, key: Path, content: _Content | None) -> Outcome:
        """Indexes content as the file's (None: removes the file); skips tokenizing when the
        index holds the same bytes already."""
        if content is None:
            with self._lock:
                return "removed" if self._drop(key) else "ignored"
        digest = hashlib.blake2b(content.data, digest_size=DIGEST_BYTES).digest()
        with self._lock:
            record = self._files.get(key)
            if record is not None and record.digest == digest:
                self._files[key] = replace(record, stamp=content.stamp)
                self._claims.discard(key)
                return "unchanged"
        tokens = tokenize_file_text(self._require_tokenizer(), content.data)
        with self._lock:
            self._put(key, FileRecord(tokens, content.stamp, digest))
        return "updated"

    # Bookkeeping (the caller holds self._lock)

    def _put(self, key: Path, record: FileRecord) -> None:
        # Added before the old tokens go: if the new ones are refused, nothing has changed.
        self.cache.add(record.tokens)
        old = self._files.get(key)
        if old is None:
            self._count_folders(key, 1)
        else:
            self.cache.remove(old.tokens)
            self._n_tokens -= len(old.tokens)
        self._files[key] = record
        self._n_tokens += len(record.tokens)
        self._claims.discard(key)

    def _drop(self, key: Path) -> bool:
        self._claims.discard(key)
        old = self._files.pop(key, None)
        if old is None:
            return False
        self.cache.remove(old.tokens)
        self._n_tokens -= len(old.tokens)
        self._count_folders(key, -1)
        return True

    def _count_folders(self, key: Path, delta: int) -> None:
        root = self._root
        if root is None or not key.is_relative_to(root):
            return
        for folder in key.relative_to(root).parents:
            self._folders[root / folder] += delta
            if self._folders[root / folder] <= 0:
                del self._folders[root / folder]

    def _at_or_under(self, key: Path) -> list[Path]:
        with self._lock:
            if key not in self._folders:
                return [key]
            return [key, *(path for path in self._files if path.is_relative_to(key))]

    # Settings and rules

    def _bind(self, root: Path | str | None, tokenizer: Tokenizer | None) -> tuple[Path, Tokenizer]:
        with self._lock:
            if root is not None:
                absolute = _absolute(root)
                if self._root is None:
                    self._root = absolute
                elif absolute != self._root:
                    raise ValueError(f"this index covers {self._root}, not {absolute}")
            if tokenizer is not None:
                if self._tokenizer is None:
                    self._tokenizer = tokenizer
                elif tokenizer is not self._tokenizer:
                    raise ValueError("this index was given another tokenizer")
        return self._require_root(), self._require_tokenizer()

    def _require_root(self) -> Path:
        if self._root is None:
            raise ValueError("the index has no root folder yet")
        return self._root

    def _require_tokenizer(self) -> Tokenizer:
        if self._tokenizer is None:
            raise ValueError("the index has no tokenizer yet")
        return self._tokenizer

    def _key(self, path: Path | str) -> Path | None:
        """The index's key for path (its absolute form), or None outside the root."""
        absolute = _absolute(path)
        return absolute if absolute.is_relative_to(self._require_root()) else None

    def _path_excluded(self, relative: PurePosixPath) -> bool:
        return is_generated_path(relative) or self._ignore.match_file(relative.as_posix())

    def _folder_ignored(self, relative: PurePosixPath) -> bool:
        # The trailing slash lets "name/" patterns match the folder itself.
        return self._ignore.match_file(relative.as_posix() + "/")


@dataclass
class _Tally:
    """Counts a scan's tokenizing phase into its stats and reports progress."""

    stats: IndexStats
    todo: list[tuple[Path, int, tuple[int, int] | None]]
    progress: Callable[[IndexProgress], None] | None
    files_done: int = 0
    bytes_done: int = 0
    bytes_total: int = field(init=False)

    def __post_init__(self) -> None:
        self.bytes_total = sum(size for _, size, _ in self.todo)
        self._report()

    def done(self, outcome: Outcome, size: int) -> None:
        if outcome == "updated":
            self.stats.tokenized += 1
            self.stats.bytes_tokenized += size
        elif outcome == "unchanged":
            self.stats.unchanged += 1
        elif outcome == "removed":
            self.stats.removed += 1
        self.files_done += 1
        self.bytes_done += size
        self._report()

    def _report(self) -> None:
        if self.progress is not None:
            self.progress(
                IndexProgress(self.files_done, len(self.todo), self.bytes_done, self.bytes_total)
            )


def _absolute(path: Path | str) -> Path:
    # Not resolve(): a symlinked file keeps the name it has inside the folder.
    return Path(os.path.abspath(path))


def _relative(root: Path, key: Path) -> PurePosixPath:
    return PurePosixPath(key.relative_to(root).as_posix())


def _stat(path: Path) -> os.stat_result | None:
    """The status of a regular file, None for anything else or nothing."""
    try:
        status = os.stat(path)
    except OSError:
        return None
    return status if stat.S_ISREG(status.st_mode) else None


def _stamp(status: os.stat_result) -> tuple[int, int]:
    return status.st_size, status.st_mtime_ns


def _trusted_stamp(status: os.stat_result, checked_ns: int) -> tuple[int, int] | None:
    """The stamp, when its mtime is old enough (see RACY_NS) at checked_ns, a time taken
    before the status."""
    return _stamp(status) if status.st_mtime_ns <= checked_ns - RACY_NS else None


def _never() -> bool:
    return False
