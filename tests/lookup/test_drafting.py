"""`_lookup.draft` / `_lookup.draft_tree` return exactly what the pure-Python reference returns."""

from __future__ import annotations

import itertools
import os
from dataclasses import dataclass, field
from typing import Literal, Optional, TypedDict

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from lookahead_lsp import _lookup
from support.caches import native_cache, native_static
from support.reference_lookup import (
    LAX_MIN_PERCENT,
    LAX_MIN_SAMPLE,
    STRICT_MIN_PERCENT,
    STRICT_MIN_SAMPLE,
    RefCache,
    Vocab,
    ref_cache_from_docs,
    ref_draft,
    ref_draft_evidence,
    ref_draft_tree,
    ref_from_native,
    ref_static_from_docs,
    stdlib_available,
    stdlib_path,
)

SETTINGS = settings(deadline=None, max_examples=150, print_blob=True)


# ---------------------------------------------------------------------------------------------
# Random corpora with lots of repetition


@st.composite
def corpora(draw: st.DrawFn, min_vocab: int = 3, max_vocab: int = 50) -> "Case":
    n_vocab = draw(st.integers(min_vocab, max_vocab))
    tok = st.integers(0, n_vocab - 1)
    # A small pool of phrases that documents are assembled from, plus noise tokens.
    phrases = draw(st.lists(st.lists(tok, min_size=1, max_size=8), min_size=1, max_size=6))
    piece = st.one_of(st.sampled_from(phrases), st.lists(tok, max_size=3))
    doc = st.lists(piece, max_size=25).map(lambda ps: list(itertools.chain.from_iterable(ps)))
    docs = st.lists(doc, max_size=4)
    case = Case(n_vocab=n_vocab)
    case.prompt = draw(doc)
    use_context = draw(st.sampled_from(["prompt", "other", "none"]))
    if use_context == "prompt":
        case.context_docs = [case.prompt]
    elif use_context == "other":
        case.context_docs = draw(docs)
    case.dynamic_docs = draw(st.none() | docs)
    case.static_docs = draw(st.none() | docs)
    case.fingerprint = draw(st.integers(0, 2**64 - 1))
    return case


@dataclass
class Case:
    n_vocab: int
    prompt: list[int] = field(default_factory=list)
    context_docs: Optional[list[list[int]]] = None
    dynamic_docs: Optional[list[list[int]]] = None
    static_docs: Optional[list[list[int]]] = None
    fingerprint: int = 0


class NativeCaches(TypedDict, total=False):
    """Keyword arguments of `_lookup.draft` and `draft_tree` (the DraftSource names); a test may
    pass only some of them."""

    context: Optional[_lookup.NgramCache]
    workspace: Optional[_lookup.NgramCache]
    repository: Optional[_lookup.StaticCache]


Source = Literal["context", "workspace", "repository"]


def only(caches: NativeCaches, which: Source) -> NativeCaches:
    """The cache of `caches` named `which`, as the only keyword argument."""
    if which == "context":
        return {"context": caches["context"]}
    if which == "workspace":
        return {"workspace": caches["workspace"]}
    return {"repository": caches["repository"]}


@dataclass
class Caches:
    native: NativeCaches
    ref: dict[str, Optional[RefCache]]


def build(case: Case, tmp_dir: str) -> Caches:
    # Keyed by the native arguments (the DraftSource names) and by the reference's.
    native: NativeCaches = {"context": None, "workspace": None, "repository": None}
    ref: dict[str, Optional[RefCache]] = {"context": None, "dynamic": None, "static": None}
    if case.context_docs is not None:
        native["context"] = native_cache(case.n_vocab, case.context_docs)
        ref["context"] = ref_cache_from_docs(case.context_docs)
    if case.dynamic_docs is not None:
        native["workspace"] = native_cache(case.n_vocab, case.dynamic_docs)
        ref["dynamic"] = ref_cache_from_docs(case.dynamic_docs)
    if case.static_docs is not None:
        path = os.path.join(tmp_dir, "static.lookup")
        native["repository"] = native_static(case.n_vocab, case.static_docs, path, case.fingerprint)
        ref["static"] = ref_static_from_docs(case.static_docs)
    return Caches(native, ref)


