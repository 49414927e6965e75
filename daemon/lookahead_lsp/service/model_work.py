"""One job of the model's worker: what it computes (Work), under which decoding options, the
request it builds (where its document sits, the context its prompt carries), and the
computation itself, which only reads the session's state. What it computed goes back to the
service, the one writer of the session's state (service.py, `_apply`)."""

from __future__ import annotations

import dataclasses
import threading
import time
from dataclasses import dataclass
from pathlib import Path

from collections.abc import Sequence

from lookahead_lsp.engine import CancelToken, Completion, CompletionRequest, DecodeOptions, DraftCaches, PromptWindows
from lookahead_lsp.service.context import context_chunks
from lookahead_lsp.service.documents import Document
from lookahead_lsp.service.folders import WorkspaceFolders
from lookahead_lsp.service.model_host import LoadedModel
from lookahead_lsp.service.settings import Settings
from lookahead_lsp.workspace.folder import WorkspaceFolder

# How long a prompt pass of work done ahead may take: a request that arrives meanwhile waits
# that long at most, about what one of its own prompt passes (128 tokens) takes on a laptop's
# CPU. Idle, the passes grow to 128 tokens (cheaper per token than smaller ones on a CPU); on a
# busy machine they shrink.
AHEAD_PASS_MS = 200.0
# A request waits this long for a model still loading before it answers nothing.
MODEL_WAIT_S = 30.0


@dataclass(frozen=True)
class Work:
    """The completion of (prefix, suffix) in a document of `language` (the editor's id). ahead:
    done while the model is idle (the model's own continuation, uncut); warm: only the
    evaluation of its whole prompt; then: the texts before the cursor of the places work ahead
    prepares after it."""

    uri: str
    path: Path | None
    prefix: str
    suffix: str
    ahead: bool = False
    warm: bool = False
    then: tuple[str, ...] = ()
    language: str = ""


@dataclass(frozen=True)
class Computed:
    """What a job computed: the completion (None where nothing ran: no model, or stopped before
    it started), or for warm work the prompt tokens evaluated and the time it took."""

    completion: Completion | None = None
    warmed_tokens: int = 0
    warmed_ms: float = 0.0


def decode_options(settings: Settings, work: Work) -> DecodeOptions:
    options = DecodeOptions(
        draft=settings.draft,
        multiline=settings.multiline,
        max_tokens=settings.max_tokens,
        time_budget_ms=settings.time_budget_ms,
        windows=PromptWindows(settings.prefix_tokens, settings.suffix_tokens, settings.extra_context_tokens),
        # Without work ahead nothing would evaluate a short prompt's whole one later.
        cold_prompt_ms=settings.cold_prompt_ms if settings.work_ahead else None,
    )
    if work.ahead:
        # The model's own continuation, uncut: each request it answers cuts it for itself. Past
        # its own answer it would decode what the next place's work decodes (the line after an
        # accepted one, after Enter): with next places it stops there, and they start sooner.
        options = dataclasses.replace(
            options, stop_rules=False, prefill_pass_ms=AHEAD_PASS_MS, until_answered=bool(work.then)
        )
    return options


def request_for(
    workspace: WorkspaceFolders, work: Work, sources: Sequence[str], recent: list[tuple[str, Document]], owner: str
) -> tuple[CompletionRequest, DraftCaches]:
    """On the worker: the request for `work` and the drafting caches of its document's folder.
    recent: the session's other documents, latest first; a prompt carries no text of another
    folder than its document's (outside every folder: only of documents outside every one)."""
    folder = workspace.of(work.path)

    def name(path: Path | None, uri: str) -> str:
        return _name(path, uri, workspace.of(path))

    of_folder = [(uri, doc) for uri, doc in recent if workspace.of(doc.path) is folder]
    retrieval = folder.retrieval if folder is not None else None
    chunks = context_chunks(sources, retrieval, work.path, work.prefix, of_folder, name)
    repository = folder.root.name if folder is not None else ""
    request = CompletionRequest(work.prefix, work.suffix, _name(work.path, work.uri, folder), chunks, repository, owner=owner)
    if folder is None:
        return request, DraftCaches()
    # The folder refreshes its static cache here, on the worker.
    workspace_cache, static_cache = folder.caches()
    return request, DraftCaches(workspace_cache, static_cache)


def _name(path: Path | None, uri: str, folder: WorkspaceFolder | None) -> str:
    """A document's name in a prompt: relative to its folder."""
    if path is not None and folder is not None:
        return path.relative_to(folder.root).as_posix()
    return path.name if path is not None else uri.rsplit("/", 1)[-1]


def compute(
    model: LoadedModel[Computed] | None,
    work: Work,
    request: CompletionRequest,
    options: DecodeOptions,
    caches: DraftCaches,
    cancel: CancelToken,
    awaited: threading.Event | None = None,
) -> Computed:
    """On the worker: the model's work for `work` (waiting for a model still loading);
    awaited: set once a request waits for this work done ahead (Engine.complete)."""
    if model is None or not model.ready.wait(MODEL_WAIT_S):
        return Computed()
    engine = model.engine
    if engine is None or cancel.cancelled:
        return Computed()
    if work.warm:
        began = time.perf_counter()
        tokens = engine.warm(request, options, cancel)
        return Computed(warmed_tokens=tokens, warmed_ms=(time.perf_counter() - began) * 1000)
    return Computed(engine.complete(request, options, caches, cancel, awaited))
