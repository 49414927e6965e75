"""Native caches built from token lists, and the random corpora the property tests draw."""

from __future__ import annotations

import itertools

import numpy as np
from hypothesis import strategies as st

from lookahead_lsp import _lookup


def native_cache(n_vocab: int, docs: list[list[int]]) -> "_lookup.NgramCache":
    cache = _lookup.NgramCache(n_vocab)
    for doc in docs:
        cache.add(np.asarray(doc, dtype=np.int32))
    return cache


def native_static(n_vocab: int, docs: list[list[int]], path: str, fingerprint: int = 0) -> "_lookup.StaticCache":
    """A static cache of docs written to path, opened and verified."""
    builder = _lookup.StaticCacheBuilder(n_vocab)
    for doc in docs:
        builder.add(np.asarray(doc, dtype=np.int32))
    builder.write(path, fingerprint)
    cache = _lookup.StaticCache.open(path, n_vocab=n_vocab, fingerprint=fingerprint)
    cache.verify()
    return cache


@st.composite
def vocab_and_docs(draw: st.DrawFn, max_vocab: int = 50, max_docs: int = 5, max_pieces: int = 25):  # type: ignore[no-untyped-def]
    """(n_vocab, docs): documents assembled from a few repeated phrases and some noise, so that
    n-grams recur often enough to qualify."""
    n_vocab = draw(st.integers(3, max_vocab))
    tok = st.integers(0, n_vocab - 1)
    phrases = draw(st.lists(st.lists(tok, min_size=1, max_size=6), min_size=1, max_size=5))
    piece = st.one_of(st.sampled_from(phrases), st.lists(tok, max_size=3))
    doc = st.lists(piece, max_size=max_pieces).map(lambda ps: list(itertools.chain.from_iterable(ps)))
    return n_vocab, draw(st.lists(doc, max_size=max_docs))