def prefix_ends(n: int, count: int = 30) -> list[int]:
    """0, 1, 2, about `count` evenly spaced prefix lengths, and n."""
    return sorted(e for e in {0, 1, 2, n} | set(range(0, n + 1, max(1, n // count))) if e <= n)


def check_tree_shape(tokens: list[int], parents: list[int]) -> list[tuple[int, list[int]]]:
    """Checks the tree is well formed; returns its branches as (depth of the first node,
    tokens). A node starts a new branch when its parent is not the node just before it; branch
    0 starts at the root and the others hang off branch 0."""
    assert len(tokens) == len(parents)
    branches: list[tuple[int, list[int]]] = []
    for i, p in enumerate(parents):
        assert -1 <= p < i, "a parent must come before its child"
        if i == 0 or p != i - 1:
            main_length = len(branches[0][1]) if branches else 0
            assert p == -1 or p < main_length - 1, "other branches hang off branch 0"
            branches.append((p + 1, [tokens[i]]))
        else:
            branches[-1][1].append(tokens[i])
    return branches


def check_draft_and_tree(
    caches: Caches, prompt: list[int], n_draft: int, max_branches: int
) -> None:
    arr = np.asarray(prompt, dtype=np.int32)
    got = _lookup.draft(arr, n_draft, **caches.native)
    assert isinstance(got, np.ndarray) and got.dtype == np.int32 and got.ndim == 1
    expected = ref_draft(prompt, n_draft, **caches.ref)
    assert got.tolist() == expected, (prompt, n_draft)
    tokens, evidence = _lookup.draft_with_evidence(arr, n_draft, **caches.native)
    assert evidence.shape == (len(expected), 4) and evidence.dtype == np.int64
    assert [(t, *e) for t, e in zip(tokens.tolist(), evidence.tolist())] == ref_draft_evidence(
        prompt, n_draft, **caches.ref
    )

    t_tokens, t_parents, t_evidence = _lookup.draft_tree(arr, n_draft, max_branches, **caches.native)
    if len(t_tokens) and max_branches:
        # Branch 0 is draft(), evidence included; every node's counts are a key's counts.
        assert t_evidence[: len(expected)].tolist() == evidence.tolist()
        assert ((t_evidence[:, 0] >= 0) & (t_evidence[:, 0] <= 2)).all()
        assert ((t_evidence[:, 2] >= 1) & (t_evidence[:, 2] <= t_evidence[:, 3])).all()
    assert t_tokens.dtype == np.int32 and t_parents.dtype == np.int32
    exp_tokens, exp_parents = ref_draft_tree(prompt, n_draft, max_branches, **caches.ref)
    assert (t_tokens.tolist(), t_parents.tolist()) == (exp_tokens, exp_parents), (
        prompt,
        n_draft,
        max_branches,
    )
    # Properties that hold whatever the reference says.
    branches = check_tree_shape(t_tokens.tolist(), t_parents.tolist())
    assert len(branches) <= max_branches
    if not branches:
        assert expected == [] or max_branches == 0
        return
    depth0, main = branches[0]
    assert depth0 == 0 and main == expected, "branch 0 must equal draft()"
    children: dict[int, set[int]] = {}
    for depth, b in branches[1:]:
        siblings = children.setdefault(depth, {main[depth]})
        assert b[0] not in siblings, "siblings must be distinct tokens"
        siblings.add(b[0])
        assert 1 <= depth + len(b) <= n_draft
        prefix = prompt + main[:depth] + b[:1]
        cont = _lookup.draft(np.asarray(prefix, dtype=np.int32), n_draft - depth - 1, **caches.native)
        assert b[1:] == cont.tolist()


# ---------------------------------------------------------------------------------------------
# The reference on hand-worked examples (so that agreement with it means something)


def test_reference_hand_worked() -> None:
    ctx = ref_cache_from_docs([[7, 5, 1, 7, 5, 2]])
    # Key (7, 5) has followers {1: 1, 2: 1}: a tie, lowest id wins; then n = 3, 4 keys follow.
    assert ref_draft([9, 7, 5], 10, ctx) == [1, 7, 5, 2]
    # Static followers of (7, 5) = {2: 2} weight token 2 by 200.
    static = ref_static_from_docs([[7, 5, 2, 7, 5, 2]])
    assert ref_draft([9, 7, 5], 1, ctx, static=static) == [2]
    # Static alone: {5: 2, 6: 1} -> 5; {5: 1, 6: 1} -> 5 (ties to the lowest id, 50 % passes).
    assert ref_draft([3, 4], 1, static=ref_static_from_docs([[3, 4, 5, 3, 4, 6, 3, 4, 5]])) == [5]
    assert ref_draft([3, 4], 1, static=ref_static_from_docs([[3, 4, 6], [3, 4, 5]])) == [5]
    # ... but a single occurrence is not enough for the static cache alone.
    assert ref_draft([3, 4], 1, static=ref_static_from_docs([[3, 4, 6]])) == []
    # Dynamic thresholds are strict: two samples of (3, 1, 2) are needed.
    assert ref_draft([3, 1, 2], 1, dynamic=ref_cache_from_docs([[1, 2, 3] * 2])) == []
    assert ref_draft([3, 1, 2], 1, dynamic=ref_cache_from_docs([[1, 2, 3] * 3])) == [3]
    # Context: the 1-gram needs 66 %: {1: 1, 2: 1} fails.
    assert ref_draft([0, 5], 3, ref_cache_from_docs([[5, 1, 5, 2]])) == []
    # Periodic text continues its period.
    periodic = [1, 2, 3, 1, 2, 3, 1, 2]
    assert ref_draft(periodic, 4, ref_cache_from_docs([periodic])) == [3, 1, 2, 3]
    # One-token and empty inputs never draft.
    assert ref_draft([5], 3, ref_cache_from_docs([[5, 1, 5, 1]])) == []
    assert ref_draft([], 3, ref_cache_from_docs([[5, 1, 5, 1]])) == []
    # The tree: (7, 5) qualifies with best 1, and 2 passes 50 % too; (5,) does not qualify. At
    # depth 3, after (7, 5) again, the n = 4 key says 2 and the n = 2 key also offers 1.
    assert ref_draft_tree([9, 7, 5], 4, 3, ctx) == ([1, 7, 5, 2, 2, 1], [-1, 0, 1, 2, -1, 2])
    assert ref_draft_tree([9, 7, 5], 4, 2, ctx) == ([1, 7, 5, 2, 2], [-1, 0, 1, 2, -1])
    assert ref_draft_tree([9, 7, 5], 4, 1, ctx) == ([1, 7, 5, 2], [-1, 0, 1, 2])
    assert ref_draft_tree([9, 7, 5], 1, 3, ctx) == ([1, 2], [-1, -1])
    assert ref_draft_tree([9, 7, 5], 0, 3, ctx) == ([], [])


def test_reference_weighting_beats_counts() -> None:
    # Context: (4,) -> {1: 3, 2: 1}; static (0, 4) -> {2: 1}: scores 1:3, 2:100 -> 2 is best,
    # but its raw count (1 of 4) fails the 66 % test of n = 1, so nothing qualifies.
    ctx = ref_cache_from_docs([[4, 1, 4, 1, 4, 1, 4, 2]])
    static = ref_static_from_docs([[0, 4, 2]])
    assert ref_draft([0, 4], 1, ctx) == [1]
    assert ref_draft([0, 4], 1, ctx, static=static) == []
    # Huge static counts: Python ints, no overflow.
    big = RefCache((2,))
    big.data = {(0, 4): {1: 2**31 - 1, 2: 2**31 - 2}}
    assert ref_draft([0, 4], 1, ctx, static=big) == [1]


# ---------------------------------------------------------------------------------------------
# Native == reference on hand-worked and random inputs


def test_native_hand_worked(tmp_path) -> None:  # type: ignore[no-untyped-def]
    case = Case(n_vocab=10, context_docs=[[7, 5, 1, 7, 5, 2]], static_docs=[[7, 5, 2, 7, 5, 2]])
    c = build(case, str(tmp_path))
    assert _lookup.draft([9, 7, 5], 10, context=c.native["context"]).tolist() == [1, 7, 5, 2]
    assert _lookup.draft([9, 7, 5], 1, **c.native).tolist() == [2]
    toks, parents, _ = _lookup.draft_tree([9, 7, 5], 4, 3, context=c.native["context"])
    assert (toks.tolist(), parents.tolist()) == ([1, 7, 5, 2, 2, 1], [-1, 0, 1, 2, -1, 2])
    for prompt in ([9, 7, 5], [7, 5], [0, 5], [5, 2], [1]):
        for n in range(0, 6):
            check_draft_and_tree(c, prompt, n, 3)


@SETTINGS
@given(case=corpora(), n_draft=st.integers(0, 12), max_branches=st.integers(0, 5), data=st.data())
def test_draft_matches_reference(tmp_path_factory, case: Case, n_draft: int, max_branches: int, data) -> None:  # type: ignore[no-untyped-def]
    caches = build(case, str(tmp_path_factory.mktemp("draft")))
    # Every prefix of the prompt (so also the empty and one-token ones).
    for end in prefix_ends(len(case.prompt)):
        check_draft_and_tree(caches, case.prompt[:end], n_draft, max_branches)
    # A prompt unrelated to the caches.
    other = data.draw(st.lists(st.integers(0, case.n_vocab - 1), max_size=12))
    check_draft_and_tree(caches, other, n_draft, max_branches)


@settings(deadline=None, max_examples=60)
@given(case=corpora(min_vocab=3, max_vocab=6), n_draft=st.integers(1, 12))
def test_draft_tiny_vocab(tmp_path_factory, case: Case, n_draft: int) -> None:  # type: ignore[no-untyped-def]
    """Vocabularies of 3..6 tokens: ties and threshold boundaries everywhere."""
    caches = build(case, str(tmp_path_factory.mktemp("tiny")))
    for end in prefix_ends(len(case.prompt)):
        check_draft_and_tree(caches, case.prompt[:end], n_draft, 6)


def test_static_weight_does_not_overflow(tmp_path) -> None:  # type: ignore[no-untyped-def]
    """Static counts near 2**31 make count * 100 * static_count overflow 32 (and 32x32) bits."""
    n_vocab = 8
    up = tmp_path / "big.upstream"
    import struct

    with open(up, "wb") as f:
        # (0, 4) -> {1: 2**31 - 1, 2: 2**31 - 2, 3: 1}; (4, 1) -> {2: 2**31 - 1, 3: 2**31 - 1}
        for key, fol in (((0, 4), [(1, 2**31 - 1), (2, 2**31 - 2), (3, 1)]), ((4, 1), [(2, 2**31 - 1), (3, 2**31 - 1)])):
            f.write(struct.pack("=4ii", *key, -1, -1, len(fol)))
            for token, n in fol:
                f.write(struct.pack("=ii", token, n))
    loaded = _lookup.NgramCache.load_upstream(str(up), n_vocab)
    b = _lookup.StaticCacheBuilder(n_vocab)
    b.add_cache(loaded)
    b.write(str(tmp_path / "big.static"), 7)
    static = _lookup.StaticCache.open(str(tmp_path / "big.static"), n_vocab, 7)
    static.verify()
    ref_static = ref_from_native(static, orders=(2,))
    assert ref_static.data == {(0, 4): {1: 2**31 - 1, 2: 2**31 - 2, 3: 1}, (4, 1): {2: 2**31 - 1, 3: 2**31 - 1}}
    for ctx_docs in ([[4, 1, 4, 2, 4, 2]], [[4, 2, 4, 1, 4, 1, 4, 1]], [[4, 3, 4, 3, 4, 1]], [[0, 4, 2, 0, 4, 1, 1, 2]]):
        ctx = native_cache(n_vocab, ctx_docs)
        ref_ctx = ref_cache_from_docs(ctx_docs)
        for prompt in ([0, 4], [5, 4], [4, 1], [0, 4, 1]):
            for dyn in (None, ctx):
                got = _lookup.draft(prompt, 5, ctx, dyn, static).tolist()
                exp = ref_draft(prompt, 5, ref_ctx, ref_ctx if dyn is not None else None, ref_static)
                assert got == exp, (ctx_docs, prompt)
                t, p, _ = _lookup.draft_tree(prompt, 5, 4, ctx, dyn, static)
                et, ep = ref_draft_tree(prompt, 5, 4, ref_ctx, ref_ctx if dyn is not None else None, ref_static)
                assert (t.tolist(), p.tolist()) == (et, ep), (ctx_docs, prompt)
        # Static alone with sums above 2**31.
        assert _lookup.draft([0, 4], 3, repository=static).tolist() == ref_draft([0, 4], 3, static=ref_static)


def upstream_cache(path: str, n_vocab: int, entries: dict[tuple[int, ...], dict[int, int]]) -> "_lookup.NgramCache":
    """An NgramCache holding exactly `entries` (written in llama.cpp's format and loaded)."""
    import struct

    with open(path, "wb") as f:
        for key, fol in entries.items():
            f.write(struct.pack("=4ii", *(key + (-1,) * (4 - len(key))), len(fol)))
            for t, n in sorted(fol.items()):
                f.write(struct.pack("=ii", t, n))
    return _lookup.NgramCache.load_upstream(path, n_vocab)


def upstream_static(tmp: str, n_vocab: int, entries: dict[tuple[int, ...], dict[int, int]]) -> "_lookup.StaticCache":
    b = _lookup.StaticCacheBuilder(n_vocab)
    b.add_cache(upstream_cache(os.path.join(tmp, "static.bin"), n_vocab, entries))
    path = os.path.join(tmp, "static.lookup")
    b.write(path, 0)
    s = _lookup.StaticCache.open(path, n_vocab)
    s.verify()
    return s


def ref_of(entries: dict[tuple[int, ...], dict[int, int]], orders: tuple[int, ...] = (1, 2, 3, 4)) -> RefCache:
    r = RefCache(orders)
    r.data = {k: dict(v) for k, v in entries.items() if v}
    return r


GRID_PROMPT = [5, 6, 7, 8]  # key of size n: GRID_PROMPT[-n:]; static key (7, 8)


@pytest.mark.parametrize("which", ["context", "dynamic"])
@pytest.mark.parametrize("n", [1, 2, 3, 4])
def test_threshold_and_weight_grid(tmp_path, which: str, n: int) -> None:  # type: ignore[no-untyped-def]
    """Exactly one key of size n, followers {1: a, 2: b, 3: c}, optionally weighted by static
    followers of (7, 8): every threshold boundary and weight/tie case against the reference and
    against the rule written out directly."""
    key = tuple(GRID_PROMPT[-n:])
    thresholds = {"context": (LAX_MIN_SAMPLE[n], LAX_MIN_PERCENT[n]), "dynamic": (STRICT_MIN_SAMPLE[n], STRICT_MIN_PERCENT[n])}
    min_sample, min_percent = thresholds[which]
    statics: list[dict[int, int]] = [{}, {2: 1}, {1: 1, 2: 2}, {3: 5}, {9: 1}]
    static_caches: list[Optional[_lookup.StaticCache]] = [None]
    for i, weights in enumerate(statics[1:], 1):
        (tmp_path / f"s{i}").mkdir()
        static_caches.append(upstream_static(str(tmp_path / f"s{i}"), 10, {(7, 8): weights}))
    ref_statics = [None] + [ref_of({(7, 8): s}, (2,)) for s in statics[1:]]
    counts = [(a, b, c) for a in range(8) for b in range(8) for c in range(3) if a + b + c > 0]
    for i, (a, b, c) in enumerate(counts):
        fol = {t: k for t, k in ((1, a), (2, b), (3, c)) if k > 0}
        cache = upstream_cache(str(tmp_path / "grid.bin"), 10, {key: fol})
        ref = ref_of({key: fol})
        for static, ref_static, weights in zip(static_caches, ref_statics, statics):
            kw: NativeCaches = (
                {"context": cache, "repository": static}
                if which == "context"
                else {"workspace": cache, "repository": static}
            )
            rkw = {which: ref, "static": ref_static}
            got = _lookup.draft(GRID_PROMPT, 1, **kw).tolist()
            assert got == ref_draft(GRID_PROMPT, 1, **rkw), (which, n, fol, weights)
            # The rule, written out once more.
            total = sum(fol.values())
            scores = {t: k * (100 * weights[t] if t in weights else 1) for t, k in fol.items()}
            best = min(scores, key=lambda t: (-scores[t], t))
            expected = [best] if total >= min_sample and 100 * fol[best] >= min_percent * total else []
            if not expected and static is not None:
                s_total = sum(weights.values())
                s_best = min(weights, key=lambda t: (-weights[t], t))
                if s_total >= 2 and 100 * weights[s_best] >= 50 * s_total:
                    expected = [s_best]
            assert got == expected, (which, n, fol, weights)
            t, p, _ = _lookup.draft_tree(GRID_PROMPT, 1, 5, **kw)
            assert (t.tolist(), p.tolist()) == ref_draft_tree(GRID_PROMPT, 1, 5, **rkw), (which, n, fol, weights)


def test_static_alone_grid(tmp_path) -> None:  # type: ignore[no-untyped-def]
    for i, (a, b, c) in enumerate((a, b, c) for a in range(6) for b in range(6) for c in range(3) if a + b + c > 0):
        fol = {t: k for t, k in ((1, a), (2, b), (3, c)) if k > 0}
        (tmp_path / str(i)).mkdir()
        static = upstream_static(str(tmp_path / str(i)), 10, {(7, 8): fol})
        ref_static = ref_of({(7, 8): fol}, (2,))
        got = _lookup.draft(GRID_PROMPT, 1, repository=static).tolist()
        total = sum(fol.values())
        best = min(fol, key=lambda t: (-fol[t], t))
        assert got == ([best] if total >= 2 and 100 * fol[best] >= 50 * total else []), fol
        assert got == ref_draft(GRID_PROMPT, 1, static=ref_static)
        t, p, _ = _lookup.draft_tree(GRID_PROMPT, 1, 5, repository=static)
        assert (t.tolist(), p.tolist()) == ref_draft_tree(GRID_PROMPT, 1, 5, static=ref_static), fol


@pytest.mark.parametrize("reps,expected", [(3, []), (12, []), (99, []), (100, []), (101, [3])])
def test_static_weight_is_100(tmp_path, reps: int, expected: list[int]) -> None:  # type: ignore[no-untyped-def]
    """(4,) -> {3: reps, 2: 1} and static (0, 4) -> {2: 1}: token 2 scores 100, token 3 reps;
    ties go to token 2, whose raw count fails the 66 % test."""
    ctx_doc = [4, 3] * reps + [4, 2]
    ctx = _lookup.NgramCache(10)
    ctx.add(ctx_doc)
    static = upstream_static(str(tmp_path), 10, {(0, 4): {2: 1}})
    ref_static = ref_of({(0, 4): {2: 1}}, (2,))
    got = _lookup.draft([0, 4], 1, ctx, None, static).tolist()
    assert got == ref_draft([0, 4], 1, ref_cache_from_docs([ctx_doc]), None, ref_static) == expected
    assert _lookup.draft([0, 4], 1, ctx).tolist() == [3]


# ---------------------------------------------------------------------------------------------
# Real code


REAL_FILES = ["argparse.py", "typing.py", "dataclasses.py", "inspect.py", "enum.py", "functools.py", "textwrap.py", "json/encoder.py"]


@pytest.fixture(scope="module")
def real_corpus(tmp_path_factory):  # type: ignore[no-untyped-def]
    if not stdlib_available(*REAL_FILES):
        pytest.skip("the standard library sources are not installed")
    vocab = Vocab()
    docs = {name: vocab.encode_file(name) for name in REAL_FILES}
    n_vocab = len(vocab) + 10
    static_docs = [docs[n] for n in REAL_FILES[:4]]
    dynamic_docs = [docs[n] for n in REAL_FILES[4:6]]
    targets = [docs[n] for n in REAL_FILES[6:]]
    path = str(tmp_path_factory.mktemp("real") / "static.lookup")
    native = {
        "dynamic": native_cache(n_vocab, dynamic_docs),
        "static": native_static(n_vocab, static_docs, path, 12345),
    }
    ref = {"dynamic": ref_cache_from_docs(dynamic_docs), "static": ref_static_from_docs(static_docs)}
    return n_vocab, native, ref, targets


@pytest.mark.parametrize("use_dynamic,use_static", [(True, True), (False, True), (True, False), (False, False)])
def test_real_code_matches_reference(real_corpus, use_dynamic: bool, use_static: bool) -> None:  # type: ignore[no-untyped-def]
    n_vocab, native, ref, targets = real_corpus
    for target in targets:
        ctx = _lookup.NgramCache(n_vocab)
        ref_ctx = RefCache()
        done = 0
        for pos in range(2, len(target), 23):
            # The context cache grows with the text, as during a completion session.
            ctx.add(np.asarray(target[:pos], dtype=np.int32), first=done)
            ref_ctx.add(target[:pos], first=done)
            done = pos
            caches = Caches(
                native={
                    "context": ctx,
                    "workspace": native["dynamic"] if use_dynamic else None,
                    "repository": native["static"] if use_static else None,
                },
                ref={
                    "context": ref_ctx,
                    "dynamic": ref["dynamic"] if use_dynamic else None,
                    "static": ref["static"] if use_static else None,
                },
            )
            check_draft_and_tree(caches, target[:pos], 8 if pos % 2 else 12, 3)
        assert ref_from_native(ctx) == ref_ctx


def test_real_model_tokens(request, tmp_path) -> None:  # type: ignore[no-untyped-def]
    try:
        tok = request.getfixturevalue("tokenizer")
    except pytest.FixtureLookupError:
        pytest.skip("no `tokenizer` fixture in conftest.py")
    if not stdlib_available("textwrap.py", "argparse.py", "enum.py"):
        pytest.skip("the standard library sources are not installed")

    def toks(name: str) -> list[int]:
        with open(stdlib_path(name), "rb") as f:
            tokens: list[int] = np.asarray(tok.tokenize(f.read()), dtype=np.int32).tolist()
            return tokens

    n_vocab = int(tok.n_vocab)
    target, static_doc, dyn_doc = toks("textwrap.py"), toks("argparse.py"), toks("enum.py")
    static = native_static(n_vocab, [static_doc], str(tmp_path / "gemma.static"), 99)
    dyn = native_cache(n_vocab, [dyn_doc])
    ref_static, ref_dyn = ref_static_from_docs([static_doc]), ref_cache_from_docs([dyn_doc])
    ctx, ref_ctx = _lookup.NgramCache(n_vocab), RefCache()
    done = 0
    for pos in range(2, len(target), 17):
        ctx.add(np.asarray(target[:pos], dtype=np.int32), first=done)
        ref_ctx.add(target[:pos], first=done)
        done = pos
        caches = Caches(
            native={"context": ctx, "workspace": dyn, "repository": static},
            ref={"context": ref_ctx, "dynamic": ref_dyn, "static": ref_static},
        )
        check_draft_and_tree(caches, target[:pos], 8, 3)


# ---------------------------------------------------------------------------------------------
# Edge cases and errors


@pytest.fixture
def small(tmp_path):  # type: ignore[no-untyped-def]
    case = Case(
        n_vocab=10,
        context_docs=[[5, 1, 5, 1, 5, 1, 2, 3, 4]],
        dynamic_docs=[[5, 1, 5, 1, 5, 1, 5, 1]],
        static_docs=[[5, 1, 5, 1, 5, 1]],
    )
    return build(case, str(tmp_path))


def test_zero_draft_and_short_inputs(small: Caches) -> None:
    assert _lookup.draft([5, 1, 5], 0, **small.native).size == 0
    assert _lookup.draft([5, 1, 5], 3, **small.native).size > 0
    for short in ([], [5], np.zeros(0, dtype=np.int32), np.array([5], dtype=np.int32)):
        assert _lookup.draft(short, 5, **small.native).shape == (0,)
        t, p, _ = _lookup.draft_tree(short, 5, 3, **small.native)
        assert t.shape == (0,) and p.shape == (0,)
    for n_draft, max_branches in ((0, 3), (4, 0), (0, 0)):
        t, p, _ = _lookup.draft_tree([5, 1, 5], n_draft, max_branches, **small.native)
        assert t.shape == (0,) and p.shape == (0,)
    # No caches at all: nothing to draft from.
    assert _lookup.draft([5, 1, 5], 4).shape == (0,)
    t, p, _ = _lookup.draft_tree([5, 1, 5], 4, 3)
    assert t.shape == (0,) and p.shape == (0,)


def test_array_likes(small: Caches) -> None:
    expected = _lookup.draft(np.array([5, 1, 5], dtype=np.int32), 4, **small.native).tolist()
    assert _lookup.draft([5, 1, 5], 4, **small.native).tolist() == expected
    assert _lookup.draft(np.array([5, 1, 5], dtype=np.int64), 4, **small.native).tolist() == expected
    assert _lookup.draft((5, 1, 5), 4, **small.native).tolist() == expected
    # A non-contiguous view.
    assert _lookup.draft(np.array([5, 0, 1, 0, 5], dtype=np.int32)[::2], 4, **small.native).tolist() == expected


@pytest.mark.parametrize("which", ["context", "workspace", "repository"])
@pytest.mark.parametrize("bad", [[5, 10], [10, 5], [-1, 5, 1], [5, 1, 2**31 - 1]])
def test_out_of_vocab_tokens(small: Caches, which: Source, bad: list[int]) -> None:
    kwargs = only(small.native, which)
    with pytest.raises(ValueError):
        _lookup.draft(bad, 4, **kwargs)
    with pytest.raises(ValueError):
        _lookup.draft_tree(bad, 4, 3, **kwargs)
    with pytest.raises(ValueError):
        _lookup.draft(bad, 4, **small.native)


def test_unverified_static_cache_is_refused(small: Caches, tmp_path) -> None:  # type: ignore[no-untyped-def]
    b = _lookup.StaticCacheBuilder(10)
    b.add([5, 1, 5, 1, 5, 1])
    path = str(tmp_path / "unverified.lookup")
    b.write(path, 0)
    s = _lookup.StaticCache.open(path)
    assert not s.verified
    with pytest.raises(ValueError):
        _lookup.draft([5, 1], 3, repository=s)
    with pytest.raises(ValueError):
        _lookup.draft([5, 1], 3, context=small.native["context"], repository=s)
    with pytest.raises(ValueError):
        _lookup.draft_tree([5, 1], 3, 2, repository=s)
    s.verify()
    assert s.verified
    assert _lookup.draft([5, 1], 3, repository=s).tolist() == ref_draft(
        [5, 1], 3, static=ref_static_from_docs([[5, 1, 5, 1, 5, 1]])
    )
    s.close()


def test_negative_sizes_are_refused(small: Caches) -> None:
    with pytest.raises(ValueError):
        _lookup.draft([5, 1, 5], -1, **small.native)
    with pytest.raises(ValueError):
        _lookup.draft_tree([5, 1, 5], -1, 3, **small.native)
    with pytest.raises(ValueError):
        _lookup.draft_tree([5, 1, 5], 3, -1, **small.native)


@settings(max_examples=40, deadline=None)
@given(seed=st.integers(0, 2**32 - 1), n_draft=st.integers(1, 8))
def test_draft_with_many_followers_matches_reference(tmp_path_factory, seed: int, n_draft: int) -> None:  # type: ignore[no-untyped-def]
    """Keys with more than 32 followers are stored as hashed blocks, visited in hash order: the
    drafter must still score them exactly and break ties towards the lowest token id."""
    rng = np.random.default_rng(seed)
    n_vocab = 300
    docs = []
    for _ in range(4):
        doc = rng.integers(0, n_vocab, size=int(rng.integers(200, 1200)))
        # Hot tokens every other position, so their 1-gram keys gather many followers, and a
        # repeated phrase, so that some keys qualify.
        doc[::2] = rng.integers(0, 4, size=len(doc[::2]))
        doc[:12] = [5, 6, 7, 8, 9, 10, 5, 6, 7, 8, 9, 10]
        docs.append([int(t) for t in doc])
    case = Case(n_vocab=n_vocab, prompt=docs[0][:300], context_docs=docs[:1], dynamic_docs=docs[1:3],
                static_docs=docs[3:])
    caches = build(case, str(tmp_path_factory.mktemp("many")))
    for end in prefix_ends(len(case.prompt), 20):
        check_draft_and_tree(caches, case.prompt[:end], n_draft, 3)


def test_evidence_names_its_source(tmp_path) -> None:  # type: ignore[no-untyped-def]
    """Each drafted token's evidence names the cache that decided it, as a DraftSource."""
    workspace = native_cache(10, [[1, 2, 3] * 4])
    repository = native_static(10, [[5, 6, 7, 5, 6, 7]], str(tmp_path / "static.lookup"), 0)
    context = native_cache(10, [[8, 9, 4, 8, 9, 4]])
    sources = {
        "context": ([8, 9], context, None, None),
        "workspace": ([1, 2], None, workspace, None),
        "repository": ([5, 6], None, None, repository),
    }
    for name, (prompt, ctx, ws, repo) in sources.items():
        _, evidence = _lookup.draft_with_evidence(prompt, 1, ctx, ws, repo)
        assert _lookup.DraftSource(evidence[0, 0]) is _lookup.DraftSource[name]
    assert [s.name for s in _lookup.DraftSource] == ["context", "workspace", "repository"]
