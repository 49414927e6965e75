"""The bookkeeping of a WorkspaceIndex: each indexed file's record, the n-gram caches their tokens
add up to, the documents open in the editor and the files a scan may still commit. Not
thread-safe by itself: the index holds its lock around every use.

With a folder table (the bulk on disk), `table_records` are the versions of the files it was
built from; `cache` counts the records that are not (changed since, new, open), and `removed`
the table's versions of those files, so that table + cache - removed is every current record.
Without one, `cache` counts every record and `removed` stays empty."""

from __future__ import annotations

import os
from collections import Counter
from pathlib import Path

import numpy as np

from lookahead_lsp._lookup import NGRAM_MAX, NgramCache
from lookahead_lsp.base.tokenizer import TokenArray
from lookahead_lsp.workspace.index_stats import IndexStats, Outcome
from lookahead_lsp.workspace.rules import Stamp, stamp_of, trusted_stamp
from lookahead_lsp.workspace.store import FileRecord


class IndexedFiles:
    """records: each indexed file's tokens and stamps by absolute path; open: the paths whose
    editor text is indexed instead of the disk's; claims: files whose pending result from a
    scan's workers may still be committed (any other update of a file withdraws its claim)."""

    def __init__(self, cache: NgramCache) -> None:
        self.cache = cache
        self.removed = NgramCache(cache.n_vocab)
        self.table_records: dict[Path, FileRecord] = {}
        # Files a scan wrote straight to the next table's store (the budget was full): not
        # drafted from until that table replaces this one, dropped from here by any update;
        # with their tokens' count, which the status adds to the folder's.
        self.spooled: dict[Path, int] = {}
        self.records: dict[Path, FileRecord] = {}
        self.open: set[Path] = set()
        self.claims: set[Path] = set()
        self.n_tokens = 0
        self.memory_tokens = 0  # tokens of records that are not the table's (held in memory)
        # Folders holding indexed files, with how many: a deleted folder's files are found
        # without visiting every file on each deletion.
        self._folders: Counter[Path] = Counter()

    def put(self, key: Path, record: FileRecord) -> None:
        """The file's n-grams are now record's (its old ones removed)."""
        old = self.records.get(key)
        in_table = old is not None and old is self.table_records.get(key)
        # Added before the old tokens go: if the new ones are refused, nothing has changed.
        if old is None or in_table:
            self.cache.add(record.tokens)
        else:
            self._replace(old.tokens, record.tokens)
        if old is None:
            self._count_folders(key, 1)
        else:
            self.n_tokens -= len(old.tokens)
            if in_table:
                self.removed.add(old.tokens)
            else:
                self.memory_tokens -= len(old.tokens)
        self.records[key] = record
        self.n_tokens += len(record.tokens)
        self.memory_tokens += len(record.tokens)
        self.claims.discard(key)
        self.spooled.pop(key, None)

    def _replace(self, old: TokenArray, new: TokenArray) -> None:
        """Swaps old's n-grams for new's touching only those that differ: an edit changes a
        few tokens of a file, and recounting all of a large one on every keystroke would take
        the model's core. N-grams whose tokens lie wholly in the shared head or the shared tail
        are the same in both; the others have their follower in the changed span or in the
        NGRAM_MAX tokens after it."""
        head, tail = _shared_ends(old, new)
        start = max(0, head - NGRAM_MAX)
        for tokens, update in ((new, self.cache.add), (old, self.cache.remove)):
            end = min(len(tokens), len(tokens) - tail + NGRAM_MAX)
            update(tokens[start:end], head - start)

    def drop(self, key: Path) -> bool:
        """Removes the file's n-grams; whether it was indexed."""
        self.claims.discard(key)
        spooled = self.spooled.pop(key, None) is not None
        old = self.records.pop(key, None)
        if old is None:
            return spooled
        if old is self.table_records.get(key):
            self.removed.add(old.tokens)
        else:
            self.cache.remove(old.tokens)
            self.memory_tokens -= len(old.tokens)
        self.n_tokens -= len(old.tokens)
        self._count_folders(key, -1)
        return True

    def adopt_table(self, table_records: dict[Path, FileRecord], current: dict[Path, FileRecord]) -> None:
        """A new folder table holds table_records; `current` are the records now (each either
        one of table_records or newer). The caches are rebuilt, fresh objects (drafting may
        still read the old ones), from the records the table does not hold."""
        cache, removed = NgramCache(self.cache.n_vocab), NgramCache(self.cache.n_vocab)
        memory_tokens = 0
        for key, record in current.items():
            if record is not table_records.get(key):
                cache.add(record.tokens)
                memory_tokens += len(record.tokens)
        for key, record in table_records.items():
            if current.get(key) is not record:
                removed.add(record.tokens)
        for key in current.keys() - self.records.keys():
            self._count_folders(key, 1)
        self.cache, self.removed = cache, removed
        self.table_records, self.records = table_records, current
        self.n_tokens = sum(len(record.tokens) for record in current.values())
        self.memory_tokens = memory_tokens
        self.spooled.clear()

    def memory_bytes(self) -> int:
        """What the in-memory part holds: its caches and the tokens of records not in the table."""
        return self.cache.memory_bytes + self.removed.memory_bytes + 4 * self.memory_tokens

    def plan(
        self, statuses: dict[Path, os.stat_result | None], checked_ns: int, stats: IndexStats
    ) -> list[tuple[Path, int, Stamp | None]]:
        """A scan's plan for the listed files (with their status, taken after checked_ns):
        removes claimed files no longer listed; returns (path, size, trusted stamp) of those
        to tokenize, claimed, and counts the others as unchanged."""
        for key in [key for key in self.claims if key not in statuses]:
            if key not in self.open and self.drop(key):
                stats.removed += 1
        todo = []
        for path, status in statuses.items():
            if path in self.open:
                continue
            record = self.records.get(path)
            if record is not None and status is not None and record.stamp == stamp_of(status):
                stats.unchanged += 1
                continue
            size = status.st_size if status is not None else 0
            stamp = trusted_stamp(status, checked_ns) if status is not None else None
            todo.append((path, size, stamp))
            self.claims.add(path)
        return todo

    def commit_scanned(self, path: Path, tokens: TokenArray | None, stamp: Stamp | None) -> Outcome:
        """A scan worker's result for a claimed file (None: vanished or unreadable since
        listed); ignored when another update came first."""
        if path not in self.claims or path in self.open:
            return "ignored"
        if tokens is None:
            return "removed" if self.drop(path) else "ignored"
        # The workers return tokens only, so the digest of what they read is unknown.
        self.put(path, FileRecord(tokens, stamp, None))
        return "updated"

    def at_or_under(self, key: Path) -> list[Path]:
        """key, and when it is a folder holding indexed files, those files."""
        if key not in self._folders:
            return [key]
        return [key, *(path for path in self.records if path.is_relative_to(key))]

    def folders_under(self, root: Path) -> set[Path]:
        """The folders under root (itself included) that hold indexed files."""
        return {folder for folder in self._folders if folder.is_relative_to(root)}

    def _count_folders(self, key: Path, delta: int) -> None:
        for folder in key.parents:
            self._folders[folder] += delta
            if self._folders[folder] <= 0:
                del self._folders[folder]


def _shared_ends(old: TokenArray, new: TokenArray) -> tuple[int, int]:
    """How many tokens old and new share at their start, and then at their end (the two never
    overlap in the shorter one)."""
    n = min(len(old), len(new))
    differ = np.flatnonzero(old[:n] != new[:n])
    head = int(differ[0]) if differ.size else n
    left = n - head
    old_end, new_end = old[len(old) - left :], new[len(new) - left :]
    differ = np.flatnonzero(old_end[::-1] != new_end[::-1])
    return head, int(differ[0]) if differ.size else left
