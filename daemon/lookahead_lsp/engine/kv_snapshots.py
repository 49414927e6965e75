"""The KV states of recently used documents, kept in host memory so that coming back to a file
costs a copy (milliseconds) instead of its prompt's evaluation (seconds on a CPU).

There is one KV cache and it holds one document's prompt at a time. When a request needs a
prompt the cache does not hold, the state it is about to lose is saved first, under the
document it belongs to; a request whose prompt a saved state shares more of than the cache
does gets that state put back before its prompt is evaluated. Which state serves is decided by
the tokens alone, so a wrong label costs at most a useless copy, never a wrong completion.

A prompt starts with context from other recently edited files, and switching files changes
which those are: coming back to a file, its prompt would differ from its saved state from the
first token. So each state keeps the context it was built with, and the engine builds the
prompt with that context again when this lets the state serve (`context_of`)."""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Sequence
from dataclasses import dataclass

from lookahead_lsp.engine.prompt import ContextChunk
from lookahead_lsp.engine.runtime import KvState, ModelRuntime

Context = tuple[ContextChunk, ...]

# Saving or restoring costs milliseconds: only a difference of this many tokens pays for it.
MIN_GAIN_TOKENS = 64


@dataclass
class SnapshotStats:
    saved: int = 0
    restored: int = 0
    tokens_restored: int = 0  # prompt tokens a restore spared from evaluation


class KvSnapshots:
    """Saved KV states by document, least recently used first out, within `budget_bytes`."""

    def __init__(self, budget_bytes: int) -> None:
        self.budget_bytes = budget_bytes
        self._states: OrderedDict[str, KvState] = OrderedDict()
        self._contexts: dict[str, Context] = {}
        self.stats = SnapshotStats()

    @property
    def nbytes(self) -> int:
        return sum(state.nbytes for state in self._states.values())

    def __len__(self) -> int:
        return len(self._states)

    def context_of(self, owner: str) -> Context | None:
        """The extra context the saved state of `owner` was built with, if one is saved."""
        return self._contexts.get(owner) if owner in self._states else None

    def reach(self, runtime: ModelRuntime, tokens: Sequence[int]) -> int:
        """How many leading tokens of `tokens` the cache or a saved state holds."""
        return max(runtime.common_prefix(tokens), self._best(tokens)[1])

    def prepare(self, runtime: ModelRuntime, tokens: Sequence[int], owner: str | None, context: Context = ()) -> None:
        """Before `tokens` are evaluated: saves the cache's state under `owner` (the document
        it was last used for, whose prompt had `context`) if it is about to lose much, and
        restores the saved state that shares the most of `tokens` if that beats what the
        cache holds."""
        have = runtime.common_prefix(tokens)
        if len(tokens) - have < MIN_GAIN_TOKENS:
            return
        if owner is not None and len(runtime.kv_tokens) - have >= MIN_GAIN_TOKENS and self.budget_bytes > 0:
            self._put(owner, runtime.save_state(), context)
        best_owner, best = self._best(tokens)
        if best_owner is not None and best - have >= MIN_GAIN_TOKENS:
            runtime.load_state(self._states[best_owner])
            self._states.move_to_end(best_owner)
            self.stats.restored += 1
            self.stats.tokens_restored += best - have

    def clear(self) -> None:
        self._states.clear()
        self._contexts.clear()

    def _best(self, tokens: Sequence[int]) -> tuple[str | None, int]:
        best_owner, best = None, 0
        for owner, state in self._states.items():
            n = _common_prefix(state.tokens, tokens)
            if n > best:
                best_owner, best = owner, n
        return best_owner, best

    def _put(self, owner: str, state: KvState, context: Context) -> None:
        self._states.pop(owner, None)
        self._contexts.pop(owner, None)
        if state.nbytes > self.budget_bytes:
            return
        self._states[owner] = state
        self._contexts[owner] = context
        self.stats.saved += 1
        while self.nbytes > self.budget_bytes:
            gone, _ = self._states.popitem(last=False)
            self._contexts.pop(gone, None)


def _common_prefix(a: Sequence[int], b: Sequence[int]) -> int:
    n, limit = 0, min(len(a), len(b))
    while n < limit and a[n] == b[n]:
        n += 1
    return n
