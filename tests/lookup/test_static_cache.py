"""StaticCacheBuilder / StaticCache (the verified 2-gram cache) and the upstream (llama.cpp)
lookup-cache file format, against the pure-Python reference; corrupt and crafted files."""

from __future__ import annotations

import os
import struct
import subprocess
import sys
import textwrap
from collections.abc import Callable

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from lookahead_lsp import _lookup
from support.caches import native_cache, vocab_and_docs
from support.reference_lookup import (
    STDLIB_DIR,
    RefCache,
    Vocab,
    ref_cache_from_docs,
    ref_draft,
    ref_draft_tree,
    ref_from_native,
    ref_static_from_docs,
)

CacheError = _lookup.CacheError
SETTINGS = settings(deadline=None, max_examples=60, print_blob=True)

HEADER_SIZE = 128
# magic[8], u32 format_version, u32 byte_order_mark, u32 ngram_order, u32 n_vocab,
# u64 fingerprint, n_keys, n_followers, n_buckets, total_count, buckets_offset, records_offset,
# followers_offset, file_size, checksum, reserved[24]
HEADER_STRUCT = struct.Struct("=8sIIII10Q24s")
HEADER_FIELDS = (
    "magic format_version byte_order_mark ngram_order n_vocab fingerprint n_keys n_followers "
    "n_buckets total_count buckets_offset records_offset followers_offset file_size checksum "
    "reserved"
).split()
assert HEADER_STRUCT.size == HEADER_SIZE
OFFSET = {
    name: off
    for name, off in zip(HEADER_FIELDS, [0, 8, 12, 16, 20, 24, 32, 40, 48, 56, 64, 72, 80, 88, 96, 104])
}


def raw_header(data: bytes) -> dict[str, int]:
    """The header's numeric fields by name (not the magic nor the reserved bytes)."""
    return {k: v for k, v in zip(HEADER_FIELDS, HEADER_STRUCT.unpack_from(data, 0)) if isinstance(v, int)}


# ---------------------------------------------------------------------------------------------
# Helpers


def write_static(path: str, n_vocab: int, docs: list[list[int]], fingerprint: int = 0) -> dict[str, int]:
    b = _lookup.StaticCacheBuilder(n_vocab)
    for d in docs:
        b.add(np.asarray(d, dtype=np.int32))
    assert b.n_tokens == sum(len(d) for d in docs)
    assert isinstance(b.memory_bytes, int) and b.memory_bytes >= 0
    return b.write(path, fingerprint)


def open_verified(path: str, n_vocab: int | None = None, fingerprint: int | None = None) -> "_lookup.StaticCache":
    s = _lookup.StaticCache.open(path, n_vocab, fingerprint)
    s.verify()
    assert s.verified
    return s


def check_error_message(err: BaseException, path: str) -> None:
    msg = str(err)
    assert "\n" not in msg.strip(), f"message is not one line: {msg!r}"
    assert msg.strip(), "empty message"
    assert path in msg, f"message does not name the path: {msg!r}"


def check_static_equals(s: "_lookup.StaticCache", ref: RefCache, n_vocab: int) -> None:
    """Every key's followers equal, absent keys empty, to_arrays() exact and well formed."""
    keys, offsets, followers = s.to_arrays()
    assert keys.dtype == np.int32 and keys.shape == (ref.n_keys, 4)
    assert offsets.dtype == np.int64 and offsets.shape == (ref.n_keys + 1,)
    assert followers.dtype == np.int32 and followers.shape == (ref.n_followers, 2)
    if ref.n_keys:
        assert np.all(keys[:, 2:] == -1)
    assert ref_from_native(s, orders=(2,)) == ref
    rows = [tuple(r) for r in keys.tolist()]
    assert rows == sorted(rows)
    for (t0, t1), fol in ref.data.items():
        got = s.followers(t0, t1)
        assert got.dtype == np.int32 and got.shape == (len(fol), 2)
        assert got.tolist() == [list(kv) for kv in sorted(fol.items())], (t0, t1)
    h = s.header
    assert h["n_keys"] == ref.n_keys
    assert h["n_followers"] == ref.n_followers
    assert h["total_count"] == ref.total_count
    assert h["n_vocab"] == n_vocab
    # Absent keys: a spread of pairs, including ones next to present keys.
    rng = np.random.default_rng(0)
    probes = {(int(a), int(b)) for a, b in rng.integers(0, n_vocab, size=(300, 2))}
    probes |= {(t0, (t1 + 1) % n_vocab) for t0, t1 in list(ref.data)[:200]}
    probes |= {(0, 0), (n_vocab - 1, n_vocab - 1)}
    for t0, t1 in probes:
        if (t0, t1) not in ref.data:
            got = s.followers(t0, t1)
            assert got.shape == (0, 2), (t0, t1)


def stdlib_docs(target_tokens: int) -> tuple[Vocab, list[list[int]]]:
    names = sorted(n for n in os.listdir(STDLIB_DIR) if n.endswith(".py"))
    vocab = Vocab()
    docs: list[list[int]] = []
    total = 0
    for name in names:
        if total >= target_tokens:
            break
        try:
            doc = vocab.encode_file(name)
        except (UnicodeDecodeError, OSError):
            continue
        docs.append(doc)
        total += len(doc)
    return vocab, docs


# ---------------------------------------------------------------------------------------------
# Build -> write -> open -> verify -> followers


@pytest.mark.parametrize(
    "docs",
    [[], [[]], [[5]], [[5, 6]], [[5, 6, 7]], [[5], [6]], [[5, 6], [6, 7]], [[5, 6, 7], [5, 6, 8], [5, 6, 7]]],
    ids=["none", "empty-doc", "1-token", "2-tokens", "3-tokens", "two-1-token", "two-2-token", "repeats"],
)
def test_tiny_corpora(tmp_path, docs: list[list[int]]) -> None:  # type: ignore[no-untyped-def]
    path = str(tmp_path / "tiny.lookup")
    written = write_static(path, 10, docs, fingerprint=42)
    s = open_verified(path, 10, 42)
    ref = ref_static_from_docs(docs)
    check_static_equals(s, ref, 10)
    assert written["n_keys"] == ref.n_keys and written["total_count"] == ref.total_count
    # No 2-gram spans two documents.
    if docs == [[5], [6]]:
        assert s.followers(5, 6).shape == (0, 2) and ref.n_keys == 0
    s.close()


@SETTINGS
@given(vd=vocab_and_docs(), fingerprint=st.integers(0, 2**64 - 1))
def test_random_corpora(tmp_path_factory, vd, fingerprint: int) -> None:  # type: ignore[no-untyped-def]
    n_vocab, docs = vd
    path = str(tmp_path_factory.mktemp("rand") / "static.lookup")
    write_static(path, n_vocab, docs, fingerprint)
    s = open_verified(path, n_vocab, fingerprint)
    check_static_equals(s, ref_static_from_docs(docs), n_vocab)
    assert s.header["fingerprint"] == fingerprint
    s.close()


