"""Where a drafted token came from, in one vocabulary from the lookup core to the status output:
the lookup core's DraftSource ids (context, workspace, repository), then the engine's own
guesses: "window", lookahead's Jacobi window, and "previous", the rest of the last completion
when the user has typed its beginning. Also the columns of an evidence table, one row per
drafted token as draft_with_evidence and draft_tree return it."""

from __future__ import annotations

from enum import IntEnum

import numpy as np
import numpy.typing as npt

from lookahead_lsp._lookup import DraftSource

SOURCES: tuple[str, ...] = tuple(source.name for source in sorted(DraftSource)) + ("window", "previous")
WINDOW = SOURCES.index("window")
PREVIOUS = SOURCES.index("previous")

Evidence = npt.NDArray[np.int64]


class EvidenceColumn(IntEnum):
    SOURCE = 0  # an index into SOURCES
    NGRAM = 1  # the size of the n-gram that decided the token (0: not from a cache)
    COUNT = 2  # how often the drafted token followed that n-gram
    TOTAL = 3  # how often anything followed it


def evidence_of(source: int, n: int) -> Evidence:
    """n rows for guesses that are not from a cache: one pretend sighting, all of its key."""
    rows = np.zeros((n, len(EvidenceColumn)), dtype=np.int64)
    rows[:, EvidenceColumn.SOURCE] = source
    rows[:, EvidenceColumn.COUNT] = 1
    rows[:, EvidenceColumn.TOTAL] = 1
    return rows
