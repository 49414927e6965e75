"""What a WorkspaceIndex reports: each update's outcome, a scan's progress and stats, and the
index's status."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable, Literal

Outcome = Literal["updated", "unchanged", "removed", "ignored"]
State = Literal["indexing", "ready"]

# The skipped-files reason for files matching the user's ignore patterns.
IGNORED = "ignored"


@dataclass(frozen=True)
class IndexProgress:
    """How far index_folder has come: files and bytes of those to tokenize, then (phase
    "writing") the folder table of a folder larger than the memory budget."""

    files_done: int
    files_total: int
    bytes_done: int
    bytes_total: int
    phase: Literal["tokenizing", "writing"] = "tokenizing"


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
    keys (in memory and in the folder table), how many documents are open in the editor, and
    its memory against the budget."""

    state: State
    files: int
    tokens: int
    ngrams: int
    open_documents: int
    memory_bytes: int = 0  # the in-memory part: caches and tokens not in the folder table
    budget_bytes: int = 0
    table_files: int = 0  # files the folder table on disk holds (0: none, all in memory)
    table_bytes: int = 0


@dataclass
class Tally:
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

    def _report(self, phase: Literal["tokenizing", "writing"] = "tokenizing") -> None:
        if self.progress is not None:
            self.progress(
                IndexProgress(self.files_done, len(self.todo), self.bytes_done, self.bytes_total, phase)
            )

    def writing(self) -> None:
        self._report("writing")
