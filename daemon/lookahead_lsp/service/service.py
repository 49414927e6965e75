"""What the language server does for one session (an editor window), without the protocol: the
model (shared with the daemon's other sessions, model_host.py), the workspace folders
(folders.py: each one's index, watcher and repository cache, created once the model's tokenizer
is known), the open documents (documents.py), completions scheduled on the model's worker
(scheduler.py) and work done ahead, and the status the editor shows (status.py). The server
(lsp/server.py) only translates LSP messages into calls of this class and its answers back.

One class, one lock: a request, an edit and a settings change see the session's state as one."""

from __future__ import annotations

import dataclasses
import itertools
import logging
import threading
import time
from collections.abc import Callable
from concurrent.futures import Future
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from lookahead_lsp import __version__
from lookahead_lsp.service.model_host import LoadedModel, ModelHost, ModelKey
from lookahead_lsp.service.scheduler import CompletionWorker, chain, resolve
from lookahead_lsp.service.suggestions import SuggestionCache, answer_key
from lookahead_lsp.service.context import context_chunks
from lookahead_lsp.service.documents import Document, OpenDocuments, edit_end
from lookahead_lsp.service.next_places import next_places
from lookahead_lsp.engine import (
    CancelToken,
    Completion,
    CompletionRequest,
    DecodeOptions,
    DraftCaches,
    PromptWindows,
)
from lookahead_lsp.base.editor import Editor
from lookahead_lsp.engine.stopping import Stopper, shown_from_continuation
from lookahead_lsp.service.status import AheadCounters, Counters, ahead_status, workspace_status
from lookahead_lsp.service.settings import Settings, apply_update, model_values
from lookahead_lsp.service.unopened import read_unopened
from lookahead_lsp.workspace.folder import FolderSettings, WorkspaceFolder
from lookahead_lsp.service.folder_host import FolderHost
from lookahead_lsp.service.folders import WorkspaceFolders

_LOG = logging.getLogger(__name__)
# Numbers the sessions of this process.
_SESSIONS = itertools.count(1)
# Edits pause this long before the end of the last one is taken for where the cursor rests: a
# keystroke's own request comes sooner, and idle work must not start just before it.
_EDIT_PAUSE_S = 0.5
# How long a prompt pass of work done ahead may take: a request that arrives meanwhile waits
# that long at most, about what one of its own prompt passes (128 tokens) takes on a laptop's
# CPU. Idle, the passes grow to 128 tokens (cheaper per token than smaller ones on a CPU); on a
# busy machine they shrink.
_AHEAD_PASS_MS = 200.0
# A request waits this long for a model still loading before it answers nothing.
_MODEL_WAIT_S = 30.0
# The work-done progress of preparing the model (one per session).
_MODEL_PROGRESS = "lookahead-model"


@dataclass(frozen=True)
class Place:
    """Where a request's document sits, looked up once per request: its workspace folder (None
    outside every one), its name relative to that folder, and the folder's name (the prompt's
    repository)."""

    folder: WorkspaceFolder | None
    name: str
    repository: str


@dataclass
class Answer:
    text: str
    source: str  # "model" or "cache"
    completion: Completion | None = None


