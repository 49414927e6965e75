"""What the language server does for one session (an editor window), without the protocol: the
model (shared with the daemon's other sessions, model_host.py), the workspace folders
(folders.py: each one's index, watcher and static cache, created once the model's tokenizer
is known), the open documents (documents.py), completions scheduled on the model's worker
(scheduler.py) and work done ahead, and the status the editor shows (status.py). The server
(lsp/server.py) only translates LSP messages into calls of this class and its answers back.

One class, one lock, one writer: a request, an edit and a settings change see the session's
state as one. The model's worker only computes (model_work.py); what it computed is applied to
the state by this class, under the lock, on the session's applier thread."""

from __future__ import annotations

import itertools
import logging
import threading
from collections.abc import Callable, Hashable
from concurrent.futures import Future, InvalidStateError, ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from lookahead_lsp.service.model_host import LoadedModel, ModelHost, ModelKey
from lookahead_lsp.service.scheduler import CompletionWorker, resolve
from lookahead_lsp.service.suggestions import SuggestionCache, answer_key
from lookahead_lsp.service.documents import Document, OpenDocuments, edit_end
from lookahead_lsp.service.model_work import Computed, Work, compute, decode_options, request_for
from lookahead_lsp.service.work_ahead import WorkAhead
from lookahead_lsp.engine import CancelToken, Completion
from lookahead_lsp.base.editor import Editor
from lookahead_lsp.engine.stopping import Stopper, shown_from_continuation
from lookahead_lsp.service.status import AheadCounters, Counters, session_status, workspace_status
from lookahead_lsp.service.settings import Settings, apply_update, model_values
from lookahead_lsp.service.unopened import read_unopened
from lookahead_lsp.workspace.folder import FolderSettings
from lookahead_lsp.service.folder_host import FolderHost
from lookahead_lsp.service.folders import WorkspaceFolders

