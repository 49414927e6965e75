"""A session's workspace folders: every root its editor named, in order, and for each, once the
model's tokenizer is known, its folder (workspace/folder.py) indexed with it, shared with the
daemon's other sessions on the same root (folder_host.py). A model with another tokenizer makes
them index again; changed ignore patterns or budget too."""

from __future__ import annotations

import logging
import threading
from pathlib import Path

from lookahead_lsp.service.documents import OpenDocuments
from lookahead_lsp.service.folder_host import FolderHost, IndexTokenizer, SharedFolder
from lookahead_lsp.base.editor import Editor
from lookahead_lsp.base.errors import UserError
from lookahead_lsp.workspace.folder import FolderSettings, FolderStatus, WorkspaceFolder


class WorkspaceFolders:
    """lock: the service's re-entrant lock, which guards the open documents too, so that a
    folder is joined with the documents open in it and no editor change overtakes them."""

    def __init__(
        self,
        client: Editor,
        lock: threading.RLock,
        documents: OpenDocuments,
        settings: FolderSettings,
        host: FolderHost,
    ) -> None:
        self._client = client
        self._lock = lock
        self._documents = documents
        self._host = host
        self.settings = settings  # those of folders joined from now on
        self._roots: list[Path] = []  # indexed or not yet
        self._folders: dict[Path, SharedFolder] = {}  # joined with the current tokenizer
        self._tokenizer: IndexTokenizer | None = None
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
            shared = self._folders.pop(root, None)
        if shared is not None:
            self._host.release(shared, self._client, save)

    def roots(self) -> list[Path]:
        with self._lock:
            return list(self._roots)

    def statuses(self) -> tuple[list[Path], list[FolderStatus]]:
        """The roots, and the statuses of the folders joined so far, in the same order."""
        with self._lock:
            roots = list(self._roots)
            folders = [self._folders.get(root) for root in roots]
        return roots, [shared.folder.status() for shared in folders if shared is not None]

    def of(self, path: Path | None) -> WorkspaceFolder | None:
        """The innermost folder holding path."""
        shared = self._shared_of(path)
        return shared.folder if shared is not None else None

    def editor_text(self, path: Path | None, text: str | None) -> None:
        """The session's editor text of a document (None: closed), for the folder holding it."""
        with self._lock:
            shared = self._shared_of(path)
            if shared is not None and path is not None:
                self._host.editor_text(shared, self._client, path, text)

    def configure(self, settings: FolderSettings) -> None:
        """New settings: the folders reopen their static cache when it changed, and are
        indexed again when the ignore patterns or the budget did."""
        with self._lock:
            old, self.settings = self.settings, settings
            folders = list(self._folders.values())
        for shared in folders:
            self._host.configure(shared, settings)
        if settings.ignore != old.ignore or settings.memory_budget != old.memory_budget:
            self._rejoin()

    def rebuild(self) -> None:
        """Indexes the folders again from their files, not their saved copies (for every session
        sharing them)."""
        with self._lock:
            folders = list(self._folders.values())
        for shared in folders:
            self._host.rebuild(shared)

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
        self._leave_all(save=True)
        try:
            tokenizer = self._host.acquire_tokenizer(model_path)
        except (OSError, UserError, ValueError, RuntimeError) as error:
            self._client.show(logging.WARNING, f"lookahead-lsp: cannot index: {error}")
            return
        with self._lock:
            closed = self._closed
            if not closed:
                self._tokenizer = tokenizer
        if closed:
            self._host.release_tokenizer(tokenizer)
            return
        if old is not None:
            self._host.release_tokenizer(old)
        self._open_missing()

    def close(self) -> None:
        """Lets every folder and the tokenizer go (the last session out saves and stops them);
        joins nothing afterwards."""
        with self._lock:
            self._closed = True
            roots = list(self._roots)
        for root in roots:
            self.remove(root, save=True)
        with self._lock:
            tokenizer, self._tokenizer = self._tokenizer, None
        if tokenizer is not None:
            self._host.release_tokenizer(tokenizer)

    def _rejoin(self) -> None:
        self._leave_all(save=True)
        self._open_missing()

    def _leave_all(self, save: bool) -> None:
        with self._lock:
            folders, self._folders = list(self._folders.values()), {}
        for shared in folders:
            self._host.release(shared, self._client, save)

    def _open_missing(self) -> None:
        with self._lock:
            if self._closed or self._tokenizer is None:
                return
            for root in self._roots:
                if root not in self._folders:
                    self._open(root)

    def _open(self, root: Path) -> None:
        """Joins the root's folder (started if no other session has it) with the session's
        documents open in it (the lock held)."""
        assert self._tokenizer is not None
        shared = self._host.acquire(root, self._tokenizer, self.settings, self._client)
        self._folders[root] = shared
        for doc in self._documents.all():
            if doc.path is not None and not doc.oversized and self._shared_of(doc.path) is shared:
                self._host.editor_text(shared, self._client, doc.path, doc.text)

    def _shared_of(self, path: Path | None) -> SharedFolder | None:
        if path is None:
            return None
        with self._lock:
            matches = [s for root, s in self._folders.items() if path.is_relative_to(root)]
        return max(matches, key=lambda s: len(s.folder.root.parts), default=None)