class LookaheadService:
    def __init__(
        self,
        client: Editor,
        cache_dir: Path | None = None,
        host: ModelHost[Answer] | None = None,
        folders: FolderHost | None = None,
    ) -> None:
        self.client = client
        self.cache_dir = cache_dir
        self.settings = Settings()
        self.counters = Counters()
        self.ahead = AheadCounters()
        self.last_completion: dict[str, Any] | None = None
        self.documents = OpenDocuments(client, self.settings.max_document_kb)
        self.suggestions = SuggestionCache()
        self._lock = threading.RLock()
        # The daemon's models and folders, shared with the other sessions (editor windows) it
        # serves.
        self._owns_hosts = host is None
        self.host: ModelHost[Answer] = host if host is not None else ModelHost(cache_dir)
        self.folder_host = folders if folders is not None else FolderHost()
        self.workspace = WorkspaceFolders(client, self._lock, self.documents, self._folder_settings(), self.folder_host)
        self._session = f"{next(_SESSIONS)}:"  # sets this session's jobs apart on a shared worker
        self._model: LoadedModel[Answer] | None = None
        # Whether the editor says where its cursor rests (lookahead/cursor): else the end of the
        # last edit stands for it.
        self._cursor_reported = False
        # The last work ahead asked for while the model was loading (uri, path, prefix, suffix):
        # where the cursor rested then is where the user is once it is ready.
        self._ahead_when_loaded: tuple[str, Path | None, str, str] | None = None
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
            self.documents.max_document_kb = update.settings.max_document_kb
        if update.changed:
            # A suggestion made under other settings (draft, maxTokens, multiline, the model...)
            # must not come back from the cache as if made under these.
            self.suggestions.clear()
            if self._model is not None:
                self._model.worker.drop_idle()
        if self._model is not None and self._model.key != self._model_key():
            self.start_model()
        self.workspace.configure(self._folder_settings())

    def _folder_settings(self) -> FolderSettings:
        s = self.settings
        return FolderSettings(
            ignore=s.ignore_globs,
            repository_cache=Path(s.static_cache_path).expanduser() if s.static_cache_path else None,
            cache_dir=self.cache_dir,
            memory_budget=(s.index_memory_mib or 0) * (1 << 20),
        )

    def _model_key(self) -> ModelKey:
        return ModelKey(**model_values(self.settings))

    def start_model(self) -> None:
        """Takes the model the settings name, from the daemon's models (shared with other
        sessions that name the same) or loaded in the background; requests wait for it."""
        old = self._model
        self._model = self.host.acquire(self._model_key(), self._model_changed)
        if old is not None:
            self.host.release(old, self._model_changed)

    def _model_changed(self, model: LoadedModel[Answer]) -> None:
        """The model's load moved on (a stage, said as work-done progress) or ended. By key, not
        identity: the load's thread may get here before acquire() has returned the model."""
        if model is not self._model and model.key != self._model_key():
            return
        if not model.ready.is_set():
            self.client.progress(_MODEL_PROGRESS, "Lookahead: preparing the model", model.stage, None, False)
            self.client.status_changed()
            return
        self.client.progress(_MODEL_PROGRESS, "Lookahead: preparing the model", "", None, True)
        if model.error is not None:
            self.client.show(logging.ERROR, f"lookahead-lsp: no completions: {model.error}")
            self.client.status_changed()
        elif model.path is not None:
            self.client.log(logging.INFO, f"model loaded: {model.path}")
            self.client.status_changed()
            self.workspace.use_model(model.path)
            self._ahead_once_loaded(model)

    @property
    def worker(self) -> CompletionWorker[Answer]:
        """The model's worker (shared by the sessions that use the model)."""
        if self._model is None:
            raise RuntimeError("no model started")
        return self._model.worker

    def shutdown(self) -> None:
        """Saves every index, stops the threads, frees the model. Idempotent."""
        with self._lock:
            if self._closed:
                return
            self._closed = True
        self.workspace.close()
        model, self._model = self._model, None
        if model is not None:
            for uri in self.documents.uris():
                model.worker.cancel(self._session + uri)
            self.host.release(model, self._model_changed)
        if self._owns_hosts:
            self.host.close()
            self.folder_host.close()

    # -- workspace folders ---------------------------------------------------------------------

    def add_folder(self, root: Path) -> None:
        """A workspace folder, indexed once the model's tokenizer is known."""
        self.workspace.add(root.resolve())

    def remove_folder(self, root: Path, save: bool = True) -> None:
        self.workspace.remove(root.resolve(), save)

    def rebuild_indexes(self) -> None:
        """Forgets every folder's index, saved copy included, and indexes the folders again
        from their files; the repository caches are opened and verified again too."""
        self.workspace.rebuild()

    # -- documents -----------------------------------------------------------------------------

    def open_document(self, uri: str, path: Path | None, text: str) -> None:
        self._record(uri, path, text, 0)

    def change_document(self, uri: str, path: Path | None, text: str, edited_at: int | None) -> int | None:
        """Records the editor's text; its folder indexes it later, off the event loop.
        edited_at: where in text the change ended, None when the editor sent the whole text
        (found then from the text before). Returns where it ended (None: nothing changed)."""
        if edited_at is None:
            with self._lock:
                before = self.documents.text(uri)
            edited_at = edit_end(before or "", text)
        self._record(uri, path, text, text.count("\n", 0, edited_at or 0))
        return edited_at

    def _record(self, uri: str, path: Path | None, text: str, edited_line: int) -> None:
        with self._lock:
            if self.documents.too_large(uri, text):
                before = self.documents.record(uri, Document(path, "", edited_line, oversized=True))
                if before is not None and not before.oversized:
                    # Its editor text grew past the cap: the index goes back to the file on
                    # disk, whose own size rule applies.
                    self.workspace.editor_text(path, None)
                return
            self.documents.record(uri, Document(path, text, edited_line))
            self.workspace.editor_text(path, text)

    def close_document(self, uri: str, path: Path | None) -> None:
        with self._lock:
            self.documents.close(uri)
            self.workspace.editor_text(path, None)
        if self._model is not None:
            self._model.worker.cancel(self._session + uri)
        self.suggestions.drop(uri)

    def read_unopened(self, path: Path | None) -> str | None:
        """A file the editor did not open, if it is one the daemon may read (see unopened.py).
        It blocks: call it off the event loop."""
        if path is None:
            return None
        return read_unopened(path, self.workspace.roots(), self.documents.cap)

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
        if self._model is None or not self._completes(uri, text, language):
            done.set_result(None)
            return done
        prefix, suffix = text[:offset], text[offset:]
        found = self._cached(uri, prefix, suffix)
        if found is not None:
            cached, ahead = found
            self.counters.from_cache += 1
            self.ahead.served += ahead
            done.set_result(Answer(cached, "cache"))
            self._prepare_next(uri, path, prefix, cached, suffix)
            return done
        adopted = self.worker.adopt(answer_key(self._session + uri, prefix, suffix))
        if adopted is not None:
            self.ahead.adopted += 1
            worker = self.worker
            # The editor cancels `done` ($/cancelRequest): the job it took over stops with it.
            done.add_done_callback(lambda f: worker.cancel_job(adopted) if f.cancelled() else None)
            adopted.add_done_callback(lambda f: self._after_adopted(uri, path, prefix, suffix, f, done))
            return done
        return self._submit(uri, path, prefix, suffix, invoked)

    def _submit(self, uri: str, path: Path | None, prefix: str, suffix: str, invoked: bool) -> Future[Answer | None]:
        job = self._job(uri, path, prefix, suffix, ahead=False)
        debounce_s = self.settings.debounce_ms / 1000
        return self.worker.submit(self._session + uri, job, debounce=not invoked, debounce_s=debounce_s)

    def _cached(self, uri: str, prefix: str, suffix: str) -> tuple[str, bool] | None:
        """The suggestion the cache gives for the request, cut for it where it is a
        continuation decoded ahead, and whether it is; None when the cache cannot tell."""
        hit = self.suggestions.lookup(uri, prefix, suffix)
        if hit is None:
            return None
        if not hit.continuation:
            return hit.text, False
        shown = self._shown(prefix, suffix, hit.text, hit.ended, same_budget=not hit.typed)
        return None if shown is None else (shown, True)

    def _shown(self, prefix: str, suffix: str, continuation: str, ended: bool, same_budget: bool) -> str | None:
        stopper = Stopper(prefix, suffix, True, self.settings.multiline)
        return shown_from_continuation(stopper, continuation, ended, same_budget)

    def cursor_rests(self, uri: str, path: Path | None, text: str, offset: int, language: str) -> None:
        """The editor's cursor stopped at `offset`: while the model is idle, the completion
        there is computed (its prompt evaluated first), so that typing there starts warm."""
        self._cursor_reported = True
        if not self._completes(uri, text, language):
            return
        self._work_ahead(uri, path, text[:offset], text[offset:])

    def edited(self, uri: str, path: Path | None, text: str, offset: int, language: str) -> None:
        """The user's last edit ended at `offset`. For an editor that does not say where its
        cursor rests (no lookahead/cursor so far), the end of the last edit stands for it: once
        the edits pause, the completion there is computed while the model is idle."""
        if not self._cursor_reported and self._completes(uri, text, language):
            self._work_ahead(uri, path, text[:offset], text[offset:], _EDIT_PAUSE_S)

    def _completes(self, uri: str, text: str, language: str) -> bool:
        too_large = self.documents.too_large(uri, text)
        return language not in self.settings.disabled_languages and not too_large

    def _prepare_next(self, uri: str, path: Path | None, prefix: str, shown: str, suffix: str) -> bool:
        """`shown` was suggested at (prefix, suffix): the places the user may go next are
        computed while the model is idle, one after the other (next_places.py). Whether
        there is any."""
        places = next_places(prefix, shown, suffix)
        if places:
            self._work_ahead(uri, path, places[0], suffix, then=tuple(places[1:]))
        return bool(places)

    def _work_ahead(
        self, uri: str, path: Path | None, prefix: str, suffix: str, delay_s: float = 0.0, then: tuple[str, ...] = ()
    ) -> None:
        """Queues the completion of (prefix, suffix) for when the model is idle, unless it is
        known already or the user turned this off; while the model loads, for once it is ready.
        then: the texts before the cursor of further places, prepared after it."""
        if not self.settings.work_ahead:
            return
        model = self._model
        if model is None or model.engine is None:
            self._ahead_when_loaded = (uri, path, prefix, suffix)
            return
        self._queue_ahead(model, uri, path, (prefix, *then), suffix, delay_s)

    def _ahead_once_loaded(self, model: LoadedModel[Answer]) -> None:
        """The model is ready: the work ahead asked for while it loaded is queued, if its
        document still has the text it was asked for (else an edit or a report since has
        said where the user is)."""
        pending, self._ahead_when_loaded = self._ahead_when_loaded, None
        if pending is None or not self.settings.work_ahead:
            return
        uri, path, prefix, suffix = pending
        # On the load's thread: the documents are read under the lock the editor's changes take.
        with self._lock:
            if self.documents.text(uri) == prefix + suffix:
                self._queue_ahead(model, uri, path, (prefix,), suffix, 0.0)

    def _queue_ahead(
        self, model: LoadedModel[Answer], uri: str, path: Path | None, prefixes: tuple[str, ...], suffix: str, delay_s: float
    ) -> None:
        """Queues the first of prefixes whose answer the cache cannot give (a continuation
        there that cannot be cut for it does not); the job queues the rest once it is done."""
        while prefixes and self._cached(uri, prefixes[0], suffix) is not None:
            prefixes = prefixes[1:]
        if not prefixes:
            return
        prefix, then = prefixes[0], prefixes[1:]
        job = self._job(uri, path, prefix, suffix, ahead=True, then=then)
        key = self._session + uri
        model.worker.submit_idle(key, answer_key(key, prefix, suffix), job, delay_s)

    def _after_adopted(
        self,
        uri: str,
        path: Path | None,
        prefix: str,
        suffix: str,
        future: Future[Answer | None],
        done: Future[Answer | None],
    ) -> None:
        """The request took over work done ahead for it: the continuation is cut for it, or,
        where that cannot tell (or the work was stopped), the model runs for it after all,
        unless the editor cancelled the request meanwhile."""
        if done.cancelled():
            return
        answer = None if future.cancelled() or future.exception() is not None else future.result()
        completion = answer.completion if answer is not None else None
        shown = None
        if completion is not None and completion.stop_reason != "cancelled":
            ended = completion.stop_reason == "end-of-generation"
            shown = self._shown(prefix, suffix, completion.text, ended, same_budget=completion.stop_reason == "max-tokens")
        if shown is None:
            chain(self._submit(uri, path, prefix, suffix, invoked=True), done)
            return
        assert completion is not None
        self._served(completion, shown)
        resolve(done, Answer(shown, "model", completion))
        self._prepare_next(uri, path, prefix, shown, suffix)

    def _queue_warm(self, uri: str, path: Path | None, prefix: str, suffix: str) -> None:
        """A completion there was given a short prompt (cold_prompt.py): the whole one is
        evaluated when the model is idle, for the next requests there to use."""
        model = self._model
        if model is None or not self.settings.work_ahead:
            return
        job = self._job(uri, path, prefix, suffix, ahead=True, warm=True)
        key = self._session + uri
        model.worker.submit_idle(key, ("warm", answer_key(key, prefix, suffix)), job)

    def _job(
        self,
        uri: str,
        path: Path | None,
        prefix: str,
        suffix: str,
        ahead: bool,
        warm: bool = False,
        then: tuple[str, ...] = (),
    ) -> Callable[[CancelToken], Answer]:
        """The model's work for one completion (warm: for the evaluation of its whole prompt
        alone), under the settings of now; then: the places work ahead prepares next."""
        settings = self.settings
        # The other documents as they are now; their lines are cut out on the worker.
        recent = self.documents.others(uri)
        options = DecodeOptions(
            draft=settings.draft,
            multiline=settings.multiline,
            max_tokens=settings.max_tokens,
            time_budget_ms=settings.time_budget_ms,
            windows=PromptWindows(settings.prefix_tokens, settings.suffix_tokens, settings.extra_context_tokens),
            # Without work ahead nothing would evaluate a cut prompt's whole one later.
            cold_prompt_ms=settings.cold_prompt_ms if settings.work_ahead else None,
        )
        if ahead:
            # The model's own continuation, uncut: each request it answers cuts it for itself.
            options = dataclasses.replace(options, stop_rules=False, prefill_pass_ms=_AHEAD_PASS_MS)

        def run(cancel: CancelToken) -> Answer:
            # On the worker: a request queued while the model loads finds the folders that open
            # once it is loaded.
            place = self._place(uri, path)
            sources = settings.context_sources if settings.extra_context_tokens else ()
            retrieval = place.folder.retrieval if place.folder is not None else None
            chunks = context_chunks(sources, retrieval, path, prefix, self._of_folder(recent, place), self._name)
            request = CompletionRequest(prefix, suffix, place.name, chunks, place.repository, owner=self._session + uri)
            if warm:
                return self._warm(request, options, cancel)
            answer = self._run(uri, path, place, request, options, cancel, ahead)
            if then and not cancel.cancelled:
                self._work_ahead(uri, path, then[0], suffix, then=then[1:])
            return answer

        return run

    def _run(
        self,
        uri: str,
        path: Path | None,
        place: Place,
        request: CompletionRequest,
        options: DecodeOptions,
        cancel: CancelToken,
        ahead: bool,
    ) -> Answer:
        model = self._model
        if model is None or not model.ready.wait(_MODEL_WAIT_S):
            return Answer("", "model")
        engine = model.engine
        if engine is None or cancel.cancelled:
            return Answer("", "model")
        try:
            result = engine.complete(request, options, _caches(place), cancel)
        except Exception as error:
            self.counters.failed += 1
            self.client.log(logging.ERROR, f"completion failed: {error}")
            raise
        if result.stop_reason == "cancelled":
            if ahead:
                self.ahead.record(result)
            self.counters.cancelled += not ahead
            return Answer("", "model", result)
        ended = result.stop_reason == "end-of-generation"
        self.suggestions.store(uri, request.prefix, request.suffix, result.text, ahead, ended)
        if ahead:
            # Counted once its answer is in the cache: a status that shows the run finished
            # finds it there (counted first, a request could come between and miss it).
            self.ahead.record(result)
        continued = False
        if not ahead:
            self._served(result, result.text)
            # What the user sees may be accepted next: its continuation (and the next line) is
            # decoded while they read it.
            continued = self._prepare_next(uri, path, request.prefix, result.text, request.suffix)
        if result.stats.short_prompt:
            self.ahead.short_prompts += 1
            if not continued:  # else the next place's own short prompt queues it
                self._queue_warm(uri, path, request.prefix, request.suffix)
        return Answer(result.text, "model", result)

    def _warm(self, request: CompletionRequest, options: DecodeOptions, cancel: CancelToken) -> Answer:
        model = self._model
        engine = model.engine if model is not None and model.ready.is_set() else None
        if engine is None or cancel.cancelled:
            return Answer("", "model")
        began = time.perf_counter()
        tokens = engine.warm(request, options, cancel)
        self.ahead.warmed(tokens, (time.perf_counter() - began) * 1000)
        return Answer("", "model")

    def _served(self, result: Completion, shown: str) -> None:
        """A request was answered by the model with `shown` (result's text, or what was cut
        for it from a continuation decoded ahead)."""
        self.counters.served += 1
        self.last_completion = {"text": shown, "stop_reason": result.stop_reason, **result.stats.as_dict()}

    def cancel(self, future: Future[Answer | None]) -> None:
        """The editor cancelled the request `complete` returned `future` for: its model work
        stops, and no newer request for the document goes with it."""
        if self._model is not None:
            self._model.worker.cancel_job(future)
        self.counters.cancelled += 1

    def _place(self, uri: str, path: Path | None) -> Place:
        folder = self.workspace.of(path)
        return Place(folder, _name(path, uri, folder), folder.root.name if folder is not None else "")

    def _of_folder(self, recent: list[tuple[str, Document]], place: Place) -> list[tuple[str, Document]]:
        """The documents of `recent` in the request's own workspace folder (outside every
        folder: those outside every folder too): a prompt carries no text of another folder."""
        return [(uri, doc) for uri, doc in recent if self.workspace.of(doc.path) is place.folder]

    def _name(self, path: Path | None, uri: str) -> str:
        """A document's name in a prompt: relative to its folder."""
        return _name(path, uri, self.workspace.of(path))

    # -- status --------------------------------------------------------------------------------

    def status(self) -> dict[str, Any]:
        loaded = self._model
        model = str(loaded.path) if loaded is not None and loaded.path else None
        error = loaded.error if loaded is not None else None
        loading = loaded is None or not loaded.ready.is_set()
        engine = loaded.engine if loaded is not None else None
        superseded = loaded.worker.superseded if loaded is not None else 0
        preempted = loaded.worker.idle_preempted if loaded is not None else 0
        workspace = workspace_status(*self.workspace.statuses(), error is not None)
        if loading:
            workspace["index"]["state"] = "indexing"
        return {
            "version": __version__,
            "model": model,
            "model_state": "loading" if loading else ("error" if error else "ready"),
            "model_error": error,
            # What preparing the model does now (loading, measuring the machine...): null once
            # it is ready.
            "model_stage": loaded.stage if loaded is not None and loading else None,
            # Which device runs the model ("CPU", "CUDA0", ...) and where each verified
            # position's argmax is taken ("backend" or "host"): null until a model is loaded.
            "backend": engine.backend if engine is not None else None,
            "sampling": engine.sampling if engine is not None else None,
            **workspace,
            "completions": {
                "served": self.counters.served,
                "from_cache": self.counters.from_cache,
                "cancelled": self.counters.cancelled + superseded,
                "failed": self.counters.failed,
            },
            "last": self.last_completion,
            "ahead": ahead_status(self.ahead, self.settings.work_ahead, engine, preempted),
            # Sessions (editor windows) of this daemon that share this one's model, and the
            # models and workspace folders the daemon holds for all its sessions.
            "shared": {
                "sessions": loaded.sessions if loaded is not None else 0,
                "models": self.host.loaded(),
                "folders": self.folder_host.folders(),
            },
            "draft": self.settings.draft,
        }


def _name(path: Path | None, uri: str, folder: WorkspaceFolder | None) -> str:
    if path is not None and folder is not None:
        return path.relative_to(folder.root).as_posix()
    return path.name if path is not None else uri.rsplit("/", 1)[-1]


def _caches(place: Place) -> DraftCaches:
    """The document's folder's caches (on the worker, which refreshes the static one)."""
    if place.folder is None:
        return DraftCaches()
    workspace, repository = place.folder.caches()
    return DraftCaches(workspace, repository)
