"""The mutable NgramCache (context / dynamic cache) against the pure-Python reference."""

from __future__ import annotations


import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from lookahead_lsp import _lookup
from support.caches import vocab_and_docs
from support.reference_lookup import (
    RefCache,
    Vocab,
    padded,
    ref_cache_from_docs,
    ref_from_native,
    stdlib_available,
)

SETTINGS = settings(deadline=None, max_examples=100, print_blob=True)


def build(n_vocab: int, docs: list[list[int]]) -> "_lookup.NgramCache":
    c = _lookup.NgramCache(n_vocab)
    for d in docs:
        c.add(np.asarray(d, dtype=np.int32))
    return c


def arrays_equal(a: tuple[np.ndarray, ...], b: tuple[np.ndarray, ...]) -> bool:
    return len(a) == len(b) and all(x.shape == y.shape and np.array_equal(x, y) for x, y in zip(a, b))


def check_arrays_well_formed(cache: "_lookup.NgramCache") -> None:
    keys, offsets, followers = cache.to_arrays()
    assert keys.dtype == np.int32 and keys.ndim == 2 and keys.shape[1] == 4
    assert offsets.dtype == np.int64 and offsets.shape == (keys.shape[0] + 1,)
    assert followers.dtype == np.int32 and followers.ndim == 2 and followers.shape[1] == 2
    assert offsets[0] == 0 and offsets[-1] == followers.shape[0]
    assert np.all(np.diff(offsets) > 0), "every key has at least one follower"
    rows = [tuple(int(t) for t in row) for row in keys]
    assert rows == sorted(rows) and len(set(rows)) == len(rows)
    for row in rows:
        n = sum(t != -1 for t in row)
        assert 1 <= n <= 4 and row == padded(row[:n]), row
        assert all(0 <= t < cache.n_vocab for t in row[:n])
    for i in range(len(rows)):
        f = followers[offsets[i] : offsets[i + 1]]
        assert np.all(np.diff(f[:, 0]) > 0), "followers sorted by token, distinct"
        assert np.all(f[:, 1] > 0)
        assert np.all((f[:, 0] >= 0) & (f[:, 0] < cache.n_vocab))
    assert cache.n_keys == len(rows)
    assert cache.n_followers == followers.shape[0]
    assert cache.total_count == int(followers[:, 1].astype(np.int64).sum())


def check_equals_ref(cache: "_lookup.NgramCache", ref: RefCache) -> None:
    check_arrays_well_formed(cache)
    assert ref_from_native(cache) == ref
    assert cache.n_keys == ref.n_keys
    assert cache.n_followers == ref.n_followers
    assert cache.total_count == ref.total_count


# ---------------------------------------------------------------------------------------------


def test_empty_cache() -> None:
    c = _lookup.NgramCache(100)
    assert c.n_vocab == 100
    assert (c.n_keys, c.n_followers, c.total_count) == (0, 0, 0)
    assert isinstance(c.memory_bytes, int) and c.memory_bytes >= 0
    keys, offsets, followers = c.to_arrays()
    assert keys.shape == (0, 4) and offsets.tolist() == [0] and followers.shape == (0, 2)
    assert c == _lookup.NgramCache(100)
    c.add([])
    c.add([3])  # no follower has a key
    assert c.n_keys == 0
    assert c.remove([]) == 0


def test_small_example() -> None:
    c = _lookup.NgramCache(10)
    c.add([1, 2, 3, 1, 2, 4])
    assert c.followers([1, 2]).tolist() == [[3, 1], [4, 1]]
    assert c.followers([2]).tolist() == [[3, 1], [4, 1]]
    assert c.followers([3, 1, 2]).tolist() == [[4, 1]]
    assert c.followers([1, 2, 3, 1]).tolist() == [[2, 1]]
    assert c.followers([1]).tolist() == [[2, 2]]
    check_equals_ref(c, ref_cache_from_docs([[1, 2, 3, 1, 2, 4]]))
    # 5 followers with keys of 1 token, 4 of 2, 3 of 3, 2 of 4.
    assert c.total_count == 5 + 4 + 3 + 2
    assert c.memory_bytes > 0


