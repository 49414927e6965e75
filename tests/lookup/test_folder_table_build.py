"""Writing a folder table within a memory limit: however many passes the limit takes, however
many threads share them, and whether the documents' pages are handed back as they are read,
the file is the same."""

from __future__ import annotations

import mmap
from pathlib import Path

import numpy as np

from lookahead_lsp._lookup import FolderTable, NgramCache, build_folder_table

N_VOCAB = 5000
MIB = 1 << 20


def documents(n_documents: int, seed: int) -> list[np.ndarray]:
    """Code-like token streams: phrases drawn from a small phrase book, so n-grams repeat across
    documents the way identifiers and idioms do, with noise between them."""
    rng = np.random.default_rng(seed)
    phrases = [rng.integers(0, N_VOCAB, size=int(rng.integers(3, 12))) for _ in range(400)]
    out = []
    for _ in range(n_documents):
        parts = [phrases[int(i)] for i in rng.zipf(1.3, size=int(rng.integers(50, 400))) % len(phrases)]
        parts += [rng.integers(0, N_VOCAB, size=3) for _ in range(len(parts) // 4)]
        order = rng.permutation(len(parts))
        out.append(np.concatenate([parts[i] for i in order]).astype(np.int32))
    return out


def test_a_small_limit_takes_many_passes_and_writes_the_same_table(tmp_path: Path) -> None:
    docs = documents(300, seed=1)
    one = build_folder_table(docs, str(tmp_path / "one.table"), N_VOCAB, 7, memory_limit=512 * MIB)
    many = build_folder_table(docs, str(tmp_path / "many.table"), N_VOCAB, 7, memory_limit=MIB)
    shared = build_folder_table(docs, str(tmp_path / "shared.table"), N_VOCAB, 7, memory_limit=4 * MIB, threads=3)
    assert one["passes"] == 1
    assert many["passes"] > 4 and many["peak_bytes"] < one["peak_bytes"]
    assert shared["passes"] > 1
    assert (tmp_path / "one.table").read_bytes() == (tmp_path / "many.table").read_bytes()
    assert (tmp_path / "shared.table").read_bytes() == (tmp_path / "many.table").read_bytes()
    # And it holds what the documents hold: every key counted twice or more, with its followers.
    cache = NgramCache(N_VOCAB)
    for d in docs:
        cache.add(d)
    table = FolderTable.open(str(tmp_path / "many.table"), N_VOCAB, 7)
    table.verify()
    keys, offsets, _ = cache.to_arrays()
    for row in range(0, len(keys), 97):
        key = [int(t) for t in keys[row] if t >= 0]
        expected = cache.followers(key)
        found = table.followers(key)
        if int(expected[:, 1].sum()) >= 2:
            assert np.array_equal(found, expected)
        else:
            assert len(found) == 0
    # Nothing but the table is left in the folder: the passes' scratch file had no name.
    assert sorted(p.name for p in tmp_path.iterdir()) == ["many.table", "one.table", "shared.table"]


def test_documents_mapped_from_a_file_give_their_pages_back_and_stay_readable(tmp_path: Path) -> None:
    docs = documents(200, seed=2)
    store = tmp_path / "tokens"
    store.write_bytes(b"".join(d.tobytes() for d in docs))
    with store.open("rb") as file, mmap.mmap(file.fileno(), 0, access=mmap.ACCESS_READ) as mapping:
        views, offset = [], 0
        for d in docs:
            views.append(np.frombuffer(mapping, dtype=np.int32, count=len(d), offset=offset))
            offset += d.nbytes
        build_folder_table(views, str(tmp_path / "mapped.table"), N_VOCAB, 7, memory_limit=MIB, release_pages=True)
        assert all(np.array_equal(view, d) for view, d in zip(views, docs))
        del views
    build_folder_table(docs, str(tmp_path / "memory.table"), N_VOCAB, 7, memory_limit=MIB)
    assert (tmp_path / "mapped.table").read_bytes() == (tmp_path / "memory.table").read_bytes()