@pytest.fixture(scope="module")
def large(tmp_path_factory):  # type: ignore[no-untyped-def]
    if not os.path.isdir(STDLIB_DIR):
        pytest.skip("Python 3.11 stdlib sources not found")
    vocab, docs = stdlib_docs(200_000)
    n_vocab = len(vocab) + 1
    path = str(tmp_path_factory.mktemp("large") / "large.lookup")
    written = write_static(path, n_vocab, docs, fingerprint=0xDEADBEEF)
    return path, n_vocab, docs, written, ref_static_from_docs(docs)


def test_large_corpus(large) -> None:  # type: ignore[no-untyped-def]
    path, n_vocab, docs, written, ref = large
    assert sum(map(len, docs)) >= 200_000
    s = open_verified(path, n_vocab, 0xDEADBEEF)
    check_static_equals(s, ref, n_vocab)
    s.close()


def test_header_fields(large) -> None:  # type: ignore[no-untyped-def]
    path, n_vocab, docs, written, ref = large
    s = _lookup.StaticCache.open(path)
    assert not s.verified
    h = s.header
    assert s.path == path
    expected = {
        "format_version": _lookup.STATIC_FORMAT_VERSION,
        "ngram_order": _lookup.STATIC_NGRAM,
        "n_vocab": n_vocab,
        "fingerprint": 0xDEADBEEF,
        "n_keys": ref.n_keys,
        "n_followers": ref.n_followers,
        "total_count": ref.total_count,
        "file_size": os.path.getsize(path),
    }
    for k, v in expected.items():
        assert h[k] == v, k
    for k in ("n_buckets", "checksum"):
        assert isinstance(h[k], int) and h[k] >= 0
    assert h["n_buckets"] >= 1
    for k, v in h.items():
        if k in written:
            assert written[k] == v, k
    # The raw 128-byte header agrees with the dict: this pins the offsets patched below.
    with open(path, "rb") as f:
        raw = raw_header(f.read(HEADER_SIZE))
    for k in ("format_version", "ngram_order", "n_vocab", "fingerprint", "n_keys", "n_followers",
              "n_buckets", "total_count", "file_size", "checksum"):
        assert raw[k] == h[k], k
    assert HEADER_SIZE <= raw["buckets_offset"] <= raw["records_offset"] <= raw["followers_offset"] <= raw["file_size"]
    assert _lookup.NGRAM_MIN == 1 and _lookup.NGRAM_MAX == 4 and _lookup.STATIC_NGRAM == 2
    s.verify()
    assert s.verified
    s.close()


def test_drafting_with_large_static_equals_reference(large) -> None:  # type: ignore[no-untyped-def]
    path, n_vocab, docs, written, ref = large
    s = open_verified(path, n_vocab)
    target = docs[-1] + docs[0][:3000]
    ctx, ref_ctx = _lookup.NgramCache(n_vocab), RefCache()
    done = 0
    for pos in range(0, len(target), 29):
        ctx.add(np.asarray(target[:pos], dtype=np.int32), first=done)
        ref_ctx.add(target[:pos], first=done)
        done = pos
        prompt = target[:pos]
        assert _lookup.draft(prompt, 8, repository=s).tolist() == ref_draft(prompt, 8, static=ref)
        assert _lookup.draft(prompt, 8, ctx, ctx, s).tolist() == ref_draft(prompt, 8, ref_ctx, ref_ctx, ref)
        t, p, _ = _lookup.draft_tree(prompt, 6, 3, ctx, None, s)
        assert (t.tolist(), p.tolist()) == ref_draft_tree(prompt, 6, 3, ref_ctx, None, ref)
    s.close()


@SETTINGS
@given(vd=vocab_and_docs(), data=st.data())
def test_drafting_with_static_equals_reference(tmp_path_factory, vd, data) -> None:  # type: ignore[no-untyped-def]
    n_vocab, docs = vd
    path = str(tmp_path_factory.mktemp("draft") / "static.lookup")
    write_static(path, n_vocab, docs)
    s = open_verified(path, n_vocab)
    ref = ref_static_from_docs(docs)
    ctx_docs = data.draw(st.lists(st.lists(st.integers(0, n_vocab - 1), max_size=30), max_size=2))
    ctx, ref_ctx = _lookup.NgramCache(n_vocab), ref_cache_from_docs(ctx_docs)
    for d in ctx_docs:
        ctx.add(d)
    for doc in docs + ctx_docs:
        for end in range(0, len(doc) + 1, 3):
            prompt = doc[:end]
            for n_draft in (1, 5):
                assert _lookup.draft(prompt, n_draft, repository=s).tolist() == ref_draft(prompt, n_draft, static=ref)
                assert _lookup.draft(prompt, n_draft, ctx, None, s).tolist() == ref_draft(prompt, n_draft, ref_ctx, None, ref)
                t, p, _ = _lookup.draft_tree(prompt, n_draft, 3, ctx, ctx, s)
                assert (t.tolist(), p.tolist()) == ref_draft_tree(prompt, n_draft, 3, ref_ctx, ref_ctx, ref)
    s.close()


def test_followers_view_is_read_only(tmp_path) -> None:  # type: ignore[no-untyped-def]
    path = str(tmp_path / "ro.lookup")
    write_static(path, 10, [[1, 2, 3, 1, 2, 4]])
    s = open_verified(path)
    f = s.followers(1, 2)
    assert f.tolist() == [[3, 1], [4, 1]]
    assert not f.flags.writeable
    with pytest.raises(ValueError):
        f[0, 1] = 5
    s.close()


def test_close_then_use_does_not_crash(tmp_path) -> None:  # type: ignore[no-untyped-def]
    """A view taken before close() and calls after close() must not crash the process."""
    path = str(tmp_path / "closed.lookup")
    write_static(path, 10, [[1, 2, 3, 1, 2, 4]])
    code = textwrap.dedent(
        f"""
        from lookahead_lsp import _lookup
        s = _lookup.StaticCache.open({path!r}); s.verify()
        view = s.followers(1, 2)
        s.close()
        try:
            print(view.tolist())
        except Exception as e:
            print("view:", type(e).__name__)
        for call in (lambda: s.followers(1, 2), lambda: s.to_arrays(), lambda: _lookup.draft([1, 2], 2, repository=s), s.verify):
            try:
                call()
            except Exception as e:
                print("after close:", type(e).__name__)
        s.close()
        print("ok")
        """
    )
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert r.returncode == 0 and r.stdout.strip().endswith("ok"), (r.returncode, r.stdout, r.stderr)


