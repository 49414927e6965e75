"""What the language server does, without the protocol: the model (loaded in the background),
one workspace index, watcher and static cache per workspace folder, completions scheduled on one
model worker, and the status the editor shows. The server (server.py) only translates LSP
messages into calls of this class and its answers back."""

from __future__ import annotations

import logging
import os
import stat
import threading
from collections import OrderedDict
from collections.abc import Callable
from concurrent.futures import Future
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

from lookahead_lsp import __version__
from lookahead_lsp._lookup import CacheError, StaticCache
from lookahead_lsp.completions import CompletionWorker, SuggestionCache
from lookahead_lsp.engine import (
    CancelToken,
    Completion,
    CompletionRequest,
    ContextChunk,
    DecodeOptions,
    DraftCaches,
    Engine,
    EngineSettings,
    PromptWindows,
)
from lookahead_lsp.errors import UserError
from lookahead_lsp.models import resolve_model_path
from lookahead_lsp.settings import Settings, apply_update
from lookahead_lsp.tokenizer import Tokenizer
from lookahead_lsp.unopened import read_unopened
from lookahead_lsp.workspace.index import IndexProgress, IndexSettings, WorkspaceIndex
from lookahead_lsp.workspace.store import store_path_for
from lookahead_lsp.workspace.watcher import WatcherStatus, WorkspaceWatcher

_LOG = logging.getLogger(__name__)
STATIC_CACHE_NAME = Path(".lookahead") / "static.cache"
# Extra context for the prompt: this many recently edited other documents, this many lines
# around their last edit.
_RECENT_DOCUMENTS = 3
_CONTEXT_LINES = 12
# A request waits this long for a model still loading before it answers nothing.
_MODEL_WAIT_S = 30.0


class Client(Protocol):
    """How the service talks back to the editor; callable from any thread."""

    def log(self, level: int, message: str) -> None: ...
    def show(self, level: int, message: str) -> None: ...
    def progress(self, token: str, title: str, message: str, percent: int | None, done: bool) -> None: ...


@dataclass
class Answer:
    text: str
    source: str  # "model" or "cache"
    completion: Completion | None = None


@dataclass
class Counters:
    served: int = 0
    from_cache: int = 0
    cancelled: int = 0
    failed: int = 0


@dataclass
class Folder:
    root: Path
    index: WorkspaceIndex
    watcher: WorkspaceWatcher | None = None
    static: StaticCache | None = None  # set once opened and verified
    static_path: Path | None = None
    # The static cache is (re)opened, off the event loop, before indexing or the next completion
    # needs it: at first, after a settings change, when its file changed on disk.
    static_stale: bool = True
    static_stamp: tuple[int, int, int, int] | None = None  # its file when last opened or tried
    static_lock: threading.Lock = field(default_factory=threading.Lock)
    stop: threading.Event = field(default_factory=threading.Event)
    thread: threading.Thread | None = None
    # Set once the first indexing has ended (its watcher running) or failed.
    indexed: threading.Event = field(default_factory=threading.Event)


@dataclass
class _Document:
    path: Path | None
    text: str  # empty for a document above the size cap
    edited_line: int = 0
    oversized: bool = False


