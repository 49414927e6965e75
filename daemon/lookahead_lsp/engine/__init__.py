"""The speculative completion engine: a GGUF model verifying lookup-drafted candidates (and its
own lookahead guesses) several tokens per pass. Knows nothing of LSP or of the workspace index:
callers hand it the caches to draft from."""

from lookahead_lsp.engine.engine import Engine
from lookahead_lsp.engine.options import DRAFT_MODES, CancelToken, DecodeOptions, DraftCaches, EngineSettings
from lookahead_lsp.engine.results import Completion, CompletionStats, TokenTrace
from lookahead_lsp.engine.prompt import CompletionRequest, ContextChunk, PromptWindows
from lookahead_lsp.engine.runtime import EngineError
from lookahead_lsp.engine.window import LookaheadShape

__all__ = [
    "DRAFT_MODES",
    "CancelToken",
    "Completion",
    "CompletionRequest",
    "CompletionStats",
    "ContextChunk",
    "DecodeOptions",
    "DraftCaches",
    "Engine",
    "EngineError",
    "EngineSettings",
    "LookaheadShape",
    "PromptWindows",
    "TokenTrace",
]
