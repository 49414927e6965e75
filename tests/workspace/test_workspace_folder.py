"""One workspace folder with the real tokenizer: indexed on its own thread, editor text indexed
after the debounce (latest text per document wins; closing goes back to the disk), the saved
copy reused by the next start, and the static cache found in the folder."""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from lookahead_lsp._lookup import StaticCacheBuilder
from lookahead_lsp.base.tokenizer import Tokenizer, tokenize_file_text
from lookahead_lsp.workspace.folder import STATIC_CACHE_NAME, FolderSettings, WorkspaceFolder
from support.recording_client import RecordingClient
from support.waiting import wait_until

WAIT_S = 60.0
MAIN = "def main():\n    return compute(1, 2)\n"

pytestmark = pytest.mark.usefixtures("hermetic_git")


@pytest.fixture
def root(tmp_path: Path) -> Path:
    folder = tmp_path / "project"
    folder.mkdir()
    (folder / "main.py").write_text(MAIN)
    return folder


@pytest.fixture
def started(tokenizer: Tokenizer, root: Path, tmp_path: Path) -> Iterator[tuple[WorkspaceFolder, RecordingClient]]:
    folder, client = _start(tokenizer, root, tmp_path / "cache")
    yield folder, client
    folder.stop(save=False)


def _start(tokenizer: Tokenizer, root: Path, cache_dir: Path) -> tuple[WorkspaceFolder, RecordingClient]:
    client = RecordingClient()
    settings = FolderSettings(cache_dir=cache_dir, debounce_s=0.05)
    folder = WorkspaceFolder(root, tokenizer, threading.Lock(), tokenizer.fingerprint, client, settings)
    folder.start()
    _until(lambda: folder.status().indexed)
    return folder, client


def _until(check: Callable[[], bool]) -> None:
    wait_until(check, WAIT_S, 0.02)


def _tokens(tokenizer: Tokenizer, *texts: str) -> int:
    return sum(len(tokenize_file_text(tokenizer, text.encode())) for text in texts)


def test_editor_text_is_indexed_after_the_debounce_and_closing_goes_back_to_the_disk(
    started: tuple[WorkspaceFolder, RecordingClient], tokenizer: Tokenizer, root: Path
) -> None:
    folder, _ = started
    assert folder.status().index.tokens == _tokens(tokenizer, MAIN)
    path = root / "main.py"
    edits = [MAIN + f"value_{i} = compute({i}, {i})\n" * i for i in range(1, 30)]
    for text in edits:  # typed faster than the debounce: the index ends with the last text
        folder.editor_text(path, text)
    _until(lambda: folder.status().index.tokens == _tokens(tokenizer, edits[-1]))
    assert folder.status().index.open_documents == 1
    folder.editor_text(path, None)
    _until(lambda: folder.status().index.tokens == _tokens(tokenizer, MAIN))
    assert folder.status().index.open_documents == 0


def test_a_document_not_on_disk_counts_while_open(
    started: tuple[WorkspaceFolder, RecordingClient], tokenizer: Tokenizer, root: Path
) -> None:
    folder, _ = started
    draft = "def draft():\n    return 3\n"
    folder.editor_text(root / "draft.py", draft)
    _until(lambda: folder.status().index.files == 2)
    assert folder.status().index.tokens == _tokens(tokenizer, MAIN, draft)
    folder.editor_text(root / "draft.py", None)
    _until(lambda: folder.status().index.files == 1)


def test_the_saved_copy_is_used_by_the_next_start(tokenizer: Tokenizer, root: Path, tmp_path: Path) -> None:
    first, client = _start(tokenizer, root, tmp_path / "cache")
    assert client.matching("1 files (1 tokenized, 0 unchanged)")
    first.stop(save=True)
    second, client = _start(tokenizer, root, tmp_path / "cache")
    try:
        assert client.matching("1 files (0 tokenized, 1 unchanged)")
        assert second.status().index.tokens == _tokens(tokenizer, MAIN)
    finally:
        second.stop(save=False)


def test_the_folders_static_cache_is_opened_and_verified(tokenizer: Tokenizer, root: Path, tmp_path: Path) -> None:
    cache_file = root / STATIC_CACHE_NAME
    cache_file.parent.mkdir()
    builder = StaticCacheBuilder(tokenizer.n_vocab)
    builder.add(tokenizer.tokenize(MAIN * 3))
    builder.write(str(cache_file), tokenizer.fingerprint)
    folder, client = _start(tokenizer, root, tmp_path / "cache")
    try:
        workspace, repository = folder.caches()
        assert repository is not None and folder.status().static_cache == cache_file
        assert workspace is folder.index.cache
        # The editor was told of the opened cache and of the end of indexing, and only then.
        _until(lambda: client.status_changes >= 2)
        told = client.status_changes
        assert folder.caches()[1] is repository and client.status_changes == told
        cache_file.write_bytes(b"not a cache")  # damaged on disk: refused before the next use
        assert folder.caches()[1] is None and folder.status().static_cache is None
        assert client.status_changes == told + 1
    finally:
        folder.stop(save=False)


def test_a_lookahead_folder_that_leads_out_of_the_workspace_is_not_used(
    tokenizer: Tokenizer, root: Path, tmp_path: Path
) -> None:
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    builder = StaticCacheBuilder(tokenizer.n_vocab)
    builder.add(tokenizer.tokenize(MAIN * 3))
    builder.write(str(elsewhere / STATIC_CACHE_NAME.name), tokenizer.fingerprint)
    (root / STATIC_CACHE_NAME.parent).symlink_to(elsewhere, target_is_directory=True)
    folder, client = _start(tokenizer, root, tmp_path / "cache")
    try:
        assert folder.caches()[1] is None and folder.status().static_cache is None
        assert len(client.matching("leads out of the folder")) == 1
    finally:
        folder.stop(save=False)