def test_builder_write_is_atomic(tmp_path) -> None:  # type: ignore[no-untyped-def]
    def builder(docs: list[list[int]]) -> "_lookup.StaticCacheBuilder":
        b = _lookup.StaticCacheBuilder(10)
        for d in docs:
            b.add(d)
        return b

    p1, p2 = str(tmp_path / "a.lookup"), str(tmp_path / "b.lookup")
    builder([[1, 2, 3]]).write(p1, 1)
    builder([[1, 2, 3], [1, 2, 4]]).write(p2, 1)
    check_static_equals(open_verified(p1), ref_static_from_docs([[1, 2, 3]]), 10)
    check_static_equals(open_verified(p2), ref_static_from_docs([[1, 2, 3], [1, 2, 4]]), 10)
    # Overwriting a file that is open (mapped) leaves the open cache intact.
    s = open_verified(p1)
    builder([[1, 2, 3], [1, 2, 4]]).write(p1, 1)
    check_static_equals(s, ref_static_from_docs([[1, 2, 3]]), 10)
    check_static_equals(open_verified(p1), ref_static_from_docs([[1, 2, 3], [1, 2, 4]]), 10)
    assert sorted(os.listdir(tmp_path)) == ["a.lookup", "b.lookup"], "no temp files left behind"


def test_builder_out_of_vocab() -> None:
    b = _lookup.StaticCacheBuilder(10)
    for bad in ([1, 10], [-1, 2, 3], [10]):
        with pytest.raises(ValueError):
            b.add(bad)


# ---------------------------------------------------------------------------------------------
# The upstream format


def parse_upstream(data: bytes) -> RefCache:
    """The llama.cpp lookup-cache format, read independently of the native code."""
    ref = RefCache()
    pos = 0
    while pos < len(data):
        key = struct.unpack_from("=4i", data, pos)
        (n,) = struct.unpack_from("=i", data, pos + 16)
        pos += 20
        k = tuple(t for t in key if t != -1)
        assert key == k + (-1,) * (4 - len(k))
        assert k not in ref.data, "duplicate key"
        fol = {}
        for _ in range(n):
            t, c = struct.unpack_from("=ii", data, pos)
            pos += 8
            fol[t] = c
        ref.data[k] = fol
    assert pos == len(data)
    return ref


def upstream_bytes(entries: list[tuple[tuple[int, ...], list[tuple[int, int]]]]) -> bytes:
    out = b""
    for key, fol in entries:
        out += struct.pack("=4i", *(tuple(key) + (-1,) * (4 - len(key))))
        out += struct.pack("=i", len(fol))
        for t, c in fol:
            out += struct.pack("=ii", t, c)
    return out


@SETTINGS
@given(vd=vocab_and_docs())
def test_ngram_cache_upstream_round_trip(tmp_path_factory, vd) -> None:  # type: ignore[no-untyped-def]
    n_vocab, docs = vd
    c = _lookup.NgramCache(n_vocab)
    for d in docs:
        c.add(d)
    path = str(tmp_path_factory.mktemp("up") / "cache.bin")
    c.save_upstream(path)
    with open(path, "rb") as f:
        assert parse_upstream(f.read()) == ref_cache_from_docs(docs)
    loaded = _lookup.NgramCache.load_upstream(path, n_vocab)
    assert loaded == c
    assert loaded.n_vocab == n_vocab
    assert all(np.array_equal(a, b) for a, b in zip(loaded.to_arrays(), c.to_arrays()))


@SETTINGS
@given(vd=vocab_and_docs())
def test_static_cache_upstream_round_trip(tmp_path_factory, vd) -> None:  # type: ignore[no-untyped-def]
    n_vocab, docs = vd
    d = tmp_path_factory.mktemp("sup")
    path = str(d / "static.lookup")
    write_static(path, n_vocab, docs, 9)
    s = open_verified(path, n_vocab, 9)
    up = str(d / "static.bin")
    s.save_upstream(up)
    ref = ref_static_from_docs(docs)
    with open(up, "rb") as f:
        assert parse_upstream(f.read()) == ref
    loaded = _lookup.NgramCache.load_upstream(up, n_vocab)
    assert ref_from_native(loaded) == ref
    b = _lookup.StaticCacheBuilder(n_vocab)
    b.add_cache(loaded)
    again = str(d / "again.lookup")
    b.write(again, 9)
    s2 = open_verified(again, n_vocab, 9)
    check_static_equals(s2, ref, n_vocab)
    assert all(np.array_equal(a, b) for a, b in zip(s.to_arrays(), s2.to_arrays()))
    s.close()
    s2.close()


def test_add_cache_takes_only_2_grams_and_adds_to_documents(tmp_path) -> None:  # type: ignore[no-untyped-def]
    c = _lookup.NgramCache(10)
    c.add([1, 2, 3, 4, 5, 1, 2, 3])
    b = _lookup.StaticCacheBuilder(10)
    b.add([1, 2, 9])
    b.add_cache(c)
    path = str(tmp_path / "mixed.lookup")
    b.write(path, 0)
    check_static_equals(open_verified(path), ref_static_from_docs([[1, 2, 9], [1, 2, 3, 4, 5, 1, 2, 3]]), 10)


def test_load_upstream_hand_written(tmp_path) -> None:  # type: ignore[no-untyped-def]
    entries = [((3,), [(1, 2), (4, 7)]), ((1, 2), [(3, 1)]), ((1, 2, 3), [(0, 5)]), ((9, 8, 7, 6), [(9, 1)])]
    path = tmp_path / "hand.bin"
    path.write_bytes(upstream_bytes(entries))
    c = _lookup.NgramCache.load_upstream(str(path), 10)
    assert ref_from_native(c).data == {k: dict(v) for k, v in entries}
    assert c.followers([3]).tolist() == [[1, 2], [4, 7]]
    # Followers given out of order are sorted.
    path.write_bytes(upstream_bytes([((5,), [(7, 1), (2, 3)])]))
    assert _lookup.NgramCache.load_upstream(str(path), 10).followers([5]).tolist() == [[2, 3], [7, 1]]
    # An empty file is an empty cache.
    path.write_bytes(b"")
    assert _lookup.NgramCache.load_upstream(str(path), 10) == _lookup.NgramCache(10)


BAD_UPSTREAM = {
    "n_followers=0": upstream_bytes([((1, 2), [])]),
    "n_followers<0": upstream_bytes([((1, 2), [(3, 1)])])[:16] + struct.pack("=i", -1) + struct.pack("=ii", 3, 1),
    "count=0": upstream_bytes([((1, 2), [(3, 0)])]),
    "count<0": upstream_bytes([((1, 2), [(3, 1), (4, -5)])]),
    "follower=n_vocab": upstream_bytes([((1, 2), [(10, 1)])]),
    "follower<0": upstream_bytes([((1, 2), [(-1, 1)])]),
    "follower=-2": upstream_bytes([((1, 2), [(-2, 1)])]),
    "key token=n_vocab": upstream_bytes([((1, 10), [(3, 1)])]),
    "key token=-2": upstream_bytes([((1, -2), [(3, 1)])]),
    "key all -1": upstream_bytes([((), [(3, 1)])]),
    "key -1 then token": struct.pack("=4ii", -1, 3, -1, -1, 1) + struct.pack("=ii", 3, 1),
    "key gap": struct.pack("=4ii", 1, -1, 3, -1, 1) + struct.pack("=ii", 3, 1),
    "truncated key": upstream_bytes([((1, 2), [(3, 1)])]) + struct.pack("=2i", 1, 2),
    "truncated n_followers": upstream_bytes([((1, 2), [(3, 1)])]) + struct.pack("=4i", 1, 2, -1, -1) + b"\x01\x00",
    "truncated follower": upstream_bytes([((1, 2), [(3, 1), (4, 1)])])[:-4],
    "missing followers": upstream_bytes([((1, 2), [(3, 1), (4, 1)])])[:-8],
    "one stray byte": upstream_bytes([((1, 2), [(3, 1)])]) + b"\x00",
    "huge n_followers": struct.pack("=4ii", 1, 2, -1, -1, 2**31 - 1) + struct.pack("=ii", 3, 1),
}


