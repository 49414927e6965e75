"""A workspace larger than its memory budget: the bulk goes to a folder table on disk (mapped),
the changes stay in memory, drafting reads both as one, and a restart maps the table at once.
The corpus is the running interpreter's own standard library."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from lookahead_lsp._lookup import NgramCache, WorkspaceView, draft
from lookahead_lsp.base.tokenizer import POOL_MIN_BYTES, Tokenizer, tokenize_file_text
from lookahead_lsp.workspace.index import IndexSettings, WorkspaceIndex
from lookahead_lsp.workspace.store import store_path_for

from support.folders import stdlib_folder

FINGERPRINT = 0x5EED
TINY = IndexSettings(memory_budget=1)  # anything indexed is over it

pytestmark = pytest.mark.usefixtures("hermetic_git")


def truth(tokenizer: Tokenizer, texts: dict[str, str]) -> NgramCache:
    cache = NgramCache(tokenizer.n_vocab)
    for text in texts.values():
        cache.add(tokenize_file_text(tokenizer, text.encode()))
    return cache


def assert_drafts_as(
    view: NgramCache | WorkspaceView, expected: NgramCache, at_table: NgramCache | None = None
) -> None:
    """Every key seen at least twice has the same followers as in `expected` (keys seen once
    cannot draft and the table leaves them out). at_table: the files when the table was
    written, if they changed since: a key seen once then is missing that one sighting."""
    keys, _, _ = expected.to_arrays()
    checked = 0
    for key in keys:
        tokens = [int(t) for t in key if t >= 0]
        want = expected.followers(tokens)
        if int(want[:, 1].sum()) < 2:
            continue
        got = view.followers(tokens)
        if at_table is not None:
            pruned = at_table.followers(tokens)
            if int(pruned[:, 1].sum()) == 1:
                want = minus(want, int(pruned[0, 0]))
        assert np.array_equal(got, want), tokens
        checked += 1
    assert checked > 100


def minus(followers: np.ndarray, token: int) -> np.ndarray:
    """followers with one sighting of token fewer."""
    rows = [[t, c - (t == token)] for t, c in followers.tolist()]
    return np.array([row for row in rows if row[1] > 0], dtype=np.int32).reshape(-1, 2)


@pytest.fixture
def store(tmp_path: Path) -> Path:
    return store_path_for(tmp_path / "workspace", tmp_path / "cache")


def test_a_folder_over_budget_drafts_from_its_table_as_from_memory(
    tmp_path: Path, tokenizer: Tokenizer, store: Path
) -> None:
    root = tmp_path / "workspace"
    texts = stdlib_folder(root, 200_000)
    index = WorkspaceIndex(tokenizer.n_vocab, root=root, tokenizer=tokenizer, settings=TINY)
    index.load(store, FINGERPRINT)
    index.index_folder()
    status = index.status()
    assert status.table_files == len(texts) and status.table_bytes > 0
    assert status.memory_bytes < 2 << 20  # empty caches, no tokens
    view = index.drafting()
    assert isinstance(view, WorkspaceView)
    expected = truth(tokenizer, texts)
    assert_drafts_as(view, expected)
    # Drafting reads the layers as it reads one cache.
    some = tokenize_file_text(tokenizer, next(iter(texts.values())).encode())[:200]
    assert np.array_equal(draft(some, 12, None, view), draft(some, 12, None, expected))


def test_changes_after_the_table_are_drafted_from_and_deleted_files_are_not(
    tmp_path: Path, tokenizer: Tokenizer, store: Path
) -> None:
    root = tmp_path / "workspace"
    texts = stdlib_folder(root, 200_000)
    index = WorkspaceIndex(tokenizer.n_vocab, root=root, tokenizer=tokenizer, settings=IndexSettings(memory_budget=64 << 20))
    index.load(store, FINGERPRINT)
    index.index_folder()
    assert index.status().table_files == 0  # fits: all in memory
    assert index.fold_if_over_budget() is False
    index.settings = TINY
    assert index.fold_if_over_budget() is True
    at_table = truth(tokenizer, texts)
    first, second = sorted(texts)[:2]
    (root / first).unlink()
    del texts[first]
    rewritten = "def brand_new_function(argument):\n    return argument.brand_new_attribute\n" * 3
    (root / second).write_text(rewritten)
    texts[second] = rewritten
    index.apply_disk_delete(root / first)
    index.apply_disk_change(root / second)
    index.open_document(root / "unsaved.py", "value = compute_unsaved()\nvalue = compute_unsaved()\n")
    texts["unsaved.py"] = "value = compute_unsaved()\nvalue = compute_unsaved()\n"
    assert index.status().files == len(texts)
    assert_drafts_as(index.drafting(), truth(tokenizer, texts), at_table)
    # Writing the changes to a new table changes nothing drafting sees.
    assert index.fold_if_over_budget() is True
    assert_drafts_as(index.drafting(), truth(tokenizer, texts))
    tables = sorted(store.parent.glob("*.table"))
    assert len(tables) == 1  # the old one went


def test_a_restart_maps_the_table_before_any_file_is_read(
    tmp_path: Path, tokenizer: Tokenizer, store: Path
) -> None:
    root = tmp_path / "workspace"
    texts = stdlib_folder(root, 200_000)
    first = WorkspaceIndex(tokenizer.n_vocab, root=root, tokenizer=tokenizer, settings=TINY)
    first.load(store, FINGERPRINT)
    first.index_folder()
    first.save(store, FINGERPRINT)
    # Both files hold what the user's code is made of: the user's only.
    for path in (store, *store.parent.glob("*.table")):
        assert path.stat().st_mode & 0o077 == 0, path
    again = WorkspaceIndex(tokenizer.n_vocab, root=root, tokenizer=tokenizer, settings=TINY)
    assert again.load(store, FINGERPRINT) == len(texts)
    assert again.status().table_files == len(texts)
    assert_drafts_as(again.drafting(), truth(tokenizer, texts))
    stats = again.index_folder()
    assert stats.tokenized == 0 and stats.unchanged == len(texts)


def test_a_scan_past_the_budget_writes_the_rest_straight_to_disk(
    tmp_path: Path, tokenizer: Tokenizer, store: Path
) -> None:
    root = tmp_path / "workspace"
    texts = stdlib_folder(root, POOL_MIN_BYTES + 200_000)
    index = WorkspaceIndex(tokenizer.n_vocab, root=root, tokenizer=tokenizer, settings=IndexSettings(memory_budget=8 << 20))
    index.load(store, FINGERPRINT)
    peaks: list[int] = []
    counted: list[int] = []

    def report(_: object) -> None:
        status = index.status()
        peaks.append(status.memory_bytes)
        counted.append(status.tokens)

    index.index_folder(jobs=2, progress=report)
    assert max(peaks) < 12 << 20  # the budget, and one file's worth past it
    assert index.status().table_files == len(texts)
    # The status counts the files written straight to disk too, as they are written.
    assert max(counted) == index.status().tokens
    assert_drafts_as(index.drafting(), truth(tokenizer, texts))


def test_a_damaged_table_is_replaced_by_indexing_in_memory(
    tmp_path: Path, tokenizer: Tokenizer, store: Path
) -> None:
    root = tmp_path / "workspace"
    texts = stdlib_folder(root, 100_000)
    first = WorkspaceIndex(tokenizer.n_vocab, root=root, tokenizer=tokenizer, settings=TINY)
    first.load(store, FINGERPRINT)
    first.index_folder()
    (table,) = store.parent.glob("*.table")
    table.write_bytes(table.read_bytes()[:100])
    again = WorkspaceIndex(tokenizer.n_vocab, root=root, tokenizer=tokenizer, settings=IndexSettings(memory_budget=64 << 20))
    again.load(store, FINGERPRINT)
    assert again.status().table_files == 0
    again.index_folder()
    assert again.cache == truth(tokenizer, texts)