_LOG = logging.getLogger(__name__)
# Numbers the sessions of this process.
_SESSIONS = itertools.count(1)
# Edits pause this long before the end of the last one is taken for where the cursor rests: a
# keystroke's own request comes sooner, and work ahead must not start just before it.
_EDIT_PAUSE_S = 0.5
# The work-done progress of preparing the model (one per session).
_MODEL_PROGRESS = "lookahead-model"


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
        host: ModelHost[Computed] | None = None,
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
        self.host: ModelHost[Computed] = host if host is not None else ModelHost(cache_dir)
        self.folder_host = folders if folders is not None else FolderHost()
        self.workspace = WorkspaceFolders(client, self._lock, self.documents, self._folder_settings(), self.folder_host)
        self._session = f"{next(_SESSIONS)}:"  # sets this session's jobs apart on a shared worker
        self._model: LoadedModel[Computed] | None = None
        # Whether the editor says where its cursor rests (lookahead/cursor): else the end of the
        # last edit stands for it.
        self._cursor_reported = False
        self._planner = WorkAhead(
            self._session,
            lambda: self.settings.work_ahead,
            lambda: self._model is not None and self._model.engine is not None,
            lambda uri, prefix, suffix: self._cached(uri, prefix, suffix) is not None,
            self._submit_ahead,
        )
        self._closed = False
        # The one thread that applies what the model's worker computed to this session's state.
        self._applier = ThreadPoolExecutor(max_workers=1, thread_name_prefix=f"lookahead-session-{self._session[:-1]}")

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
                # A suggestion made under other settings (draft, maxTokens, multiline, the
                # model...) must not come back from the cache as if made under these.
                self.suggestions.clear()
                if self._model is not None:
                    self._model.worker.drop_ahead()
        if self._model is not None and self._model.key != self._model_key():
            self.start_model()
        self.workspace.configure(self._folder_settings())

    def _folder_settings(self) -> FolderSettings:
        s = self.settings
        return FolderSettings(
            ignore=s.ignore_globs,
            static_cache=Path(s.static_cache_path).expanduser() if s.static_cache_path else None,
            cache_dir=self.cache_dir,
            memory_budget=(s.index_memory_mib or 0) * (1 << 20),
        )

    def _model_key(self) -> ModelKey:
        return ModelKey(**model_values(self.settings))

    def start_model(self) -> None:
        """Takes the model the settings name, from the daemon's models (shared with other
        sessions that name the same) or loaded in the background; requests wait for it."""
        acquired = self.host.acquire(self._model_key(), self._model_changed)
        with self._lock:
            old, self._model = self._model, acquired
        if old is not None:
            self.host.release(old, self._model_changed)

    def _model_changed(self, model: LoadedModel[Computed]) -> None:
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
            self._ahead_once_loaded()

    @property
    def worker(self) -> CompletionWorker[Computed]:
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
        self._applier.shutdown(wait=False)
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
        """Forgets every folder's index, saved index included, and indexes the folders again
        from their files; the static caches are opened and verified again too."""
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
            self.suggestions.drop(uri)
        if self._model is not None:
            self._model.worker.cancel(self._session + uri)

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
    #
    # The state a completion changes (counters, the suggestion cache, the last completion, what
    # is queued next) is changed under the session's lock by the caller's thread (the editor's
    # requests and reports) or by the session's applier thread, which applies what the model's
    # worker computed (`_apply`): the worker's jobs only compute (model_work.py).

    def complete(
        self, uri: str, path: Path | None, text: str, offset: int, language: str, invoked: bool = False
    ) -> Future[Answer | None]:
        """The completion at `offset` of `text`: from the suggestion cache at once, else from
        work done ahead for it, else from the model on its worker (superseding this document's
        earlier request). invoked: the user asked explicitly (no debounce)."""
        done: Future[Answer | None] = Future()
        model = self._model
        if model is None or not self._completes(uri, text, language):
            done.set_result(None)
            return done
        work = Work(uri, path, text[:offset], text[offset:], language=language)
        with self._lock:
            self._planner.asked(uri, work.prefix)
            found = self._cached(uri, work.prefix, work.suffix)
            if found is not None:
                cached, ahead = found
                self.counters.from_cache += 1
                self.ahead.served += ahead
                done.set_result(Answer(cached, "cache"))
                self._planner.after_shown(work, cached)
                return done
            adopted = model.worker.adopt(answer_key(self._session + uri, work.prefix, work.suffix))
            if adopted is None:
                self._submit(model, work, done, debounce=not invoked)
                return done
            self.ahead.adopted += 1
        # The editor cancels `done` ($/cancelRequest): the job it took over stops with it.
        done.add_done_callback(lambda f: model.worker.cancel_job(adopted) if f.cancelled() else None)
        adopted.add_done_callback(lambda f: self._post(self._after_adopted, model, work, f, done))
        return done

    def _submit(self, model: LoadedModel[Computed], work: Work, done: Future[Answer | None], debounce: bool) -> None:
        """Queues a request's work; `done` gets its answer once applied (lock held)."""
        debounce_s = self.settings.debounce_ms / 1000
        job = model.worker.submit(self._session + work.uri, self._job(work, done), debounce, debounce_s)
        done.add_done_callback(lambda f: model.worker.cancel_job(job) if f.cancelled() else None)
        job.add_done_callback(lambda f: self._post(self._ended, f, done))

    def _cached(self, uri: str, prefix: str, suffix: str) -> tuple[str, bool] | None:
        """The suggestion the cache gives for the request, cut for it where it is a
        continuation decoded ahead, and whether it is; None when the cache cannot tell."""
        hit = self.suggestions.lookup(uri, prefix, suffix)
        if hit is None:
            return None
        if not hit.continuation:
            return hit.text, False
        stopper = Stopper(prefix, suffix, True, self.settings.multiline)
        shown = shown_from_continuation(stopper, hit.text, hit.ended, same_budget=not hit.typed)
        return None if shown is None else (shown, True)

    def cursor_rests(self, uri: str, path: Path | None, text: str, offset: int, language: str) -> None:
        """The editor's cursor stopped at `offset`: while the model is idle, the completion
        there is computed (its prompt evaluated first), so that typing there starts warm."""
        with self._lock:
            self._cursor_reported = True
            if self._completes(uri, text, language):
                self._planner.at(Work(uri, path, text[:offset], text[offset:], language=language))

    def edited(self, uri: str, path: Path | None, text: str, offset: int, language: str) -> None:
        """The user's last edit ended at `offset`. For an editor that does not say where its
        cursor rests (no lookahead/cursor so far), the end of the last edit stands for it: once
        the edits pause, the completion there is computed while the model is idle."""
        with self._lock:
            if not self._cursor_reported and self._completes(uri, text, language):
                self._planner.at(Work(uri, path, text[:offset], text[offset:], language=language), _EDIT_PAUSE_S)

    def _completes(self, uri: str, text: str, language: str) -> bool:
        too_large = self.documents.too_large(uri, text)
        return language not in self.settings.disabled_languages and not too_large

    def _ahead_once_loaded(self) -> None:
        """The model is ready: the work ahead asked for while it loaded is queued, if its
        document still has the text it was asked for (else an edit or a report since has
        said where the user is)."""
        with self._lock:
            pending, self._planner.when_loaded = self._planner.when_loaded, None
            if pending is not None and self.documents.text(pending.uri) == pending.prefix + pending.suffix:
                self._planner.at(pending)

    def _submit_ahead(self, work: Work, answer: Hashable, delay_s: float, if_free: bool) -> None:
        """Queues work ahead on the model's worker (lock held)."""
        model = self._model
        if model is None:
            return
        done: Future[Answer | None] = Future()
        awaited = threading.Event()
        run = self._job(work, done, awaited)
        job = model.worker.submit_ahead(self._session + work.uri, answer, run, delay_s, if_free, awaited)
        job.add_done_callback(lambda f: self._post(self._ended, f, done))

    def _after_adopted(
        self,
        model: LoadedModel[Computed],
        work: Work,
        future: Future[Computed | None],
        done: Future[Answer | None],
    ) -> None:
        """The request `work` took over work done ahead for it (applied by now): the engine's answer
        for the request's cursor, or, where the continuation could not tell (or the work was
        stopped), the model runs for it after all, unless the editor cancelled the request
        meanwhile (on the applier, lock held)."""
        if done.cancelled():
            return
        computed = None if future.cancelled() or future.exception() is not None else future.result()
        completion = computed.completion if computed is not None else None
        if completion is None or completion.answer is None:
            self._submit(model, work, done, debounce=False)
            return
        self._served(completion, completion.answer)
        resolve(done, Answer(completion.answer, "model", completion))
        self._planner.after_shown(work, completion.answer)

    def _job(
        self, work: Work, done: Future[Answer | None], awaited: threading.Event | None = None
    ) -> Callable[[CancelToken], Computed]:
        """The worker's job for `work`, under the settings of now: it computes on the worker
        and hands what it computed to the applier (`done` gets the answer there); awaited: the
        event the worker sets once a request takes this work ahead over."""
        options = decode_options(self.settings, work)
        sources = self.settings.context_sources if self.settings.extra_context_tokens else ()
        # The other documents as they are now; their lines are cut out on the worker.
        recent = self.documents.others(work.uri)

        def run(cancel: CancelToken) -> Computed:
            # On the worker: a request queued while the model loads finds the folders that open
            # once it is loaded.
            request, caches = request_for(self.workspace, work, sources, recent, self._session + work.uri)
            computed = compute(self._model, work, request, options, caches, cancel, awaited)
            self._post(self._apply, work, computed, cancel, done)
            return computed

        return run

    def _post(self, apply: Callable[..., None], *args: Any) -> None:
        """Runs apply(*args) on the session's applier thread, under the lock, after everything
        posted before it."""

        def under_lock() -> None:
            with self._lock:
                apply(*args)

        try:
            self._applier.submit(under_lock)
        except RuntimeError:  # the session shut down: nothing is waiting for its state
            pass

    def _apply(self, work: Work, computed: Computed, cancel: CancelToken, done: Future[Answer | None]) -> None:
        """What a job computed changes the session's state: the counters, the suggestion
        cache, the last completion, and what is prepared next; then `done` gets the answer
        (None where the job was superseded meanwhile) (on the applier, lock held)."""
        if computed.warmed_tokens:
            self.ahead.warmed(computed.warmed_tokens, computed.warmed_ms)
        result = computed.completion
        if result is None:
            resolve(done, None if cancel.cancelled else Answer("", "model"))
            return
        if result.stop_reason == "cancelled":
            if work.ahead:
                self.ahead.record(result)
            self.counters.cancelled += not work.ahead
            resolve(done, None)
            return
        ended = result.stop_reason == "end-of-generation"
        self.suggestions.store(work.uri, work.prefix, work.suffix, result.text, work.ahead, ended)
        continued = False
        if work.ahead:
            self.ahead.record(result)
            if not cancel.cancelled:
                continued = self._planner.after_done(work)
        else:
            self._served(result, result.text)
            # What the user sees may be accepted next: its continuation (and the next line) is
            # decoded while they read it.
            continued = self._planner.after_shown(work, result.text)
        if result.stats.short_prompt:
            self.ahead.short_prompts += 1
            # The next place's own short prompt queues it: evaluating the whole prompt first
            # would replace the next place's work, which the user's next key needs sooner.
            if not continued:
                self._planner.whole_prompt(work)
        resolve(done, None if cancel.cancelled else Answer(result.text, "model", result))

    def _ended(self, job: Future[Computed | None], done: Future[Answer | None]) -> None:
        """A job left the worker (on the applier, after its `_apply` if it ran): one that
        failed fails its request, one that never ran or was superseded answers nothing."""
        if not job.cancelled() and (error := job.exception()) is not None:
            self.counters.failed += 1
            self.client.log(logging.ERROR, f"completion failed: {error}")
            if not done.done():
                try:
                    done.set_exception(error)
                except InvalidStateError:
                    pass
            return
        resolve(done, None)

    def _served(self, result: Completion, shown: str) -> None:
        """A request was answered by the model with `shown` (result's text, or what was cut
        for it from a continuation decoded ahead) (lock held)."""
        self.counters.served += 1
        self.last_completion = {"text": shown, "stop_reason": result.stop_reason, **result.stats.as_dict()}

    def cancel(self, future: Future[Answer | None]) -> None:
        """The editor cancelled the request `complete` returned `future` for: its model work
        stops, and no newer request for the document goes with it."""
        future.cancel()
        with self._lock:
            self.counters.cancelled += 1

    # -- status --------------------------------------------------------------------------------

    def status(self) -> dict[str, Any]:
        loaded = self._model
        workspace = workspace_status(*self.workspace.statuses(), loaded is not None and loaded.error is not None)
        with self._lock:
            return session_status(
                loaded, workspace, self.counters, self.last_completion, self.ahead, self._planner.counts,
                self.settings, self.host, self.folder_host,
            )