@pytest.mark.parametrize("name", sorted(BAD_UPSTREAM))
def test_bad_upstream_files(tmp_path, name: str) -> None:  # type: ignore[no-untyped-def]
    path = str(tmp_path / "bad upstream.bin")
    with open(path, "wb") as f:
        f.write(BAD_UPSTREAM[name])
    with pytest.raises(CacheError) as e:
        _lookup.NgramCache.load_upstream(path, 10)
    check_error_message(e.value, path)
    assert isinstance(e.value, ValueError)


def test_missing_files(tmp_path) -> None:  # type: ignore[no-untyped-def]
    path = str(tmp_path / "does-not-exist.bin")
    with pytest.raises(CacheError) as e:
        _lookup.NgramCache.load_upstream(path, 10)
    check_error_message(e.value, path)
    with pytest.raises(CacheError) as e:
        _lookup.StaticCache.open(path)
    check_error_message(e.value, path)
    # A directory is not a cache file either.
    with pytest.raises(CacheError) as e:
        _lookup.StaticCache.open(str(tmp_path))
    check_error_message(e.value, str(tmp_path))


@SETTINGS
@given(data=st.binary(min_size=1, max_size=400))
def test_random_upstream_bytes_never_crash(tmp_path_factory, data: bytes) -> None:  # type: ignore[no-untyped-def]
    path = str(tmp_path_factory.mktemp("rup") / "random.bin")
    with open(path, "wb") as f:
        f.write(data)
    try:
        c = _lookup.NgramCache.load_upstream(path, 50)
    except CacheError as e:
        check_error_message(e, path)
    else:
        # Only a well-formed file may load, and then it says what the file says.
        ref = parse_upstream(data)
        assert ref_from_native(c) == ref


# ---------------------------------------------------------------------------------------------
# Corrupt static cache files


class Golden:
    def __init__(self, path: str, data: bytes, n_vocab: int, ref: RefCache) -> None:
        self.path, self.data, self.n_vocab, self.ref = path, data, n_vocab, ref


@pytest.fixture(scope="module")
def golden(tmp_path_factory) -> Golden:  # type: ignore[no-untyped-def]
    rng = np.random.default_rng(1234)
    n_vocab = 40
    phrases = [rng.integers(0, n_vocab, size=int(rng.integers(2, 7))).tolist() for _ in range(12)]
    docs = []
    for _ in range(6):
        doc: list[int] = []
        while len(doc) < 300:
            doc += phrases[int(rng.integers(0, len(phrases)))] if rng.random() < 0.8 else [int(rng.integers(0, n_vocab))]
        docs.append(doc)
    path = str(tmp_path_factory.mktemp("golden") / "golden.lookup")
    write_static(path, n_vocab, docs, fingerprint=77)
    with open(path, "rb") as f:
        data = f.read()
    ref = ref_static_from_docs(docs)
    check_static_equals(open_verified(path, n_vocab, 77), ref, n_vocab)
    return Golden(path, data, n_vocab, ref)


def outcome(path: str, expected: RefCache | None, n_vocab: int = 40, fingerprint: int | None = None) -> str:
    """Opens and verifies `path`: "error" after a CacheError that names the path, or "ok" after
    checking the contents equal `expected` (None: only self-consistency can be checked)."""
    try:
        s = _lookup.StaticCache.open(path, None, fingerprint)
        s.verify()
    except CacheError as e:
        check_error_message(e, path)
        return "error"
    if expected is not None:
        check_static_equals(s, expected, n_vocab)
    else:
        check_self_consistent(s)
    s.close()
    return "ok"


def check_self_consistent(s: "_lookup.StaticCache") -> None:
    """A verified cache whose contents we cannot predict: it must still make sense."""
    h = s.header
    keys, offsets, followers = s.to_arrays()
    assert keys.shape == (h["n_keys"], 4) and followers.shape == (h["n_followers"], 2)
    assert offsets[0] == 0 and offsets[-1] == followers.shape[0] and np.all(np.diff(offsets) > 0)
    n_vocab = h["n_vocab"]
    assert np.all((followers[:, 0] >= 0) & (followers[:, 0] < n_vocab)) and np.all(followers[:, 1] > 0)
    assert int(followers[:, 1].astype(np.int64).sum()) == h["total_count"]
    rows = [tuple(r) for r in keys.tolist()]
    assert rows == sorted(set(rows))
    for i, (t0, t1, _, _) in enumerate(rows):
        assert 0 <= t0 < n_vocab and 0 <= t1 < n_vocab
        assert s.followers(t0, t1).tolist() == followers[offsets[i] : offsets[i + 1]].tolist()
    if rows:
        t0, t1 = rows[0][:2]
        expected = followers[offsets[0] : offsets[1]]
        assert len(_lookup.draft([t0, t1], 4, repository=s)) <= 4
        assert s.followers(t0, t1).tolist() == expected.tolist()


def write_file(tmp_path_factory, name: str, data: bytes) -> str:  # type: ignore[no-untyped-def]
    path = str(tmp_path_factory.mktemp("corrupt") / name)
    with open(path, "wb") as f:
        f.write(data)
    return path


@settings(deadline=None, max_examples=100, suppress_health_check=[HealthCheck.too_slow])
@given(data=st.data())
def test_truncated_files(tmp_path_factory, golden: Golden, data) -> None:  # type: ignore[no-untyped-def]
    size = data.draw(st.one_of(st.integers(0, HEADER_SIZE + 8), st.integers(0, len(golden.data) - 1)))
    path = write_file(tmp_path_factory, "truncated.lookup", golden.data[:size])
    with pytest.raises(CacheError) as e:
        _lookup.StaticCache.open(path)  # the header's file_size says it is truncated
    check_error_message(e.value, path)


@settings(deadline=None, max_examples=200, suppress_health_check=[HealthCheck.too_slow])
@given(data=st.data())
def test_bit_flips(tmp_path_factory, golden: Golden, data) -> None:  # type: ignore[no-untyped-def]
    n = len(golden.data)
    region = data.draw(st.sampled_from(["header", "anywhere", "tail"]))
    offsets = st.integers(0, HEADER_SIZE - 1) if region == "header" else (
        st.integers(n - 64, n - 1) if region == "tail" else st.integers(0, n - 1))
    flips = data.draw(st.lists(st.tuples(offsets, st.integers(0, 7)), min_size=1, max_size=4, unique=True))
    buf = bytearray(golden.data)
    for off, bit in flips:
        buf[off] ^= 1 << bit
    path = write_file(tmp_path_factory, "flipped.lookup", bytes(buf))
    result = outcome(path, golden.ref)
    if len(flips) == 1:
        assert result == "error", "a single bit flip must be detected"


