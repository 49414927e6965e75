"""What a caller sets: the engine's settings, one completion's options, the caches it drafts
from, and the token that cancels it."""

from __future__ import annotations

import threading
from dataclasses import dataclass
from pathlib import Path

from lookahead_lsp._lookup import NgramCache, PassInterrupt, StaticCache, WorkspaceView
from lookahead_lsp.engine.policy import AUTO_MAX_DRAFT
from lookahead_lsp.engine.prompt import PromptWindows
from lookahead_lsp.engine.stopping import MULTILINE_MODES
from lookahead_lsp.engine.window import LookaheadShape



@dataclass(frozen=True)
class DraftMode:
    """What a draft mode means for the rest of the engine, decided once per completion."""

    name: str
    drafts: bool  # passes verify drafted tokens (lookup trees, the last completion's rest)
    fixed_window: bool  # every pass carries the configured Jacobi window
    adaptive: bool  # auto: each draft's length, and any window, chosen by the policy

    @property
    def uses_policy(self) -> bool:
        """Whether auto's state is loaded for it: auto plans with it, lookahead's wide passes
        teach its cost curve."""
        return self.adaptive or self.fixed_window


_MODES = {
    mode.name: mode
    for mode in (
        DraftMode("none", drafts=False, fixed_window=False, adaptive=False),
        DraftMode("lookup", drafts=True, fixed_window=False, adaptive=False),
        DraftMode("lookahead", drafts=True, fixed_window=True, adaptive=False),
        DraftMode("auto", drafts=True, fixed_window=False, adaptive=True),
    )
}
DRAFT_MODES = tuple(_MODES)
PREFILL_CHUNK = 128
# auto: the window shapes it may run, widest first (planning.auto_window picks one).
AUTO_WINDOW_SHAPES = (LookaheadShape(8, 4, 8), LookaheadShape(4, 4, 4), LookaheadShape(2, 3, 2))


@dataclass(frozen=True)
class EngineSettings:
    model_path: Path
    n_ctx: int = 4096
    n_threads: int | None = None  # None: the cores other programs leave free (threads.py)
    n_gpu_layers: int = -1  # -1: all, on a GPU build of llama-cpp-python
    cache_dir: Path | None = None  # cost model and calibration (default ~/.cache/lookahead-lsp)
    sampling: str = "auto"  # where each position's argmax is taken (runtime.SAMPLING_MODES)
    # Host memory for the KV states of recently used documents (kv_states.py); 0: none kept.
    kv_state_mib: int = 256


@dataclass(frozen=True)
class DecodeOptions:
    draft: str = "auto"
    max_tokens: int = 64
    time_budget_ms: float | None = None
    stop_rules: bool = True
    multiline: str = "auto"  # when a completion may span several lines (stopping.MULTILINE_MODES)
    windows: PromptWindows = PromptWindows()
    lookup_draft: int = 8  # lookup / lookahead: tokens per drafted branch
    lookup_branches: int = 3  # lookup / lookahead: branches of the token tree
    lookahead: LookaheadShape = LookaheadShape()
    trace: bool = False  # record, per emitted token, the verifying pass's top two logits
    heal: bool = True  # token healing at the end of a partly typed word (healing.py)
    # auto: whose record the guard keeps (a document, a language); default: the file extension.
    speculation_key: str | None = None
    # Prompt tokens per llama_decode call: the granularity of cancelling a cold prompt.
    prefill_chunk: int = PREFILL_CHUNK
    # Set: prompt passes are sized to take about this long each (prefill_chunk tokens at most),
    # from what the last one took per token, so that a request arriving during work done ahead
    # waits that long at most however busy the machine is, and larger passes (cheaper per
    # token) run while it is idle.
    prefill_pass_ms: float | None = None
    # Set: a prompt whose evaluation would take longer than this is cut short, for Engine.warm
    # to evaluate whole later (cold_prompt.py).
    cold_prompt_ms: float | None = None
    # Without stop rules: the continuation ends once it holds the answer of a request at its
    # cursor (as it does for a request waiting on it), for work ahead whose next places are
    # prepared by work of their own, which would decode the rest again.
    until_answered: bool = False

    def __post_init__(self) -> None:
        if self.draft not in _MODES:
            raise ValueError(f"draft must be one of {', '.join(DRAFT_MODES)}, not {self.draft!r}")
        if self.max_tokens < 1:
            raise ValueError("max_tokens must be >= 1")
        if self.multiline not in MULTILINE_MODES:
            raise ValueError(f"multiline must be one of {', '.join(MULTILINE_MODES)}, not {self.multiline!r}")
        if self.cold_prompt_ms is not None and not self.cold_prompt_ms > 0:
            raise ValueError("cold_prompt_ms must be > 0")
        if not 0 <= self.lookup_branches <= 16 or self.lookup_draft < 0:
            raise ValueError("lookup_branches must be in [0, 16] and lookup_draft >= 0")

    @property
    def mode(self) -> DraftMode:
        return _MODES[self.draft]


@dataclass(frozen=True)
class DraftCaches:
    """The lookup core's long-lived draft sources: the folder's live workspace cache and its
    prebuilt static cache (verified before it is handed over). The
    request's context cache is the engine's own."""

    workspace: NgramCache | WorkspaceView | None = None
    repository: StaticCache | None = None


class CancelToken:
    """Set from any thread; the engine checks it between model passes and prompt chunks, and
    the pass under way ends at once where the backend allows (`interrupt`: llama.cpp's CPU
    backend)."""

    def __init__(self) -> None:
        self._event = threading.Event()
        self.interrupt = PassInterrupt()

    def cancel(self) -> None:
        self.interrupt.raise_()
        self._event.set()

    @property
    def cancelled(self) -> bool:
        return self._event.is_set()


def step_room(options: DecodeOptions) -> int:
    """Positions one step may use beyond the current token."""
    if options.mode.adaptive:
        return AUTO_MAX_DRAFT + max(shape.positions for shape in AUTO_WINDOW_SHAPES) + 8
    return options.lookup_draft + options.lookahead.positions + 8