class LookaheadService:
    def __init__(self, client: Client, cache_dir: Path | None = None) -> None:
        self.client = client
        self.cache_dir = cache_dir
        self.settings = Settings()
        self.counters = Counters()
        self.last: dict[str, Any] | None = None
        self.folders: dict[Path, Folder] = {}
        self.documents: OrderedDict[str, _Document] = OrderedDict()  # most recently edited last
        self.suggestions = SuggestionCache()
        self._oversized_reported: set[str] = set()  # URIs whose size was reported, until closed
        self.worker: CompletionWorker[Answer] = CompletionWorker(self.settings.debounce_ms / 1000)
        self._lock = threading.RLock()
        self._engine: Engine | None = None
        self._engine_ready = threading.Event()
        self._engine_error: str | None = None
        self._model_path: Path | None = None
        self._tokenizer: Tokenizer | None = None  # the indexes' own (vocabulary only)
        self._tokenizer_lock = threading.Lock()
        self._fingerprint: int | None = None
        self._loader: threading.Thread | None = None
        self._closed = False

    # -- lifecycle -----------------------------------------------------------------------------

    def configure(self, raw: Any) -> None:
        """Applies editor settings; reports unknown keys and refused values; reloads what a
        change needs (the model, the static caches, the indexes' ignore patterns)."""
        update = apply_update(self.settings, raw)
        for problem in update.problems:
            self.client.show(logging.WARNING, f"lookahead-lsp: {problem}")
        with self._lock:
            self.settings = update.settings
            self.worker.debounce_s = self.settings.debounce_ms / 1000
        model_keys = {"model_path", "context_size", "threads", "gpu_layers"}
        if self._loader is not None and update.changed & model_keys:
            self.start_model()
        if "static_cache_path" in update.changed:
            for folder in list(self.folders.values()):
                folder.static_stale = True
        if self._loader is not None and "ignore_globs" in update.changed:
            for root in list(self.folders):
                self.remove_folder(root)
                self.add_folder(root)

    def start_model(self) -> None:
        """(Re)loads the model on a background thread; requests wait for it."""
        self._engine_ready.clear()
        self._loader = threading.Thread(target=self._load_model, name="lookahead-load", daemon=True)
        self._loader.start()

    def _load_model(self) -> None:
        with self._lock:
            old, self._engine = self._engine, None
            self._engine_error = None
        if old is not None:
            self.worker.submit("\0reload", lambda _cancel: _close(old), essential=True)
        s = self.settings
        try:
            path = resolve_model_path(None, s.model_path, asker="editor")
            engine = Engine(EngineSettings(path, s.context_size, s.threads, s.gpu_layers, self.cache_dir))
            _ = engine.cost_model  # measured once per machine; a few seconds the first time
            _ = engine.token_prefixes  # for token healing; built here, not in the first request
        except (UserError, OSError, ValueError) as error:
            message = str(error)
            with self._lock:
                self._engine_error = message
                self._model_path = None
            self._engine_ready.set()
            self.client.show(logging.ERROR, f"lookahead-lsp: no completions: {message}")
            return
        with self._lock:
            self._engine, self._model_path = engine, path
        self._engine_ready.set()
        self.client.log(logging.INFO, f"model loaded: {path}")
        for folder in list(self.folders.values()):
            if folder.thread is None:
                self._start_indexing(folder)

    def shutdown(self) -> None:
        """Saves every index, stops the threads, frees the model. Idempotent."""
        with self._lock:
            if self._closed:
                return
            self._closed = True
        for root in list(self.folders):
            self.remove_folder(root)
        self.worker.stop()
        with self._lock:
            engine, self._engine = self._engine, None
            tokenizer, self._tokenizer = self._tokenizer, None
        if engine is not None:
            engine.close()
        if tokenizer is not None:
            tokenizer.close()

    # -- workspace folders ---------------------------------------------------------------------

    def add_folder(self, root: Path) -> None:
        root = root.resolve()
        with self._lock:
            if root in self.folders or self._closed:
                return
            index = WorkspaceIndex(
                self._n_vocab(),
                root=root,
                tokenizer_lock=self._tokenizer_lock,
                settings=IndexSettings(ignore=self.settings.ignore_globs),
            )
            folder = self.folders[root] = Folder(root, index)
        if self._engine_ready.is_set() and self._engine is not None:
            self._start_indexing(folder)

    def remove_folder(self, root: Path, save: bool = True) -> None:
        with self._lock:
            folder = self.folders.pop(root.resolve(), None)
        if folder is None:
            return
        folder.stop.set()
        if folder.thread is not None:
            folder.thread.join()
        if folder.watcher is not None:
            folder.watcher.stop()
        if save:
            self._save(folder)
        # Not closed: a completion on the worker may still draft with it; the last reference
        # going frees it.
        folder.static = None

    def rebuild_indexes(self) -> None:
        """Forgets every folder's index, saved copy included, and indexes the folders again
        from their files; the static caches are opened and verified again too."""
        for root in list(self.folders):
            self.remove_folder(root, save=False)
            store_path_for(root, self.cache_dir).unlink(missing_ok=True)
            self.add_folder(root)

    def _n_vocab(self) -> int:
        engine = self._engine
        return engine.tokenizer.n_vocab if engine is not None else 262144

    def _start_indexing(self, folder: Folder) -> None:
        folder.thread = threading.Thread(
            target=self._index, args=(folder,), name=f"index {folder.root.name}", daemon=True
        )
        folder.thread.start()

    def _index(self, folder: Folder) -> None:
        token = f"lookahead-index-{id(folder)}"
        try:
            tokenizer = self._index_tokenizer()
            if tokenizer.n_vocab != folder.index.cache.n_vocab:
                folder.index = WorkspaceIndex(
                    tokenizer.n_vocab,
                    root=folder.root,
                    tokenizer_lock=self._tokenizer_lock,
                    settings=IndexSettings(ignore=self.settings.ignore_globs),
                )
            fingerprint = self._tokenizer_fingerprint(tokenizer)
            self._refresh_static(folder)
            folder.index.load(store_path_for(folder.root, self.cache_dir), fingerprint)
            title = f"Indexing {folder.root.name}"
            self.client.progress(token, title, "listing files", 0, False)

            def report(p: IndexProgress) -> None:
                percent = 100 * p.bytes_done // p.bytes_total if p.bytes_total else 100
                self.client.progress(token, title, f"{p.files_done}/{p.files_total} files", percent, False)

            stats = folder.index.index_folder(tokenizer=tokenizer, progress=report, cancelled=folder.stop.is_set)
            status = folder.index.status()
            self.client.progress(token, title, f"{status.files} files, {status.tokens} tokens", 100, True)
            self.client.log(
                logging.INFO,
                f"indexed {folder.root}: {status.files} files ({stats.tokenized} tokenized, "
                f"{stats.unchanged} unchanged) in {stats.seconds:.1f} s",
            )
            if folder.stop.is_set():
                return
            # Documents opened while the model loaded: the editor's text wins over the disk's.
            for doc in list(self.documents.values()):
                if doc.path is not None and not doc.oversized and self.folder_of(doc.path) is folder:
                    folder.index.open_document(doc.path, doc.text)
            folder.watcher = WorkspaceWatcher(folder.index)
            folder.watcher.start()
        except (OSError, UserError, ValueError, RuntimeError) as error:
            self.client.show(logging.WARNING, f"lookahead-lsp: cannot index {folder.root}: {error}")
        finally:
            folder.indexed.set()

    def _index_tokenizer(self) -> Tokenizer:
        with self._lock:
            if self._tokenizer is None or self._tokenizer.model_path != self._model_path:
                if self._model_path is None:
                    raise UserError("no model")
                self._tokenizer = Tokenizer(self._model_path)
                self._fingerprint = None
            return self._tokenizer

    def _tokenizer_fingerprint(self, tokenizer: Tokenizer) -> int:
        with self._tokenizer_lock:
            if self._fingerprint is None:
                self._fingerprint = tokenizer.fingerprint
            return self._fingerprint

    def _refresh_static(self, folder: Folder) -> None:
        """(Re)opens the folder's static cache when it is stale (at first, after a settings
        change) or its file changed on disk (one that was missing or refused included): on the
        indexing thread or the model's worker, never the event loop, as verify reads it all."""
        with folder.static_lock:
            path = self._static_path(folder)
            if folder.static is not None:
                changed = folder.static.changed_on_disk()
            else:
                changed = _file_stamp(path) != folder.static_stamp
            if folder.static_stale or changed:
                folder.static_stale = False
                self._open_static(folder, path)

    def _static_path(self, folder: Folder) -> Path:
        """The configured static cache, else .lookahead/static.cache in the folder."""
        configured = self.settings.static_cache_path
        return Path(configured).expanduser() if configured else folder.root / STATIC_CACHE_NAME

    def _open_static(self, folder: Folder, path: Path) -> None:
        """Opens and verifies the static cache before drafting uses it. The one it replaces is
        not closed: a completion may still hold it."""
        folder.static, folder.static_path, folder.static_stamp = None, None, None
        try:
            info = path.stat()
        except FileNotFoundError:
            if self.settings.static_cache_path:
                self.client.show(logging.WARNING, f"lookahead-lsp: static cache not found: {path}")
            return
        except OSError as error:
            self.client.show(logging.WARNING, f"lookahead-lsp: static cache not used: {path}: {error.strerror}")
            return
        folder.static_stamp = _stamp(info)
        if not stat.S_ISREG(info.st_mode):  # a FIFO would block the open, a device never end
            self.client.show(logging.WARNING, f"lookahead-lsp: static cache not used: {path} is not a regular file")
            return
        try:
            tokenizer = self._index_tokenizer()
            cache = StaticCache.open(str(path), tokenizer.n_vocab, self._tokenizer_fingerprint(tokenizer))
            cache.verify()
        except (CacheError, UserError) as error:
            self.client.show(logging.WARNING, f"lookahead-lsp: static cache not used: {error}")
            return
        folder.static, folder.static_path = cache, path

    def _save(self, folder: Folder) -> None:
        if self._fingerprint is None or folder.index.root is None:
            return
        try:
            folder.index.save(store_path_for(folder.root, self.cache_dir), self._fingerprint)
        except OSError as error:
            self.client.log(logging.WARNING, f"cannot save the index of {folder.root}: {error}")

    def folder_of(self, path: Path | None) -> Folder | None:
        if path is None:
            return None
        with self._lock:
            matches = [f for root, f in self.folders.items() if path.is_relative_to(root)]
        return max(matches, key=lambda f: len(f.root.parts), default=None)

    # -- documents -----------------------------------------------------------------------------

    def open_document(self, uri: str, path: Path | None, text: str) -> None:
        self.change_document(uri, path, text, 0)

    def change_document(self, uri: str, path: Path | None, text: str, edited_line: int) -> None:
        before = self.documents.pop(uri, None)
        if self._too_large(uri, text):
            self.documents[uri] = _Document(path, "", edited_line, oversized=True)
            if before is not None and not before.oversized:
                # Its editor text grew past the cap: the index goes back to the file on disk,
                # whose own size rule applies.
                self._update_index(path, lambda index, p: index.close_document(p))
            return
        self.documents[uri] = _Document(path, text, edited_line)
        self._update_index(path, lambda index, p: index.change_document(p, text))

    def close_document(self, uri: str, path: Path | None) -> None:
        self.documents.pop(uri, None)
        self._oversized_reported.discard(uri)
        self.worker.cancel(uri)
        self.suggestions.drop(uri)
        self._update_index(path, lambda index, p: index.close_document(p))

    def _too_large(self, uri: str, text: str) -> bool:
        """Whether the text is above maxDocumentKb; said once per document in the log."""
        limit = self.settings.max_document_kb
        if len(text) <= limit * 1024:
            self._oversized_reported.discard(uri)
            return False
        if uri not in self._oversized_reported:
            self._oversized_reported.add(uri)
            self.client.log(
                logging.INFO,
                f"not completed nor indexed from the editor: {uri} ({len(text) // 1024} KiB, maxDocumentKb {limit})",
            )
        return True

    def read_unopened(self, path: Path | None) -> str | None:
        """A file the editor did not open, if it is one the daemon may read (see unopened.py).
        It blocks: call it off the event loop."""
        if path is None:
            return None
        with self._lock:
            roots = list(self.folders)
        return read_unopened(path, roots, self.settings.max_document_kb * 1024)

    def _update_index(self, path: Path | None, update: Callable[[WorkspaceIndex, Path], object]) -> None:
        """Feeds an editor event to the index of the document's folder, if that index is being
        kept (it is not without a model to tokenize with)."""
        folder = self.folder_of(path)
        if folder is None or path is None or folder.thread is None:
            return
        try:
            update(folder.index, path)
        except (ValueError, OSError) as error:
            self.client.log(logging.WARNING, f"index not updated for {path}: {error}")

    def disk_event(self, path: Path, kind: str) -> None:
        """A file event the editor reported (workspace/didChangeWatchedFiles)."""
        folder = self.folder_of(path)
        if folder is not None and folder.watcher is not None:
            folder.watcher.notify(path, kind)  # type: ignore[arg-type]

    # -- completions ---------------------------------------------------------------------------

    def complete(
        self, uri: str, path: Path | None, text: str, offset: int, language: str, invoked: bool = False
    ) -> Future[Answer | None]:
        """The completion at `offset` of `text`: from the suggestion cache at once, else from
        the model on its worker (superseding this document's earlier request). invoked: the
        user asked explicitly (no debounce)."""
        done: Future[Answer | None] = Future()
        if language in self.settings.disabled_languages or self._too_large(uri, text):
            done.set_result(None)
            return done
        prefix, suffix = text[:offset], text[offset:]
        cached = self.suggestions.lookup(uri, prefix, suffix)
        if cached is not None:
            self.counters.from_cache += 1
            done.set_result(Answer(cached, "cache"))
            return done
        settings = self.settings
        request = CompletionRequest(prefix, suffix, self._relative(path, uri), self._recent_chunks(uri),
                                    self._repository(path))
        options = DecodeOptions(
            draft=settings.draft,
            max_tokens=settings.max_tokens,
            time_budget_ms=settings.time_budget_ms,
            windows=PromptWindows(settings.prefix_tokens, settings.suffix_tokens, settings.extra_context_tokens),
        )
        return self.worker.submit(
            uri, lambda cancel: self._run(uri, path, request, options, cancel), debounce=not invoked
        )

    def _run(
        self, uri: str, path: Path | None, request: CompletionRequest, options: DecodeOptions, cancel: CancelToken
    ) -> Answer:
        if not self._engine_ready.wait(_MODEL_WAIT_S):
            return Answer("", "model")
        engine = self._engine
        if engine is None or cancel.cancelled:
            return Answer("", "model")
        try:
            result = engine.complete(request, options, self._caches(path), cancel)
        except Exception as error:
            self.counters.failed += 1
            self.client.log(logging.ERROR, f"completion failed: {error}")
            raise
        if result.stop_reason == "cancelled":
            self.counters.cancelled += 1
        else:
            self.counters.served += 1
            self.suggestions.store(uri, request.prefix, request.suffix, result.text)
            self.last = {"text": result.text, "stop_reason": result.stop_reason, **result.stats.as_dict()}
        return Answer(result.text, "model", result)

    def _caches(self, path: Path | None) -> DraftCaches:
        """The document's folder's caches (on the worker, which refreshes the static one)."""
        folder = self.folder_of(path)
        if folder is None:
            return DraftCaches()
        self._refresh_static(folder)
        return DraftCaches(folder.index.cache, folder.static)

    def note_cancelled(self) -> None:
        self.counters.cancelled += 1

    def _relative(self, path: Path | None, uri: str) -> str:
        folder = self.folder_of(path)
        if path is not None and folder is not None:
            return path.relative_to(folder.root).as_posix()
        return path.name if path is not None else uri.rsplit("/", 1)[-1]

    def _repository(self, path: Path | None) -> str:
        folder = self.folder_of(path)
        return folder.root.name if folder is not None else ""

    def _recent_chunks(self, uri: str) -> tuple[ContextChunk, ...]:
        """Lines around the last edit of the most recently edited other documents."""
        chunks: list[ContextChunk] = []
        for other, doc in reversed(self.documents.items()):
            if other == uri or doc.oversized or len(chunks) >= _RECENT_DOCUMENTS:
                continue
            lines = doc.text.splitlines(keepends=True)
            start = max(0, doc.edited_line - _CONTEXT_LINES)
            text = "".join(lines[start : doc.edited_line + _CONTEXT_LINES])
            if text.strip():
                chunks.append(ContextChunk(self._relative(doc.path, other), text))
        return tuple(chunks)

    # -- status --------------------------------------------------------------------------------

    def status(self) -> dict[str, Any]:
        with self._lock:
            folders = list(self.folders.values())
            model = str(self._model_path) if self._model_path else None
            error = self._engine_error
            loading = not self._engine_ready.is_set()
        totals = {"files": 0, "tokens": 0, "ngrams": 0}
        indexing = False
        for folder in folders:
            s = folder.index.status()
            totals["files"] += s.files
            totals["tokens"] += s.tokens
            totals["ngrams"] += s.ngrams
            # Until its first indexing ends a folder counts as indexing, also while it waits for
            # the model or for its thread to start; only a model that failed to load leaves it
            # unindexed for good. Later rescans show in the index's own state.
            pending = not folder.indexed.is_set() and error is None
            indexing = indexing or s.state == "indexing" or pending
        statics = [str(f.static_path) for f in folders if f.static is not None]
        return {
            "version": __version__,
            "model": model,
            "model_state": "loading" if loading else ("error" if error else "ready"),
            "model_error": error,
            "index": {**totals, "state": "indexing" if indexing or loading else "ready"},
            "folders": [_folder_status(f) for f in folders],
            "static_cache": statics[0] if statics else None,
            "completions": {
                "served": self.counters.served,
                "from_cache": self.counters.from_cache,
                "cancelled": self.counters.cancelled + self.worker.superseded,
                "failed": self.counters.failed,
            },
            "last": self.last,
            "draft": self.settings.draft,
        }


def _folder_status(folder: Folder) -> dict[str, Any]:
    """A folder's root, static cache in use, and how its watcher learns of changes (watching
    events, or polling and why)."""
    watcher = folder.watcher.status if folder.watcher is not None else WatcherStatus("stopped")
    return {
        "root": str(folder.root),
        "static_cache": str(folder.static_path) if folder.static is not None else None,
        "watcher": {"mode": watcher.mode, "reason": watcher.reason},
    }


def _stamp(info: os.stat_result) -> tuple[int, int, int, int]:
    return info.st_dev, info.st_ino, info.st_size, info.st_mtime_ns


def _file_stamp(path: Path) -> tuple[int, int, int, int] | None:
    try:
        return _stamp(path.stat())
    except OSError:
        return None


def _close(engine: Engine) -> Answer:
    engine.close()
    return Answer("", "model")
