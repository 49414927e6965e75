"""The native windows of similar-code search (native/text_windows.h) score every window as the
Jaccard similarity of word sets would, on any text; bad word lists are refused."""

from __future__ import annotations

import re

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from lookahead_lsp._lookup import TextWindows, query_words

_NONE = np.zeros(0, np.uint64)
_WORD = re.compile(rb"[A-Za-z0-9_]+")

# Words that repeat across lines, numbers, punctuation, non-ASCII letters and line ends.
_PIECES = st.sampled_from(["foo", "bar", "baz_1", "Qux", "42", "x9", "_", "é", "名前", " ", "  ", ".", "(", ")", "->", "\n", "\n", "\t", "\r\n"])
# Any bytes too (a repository's file may hold anything).
_TEXTS = st.one_of(st.lists(_PIECES, max_size=200).map(lambda p: "".join(p).encode()), st.binary(max_size=400))


def _words_of(text: bytes) -> set[bytes]:
    return set(_WORD.findall(text))


def _expected(text: bytes, block_lines: int, query: bytes, left_out: set[bytes]) -> list[float]:
    """Each window's similarity, from the definition: sets of words of blocks of lines."""
    lines = text.split(b"\n")
    blocks = [_words_of(b"\n".join(lines[at : at + block_lines])) - left_out for at in range(0, len(lines), block_lines)]
    blocks.append(set())
    asked = {w for w in _words_of(query) if not w[:1].isdigit()} - left_out
    count = (len(lines) - 1) // block_lines if len(lines) > block_lines else 1
    out = []
    for w in range(count):
        window = blocks[w] | blocks[w + 1]
        common = len(asked & window)
        out.append(common / (len(asked) + len(window) - common) if asked else 0.0)
    return out


def _hashes(words: set[bytes]) -> np.ndarray:
    return query_words(b" ".join(sorted(words)), _NONE)


@settings(max_examples=300, deadline=None)
@given(text=_TEXTS, query=_TEXTS, block_lines=st.integers(1, 7), left_out=st.sets(st.sampled_from([b"foo", b"Qux", b"_"])))
def test_windows_score_what_word_sets_give(text: bytes, query: bytes, block_lines: int, left_out: set[bytes]) -> None:
    excluded = _hashes(left_out)
    windows = TextWindows(text, block_lines, excluded)
    scores = windows.similarities(query_words(query, excluded))
    assert windows.windows == len(scores)
    assert scores.tolist() == _expected(text, block_lines, query, left_out)


def test_a_query_names_each_identifier_once_and_no_number() -> None:
    asked = query_words(b"foo(bar, foo) + 42 * x9", _NONE)
    assert len(asked) == 3
    assert list(asked) == sorted(asked)
    assert set(query_words(b"x9", _NONE)) <= set(asked)


def test_a_window_like_the_query_scores_above_the_others() -> None:
    text = "\n".join(["alpha beta"] * 6 + ["gamma delta"] * 6 + ["alpha beta"] * 6)
    scores = TextWindows(text.encode(), 3, _NONE).similarities(query_words(b"gamma(delta)", _NONE))
    assert scores.tolist() == [0.0, 0.5, 1.0, 0.5, 0.0]


def test_bad_word_lists_and_blocks_are_refused() -> None:
    unsorted = np.array([3, 1], np.uint64)
    with pytest.raises(ValueError, match="sorted and distinct"):
        query_words(b"a b", unsorted)
    with pytest.raises(ValueError, match="sorted and distinct"):
        TextWindows(b"a b", 6, _NONE).similarities(np.array([1, 1], np.uint64))
    with pytest.raises(ValueError, match="block_lines"):
        TextWindows(b"a b", 0, _NONE)
    with pytest.raises(ValueError, match="1-D"):
        TextWindows(b"a b", 6, np.zeros((2, 2), np.uint64))