def test_followers_of_absent_keys() -> None:
    c = build(10, [[1, 2, 3, 4, 5, 6]])
    for key in ([0], [9], [2, 1], [1, 2, 4], [1, 2, 3, 5], [6], [5, 6], [3, 4, 5, 6]):
        f = c.followers(key)
        assert isinstance(f, np.ndarray) and f.dtype == np.int32 and f.shape == (0, 2), key
    f = _lookup.NgramCache(10).followers([1, 2])
    assert f.shape == (0, 2)


def test_followers_is_a_copy() -> None:
    c = build(10, [[1, 2, 1, 2, 1, 3]])
    f = c.followers([1])
    assert f.tolist() == [[2, 2], [3, 1]]
    if f.flags.writeable:
        f[0, 1] = 99
    assert c.followers([1]).tolist() == [[2, 2], [3, 1]]
    c.add([1, 3, 1, 3, 1, 3])
    assert f.tolist()[1] == [3, 1] and c.followers([1]).tolist() == [[2, 2], [3, 4]]


@pytest.mark.parametrize("bad", [[1, 10], [-1, 2], [10], [1, 2, 3, 2**31 - 1]])
def test_add_out_of_vocab_raises_and_changes_nothing(bad: list[int]) -> None:
    c = build(10, [[1, 2, 3, 4, 1, 2, 3]])
    before = c.to_arrays()
    with pytest.raises(ValueError):
        c.add(bad)
    assert arrays_equal(c.to_arrays(), before)
    assert c == build(10, [[1, 2, 3, 4, 1, 2, 3]])


@pytest.mark.parametrize("bad", [[1, 10], [-1, 2], [10], [1, 2, 3, 2**31 - 1]])
def test_remove_out_of_vocab_raises_and_changes_nothing(bad: list[int]) -> None:
    c = build(10, [[1, 2, 3, 4, 1, 2, 3]])
    before = c.to_arrays()
    with pytest.raises(ValueError):
        c.remove(bad)
    assert arrays_equal(c.to_arrays(), before)


def test_eq() -> None:
    a = build(10, [[1, 2, 3]])
    assert a == build(10, [[1, 2, 3]])
    assert not (a == build(10, [[1, 2, 4]]))
    assert a != build(10, [[1, 2, 3, 1]])
    assert a != build(10, [[1, 2, 3], [1, 2, 3]])
    assert not (a == "not a cache")
    assert a != _lookup.NgramCache(10)


def test_clear() -> None:
    c = build(10, [[1, 2, 3, 1, 2, 3]])
    c.clear()
    assert (c.n_keys, c.n_followers, c.total_count) == (0, 0, 0)
    assert c == _lookup.NgramCache(10)
    c.add([1, 2, 3])
    assert c == build(10, [[1, 2, 3]])


@SETTINGS
@given(vd=vocab_and_docs(max_docs=8, max_pieces=20), data=st.data())
def test_remove_some_equals_fresh_build(vd, data) -> None:  # type: ignore[no-untyped-def]
    n_vocab, docs = vd
    cache = build(n_vocab, docs)
    check_equals_ref(cache, ref_cache_from_docs(docs))
    removed = data.draw(st.lists(st.sampled_from(range(len(docs))), unique=True) if docs else st.just([]))
    for i in removed:
        assert cache.remove(np.asarray(docs[i], dtype=np.int32)) == 0
    remaining = [d for i, d in enumerate(docs) if i not in removed]
    fresh = build(n_vocab, remaining)
    assert cache == fresh
    assert arrays_equal(cache.to_arrays(), fresh.to_arrays())
    check_equals_ref(cache, ref_cache_from_docs(remaining))
    # Removing everything leaves an empty cache.
    for i, d in enumerate(docs):
        if i not in removed:
            assert cache.remove(d) == 0
    assert cache == _lookup.NgramCache(n_vocab) and cache.n_keys == 0 and cache.total_count == 0


