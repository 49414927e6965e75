"""`_lookup.replay` (llama-lookup-stats' method) against the pure-Python reference."""

from __future__ import annotations

import itertools

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from lookahead_lsp import _lookup
from support.caches import native_cache, native_static
from support.reference_lookup import (
    RefCache,
    Vocab,
    ref_cache_from_docs,
    ref_from_native,
    ref_replay,
    ref_static_from_docs,
    stdlib_available,
)

SETTINGS = settings(deadline=None, max_examples=30, print_blob=True)


def check_replay(
    tokens: list[int],
    n_ctx: int,
    n_draft: int,
    n_vocab: int,
    dynamic_docs: list[list[int]] | None,
    static: "_lookup.StaticCache | None",
    ref_static: RefCache | None,
) -> dict[str, int]:
    dynamic = None if dynamic_docs is None else native_cache(n_vocab, dynamic_docs)
    ref_dynamic = None if dynamic_docs is None else ref_cache_from_docs(dynamic_docs)
    got = _lookup.replay(np.asarray(tokens, dtype=np.int32), n_ctx, n_draft, dynamic, static)
    expected = ref_replay(tokens, n_ctx, n_draft, ref_dynamic, ref_static)
    assert isinstance(got["draft_ns"], int) and got["draft_ns"] >= 0
    assert {k: got[k] for k in expected} == expected, (n_ctx, n_draft)
    assert 0 <= got["n_accept"] <= got["n_drafted"]
    if dynamic is not None:
        assert ref_from_native(dynamic) == ref_dynamic
    return got


@st.composite
def corpora(draw: st.DrawFn):  # type: ignore[no-untyped-def]
    n_vocab = draw(st.integers(3, 50))
    tok = st.integers(0, n_vocab - 1)
    phrases = draw(st.lists(st.lists(tok, min_size=1, max_size=10), min_size=1, max_size=8))
    piece = st.one_of(st.sampled_from(phrases), st.sampled_from(phrases), st.lists(tok, max_size=3))
    doc = st.lists(piece, max_size=120).map(lambda ps: list(itertools.chain.from_iterable(ps)))
    tokens = draw(doc)
    dynamic = draw(st.none() | st.lists(doc, max_size=2))
    static = draw(st.none() | st.lists(doc, min_size=1, max_size=3))
    return n_vocab, tokens, dynamic, static


@SETTINGS
@given(
    case=corpora(),
    n_ctx=st.sampled_from([64, 100, 128, 256, 512]),
    n_draft=st.sampled_from([1, 3, 8]),
)
def test_replay_random_corpora(tmp_path_factory, case, n_ctx: int, n_draft: int) -> None:  # type: ignore[no-untyped-def]
    n_vocab, tokens, dynamic_docs, static_docs = case
    static = ref_static = None
    if static_docs is not None:
        static = native_static(n_vocab, static_docs, str(tmp_path_factory.mktemp("replay") / "s.lookup"))
        ref_static = ref_static_from_docs(static_docs)
    check_replay(tokens, n_ctx, n_draft, n_vocab, dynamic_docs, static, ref_static)


@settings(deadline=None, max_examples=40)
@given(
    n_vocab=st.integers(2, 6),
    tokens=st.lists(st.integers(0, 5), max_size=120),
    n_ctx=st.integers(1, 20),
    n_draft=st.integers(1, 10),
    with_dynamic=st.booleans(),
)
def test_replay_small_chunks(n_vocab: int, tokens: list[int], n_ctx: int, n_draft: int, with_dynamic: bool) -> None:
    tokens = [t % n_vocab for t in tokens]
    check_replay(tokens, n_ctx, n_draft, n_vocab, [] if with_dynamic else None, None, None)


def test_replay_counts_by_hand() -> None:
    # A period-3 text: after the first period, every position drafts the continuation.
    tokens = [0, 1, 2] * 30  # 90 tokens, one chunk of 64 (64 + 64 > 90)
    got = check_replay(tokens, 64, 8, 3, [], None, None)
    assert got["n_predict"] == 64
    assert got["n_accept"] > 40
    # Fewer tokens than n_ctx + 1: no chunk at all.
    for n in (0, 1, 63, 64):
        got = _lookup.replay(np.zeros(n, dtype=np.int32), 64, 8)
        assert (got["n_drafted"], got["n_accept"], got["n_predict"]) == (0, 0, n - n % 64)


def test_replay_refuses_unverified_static(tmp_path) -> None:  # type: ignore[no-untyped-def]
    b = _lookup.StaticCacheBuilder(5)
    b.add([0, 1, 2, 0, 1, 2])
    path = str(tmp_path / "s.lookup")
    b.write(path, 0)
    s = _lookup.StaticCache.open(path)
    with pytest.raises(ValueError):
        _lookup.replay([0, 1, 2] * 100, 64, 3, None, s)


