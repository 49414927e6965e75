"""What the language server does, without the protocol: the model (loaded in the background),
the workspace folders (workspace_folders.py, each one's index, watcher and repository cache
created once the model's tokenizer is known), the open documents (documents.py), completions
scheduled on one model worker, and the status the editor shows. The server (server.py) only
translates LSP messages into calls of this class and its answers back."""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable
from concurrent.futures import Future
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol

from lookahead_lsp import __version__
from lookahead_lsp.service.scheduler import CompletionWorker, SuggestionCache, answer_key
from lookahead_lsp.service.documents import Document, OpenDocuments, recent_chunks
from lookahead_lsp.engine import (
    CancelToken,
    Completion,
    CompletionRequest,
    DecodeOptions,
    DraftCaches,
    Engine,
    EngineSettings,
    PromptWindows,
)
from lookahead_lsp.base.errors import UserError
from lookahead_lsp.models.resolve import resolve_model_path
from lookahead_lsp.service.status import workspace_status
from lookahead_lsp.service.settings import Settings, apply_update
from lookahead_lsp.service.unopened import read_unopened
from lookahead_lsp.workspace.folder import FolderSettings
from lookahead_lsp.service.folders import WorkspaceFolders

_LOG = logging.getLogger(__name__)
# A request waits this long for a model still loading before it answers nothing.
_MODEL_WAIT_S = 30.0


class Client(Protocol):
    """How the service talks back to the editor; callable from any thread."""

    def log(self, level: int, message: str) -> None: ...
    def show(self, level: int, message: str) -> None: ...
    def progress(self, token: str, title: str, message: str, percent: int | None, done: bool) -> None: ...
    def status_changed(self) -> None:
        """What status() answers changed (the editor is told, at most a few times a second)."""


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
class AheadCounters:
    """What work done while the model was idle cost and saved."""

    runs: int = 0  # idle completions that finished
    stopped: int = 0  # idle completions a request interrupted
    served: int = 0  # answers from them, from the cache, with nothing typed since
    adopted: int = 0  # requests that found their answer being computed ahead and waited for it
    ms_model: float = 0.0  # model time spent ahead of requests

    def record(self, result: Completion) -> None:
        self.ms_model += result.stats.ms_total
        if result.stop_reason == "cancelled":
            self.stopped += 1
        else:
            self.runs += 1


