"""The workspace folders of one daemon, shared by its sessions (editor windows), as model_host.py
shares the models: sessions that open the same root with the same model and the same index
settings share one WorkspaceFolder, so two windows on one repository hold one index in memory,
run one watcher and one indexing thread, and write one saved index. The tokenizer the folders
index with is loaded once per model file, not once per window.

- The memory budget is the daemon's: each folder gets its budget divided by the number of
  folders the daemon holds, so N folders together stay within one budget (a folder whose share
  shrank writes its bulk to disk at its next budget check).
- Each session's editor texts are kept apart: a document open in two windows stays indexed with
  the text of the window that changed it last until both have closed it; a window that leaves
  takes only its own texts with it.
- What a shared folder says (progress, warnings, status changes) reaches every session using it.
- A folder is stopped, and its index saved, when its last session lets it go."""

from __future__ import annotations

import logging
import threading
from dataclasses import dataclass, field
from pathlib import Path

from lookahead_lsp.base.editor import Editor
from lookahead_lsp.base.tokenizer import Tokenizer
from lookahead_lsp.workspace.folder import FolderSettings, WorkspaceFolder
from lookahead_lsp.workspace.index import default_memory_budget
from lookahead_lsp.workspace.store import store_path_for


@dataclass(eq=False)
class IndexTokenizer:
    """The folders' tokenizer for one model file (vocabulary only, apart from the engine's), its
    vocabulary's fingerprint, the lock its users take, and how many hold it (sessions and
    folders)."""

    tokenizer: Tokenizer
    fingerprint: int
    lock: threading.Lock = field(default_factory=threading.Lock)
    holders: int = 0


@dataclass(frozen=True)
class _FolderKey:
    """What makes two sessions' folders one: the root, the model's vocabulary, and the settings
    that change what is indexed and where it is saved (the static cache is the last
    configuring session's, the debounce the first session's)."""

    root: Path
    model_path: Path
    ignore: tuple[str, ...]
    cache_dir: Path | None
    memory_budget: int


