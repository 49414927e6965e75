"""A file's new version replaces its n-grams exactly, whatever part of it changed: the index
recounts only the changed span, and the result must equal counting the new version whole."""

from __future__ import annotations

from pathlib import Path

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from lookahead_lsp._lookup import NgramCache
from lookahead_lsp.workspace.indexed_files import IndexedFiles
from lookahead_lsp.workspace.store import FileRecord

N_VOCAB = 12  # a small vocabulary, so that spans repeat and counts above one are common
_TOKENS = st.lists(st.integers(0, N_VOCAB - 1), max_size=40)


def _record(tokens: list[int]) -> FileRecord:
    return FileRecord(np.array(tokens, dtype=np.int32), None, None)


def _counted(*files: list[int]) -> NgramCache:
    cache = NgramCache(N_VOCAB)
    for tokens in files:
        cache.add(np.array(tokens, dtype=np.int32))
    return cache


@settings(deadline=None, max_examples=300)
@given(head=_TOKENS, old_middle=_TOKENS, new_middle=_TOKENS, tail=_TOKENS, other=_TOKENS)
def test_a_new_version_counts_as_if_counted_whole(
    head: list[int], old_middle: list[int], new_middle: list[int], tail: list[int], other: list[int]
) -> None:
    files = IndexedFiles(NgramCache(N_VOCAB))
    files.put(Path("/w/other.py"), _record(other))  # shares n-grams with the edited file
    files.put(Path("/w/edited.py"), _record(head + old_middle + tail))
    files.put(Path("/w/edited.py"), _record(head + new_middle + tail))
    assert files.cache == _counted(other, head + new_middle + tail)
    assert files.n_tokens == len(other) + len(head) + len(new_middle) + len(tail)


@given(old=_TOKENS, new=_TOKENS)
def test_unrelated_versions_replace_each_other(old: list[int], new: list[int]) -> None:
    files = IndexedFiles(NgramCache(N_VOCAB))
    files.put(Path("/w/a.py"), _record(old))
    files.put(Path("/w/a.py"), _record(new))
    assert files.cache == _counted(new)
    files.drop(Path("/w/a.py"))
    assert files.cache == _counted()