class LookaheadService:
    def __init__(self, client: Client, cache_dir: Path | None = None) -> None:
        self.client = client
        self.cache_dir = cache_dir
        self.settings = Settings()
        self.counters = Counters()
        self.ahead = AheadCounters()
        self.last_completion: dict[str, Any] | None = None
        self.documents = OpenDocuments(client)
        self.suggestions = SuggestionCache()
        self.worker: CompletionWorker[Answer] = CompletionWorker(self.settings.debounce_ms / 1000)
        self._lock = threading.RLock()
        self.workspace = WorkspaceFolders(client, self._lock, self.documents, self._folder_settings())
        self._engine: Engine | None = None
        self._engine_ready = threading.Event()
        self._engine_error: str | None = None
        self._model_path: Path | None = None
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
        if update.changed:
            # A suggestion made under other settings (draft, maxTokens, multiline, the model...)
            # must not come back from the cache as if made under these.
            self.suggestions.clear()
            self.worker.drop_idle()
        model_keys = {"model_path", "context_size", "threads", "gpu_layers", "sampling"}
        if self._loader is not None and update.changed & model_keys:
            self.start_model()
        self.workspace.configure(self._folder_settings())

    def _folder_settings(self) -> FolderSettings:
        s = self.settings
        return FolderSettings(
            ignore=s.ignore_globs,
            repository_cache=Path(s.static_cache_path).expanduser() if s.static_cache_path else None,
            cache_dir=self.cache_dir,
        )

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
            self.worker.submit_chore(lambda _cancel: _close(old))
        s = self.settings
        try:
            path = resolve_model_path(None, s.model_path, asker="editor")
            engine = Engine(EngineSettings(path, s.context_size, s.threads, s.gpu_layers, self.cache_dir, s.sampling))
            engine.prepare()  # not in the first request
        except (UserError, OSError, ValueError) as error:
            message = str(error)
            with self._lock:
                self._engine_error = message
                self._model_path = None
            self._engine_ready.set()
            self.client.show(logging.ERROR, f"lookahead-lsp: no completions: {message}")
            self.client.status_changed()
            return
        with self._lock:
            self._engine, self._model_path = engine, path
        self._engine_ready.set()
        self.client.log(logging.INFO, f"model loaded: {path}")
        self.client.status_changed()
        self.workspace.use_model(path)

    def shutdown(self) -> None:
        """Saves every index, stops the threads, frees the model. Idempotent."""
        with self._lock:
            if self._closed:
                return
            self._closed = True
        self.workspace.close()
        self.worker.stop()
        with self._lock:
            engine, self._engine = self._engine, None
        if engine is not None:
            engine.close()

    # -- workspace folders ---------------------------------------------------------------------

    def add_folder(self, root: Path) -> None:
        """A workspace folder, indexed once the model's tokenizer is known."""
        self.workspace.add(root.resolve())

    def remove_folder(self, root: Path, save: bool = True) -> None:
        self.workspace.remove(root.resolve(), save)

    def rebuild_indexes(self) -> None:
        """Forgets every folder's index, saved copy included, and indexes the folders again
        from their files; the repository caches are opened and verified again too."""
        self.workspace.reopen(save=False, forget=True)

    # -- documents -----------------------------------------------------------------------------

    def open_document(self, uri: str, path: Path | None, text: str) -> None:
        self.change_document(uri, path, text, 0)

    def change_document(self, uri: str, path: Path | None, text: str, edited_line: int) -> None:
        """Records the editor's text; its folder indexes it later, off the event loop."""
        with self._lock:
            if self.documents.too_large(uri, text, self.settings.max_document_kb):
                before = self.documents.record(uri, Document(path, "", edited_line, oversized=True))
                if before is not None and not before.oversized:
                    # Its editor text grew past the cap: the index goes back to the file on
                    # disk, whose own size rule applies.
                    self._editor_text(path, None)
                return
            self.documents.record(uri, Document(path, text, edited_line))
            self._editor_text(path, text)

    def close_document(self, uri: str, path: Path | None) -> None:
        with self._lock:
            self.documents.close(uri)
            self._editor_text(path, None)
        self.worker.cancel(uri)
        self.suggestions.drop(uri)

    def read_unopened(self, path: Path | None) -> str | None:
        """A file the editor did not open, if it is one the daemon may read (see unopened.py).
        It blocks: call it off the event loop."""
        if path is None:
            return None
        return read_unopened(path, self.workspace.roots(), self.settings.max_document_kb * 1024)

    def _editor_text(self, path: Path | None, text: str | None) -> None:
        folder = self.workspace.of(path)
        if folder is not None and path is not None:
            folder.editor_text(path, text)

    def disk_event(self, path: Path, kind: str) -> None:
        """A file event the editor reported (workspace/didChangeWatchedFiles): "created",
        "changed" or "deleted"."""
        folder = self.workspace.of(path)
        if folder is not None:
            folder.disk_event(path, "deleted" if kind == "deleted" else "changed")

    # -- completions ---------------------------------------------------------------------------

    def complete(
        self, uri: str, path: Path | None, text: str, offset: int, language: str, invoked: bool = False
    ) -> Future[Answer | None]:
        """The completion at `offset` of `text`: from the suggestion cache at once, else from
        work done ahead for it, else from the model on its worker (superseding this document's
        earlier request). invoked: the user asked explicitly (no debounce)."""
        done: Future[Answer | None] = Future()
        if not self._completes(uri, text, language):
            done.set_result(None)
            return done
        prefix, suffix = text[:offset], text[offset:]
        cached = self.suggestions.lookup(uri, prefix, suffix)
        if cached is not None:
            self.counters.from_cache += 1
            self.ahead.served += cached.ahead
            done.set_result(Answer(cached.text, "cache"))
            self._work_ahead(uri, path, prefix + cached.text, suffix)
            return done
        adopted = self.worker.adopt(answer_key(uri, prefix, suffix))
        if adopted is not None:
            self.ahead.adopted += 1
            adopted.add_done_callback(lambda f: self._after_adopted(uri, path, prefix, suffix, f))
            return adopted
        job = self._job(uri, path, prefix, suffix, ahead=False)
        return self.worker.submit(uri, job, debounce=not invoked)

    def cursor_rests(self, uri: str, path: Path | None, text: str, offset: int, language: str) -> None:
        """The editor's cursor stopped at `offset`: while the model is idle, the completion
        there is computed (its prompt evaluated first), so that typing there starts warm."""
        if not self._completes(uri, text, language):
            return
        self._work_ahead(uri, path, text[:offset], text[offset:])

    def _completes(self, uri: str, text: str, language: str) -> bool:
        too_large = self.documents.too_large(uri, text, self.settings.max_document_kb)
        return language not in self.settings.disabled_languages and not too_large

    def _work_ahead(self, uri: str, path: Path | None, prefix: str, suffix: str) -> None:
        """Queues the completion of (prefix, suffix) for when the model is idle, unless it is
        known already or the user turned this off."""
        if not self.settings.work_ahead or not self._engine_ready.is_set() or self._engine is None:
            return
        if self.suggestions.lookup(uri, prefix, suffix) is not None:
            return
        job = self._job(uri, path, prefix, suffix, ahead=True)
        self.worker.submit_idle(uri, answer_key(uri, prefix, suffix), job)

    def _after_adopted(
        self, uri: str, path: Path | None, prefix: str, suffix: str, future: Future[Answer | None]
    ) -> None:
        if future.cancelled() or future.exception() is not None:
            return
        answer = future.result()
        if answer is None or answer.completion is None or answer.completion.stop_reason == "cancelled":
            return
        self._served(answer.completion)
        if answer.text:
            self._work_ahead(uri, path, prefix + answer.text, suffix)

    def _job(self, uri: str, path: Path | None, prefix: str, suffix: str, ahead: bool) -> Callable[[CancelToken], Answer]:
        """The model's work for one completion, under the settings of now."""
        settings = self.settings
        # The other documents as they are now; their lines are cut out on the worker.
        recent = self.documents.others(uri)
        options = DecodeOptions(
            draft=settings.draft,
            multiline=settings.multiline,
            max_tokens=settings.max_tokens,
            time_budget_ms=settings.time_budget_ms,
            windows=PromptWindows(settings.prefix_tokens, settings.suffix_tokens, settings.extra_context_tokens),
        )

        def run(cancel: CancelToken) -> Answer:
            request = CompletionRequest(
                prefix, suffix, self._relative(path, uri), recent_chunks(recent, self._relative), self._repository(path)
            )
            return self._run(uri, path, request, options, cancel, ahead)

        return run

    def _run(
        self,
        uri: str,
        path: Path | None,
        request: CompletionRequest,
        options: DecodeOptions,
        cancel: CancelToken,
        ahead: bool,
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
        if ahead:
            self.ahead.record(result)
        if result.stop_reason == "cancelled":
            self.counters.cancelled += not ahead
            return Answer("", "model", result)
        self.suggestions.store(uri, request.prefix, request.suffix, result.text, ahead)
        if not ahead:
            self._served(result)
            if result.text:
                # What the user sees may be accepted next: its continuation is decoded while
                # they read it.
                self._work_ahead(uri, path, request.prefix + result.text, request.suffix)
        return Answer(result.text, "model", result)

    def _served(self, result: Completion) -> None:
        self.counters.served += 1
        self.last_completion = {"text": result.text, "stop_reason": result.stop_reason, **result.stats.as_dict()}

    def _caches(self, path: Path | None) -> DraftCaches:
        """The document's folder's caches (on the worker, which refreshes the static one)."""
        folder = self.workspace.of(path)
        if folder is None:
            return DraftCaches()
        workspace, repository = folder.caches()
        return DraftCaches(workspace, repository)

    def cancel(self, future: Future[Answer | None]) -> None:
        """The editor cancelled the request `complete` returned `future` for: its model work
        stops, and no newer request for the document goes with it."""
        self.worker.cancel_job(future)
        self.counters.cancelled += 1

    def _relative(self, path: Path | None, uri: str) -> str:
        folder = self.workspace.of(path)
        if path is not None and folder is not None:
            return path.relative_to(folder.root).as_posix()
        return path.name if path is not None else uri.rsplit("/", 1)[-1]

    def _repository(self, path: Path | None) -> str:
        folder = self.workspace.of(path)
        return folder.root.name if folder is not None else ""

    # -- status --------------------------------------------------------------------------------

    def status(self) -> dict[str, Any]:
        with self._lock:
            model = str(self._model_path) if self._model_path else None
            error = self._engine_error
            loading = not self._engine_ready.is_set()
            engine = self._engine
        workspace = workspace_status(*self.workspace.statuses(), error is not None)
        if loading:
            workspace["index"]["state"] = "indexing"
        return {
            "version": __version__,
            "model": model,
            "model_state": "loading" if loading else ("error" if error else "ready"),
            "model_error": error,
            # Which device runs the model ("CPU", "CUDA0", ...) and where each verified
            # position's argmax is taken ("backend" or "host"): null until a model is loaded.
            "backend": engine.backend if engine is not None else None,
            "sampling": engine.sampling if engine is not None else None,
            **workspace,
            "completions": {
                "served": self.counters.served,
                "from_cache": self.counters.from_cache,
                "cancelled": self.counters.cancelled + self.worker.superseded,
                "failed": self.counters.failed,
            },
            "last": self.last_completion,
            "ahead": self._ahead_status(engine),
            "draft": self.settings.draft,
        }


    def _ahead_status(self, engine: Engine | None) -> dict[str, Any]:
        a = self.ahead
        snapshots = engine.snapshots if engine is not None else None
        return {
            "enabled": self.settings.work_ahead,
            "runs": a.runs,
            "stopped": a.stopped + self.worker.idle_preempted,
            "served": a.served,
            "adopted": a.adopted,
            "ms_model": round(a.ms_model, 1),
            # KV states of recently used documents, and what putting them back spared.
            "kv_states": len(snapshots) if snapshots else 0,
            "kv_states_mib": round(snapshots.nbytes / 2**20, 1) if snapshots else 0.0,
            "kv_restored": snapshots.stats.restored if snapshots else 0,
            "kv_tokens_restored": snapshots.stats.tokens_restored if snapshots else 0,
        }


def _close(engine: Engine) -> Answer:
    engine.close()
    return Answer("", "model")