@SETTINGS
@given(vd=vocab_and_docs(max_docs=1, max_pieces=20), data=st.data())
def test_incremental_add_equals_one_add(vd, data) -> None:  # type: ignore[no-untyped-def]
    n_vocab, docs = vd
    doc = docs[0] if docs else []
    cuts = sorted(data.draw(st.lists(st.integers(0, len(doc)), max_size=6)))
    inc = _lookup.NgramCache(n_vocab)
    ref = RefCache()
    done = 0
    for cut in cuts + [len(doc)]:
        inc.add(np.asarray(doc[:cut], dtype=np.int32), first=done)
        ref.add(doc[:cut], first=done)
        done = cut
    whole = build(n_vocab, [doc])
    assert inc == whole
    assert arrays_equal(inc.to_arrays(), whole.to_arrays())
    check_equals_ref(inc, ref)
    # And removing increment by increment, in another order, undoes it.
    bounds = [0] + cuts + [len(doc)]
    spans = list(zip(bounds, bounds[1:]))
    for lo, hi in data.draw(st.permutations(spans)):
        assert inc.remove(doc[:hi], first=lo) == 0
    assert inc == _lookup.NgramCache(n_vocab)


@SETTINGS
@given(vd=vocab_and_docs(max_docs=8, max_pieces=20), split=st.integers(0, 8))
def test_merge(vd, split: int) -> None:  # type: ignore[no-untyped-def]
    n_vocab, docs = vd
    a, b = build(n_vocab, docs[:split]), build(n_vocab, docs[split:])
    b_before = b.to_arrays()
    a.merge(b)
    assert a == build(n_vocab, docs)
    assert arrays_equal(b.to_arrays(), b_before), "merge must not change its argument"
    check_equals_ref(a, ref_cache_from_docs(docs))
    # Merging an empty cache changes nothing; merging into an empty one copies.
    a.merge(_lookup.NgramCache(n_vocab))
    assert a == build(n_vocab, docs)
    e = _lookup.NgramCache(n_vocab)
    e.merge(a)
    assert e == a


def test_merge_with_itself_doubles() -> None:
    doc = [1, 2, 3, 1, 2, 4, 1, 2, 3]
    a = build(10, [doc])
    a.merge(a)
    assert a == build(10, [doc, doc])


def test_remove_never_added() -> None:
    doc = [1, 2, 3, 1, 2, 4]
    c = build(10, [doc])
    before = c.to_arrays()
    # Tokens 7, 8, 9 never occur: every occurrence is missing (1+2+3+4+4 for 6 tokens).
    assert c.remove([7, 8, 9, 7, 8, 9]) == 1 + 2 + 3 + 4 + 4
    assert arrays_equal(c.to_arrays(), before)
    check_equals_ref(c, ref_cache_from_docs([doc]))
    # Partly present: the present occurrences are removed, the rest counted.
    ref = ref_cache_from_docs([doc])
    missing = ref.remove([1, 2, 3, 9])
    assert missing > 0
    assert c.remove([1, 2, 3, 9]) == missing
    check_equals_ref(c, ref)
    # Removing the same thing twice: the second time everything is missing.
    assert c.remove([1, 2, 4]) == ref.remove([1, 2, 4])
    assert c.remove([1, 2, 4]) == ref.remove([1, 2, 4]) > 0
    check_equals_ref(c, ref)
    c.add(doc)
    ref.add(doc)
    check_equals_ref(c, ref)