@settings(deadline=None, max_examples=100, suppress_health_check=[HealthCheck.too_slow])
@given(blob=st.binary(max_size=600), keep_magic=st.booleans(), keep_header=st.booleans())
def test_random_bytes(tmp_path_factory, golden: Golden, blob: bytes, keep_magic: bool, keep_header: bool) -> None:  # type: ignore[no-untyped-def]
    if keep_header:
        data = golden.data[:HEADER_SIZE] + blob  # a real header, garbage after it
    elif keep_magic:
        data = golden.data[:8] + blob
    else:
        data = blob
    path = write_file(tmp_path_factory, "random.lookup", data)
    assert outcome(path, golden.ref) == "error"


def patched(data: bytes, field: str, fmt: str, value: int) -> bytes:
    buf = bytearray(data)
    struct.pack_into(fmt, buf, OFFSET[field], value)
    return bytes(buf)


def test_wrong_magic_version_and_byte_order(tmp_path_factory, golden: Golden) -> None:  # type: ignore[no-untyped-def]
    version = raw_header(golden.data)["format_version"]
    assert version == _lookup.STATIC_FORMAT_VERSION
    cases = {
        "magic": b"GGUF\x00\x00\x00\x00" + golden.data[8:],
        "magic-1-byte": b"X" + golden.data[1:],
        "version+1": patched(golden.data, "format_version", "=I", version + 1),
        "version-1": patched(golden.data, "format_version", "=I", version - 1),
        "version-max": patched(golden.data, "format_version", "=I", 2**32 - 1),
        "byte-order": patched(golden.data, "byte_order_mark", "=I", 0x04030201),
        "ngram-order": patched(golden.data, "ngram_order", "=I", 3),
        "file-size": patched(golden.data, "file_size", "=Q", len(golden.data) + 64),
        "file-size-small": patched(golden.data, "file_size", "=Q", len(golden.data) - 64),
        "n-keys-huge": patched(golden.data, "n_keys", "=Q", 2**63),
        "n-followers-huge": patched(golden.data, "n_followers", "=Q", 2**40),
        "n-buckets-0": patched(golden.data, "n_buckets", "=Q", 0),
        "n-buckets-huge": patched(golden.data, "n_buckets", "=Q", 2**62),
        "offsets-past-end": patched(golden.data, "followers_offset", "=Q", 2**63),
        "records-past-end": patched(golden.data, "records_offset", "=Q", len(golden.data) + 8),
        "n-vocab-0": patched(golden.data, "n_vocab", "=I", 0),
        "n-vocab-huge": patched(golden.data, "n_vocab", "=I", 2**32 - 1),
    }
    for name, data in cases.items():
        path = write_file(tmp_path_factory, f"{name}.lookup", data)
        assert outcome(path, golden.ref) == "error", name
    for name in ("magic", "magic-1-byte", "version+1", "version-1", "version-max", "byte-order", "file-size", "file-size-small"):
        path = write_file(tmp_path_factory, f"{name}-open.lookup", cases[name])
        with pytest.raises(CacheError) as e:
            _lookup.StaticCache.open(path)  # caught by open(), before verify()
        check_error_message(e.value, path)


def test_wrong_vocab_or_fingerprint(golden: Golden) -> None:
    path = golden.path
    for n_vocab, fingerprint in ((41, None), (39, None), (None, 78), (None, 0), (40, 2**64 - 1)):
        with pytest.raises(CacheError) as e:
            _lookup.StaticCache.open(path, n_vocab, fingerprint)
        check_error_message(e.value, path)
    open_verified(path, 40, 77).close()
    open_verified(path, n_vocab=40).close()
    open_verified(path, fingerprint=77).close()


def test_flip_that_open_misses_is_caught_by_verify(tmp_path_factory, golden: Golden) -> None:  # type: ignore[no-untyped-def]
    raw = raw_header(golden.data)
    # Flip a bit in the last follower's count: open() reads the header only.
    off = int(raw["followers_offset"]) + 8 * (int(raw["n_followers"]) - 1) + 4
    buf = bytearray(golden.data)
    buf[off] ^= 0x10
    path = write_file(tmp_path_factory, "follower-flip.lookup", bytes(buf))
    s = _lookup.StaticCache.open(path, 40, 77)
    assert not s.verified
    with pytest.raises(CacheError) as e:
        s.verify()
    check_error_message(e.value, path)
    assert not s.verified
    with pytest.raises(ValueError):
        _lookup.draft([1, 2, 3], 3, repository=s)
    s.close()


# A Python port of native/checksum.cpp lets corruption get past the checksum, so that verify()'s
# structural checks are what stands between a corrupt file and the drafter.
_M64 = (1 << 64) - 1
_MUL_A = 0x9FB21C651E98DF25
_MUL_B = 0xC2B2AE3D27D4EB4F


def _rotl(x: int, r: int) -> int:
    return ((x << r) | (x >> (64 - r))) & _M64


def py_checksum(data: bytes) -> int:
    lanes = [0x243F6A8885A308D3, 0x13198A2E03707344, 0xA4093822299F31D0, 0x082EFA98EC4E6C89]
    n_stripes = len(data) // 32
    words = struct.unpack_from(f"<{4 * n_stripes}Q", data)
    for s in range(n_stripes):
        for i in range(4):
            lanes[i] = (_rotl((lanes[i] + words[4 * s + i] * _MUL_B) & _M64, 31) * _MUL_A) & _M64
    h = (_rotl(lanes[0], 1) + _rotl(lanes[1], 7) + _rotl(lanes[2], 12) + _rotl(lanes[3], 18)) & _M64
    h ^= (len(data) * _MUL_A) & _M64
    for byte in data[32 * n_stripes :]:
        h = (_rotl(h ^ ((byte * _MUL_B) & _M64), 23) * _MUL_A) & _M64
    h ^= h >> 33
    h = (h * _MUL_B) & _M64
    h ^= h >> 29
    h = (h * _MUL_A) & _M64
    return h ^ (h >> 32)


def with_checksum(data: bytes) -> bytes:
    buf = bytearray(data)
    struct.pack_into("=Q", buf, OFFSET["checksum"], 0)
    struct.pack_into("=Q", buf, OFFSET["checksum"], py_checksum(bytes(buf)))
    return bytes(buf)


@pytest.fixture(scope="module")
def checksum_port(golden: Golden) -> None:
    if sys.byteorder != "little" or with_checksum(golden.data) != golden.data:
        pytest.skip("the Python port of the checksum does not match the native one")