class _Editors:
    """The editors of the sessions using one folder: what the folder says goes to each."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._editors: list[Editor] = []

    def add(self, editor: Editor) -> None:
        with self._lock:
            self._editors.append(editor)

    def remove(self, editor: Editor) -> None:
        with self._lock:
            self._editors.remove(editor)

    def _all(self) -> list[Editor]:
        with self._lock:
            return list(self._editors)

    def log(self, level: int, message: str) -> None:
        for editor in self._all():
            editor.log(level, message)

    def show(self, level: int, message: str) -> None:
        for editor in self._all():
            editor.show(level, message)

    def progress(self, token: str, title: str, message: str, percent: int | None, done: bool) -> None:
        for editor in self._all():
            editor.progress(token, title, message, percent, done)

    def status_changed(self) -> None:
        for editor in self._all():
            editor.status_changed()


@dataclass(eq=False)
class SharedFolder:
    """One folder as its sessions hold it. texts: per path, each session's editor text in the
    order the sessions last changed it (the last one is what the index holds)."""

    key: _FolderKey
    settings: FolderSettings
    folder: WorkspaceFolder
    editors: _Editors
    texts: dict[Path, dict[Editor, str]] = field(default_factory=dict)
    sessions: int = 0


class FolderHost:
    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._tokenizers: dict[Path, IndexTokenizer] = {}
        self._folders: dict[_FolderKey, SharedFolder] = {}

    # -- tokenizers ----------------------------------------------------------------------------

    def acquire_tokenizer(self, model_path: Path) -> IndexTokenizer:
        """The folders' tokenizer of model_path, loaded (and fingerprinted) if no session holds
        it: seconds, off the event loop. Raises what Tokenizer raises."""
        with self._lock:
            held = self._tokenizers.get(model_path)
            if held is not None:
                held.holders += 1
                return held
        tokenizer = Tokenizer(model_path)
        try:
            fingerprint = tokenizer.fingerprint
        except BaseException:
            tokenizer.close()
            raise
        with self._lock:
            held = self._tokenizers.get(model_path)  # another session loaded it meanwhile
            spare = held is not None
            if held is None:
                held = self._tokenizers[model_path] = IndexTokenizer(tokenizer, fingerprint)
            held.holders += 1
        if spare:
            tokenizer.close()
        return held

    def release_tokenizer(self, held: IndexTokenizer) -> None:
        with self._lock:
            held.holders -= 1
            last = held.holders == 0
            if last:
                del self._tokenizers[held.tokenizer.model_path]
        if last:
            held.tokenizer.close()

    # -- folders -------------------------------------------------------------------------------

    def acquire(self, root: Path, tokenizer: IndexTokenizer, settings: FolderSettings, editor: Editor) -> SharedFolder:
        """The folder of root for a session (its editor), started if no session holds it; the
        folders' budgets are shared out again."""
        key = _FolderKey(root, tokenizer.tokenizer.model_path, settings.ignore, settings.cache_dir, settings.memory_budget)
        with self._lock:
            shared = self._folders.get(key)
            fresh = shared is None
            if shared is None:
                editors = _Editors()
                tokenizer.holders += 1
                folder = self._new_folder(root, tokenizer, settings, editors)
                shared = self._folders[key] = SharedFolder(key, settings, folder, editors)
            shared.sessions += 1
            shared.editors.add(editor)
            self._share_budgets()
        if fresh:
            shared.folder.start()
        return shared

    def release(self, shared: SharedFolder, editor: Editor, save: bool) -> None:
        """A session lets the folder go: its editor texts leave the index (back to the disk's or
        another session's); the last session out stops the folder (saved when `save`)."""
        with self._lock:
            for path, holders in list(shared.texts.items()):
                if editor in holders:
                    self._set_text(shared, editor, path, None)
            shared.editors.remove(editor)
            shared.sessions -= 1
            last = shared.sessions == 0
            if last:
                del self._folders[shared.key]
                self._share_budgets()
            tokenizer = self._tokenizers_of(shared)
        if last:
            shared.folder.stop(save)
            self.release_tokenizer(tokenizer)

    def editor_text(self, shared: SharedFolder, editor: Editor, path: Path, text: str | None) -> None:
        """A session's editor text of a document in the folder (None: that session closed it)."""
        with self._lock:
            self._set_text(shared, editor, path, text)

    def configure(self, shared: SharedFolder, settings: FolderSettings) -> None:
        """Settings that do not change what is indexed (the static cache): the folder takes
        the last configuring session's."""
        with self._lock:
            old, shared.settings = shared.settings, settings
        if settings.static_cache != old.static_cache:
            shared.folder.set_static_cache(settings.static_cache)

    def rebuild(self, shared: SharedFolder) -> None:
        """Forgets the folder's index, saved index included, and indexes it again from its files,
        with the editor texts of every session using it."""
        with self._lock:
            old = shared.folder
        old.stop(save=False)
        store = store_path_for(old.root, shared.settings.cache_dir)
        for table in store.parent.glob(f"{store.stem}.*.table"):
            table.unlink(missing_ok=True)
        store.unlink(missing_ok=True)
        with self._lock:
            tokenizer = self._tokenizers_of(shared)
            folder = self._new_folder(old.root, tokenizer, shared.settings, shared.editors)
            shared.folder = folder
            self._share_budgets()
            for path, holders in shared.texts.items():
                folder.editor_text(path, next(reversed(holders.values())))
        folder.start()

    def folders(self) -> int:
        """Folders held (indexing or indexed)."""
        with self._lock:
            return len(self._folders)

    def close(self) -> None:
        """Stops and saves every folder now (the daemon is leaving)."""
        with self._lock:
            folders = list(self._folders.values())
            self._folders.clear()
        for shared in folders:
            shared.folder.stop(save=True)
        with self._lock:
            tokenizers = list(self._tokenizers.values())
            self._tokenizers.clear()
        for held in tokenizers:
            held.tokenizer.close()

    # -- the lock held -------------------------------------------------------------------------

    def _new_folder(self, root: Path, tokenizer: IndexTokenizer, settings: FolderSettings, editors: _Editors) -> WorkspaceFolder:
        """A folder not started yet: _share_budgets gives it its share before it starts."""
        return WorkspaceFolder(root, tokenizer.tokenizer, tokenizer.lock, tokenizer.fingerprint, editors, settings)

    def _share_budgets(self) -> None:
        count = len(self._folders)
        for shared in self._folders.values():
            shared.folder.set_memory_budget(_budget(shared.settings) // count)

    def _set_text(self, shared: SharedFolder, editor: Editor, path: Path, text: str | None) -> None:
        holders = shared.texts.setdefault(path, {})
        holders.pop(editor, None)
        if text is not None:
            holders[editor] = text  # last: the latest change
        elif not holders:
            del shared.texts[path]
        shared.folder.editor_text(path, next(reversed(holders.values()), None))

    def _tokenizers_of(self, shared: SharedFolder) -> IndexTokenizer:
        return self._tokenizers[shared.key.model_path]


def _budget(settings: FolderSettings) -> int:
    """The daemon's budget for its indexes together, as the folder's settings name it."""
    return settings.memory_budget or default_memory_budget()