REAL = ["textwrap.py", "argparse.py", "typing.py", "enum.py", "functools.py"]


@pytest.fixture(scope="module")
def real(tmp_path_factory):  # type: ignore[no-untyped-def]
    if not stdlib_available(*REAL):
        pytest.skip("Python 3.11 stdlib sources not found")
    vocab = Vocab()
    docs = {n: vocab.encode_file(n) for n in REAL}
    n_vocab = len(vocab)
    static_docs = [docs["argparse.py"], docs["typing.py"]]
    static = native_static(n_vocab, static_docs, str(tmp_path_factory.mktemp("real") / "s.lookup"))
    target = docs["textwrap.py"][:4000] + docs["functools.py"][:2000]
    return n_vocab, target, [docs["enum.py"]], static, ref_static_from_docs(static_docs)


@pytest.mark.parametrize(
    "n_ctx,n_draft,with_dynamic,with_static",
    [(512, 8, True, True), (128, 3, True, True), (256, 1, False, True), (512, 3, True, False), (64, 8, False, False)],
)
def test_replay_real_code(real, n_ctx: int, n_draft: int, with_dynamic: bool, with_static: bool) -> None:  # type: ignore[no-untyped-def]
    n_vocab, target, dynamic_docs, static, ref_static = real
    got = check_replay(
        target,
        n_ctx,
        n_draft,
        n_vocab,
        dynamic_docs if with_dynamic else None,
        static if with_static else None,
        ref_static if with_static else None,
    )
    assert got["n_accept"] > 0


def test_replay_refuses_bad_sizes_and_tokens() -> None:
    dyn = _lookup.NgramCache(5)
    for n_ctx, n_draft in ((0, 3), (-1, 3), (64, -1)):
        with pytest.raises(ValueError):
            _lookup.replay([0, 1, 2] * 100, n_ctx, n_draft, dyn)
    with pytest.raises(ValueError):
        _lookup.replay([0, 1, 5] * 100, 64, 3, dyn)  # 5 is outside the dynamic cache's vocabulary
    assert dyn.n_keys == 0


@SETTINGS
@given(case=corpora(), n_ctx=st.sampled_from([32, 64, 128]), n_draft=st.sampled_from([1, 3, 8]),
       max_branches=st.integers(2, 4))
def test_tree_replay_matches_reference(tmp_path_factory, case, n_ctx: int, n_draft: int, max_branches: int) -> None:  # type: ignore[no-untyped-def]
    """lookup-stats --branches: each step drafts a token tree, keeps the branch that matches the
    text longest and pays for every node."""
    n_vocab, tokens, dynamic_docs, static_docs = case
    static = ref_static = None
    if static_docs is not None:
        static = native_static(n_vocab, static_docs, str(tmp_path_factory.mktemp("tree") / "s.cache"))
        ref_static = ref_static_from_docs(static_docs)
    dynamic = None if dynamic_docs is None else native_cache(n_vocab, dynamic_docs)
    ref_dynamic = None if dynamic_docs is None else ref_cache_from_docs(dynamic_docs)
    got = _lookup.replay(np.asarray(tokens, dtype=np.int32), n_ctx, n_draft, dynamic, static,
                         max_branches=max_branches)
    expected = ref_replay(tokens, n_ctx, n_draft, ref_dynamic, ref_static, max_branches=max_branches)
    assert {k: got[k] for k in expected} == expected


def test_tree_replay_finds_what_the_single_draft_misses() -> None:
    """At a fork where the text's own context favours one continuation and the workspace the
    other, the single draft follows the context; a tree also carries the workspace's guess and
    wins whenever the text takes that branch."""
    rng = np.random.default_rng(7)
    prefix, a, b = [1, 2, 3, 4, 5], [10, 11, 12, 13], [20, 21, 22, 23]
    doc = np.array([t for choice in rng.random(300) for t in prefix + (a if choice < 0.6 else b)], dtype=np.int32)
    workspace = np.array((prefix + b) * 50, dtype=np.int32)

    def run(max_branches: int) -> dict[str, int]:
        dynamic = _lookup.NgramCache(30)
        dynamic.add(workspace)
        # 6 tokens a draft, so that drafts cross the fork at varying depths.
        return _lookup.replay(doc, 1024, 6, dynamic, max_branches=max_branches)

    assert run(3)["n_accept"] > run(1)["n_accept"]
    with pytest.raises(ValueError):
        _lookup.replay(doc, 1024, 8, max_branches=0)