@settings(deadline=None, max_examples=250, suppress_health_check=[HealthCheck.too_slow])
@given(data=st.data())
def test_structural_corruption_behind_a_valid_checksum(tmp_path_factory, golden: Golden, checksum_port, data) -> None:  # type: ignore[no-untyped-def]
    raw = raw_header(golden.data)
    n = len(golden.data)
    kind = data.draw(st.sampled_from(["flip", "field", "word"]))
    buf = bytearray(golden.data)
    if kind == "flip":
        for off, bit in data.draw(st.lists(st.tuples(st.integers(0, n - 1), st.integers(0, 7)), min_size=1, max_size=3)):
            buf[off] ^= 1 << bit
    elif kind == "field":
        field = data.draw(st.sampled_from(["n_keys", "n_followers", "n_buckets", "total_count", "buckets_offset",
                                           "records_offset", "followers_offset"]))
        value = data.draw(st.one_of(st.integers(0, 2**64 - 1), st.integers(0, 4 * n),
                                    st.integers(-64, 64).map(lambda d: max(0, raw[field] + d))))
        struct.pack_into("=Q", buf, OFFSET[field], value)
        n_vocab_value = data.draw(st.none() | st.integers(0, 2**32 - 1))
        if n_vocab_value is not None:
            struct.pack_into("=I", buf, OFFSET["n_vocab"], n_vocab_value)
    else:
        # Overwrite a 4- or 8-byte word in the body (bucket, record key/span, follower).
        size = data.draw(st.sampled_from([4, 8]))
        off = data.draw(st.integers(HEADER_SIZE, n - size))
        value = data.draw(st.one_of(st.integers(0, 2 ** (8 * size) - 1), st.sampled_from([0, 1, 2 ** (8 * size) - 1, 2 ** (8 * size - 1)])))
        buf[off : off + size] = value.to_bytes(size, "little")
    fixed = with_checksum(bytes(buf))
    if fixed == golden.data:
        return
    path = write_file(tmp_path_factory, "structural.lookup", fixed)
    # Any outcome but a crash, a non-CacheError exception or an inconsistent verified cache.
    outcome(path, None)
    # Through the store the file itself is checked, through bounded buffers, before it is
    # copied: the same verdict as the check of the bytes in memory.
    store = str(tmp_path_factory.getbasetemp() / "structural-store")
    assert _accepted(lambda: _lookup.StaticCache.open(path, store=store).verify()) == _accepted(
        lambda: _lookup.StaticCache.open(path).verify()
    )


def _accepted(open_and_verify: Callable[[], None]) -> bool:
    try:
        open_and_verify()
    except CacheError:
        return False
    return True


# ---------------------------------------------------------------------------------------------
# Files changed, replaced or planted by someone else


def run_isolated(code: str, timeout: float = 120) -> "subprocess.CompletedProcess[str]":
    """Runs `code` in a fresh interpreter, so that a crash (SIGSEGV, SIGBUS) or a hang fails the
    test instead of ending or stalling pytest. An interpreter started without site (-S, as `make
    sanitize` runs the sanitizer build from PYTHONPATH) starts its child the same way."""
    site = ["-S"] if sys.flags.no_site else []
    return subprocess.run([sys.executable, *site, "-c", textwrap.dedent(code)], capture_output=True, text=True,
                          timeout=timeout)


def many_pages_static(path: str, n_vocab: int = 60) -> None:
    """A static cache of many pages, whose pairs mostly qualify for drafting."""
    rng = np.random.default_rng(7)
    phrases = [rng.integers(0, n_vocab, size=12).tolist() for _ in range(40)]
    docs: list[list[int]] = [sum((phrases[int(i)] for i in rng.integers(0, 40, size=300)), []) for _ in range(4)]
    write_static(path, n_vocab, docs)
    assert os.path.getsize(path) > 4 * 4096


# Every answer the cache gives, before and after `change` is done to its file in place.
ANSWERS_BEFORE_AND_AFTER = """
import os
import numpy as np
from lookahead_lsp import _lookup

path, n_vocab = {path!r}, {n_vocab}
s = _lookup.StaticCache.open(path, n_vocab); s.verify()
unverified = _lookup.StaticCache.open(path, n_vocab)

def answers(cache):
    pairs = [cache.followers(a, b).tolist() for a in range(n_vocab) for b in range(n_vocab)]
    drafts = [_lookup.draft(np.array([a, b], dtype=np.int32), 8, repository=cache).tolist()
              for a in range(n_vocab) for b in range(n_vocab)]
    return pairs, drafts, [a.tolist() for a in cache.to_arrays()], cache.header

before = answers(s)
{change}
print("same answers:", answers(s) == before)
unverified.verify()
print("verified later:", answers(unverified) == before)
print("changed on disk:", s.changed_on_disk(), unverified.changed_on_disk())
"""

EXPECTED_ANSWERS = ["same answers: True", "verified later: True", "changed on disk: True True"]


def test_header_and_body_rewritten_in_place_after_verify(tmp_path) -> None:  # type: ignore[no-untyped-def]
    """The bounds checks used to re-read the header from a shared mapping: a file rewritten in
    place (same inode) after verify() gave SIGSEGV. Now the cache answers from what it read."""
    path = str(tmp_path / "rewritten.lookup")
    many_pages_static(path)
    change = textwrap.dedent(
        """
        size = os.path.getsize(path)
        with open(path, "r+b") as f:
            header = bytearray(f.read(128))
            header[32:56] = (2**32 - 1).to_bytes(8, "little") * 3  # n_keys, n_followers, n_buckets
            # Buckets that alternately claim every record and none, records that match no key.
            body = (bytes(4) + b"\\xff" * 4) * (size // 8)
            f.seek(0)
            f.write(bytes(header) + body[: size - 128])
        """
    )
    r = run_isolated(ANSWERS_BEFORE_AND_AFTER.format(path=path, n_vocab=60, change=change))
    assert r.returncode == 0, (r.returncode, r.stdout, r.stderr)
    assert r.stdout.splitlines() == EXPECTED_ANSWERS, r.stdout


@pytest.mark.parametrize("length", [0, 4096, 128])
def test_truncated_in_place_after_open(tmp_path, length: int) -> None:  # type: ignore[no-untyped-def]
    """A file truncated while mapped gave SIGBUS on the next look-up."""
    path = str(tmp_path / "truncated.lookup")
    many_pages_static(path)
    change = f"os.truncate(path, {length})"
    r = run_isolated(ANSWERS_BEFORE_AND_AFTER.format(path=path, n_vocab=60, change=change))
    assert r.returncode == 0, (r.returncode, r.stdout, r.stderr)
    assert r.stdout.splitlines() == EXPECTED_ANSWERS, r.stdout


