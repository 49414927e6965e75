"""One job of the model's worker: what it computes (Work), under which decoding options, and the
computation itself, which only reads the session's state. What it computed goes back to the
service, the one writer of the session's state (service.py, `_apply`)."""

from __future__ import annotations

import dataclasses
import time
from dataclasses import dataclass
from pathlib import Path

from lookahead_lsp.engine import CancelToken, Completion, CompletionRequest, DecodeOptions, DraftCaches, PromptWindows
from lookahead_lsp.service.model_host import LoadedModel
from lookahead_lsp.service.settings import Settings

# How long a prompt pass of work done ahead may take: a request that arrives meanwhile waits
# that long at most, about what one of its own prompt passes (128 tokens) takes on a laptop's
# CPU. Idle, the passes grow to 128 tokens (cheaper per token than smaller ones on a CPU); on a
# busy machine they shrink.
AHEAD_PASS_MS = 200.0
# A request waits this long for a model still loading before it answers nothing.
MODEL_WAIT_S = 30.0


@dataclass(frozen=True)
class Work:
    """The completion of (prefix, suffix) in a document. ahead: done while the model is idle
    (the model's own continuation, uncut); warm: only the evaluation of its whole prompt; then:
    the texts before the cursor of the places work ahead prepares after it."""

    uri: str
    path: Path | None
    prefix: str
    suffix: str
    ahead: bool = False
    warm: bool = False
    then: tuple[str, ...] = ()


@dataclass(frozen=True)
class Computed:
    """What a job computed: the completion (None where nothing ran: no model, or stopped before
    it started), or for warm work the prompt tokens evaluated and the time it took."""

    completion: Completion | None = None
    warmed_tokens: int = 0
    warmed_ms: float = 0.0


def decode_options(settings: Settings, ahead: bool) -> DecodeOptions:
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
        options = dataclasses.replace(options, stop_rules=False, prefill_pass_ms=AHEAD_PASS_MS)
    return options


def compute(
    model: LoadedModel[Computed] | None,
    work: Work,
    request: CompletionRequest,
    options: DecodeOptions,
    caches: DraftCaches,
    cancel: CancelToken,
) -> Computed:
    """On the worker: the model's work for `work` (waiting for a model still loading)."""
    if model is None or not model.ready.wait(MODEL_WAIT_S):
        return Computed()
    engine = model.engine
    if engine is None or cancel.cancelled:
        return Computed()
    if work.warm:
        began = time.perf_counter()
        tokens = engine.warm(request, options, cancel)
        return Computed(warmed_tokens=tokens, warmed_ms=(time.perf_counter() - began) * 1000)
    return Computed(engine.complete(request, options, caches, cancel))
