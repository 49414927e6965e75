"""The service's workspace folders: every root the editor named, in order, and for each, once the
model's tokenizer is known, its WorkspaceFolder (workspace/folder.py) indexed with it. A model
with another tokenizer makes them index again; changed ignore patterns too."""

from __future__ import annotations

import logging
import threading
from dataclasses import dataclass
from pathlib import Path

from lookahead_lsp.service.documents import OpenDocuments
from lookahead_lsp.base.editor import Editor
from lookahead_lsp.base.errors import UserError
from lookahead_lsp.base.tokenizer import Tokenizer
from lookahead_lsp.workspace.folder import FolderSettings, FolderStatus, WorkspaceFolder
from lookahead_lsp.workspace.store import store_path_for


@dataclass(frozen=True)
class _IndexTokenizer:
    """The folders' tokenizer (vocabulary only, apart from the engine's) and its vocabulary's
    fingerprint."""

    tokenizer: Tokenizer
    fingerprint: int


class WorkspaceFolders:
    """lock: the service's re-entrant lock, which guards the open documents too, so that a
    folder is created with the documents open in it and no editor change overtakes them."""

    def __init__(
        self, client: Editor, lock: threading.RLock, documents: OpenDocuments, settings: FolderSettings
    ) -> None:
        self._client = client
        self._lock = lock
        self._documents = documents
        self.settings = settings  # those of folders created from now on
        self._roots: list[Path] = []  # indexed or not yet
        self._folders: dict[Path, WorkspaceFolder] = {}  # indexed with the current tokenizer
        self._tokenizer: _IndexTokenizer | None = None
        self._tokenizer_lock = threading.Lock()
        self._use_lock = threading.Lock()  # one use_model at a time
        self._closed = False

    def add(self, root: Path) -> None:
        """A workspace folder (resolved), indexed once the model's tokenizer is known."""
        with self._lock:
            if root in self._roots or self._closed:
                return
            self._roots.append(root)
            if self._tokenizer is not None:
                self._open(root)

    def remove(self, root: Path, save: bool) -> None:
        with self._lock:
            if root in self._roots:
                self._roots.remove(root)
            folder = self._folders.pop(root, None)
        if folder is not None:
            folder.stop(save)

    def roots(self) -> list[Path]:
        with self._lock:
            return list(self._roots)

    def statuses(self) -> tuple[list[Path], list[FolderStatus]]:
        """The roots, and the statuses of the folders created so far, in the same order."""
        with self._lock:
            roots = list(self._roots)
            folders = [self._folders.get(root) for root in roots]
        return roots, [folder.status() for folder in folders if folder is not None]

    def of(self, path: Path | None) -> WorkspaceFolder | None:
        """The innermost folder holding path."""
        if path is None:
            return None
        with self._lock:
            matches = [f for root, f in self._folders.items() if path.is_relative_to(root)]
        return max(matches, key=lambda f: len(f.root.parts), default=None)

    def configure(self, settings: FolderSettings) -> None:
        """New settings: the folders reopen their repository cache when it changed, and are
        indexed again when the ignore patterns did."""
        with self._lock:
            old, self.settings = self.settings, settings
            folders = list(self._folders.values())
        if settings.repository_cache != old.repository_cache:
            for folder in folders:
                folder.set_repository_cache(settings.repository_cache)
        if settings.ignore != old.ignore or settings.memory_budget != old.memory_budget:
            self.reopen(save=True)

    def reopen(self, save: bool, forget: bool = False) -> None:
        """Indexes the folders again with the current settings (forget: from their files, not
        their saved copies)."""
        with self._lock:
            folders, self._folders = list(self._folders.values()), {}
            roots = list(self._roots)
        for folder in folders:
            folder.stop(save)
        if forget:
            for root in roots:
                store = store_path_for(root, self.settings.cache_dir)
                for table in store.parent.glob(f"{store.stem}.*.table"):
                    table.unlink(missing_ok=True)
                store.unlink(missing_ok=True)
        self._open_missing()

    def use_model(self, model_path: Path) -> None:
        """Once the model is known: the folders are indexed with its tokenizer (again, when
        another model's was used). Calls run one at a time: a second for the same model only
        opens the folders added since."""
        with self._use_lock:
            self._use_model(model_path)

    def _use_model(self, model_path: Path) -> None:
        with self._lock:
            old = self._tokenizer
        if old is not None and old.tokenizer.model_path == model_path:
            self._open_missing()
            return
        with self._lock:
            folders, self._folders = list(self._folders.values()), {}
        for folder in folders:
            folder.stop(save=True)
        try:
            tokenizer = Tokenizer(model_path)
            with self._tokenizer_lock:
                fingerprint = tokenizer.fingerprint
        except (OSError, UserError, ValueError, RuntimeError) as error:
            self._client.show(logging.WARNING, f"lookahead-lsp: cannot index: {error}")
            return
        with self._lock:
            if self._closed:
                tokenizer.close()
                return
            self._tokenizer = _IndexTokenizer(tokenizer, fingerprint)
        if old is not None:
            old.tokenizer.close()
        self._open_missing()

    def close(self) -> None:
        """Saves and stops every folder and frees the tokenizer; adds nothing afterwards."""
        with self._lock:
            self._closed = True
            roots = list(self._roots)
        for root in roots:
            self.remove(root, save=True)
        with self._lock:
            tokenizer, self._tokenizer = self._tokenizer, None
        if tokenizer is not None:
            tokenizer.tokenizer.close()

    def _open_missing(self) -> None:
        with self._lock:
            if self._closed or self._tokenizer is None:
                return
            for root in self._roots:
                if root not in self._folders:
                    self._open(root)

    def _open(self, root: Path) -> None:
        """Creates and starts the folder's indexing, with the documents open in it (the lock
        held)."""
        assert self._tokenizer is not None
        tokenizer = self._tokenizer
        folder = WorkspaceFolder(
            root, tokenizer.tokenizer, self._tokenizer_lock, tokenizer.fingerprint, self._client, self.settings
        )
        self._folders[root] = folder
        for doc in self._documents.all():
            if doc.path is not None and not doc.oversized and self.of(doc.path) is folder:
                folder.editor_text(doc.path, doc.text)
        folder.start()