@pytest.mark.skipif(not hasattr(os, "mkfifo"), reason="no FIFOs")
def test_fifo_is_refused_at_once(tmp_path) -> None:  # type: ignore[no-untyped-def]
    """Opening a FIFO for reading waits for a writer: it blocked the daemon's indexing."""
    path = str(tmp_path / "static.cache")
    os.mkfifo(path)
    code = f"""
        import time
        from lookahead_lsp import _lookup
        for load in (lambda: _lookup.StaticCache.open({path!r}), lambda: _lookup.NgramCache.load_upstream({path!r}, 10)):
            start = time.monotonic()
            try:
                load()
            except _lookup.CacheError as error:
                print(f"{{time.monotonic() - start:.3f}}", error)
        """
    r = run_isolated(code, timeout=30)
    lines = r.stdout.splitlines()
    assert r.returncode == 0 and len(lines) == 2, (r.returncode, r.stdout, r.stderr)
    for line in lines:
        seconds, message = line.split(" ", 1)
        assert float(seconds) < 1.0, line
        assert message == f"{path}: cannot open (not a regular file (a FIFO))" or (
            message.startswith(path) and "not a regular file (a FIFO)" in message
        ), message


@pytest.mark.skipif(not hasattr(os, "symlink"), reason="no symbolic links")
def test_symlink_directory_and_device_are_refused(tmp_path) -> None:  # type: ignore[no-untyped-def]
    real = str(tmp_path / "real.lookup")
    write_static(real, 10, [[1, 2, 3, 1, 2, 4]])
    link = str(tmp_path / "link.lookup")
    os.symlink(real, link)
    cases = {
        link: "not a regular file (a symbolic link, which is not followed)",
        str(tmp_path): "not a regular file (a directory)",
        os.devnull: "not a regular file (a character device)",
    }
    for path, reason in cases.items():
        for load in (lambda: _lookup.StaticCache.open(path), lambda: _lookup.NgramCache.load_upstream(path, 10)):
            with pytest.raises(CacheError) as e:
                load()
            check_error_message(e.value, path)
            assert reason in str(e.value), str(e.value)
    # The file the link names opens as ever.
    open_verified(real).close()


def test_changed_on_disk(tmp_path) -> None:  # type: ignore[no-untyped-def]
    path = str(tmp_path / "watched.lookup")
    write_static(path, 10, [[1, 2, 3]])
    s = open_verified(path)
    assert not s.changed_on_disk()
    # Replaced by a rename (what build-cache does): another inode.
    write_static(path, 10, [[1, 2, 4]])
    assert s.changed_on_disk()
    assert s.followers(1, 2).tolist() == [[3, 1]], "the open cache keeps answering from its copy"
    s = open_verified(path)
    assert not s.changed_on_disk() and s.followers(1, 2).tolist() == [[4, 1]]
    # Same inode and size, only its times changed.
    st_ = os.stat(path)
    os.utime(path, ns=(st_.st_atime_ns, st_.st_mtime_ns + 1_000_000))
    assert s.changed_on_disk()
    s = open_verified(path)
    os.unlink(path)
    assert s.changed_on_disk(), "nothing at the path any more"
    s.close()
    with pytest.raises(ValueError):
        s.changed_on_disk()


# ---------------------------------------------------------------------------------------------
# Crafted files: offsets and sizes that lie behind a valid checksum (issue 20)


def static_layout(n_keys: int, n_followers: int) -> tuple[int, int, int, int, int]:
    """(n_buckets, buckets_offset, records_offset, followers_offset, file_size) as the writer
    lays a file out (native/static_cache_format.h)."""
    bits = 0
    while (1 << bits) * 2 < n_keys:
        bits += 1
    n_buckets = 1 << bits

    def align(offset: int) -> int:
        return (offset + 63) & ~63

    buckets = align(HEADER_SIZE)
    records = align(buckets + 4 * (n_buckets + 1))
    followers = align(records + 16 * n_keys)
    return n_buckets, buckets, records, followers, followers + 8 * n_followers


def crafted_header(n_keys: int, n_followers: int, n_buckets: int, offsets: tuple[int, int, int], size: int,
                   n_vocab: int = 40) -> bytes:
    return HEADER_STRUCT.pack(_lookup.STATIC_MAGIC, _lookup.STATIC_FORMAT_VERSION, 0x01020304, 2, n_vocab, 0,
                              n_keys, n_followers, n_buckets, n_followers, *offsets, size, 0, bytes(24))


def records_past_the_end() -> bytes:
    """No keys, two buckets of which the first claims a record: the record would lie at the end
    of the file. Page-aligned (1 MiB), so that the read lands on the page after the bytes."""
    size = 1 << 20
    header = crafted_header(0, 0, 2, (HEADER_SIZE, size, size), size)
    data = header + struct.pack("<3I", 0, 1, 0)
    return with_checksum(data + bytes(size - len(data)))


def bucket_past_n_keys(path: str) -> bytes:
    """A sound file, but one bucket bound far past n_keys (the following ones unchanged)."""
    many_pages_static(path)
    with open(path, "rb") as f:
        buf = bytearray(f.read())
    raw = raw_header(bytes(buf))
    assert raw["n_buckets"] >= 4
    struct.pack_into("<I", buf, raw["buckets_offset"] + 4, raw["n_keys"] + (1 << 24))
    return with_checksum(bytes(buf))


# Opens and verifies a crafted file where a read past the end of its bytes cannot go unnoticed:
# the next anonymous mapping of the file's size goes into a hole right below an inaccessible page,
# so a read past the private copy stops the process (the old verify() read the records of
# [buckets[b], buckets[b + 1]) before checking buckets[b + 1] <= n_keys, and died of SIGSEGV).
VERIFY_BEHIND_A_GUARD = """
import ctypes, mmap
from lookahead_lsp import _lookup

path, size, store = {path!r}, {size}, {store!r}
libc = ctypes.CDLL(None)
libc.mmap.restype = ctypes.c_void_p
libc.mmap.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int, ctypes.c_int, ctypes.c_int, ctypes.c_long]
libc.munmap.argtypes = [ctypes.c_void_p, ctypes.c_size_t]
base = libc.mmap(None, size + mmap.PAGESIZE, 0, mmap.MAP_PRIVATE | mmap.MAP_ANONYMOUS, -1, 0)
libc.munmap(base, size)
try:
    s = _lookup.StaticCache.open(path, **({{"store": store}} if store else {{}}))
    s.verify()
except _lookup.CacheError as error:
    print(error)
else:
    print("verified")
"""


@pytest.mark.parametrize("through_store", [False, True], ids=["memory", "store"])
@pytest.mark.parametrize("craft", ["records-past-the-end", "bucket-past-n-keys"])
def test_crafted_bucket_offsets_are_refused(tmp_path, craft: str, through_store: bool, checksum_port) -> None:  # type: ignore[no-untyped-def]
    """Issue 20, defect 2: a valid checksum and bucket bounds past n_keys made verify() read past
    its buffer (serve and inspect-cache --verify died of SIGSEGV). Now one CacheError line."""
    path = str(tmp_path / "static.cache")
    data = records_past_the_end() if craft == "records-past-the-end" else bucket_past_n_keys(path)
    with open(path, "wb") as f:
        f.write(data)
    store = str(tmp_path / "store") if through_store else ""
    r = run_isolated(VERIFY_BEHIND_A_GUARD.format(path=path, size=len(data), store=store))
    assert r.returncode == 0, (r.returncode, r.stdout, r.stderr)
    lines = r.stdout.splitlines()
    assert len(lines) == 1 and lines[0].startswith(path + ": corrupt"), r.stdout
    if through_store:
        assert not os.path.exists(store) or os.listdir(store) == [], "a refused file left something in the store"


