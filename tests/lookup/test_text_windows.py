"""The native windows of similar-code search (native/text_windows.h) score every window as the
Jaccard similarity of sets of identifiers' terms would, on any text; bad term lists are
refused."""

from __future__ import annotations

import re

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from lookahead_lsp._lookup import TextWindows, query_terms

_NONE = np.zeros(0, np.uint64)
_IDENTIFIER = re.compile(rb"[A-Za-z0-9_]+")
_TERM_END = re.compile(rb"_|(?<=[a-z])(?=[A-Z])")

# Words that repeat across lines, numbers, punctuation, non-ASCII letters and line ends.
_PIECES = st.sampled_from(
    ["foo", "bar", "baz_1", "Qux", "fooBar", "HTTPServer", "tick_init", "ab", "42", "x9", "_", "é", "名前", " ", "  ", ".", "(", ")", "->", "\n", "\n", "\t", "\r\n"]
)
# Any bytes too (a repository's file may hold anything).
_TEXTS = st.one_of(st.lists(_PIECES, max_size=200).map(lambda p: "".join(p).encode()), st.binary(max_size=400))


def _terms_of(text: bytes) -> set[bytes]:
    """The definition: identifiers cut at `_` and lower-to-upper case, lowercased, 3 or more."""
    return {t.lower() for word in _IDENTIFIER.findall(text) for t in _TERM_END.split(word) if len(t) >= 3}


def _expected(text: bytes, block_lines: int, query: bytes, left_out: set[bytes]) -> list[float]:
    """Each window's similarity, from the definition: sets of terms of blocks of lines."""
    lines = text.split(b"\n")
    blocks = [_terms_of(b"\n".join(lines[at : at + block_lines])) - left_out for at in range(0, len(lines), block_lines)]
    blocks.append(set())
    asked = {w for w in _terms_of(query) if not w[:1].isdigit()} - left_out
    count = (len(lines) - 1) // block_lines if len(lines) > block_lines else 1
    out = []
    for w in range(count):
        window = blocks[w] | blocks[w + 1]
        common = len(asked & window)
        out.append(common / (len(asked) + len(window) - common) if asked else 0.0)
    return out


def _hashes(terms: set[bytes]) -> np.ndarray:
    return query_terms(b" ".join(sorted(terms)), _NONE)


@settings(max_examples=300, deadline=None)
@given(text=_TEXTS, query=_TEXTS, block_lines=st.integers(1, 7), left_out=st.sets(st.sampled_from([b"foo", b"qux", b"bar", b"tick"])))
def test_windows_score_what_term_sets_give(text: bytes, query: bytes, block_lines: int, left_out: set[bytes]) -> None:
    excluded = _hashes(left_out)
    windows = TextWindows(text, block_lines, excluded)
    scores = windows.similarities(query_terms(query, excluded))
    assert windows.windows == len(scores)
    assert scores.tolist() == _expected(text, block_lines, query, left_out)


def test_a_query_holds_each_term_once_and_no_number() -> None:
    asked = query_terms(b"tick_init(highres, tickInit) + 0x42 * x86_64 + fd", _NONE)
    assert list(asked) == sorted(set(query_terms(b"tick init highres x86", _NONE)))
    assert len(asked) == 4


def test_a_window_like_the_query_scores_above_the_others() -> None:
    text = "\n".join(["alpha beta"] * 6 + ["gamma_delta"] * 6 + ["alpha beta"] * 6)
    scores = TextWindows(text.encode(), 3, _NONE).similarities(query_terms(b"gammaDelta()", _NONE))
    assert scores.tolist() == [0.0, 0.5, 1.0, 0.5, 0.0]


def test_bad_term_lists_and_blocks_are_refused() -> None:
    unsorted = np.array([3, 1], np.uint64)
    with pytest.raises(ValueError, match="sorted and distinct"):
        query_terms(b"a b", unsorted)
    with pytest.raises(ValueError, match="sorted and distinct"):
        TextWindows(b"a b", 6, _NONE).similarities(np.array([1, 1], np.uint64))
    with pytest.raises(ValueError, match="block_lines"):
        TextWindows(b"a b", 0, _NONE)
    with pytest.raises(ValueError, match="1-D"):
        TextWindows(b"a b", 6, np.zeros((2, 2), np.uint64))
