"""The workspace part of lookahead/status: the folders' indexes added up, each folder's root,
repository cache and watcher."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from lookahead_lsp.workspace.folder import FolderStatus


def workspace_status(roots: list[Path], statuses: list[FolderStatus], model_failed: bool) -> dict[str, Any]:
    """"index" (the workspace caches' files, tokens and n-grams, and whether any folder is
    indexing), "folders" (one entry per root, in order) and "repository_cache" (the first
    folder's in use, or None). statuses: those of the folders created so far."""
    totals = {"files": 0, "tokens": 0, "ngrams": 0}
    indexing = False
    for status in statuses:
        totals["files"] += status.index.files
        totals["tokens"] += status.index.tokens
        totals["ngrams"] += status.index.ngrams
        indexing = indexing or status.index.state == "indexing" or not status.indexed
    # Until its first indexing ends a folder counts as indexing, also while it waits for
    # the model; only a model that failed to load leaves it unindexed for good. Later
    # rescans show in the index's own state.
    if len(statuses) < len(roots) and not model_failed:
        indexing = True
    by_root = {status.root: status for status in statuses}
    repository = [str(status.repository_cache) for status in statuses if status.repository_cache is not None]
    return {
        "index": {**totals, "state": "indexing" if indexing else "ready"},
        "folders": [_folder_status(root, by_root.get(root)) for root in roots],
        "repository_cache": repository[0] if repository else None,
    }


def _folder_status(root: Path, status: FolderStatus | None) -> dict[str, Any]:
    """A folder's root, repository cache in use, how its watcher learns of changes (watching
    events, or polling and why; stopped until it is indexed), and its index: state, files,
    memory against the budget, and the folder table on disk (table_files 0: none)."""
    if status is None:
        return {"root": str(root), "repository_cache": None, "watcher": {"mode": "stopped", "reason": ""}, "index": None}
    index = status.index
    return {
        "root": str(root),
        "repository_cache": str(status.repository_cache) if status.repository_cache is not None else None,
        "watcher": {"mode": status.watcher.mode, "reason": status.watcher.reason},
        "index": {
            "state": "indexing" if index.state == "indexing" or not status.indexed else "ready",
            "files": index.files,
            "tokens": index.tokens,
            "memory_bytes": index.memory_bytes,
            "budget_bytes": index.budget_bytes,
            "table_files": index.table_files,
            "table_bytes": index.table_bytes,
        },
    }