SPARSE_SIZE = 6 << 30

# Opens a file and reports how long it took, how much the peak resident memory grew and the
# error, from a fresh process whose peak is its own.
OPEN_AND_MEASURE = """
import resource, time
from lookahead_lsp import _lookup

path, store = {path!r}, {store!r}
before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
start = time.monotonic()
try:
    _lookup.StaticCache.open(path, **({{"store": store}} if store else {{}}))
    message = "opened"
except _lookup.CacheError as error:
    message = str(error)
seconds = time.monotonic() - start
print(seconds, (resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - before) // 1024)
print(message)
"""


@pytest.mark.parametrize("through_store", [False, True], ids=["memory", "store"])
@pytest.mark.parametrize("header", ["none", "plausible"])
def test_sparse_file_is_refused_unread(tmp_path, header: str, through_store: bool) -> None:  # type: ignore[no-untyped-def]
    """Issue 20, defect 5: a sparse 6 GiB static.cache (no bytes on disk) was read whole before
    its header was checked (the daemon peaked at 6.7 GB). Now the header is checked against the
    size, and the section bounds probed, first."""
    path = str(tmp_path / "static.cache")
    with open(path, "wb") as f:
        if header == "plausible":  # counts that add up to the file's size, nothing behind them
            n_keys = 1 << 24
            n_buckets, *offsets, followers_end = static_layout(n_keys, 0)
            n_followers = (SPARSE_SIZE - offsets[2]) // 8
            assert static_layout(n_keys, n_followers)[4] == SPARSE_SIZE
            f.write(crafted_header(n_keys, n_followers, n_buckets, (offsets[0], offsets[1], offsets[2]), SPARSE_SIZE))
        f.truncate(SPARSE_SIZE)
    if os.stat(path).st_blocks * 512 > 1 << 20:
        pytest.skip("this file system does not keep sparse files")
    store = str(tmp_path / "store") if through_store else ""
    r = run_isolated(OPEN_AND_MEASURE.format(path=path, store=store))
    assert r.returncode == 0, (r.returncode, r.stdout, r.stderr)
    measures, message = r.stdout.splitlines()
    seconds, grown_mb = float(measures.split()[0]), int(measures.split()[1])
    assert message.startswith(path + ": ") and ("bad magic" in message or "corrupt" in message), message
    assert seconds < 1.0 and grown_mb < 64, (seconds, grown_mb, message)
    if through_store:
        assert not os.path.exists(store) or os.listdir(store) == [], "a refused file was copied into the store"


def test_layout_that_does_not_add_up_is_refused_at_open(tmp_path_factory, golden: Golden, checksum_port) -> None:  # type: ignore[no-untyped-def]
    """Sections must lie where the writer puts them: a gap, an overlap or bytes after the last
    section are refused by open(), before any section is read."""
    raw = raw_header(golden.data)
    n = len(golden.data)
    cases = {
        "records-later": patched(golden.data, "records_offset", "=Q", raw["records_offset"] + 64),
        "followers-overlap": patched(golden.data, "followers_offset", "=Q", raw["followers_offset"] - 8),
        "buckets-later": patched(golden.data, "buckets_offset", "=Q", raw["buckets_offset"] + 64),
        "more-buckets": patched(golden.data, "n_buckets", "=Q", raw["n_buckets"] * 2),
        "grown": patched(golden.data + bytes(64), "file_size", "=Q", n + 64),
        "fewer-followers": patched(golden.data, "n_followers", "=Q", raw["n_followers"] - 1),
        "no-keys": patched(golden.data, "n_keys", "=Q", 0),
    }
    for name, data in cases.items():
        path = write_file(tmp_path_factory, f"{name}.lookup", with_checksum(data))
        with pytest.raises(CacheError) as e:
            _lookup.StaticCache.open(path)
        check_error_message(e.value, path)
        assert "corrupt" in str(e.value), (name, str(e.value))


# ---------------------------------------------------------------------------------------------
# Writers: planted temporary names


def plant_links(out: str, target: str, pids: range) -> list[str]:
    """Symbolic links at the temporary names the writers used to pick (<out>.tmp.<pid>)."""
    links = [f"{out}.tmp.{pid}" for pid in pids]
    for link in links:
        os.symlink(target, link)
    return links


@pytest.mark.skipif(not hasattr(os, "symlink"), reason="no symbolic links")
def test_writers_never_follow_planted_links(tmp_path) -> None:  # type: ignore[no-untyped-def]
    victim = tmp_path / "victim.txt"
    victim.write_bytes(b"precious\n")
    pids = range(os.getpid(), os.getpid() + 64)
    docs = [[1, 2, 3, 1, 2, 4]]
    write_static(str(tmp_path / "source.lookup"), 10, docs)
    source = open_verified(str(tmp_path / "source.lookup"))
    writers: dict[str, Callable[[str], object]] = {
        "static.lookup": lambda out: write_static(out, 10, docs),
        "ngram.upstream": lambda out: native_cache(10, docs).save_upstream(out),
        "static.upstream": lambda out: source.save_upstream(out),
    }
    for name, write in writers.items():
        out = str(tmp_path / name)
        links = plant_links(out, str(victim), pids)
        write(out)
        assert victim.read_bytes() == b"precious\n", f"{name}: the planted link was followed"
        assert all(os.readlink(link) == str(victim) for link in links), f"{name}: a planted link was replaced"
        assert not os.path.islink(out) and os.path.getsize(out) > 0
        left = [n for n in os.listdir(tmp_path) if n.startswith(name + ".tmp.") and not os.path.islink(tmp_path / n)]
        assert left == [], f"{name}: temporary files left behind: {left}"
    check_static_equals(open_verified(str(tmp_path / "static.lookup")), ref_static_from_docs(docs), 10)
    assert _lookup.NgramCache.load_upstream(str(tmp_path / "ngram.upstream"), 10) == native_cache(10, docs)
    assert ref_from_native(_lookup.NgramCache.load_upstream(str(tmp_path / "static.upstream"), 10)) == (
        ref_static_from_docs(docs)
    )


def test_written_file_mode_follows_the_umask(tmp_path) -> None:  # type: ignore[no-untyped-def]
    for umask in (0o022, 0o077):
        old = os.umask(umask)
        try:
            out = tmp_path / f"mode-{umask:o}.lookup"
            write_static(str(out), 10, [[1, 2, 3]])
        finally:
            os.umask(old)
        assert out.stat().st_mode & 0o777 == 0o644 & ~umask


def test_write_into_missing_folder_says_why(tmp_path) -> None:  # type: ignore[no-untyped-def]
    out = str(tmp_path / "missing" / "static.lookup")
    with pytest.raises(OSError) as e:
        write_static(out, 10, [[1, 2, 3]])
    assert out in str(e.value) and "temporary file" in str(e.value), str(e.value)
