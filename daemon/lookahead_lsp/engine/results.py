"""What a completion gives back: its text and tokens, why it stopped, its statistics and, on
request, the logits that verified each token."""

from __future__ import annotations

from dataclasses import dataclass, field

from lookahead_lsp.engine.sources import SOURCES


@dataclass
class CompletionStats:
    tokens: int = 0
    passes: int = 0
    accepted_by_source: dict[str, int] = field(default_factory=lambda: {s: 0 for s in SOURCES})
    drafted: int = 0  # candidate tokens sent to the model
    lookahead_window: str | None = None  # the Jacobi window's shape, "W4 N4 G4", when one ran
    prompt_tokens: int = 0
    prompt_evaluated: int = 0  # of which not found in the KV cache
    ms_prompt: float = 0.0
    ms_draft: float = 0.0
    ms_model: float = 0.0
    ms_total: float = 0.0
    threads: int = 0  # the model's threads for this completion (threads.py)
    short_prompt: bool = False  # its prompt was cold and cut short (cold_prompt.py)
    # The other files' chunks in its prompt: path, lines, why, tokens (ContextChunk.described).
    context: list[dict[str, object]] = field(default_factory=list)

    @property
    def tokens_per_pass(self) -> float:
        return self.tokens / self.passes if self.passes else 0.0

    @property
    def tokens_per_s(self) -> float:
        """Generation speed: tokens over the time after the prompt was evaluated."""
        seconds = (self.ms_total - self.ms_prompt) / 1000
        return self.tokens / seconds if seconds > 0 else 0.0

    def as_dict(self) -> dict[str, object]:
        return {
            "tokens": self.tokens,
            "passes": self.passes,
            "tokens_per_pass": round(self.tokens_per_pass, 3),
            "accepted_by_source": dict(self.accepted_by_source),
            "drafted": self.drafted,
            "lookahead_window": self.lookahead_window,
            "prompt_tokens": self.prompt_tokens,
            "prompt_evaluated": self.prompt_evaluated,
            "ms_prompt": round(self.ms_prompt, 2),
            "ms_draft": round(self.ms_draft, 2),
            "ms_model": round(self.ms_model, 2),
            "ms_total": round(self.ms_total, 2),
            "tokens_per_s": round(self.tokens_per_s, 2),
            "threads": self.threads,
            "context": list(self.context),
            "short_prompt": self.short_prompt,
        }


@dataclass(frozen=True)
class TokenTrace:
    """An emitted token and the logits row that verified it (its pass, top two ids and values)."""

    token: int
    pass_index: int
    top1: int
    top2: int
    margin: float  # top-1 logit minus top-2 logit


@dataclass
class Completion:
    text: str
    tokens: list[int]
    stats: CompletionStats
    stop_reason: str  # stop-rule, max-tokens, end-of-generation, time-budget, context-full, answered, cancelled
    trace: list[TokenTrace] = field(default_factory=list)
    # Run without stop rules (work done ahead): what a request at this run's own cursor shows,
    # cut from the continuation; None where the continuation stops too soon to tell.
    answer: str | None = None