@st.composite
def operations(draw: st.DrawFn):  # type: ignore[no-untyped-def]
    n_vocab, docs = draw(vocab_and_docs(max_docs=6, max_pieces=20))
    tok = st.integers(0, n_vocab - 1)
    seq = st.one_of(st.sampled_from(docs), st.lists(tok, max_size=12)) if docs else st.lists(tok, max_size=12)
    op = st.one_of(
        st.tuples(st.just("add"), seq, st.integers(0, 14)),
        st.tuples(st.just("remove"), seq, st.integers(0, 14)),
        st.tuples(st.just("merge"), st.lists(seq, max_size=3), st.just(0)),
        st.tuples(st.just("clear"), st.just([]), st.just(0)),
    )
    ops = draw(st.lists(op, max_size=20))
    return n_vocab, ops


@SETTINGS
@given(case=operations())
def test_random_operations_match_reference(case) -> None:  # type: ignore[no-untyped-def]
    n_vocab, ops = case
    cache = _lookup.NgramCache(n_vocab)
    ref = RefCache()
    for kind, arg, first in ops:
        if kind == "add":
            cache.add(np.asarray(arg, dtype=np.int32), first=first)
            ref.add(arg, first=first)
        elif kind == "remove":
            assert cache.remove(np.asarray(arg, dtype=np.int32), first=first) == ref.remove(arg, first=first)
        elif kind == "merge":
            cache.merge(build(n_vocab, arg))
            ref.merge(ref_cache_from_docs(arg))
        else:
            cache.clear()
            ref.clear()
        check_equals_ref(cache, ref)
        for key in list(ref.data)[:10]:
            assert cache.followers(key).tolist() == [list(kv) for kv in sorted(ref.data[key].items())]


def test_large_file_added_and_removed() -> None:
    if not stdlib_available("argparse.py", "typing.py"):
        pytest.skip("Python 3.11 stdlib sources not found")
    vocab = Vocab()
    base = vocab.encode_file("typing.py")[:5000]
    big = vocab.encode_file("argparse.py")
    assert len(big) >= 10_000
    big = big[:10_000]
    n_vocab = len(vocab)
    cache = build(n_vocab, [base])
    before = cache.to_arrays()
    cache.add(np.asarray(big, dtype=np.int32))
    check_equals_ref(cache, ref_cache_from_docs([base, big]))
    assert cache.remove(np.asarray(big, dtype=np.int32)) == 0
    assert arrays_equal(cache.to_arrays(), before)
    assert cache == build(n_vocab, [base])
    # The file edited in the middle (the workspace case): remove the old text, add the new.
    edited = big[:4000] + big[4100:7000] + big[:50] + big[7000:]
    cache.add(big)
    assert cache.remove(big) == 0
    cache.add(edited)
    assert cache == build(n_vocab, [base, edited])
    assert cache.remove(edited) == 0
    assert arrays_equal(cache.to_arrays(), before)


@settings(max_examples=40, deadline=None)
@given(
    vocab=st.sampled_from([60, 200, 1000]),
    seed=st.integers(0, 2**32 - 1),
)
def test_keys_with_many_followers_round_trip(vocab: int, seed: int) -> None:
    """Keys with more than 32 followers change layout (sorted array -> hashed block) and back
    as files come and go; the cache must still equal a fresh build and the reference."""
    rng = np.random.default_rng(seed)
    # A few hot tokens followed by anything: their 1-gram keys collect many followers.
    docs = []
    for _ in range(6):
        doc = rng.integers(0, vocab, size=int(rng.integers(100, 1500)))
        doc[::2] = rng.integers(0, 3, size=len(doc[::2]))
        docs.append(doc.astype(np.int32))
    cache = _lookup.NgramCache(vocab)
    for d in docs:
        cache.add(d)
    removed = [int(i) for i in rng.permutation(len(docs))[: len(docs) // 2]]
    for i in removed:
        assert cache.remove(docs[i]) == 0
    fresh = _lookup.NgramCache(vocab)
    ref = RefCache()
    for i, d in enumerate(docs):
        if i not in removed:
            fresh.add(d)
            ref.add(d.tolist())
    assert cache == fresh
    check_equals_ref(cache, ref)
    for key in [(0,), (1,), (2,)]:
        assert cache.followers(key).tolist() == sorted([t, c] for t, c in ref.data.get(key, {}).items())
