"""The KV states of recently used documents, kept in host memory so that coming back to a file
costs a copy (milliseconds) instead of its prompt's evaluation (seconds on a CPU).

There is one KV cache and it holds one document's prompt at a time. When a request needs a
prompt the cache does not hold, the state it is about to lose is saved first, under the
document it belongs to and the start of its prompt; a request whose prompt a KV state shares
more of than the cache does gets that state put back before its prompt is evaluated. Which
state serves is decided by the tokens alone, so a wrong label costs at most a useless copy,
never a wrong completion.

One document can have states of prompts that start at different points (a short prompt and the
whole one, cold_prompt.py; the prompt of work done ahead past a suggestion, whose window moved,
and the user's own): each is kept under its start, so that saving one never drops another.
Under one start the newer state replaces the older, unless it holds only a beginning of it.

A prompt starts with context from other recently edited files, and switching files changes
which those are: coming back to a file, its prompt would differ from its KV state from the
first token. So each state keeps the context it was built with, and the engine builds the
prompt with that context again when this lets the state serve (`context_of`): only for the same
owner, the session and document the state was saved for. Another window's document of the same
relative name shares tokens at most, and a restored state keeps only the tokens the new prompt
shares with it."""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Sequence
from dataclasses import dataclass

from lookahead_lsp.engine.prompt import ContextChunk
from lookahead_lsp.engine.runtime import KvState, ModelRuntime

Context = tuple[ContextChunk, ...]

# Saving or restoring costs milliseconds: only a difference of this many tokens pays for it.
MIN_GAIN_TOKENS = 64
# A state's start: this many of its first tokens.
_START_TOKENS = 32

# A KV state's key: its owner (session and document) and a digest of its start.
Key = tuple[str, int]


@dataclass
class KvStateStats:
    saved: int = 0
    restored: int = 0
    tokens_restored: int = 0  # prompt tokens a restore spared from evaluation


class KvStates:
    """Saved KV states by document and start, least recently used first out, within
    `budget_bytes`."""

    def __init__(self, budget_bytes: int) -> None:
        self.budget_bytes = budget_bytes
        self._states: OrderedDict[Key, KvState] = OrderedDict()
        # The extra context each document's last KV state was built with.
        self._contexts: dict[str, Context] = {}
        self.stats = KvStateStats()

    @property
    def nbytes(self) -> int:
        return sum(state.nbytes for state in self._states.values())

    def __len__(self) -> int:
        return len(self._states)

    def context_of(self, owner: str) -> Context | None:
        """The extra context the last KV state of `owner` (a request's owner: its session
        and document) was built with, if one is kept. Only the same owner's: another's context
        holds text its own request may not see."""
        kept = any(key[0] == owner for key in self._states)
        return self._contexts.get(owner) if kept else None

    def reach(self, runtime: ModelRuntime, tokens: Sequence[int]) -> int:
        """How many leading tokens of `tokens` the cache or a KV state holds."""
        return max(runtime.common_prefix(tokens), self._best(tokens)[1])

    def prepare(self, runtime: ModelRuntime, tokens: Sequence[int], owner: str | None, context: Context = ()) -> None:
        """Before `tokens` are evaluated: saves the cache's state under `owner` (the document
        it was last used for, whose prompt had `context`) if it is about to lose much, and
        restores the KV state that shares the most of `tokens` if that beats what the
        cache holds."""
        have = runtime.common_prefix(tokens)
        if len(tokens) - have < MIN_GAIN_TOKENS:
            return
        if owner is not None and len(runtime.kv_tokens) - have >= MIN_GAIN_TOKENS and self.budget_bytes > 0:
            self._put(owner, runtime.save_state(), context)
        best_key, best = self._best(tokens)
        if best_key is not None and best - have >= MIN_GAIN_TOKENS:
            runtime.load_state(self._states[best_key])
            # Only what this prompt itself would evaluate stays: the state's tail (another
            # document's text, when the state was saved for one of the same start) goes now.
            runtime.truncate(best)
            self._states.move_to_end(best_key)
            self.stats.restored += 1
            self.stats.tokens_restored += best - have

    def clear(self) -> None:
        self._states.clear()
        self._contexts.clear()

    def _best(self, tokens: Sequence[int]) -> tuple[Key | None, int]:
        best_key, best = None, 0
        for key, state in self._states.items():
            n = _common_prefix(state.tokens, tokens)
            if n > best:
                best_key, best = key, n
        return best_key, best

    def _put(self, owner: str, state: KvState, context: Context) -> None:
        key = (owner, hash(tuple(state.tokens[:_START_TOKENS])))
        kept = self._states.get(key)
        if kept is not None and _common_prefix(kept.tokens, state.tokens) == len(state.tokens):
            self._states.move_to_end(key)  # the saved one holds all of this one, and more
            return
        self._states.pop(key, None)
        if state.nbytes > self.budget_bytes:
            return
        self._states[key] = state
        self._contexts[owner] = context
        self.stats.saved += 1
        while self.nbytes > self.budget_bytes:
            self._states.popitem(last=False)
        owners = {key[0] for key in self._states}
        for gone in [owner for owner in self._contexts if owner not in owners]:
            del self._contexts[gone]


def _common_prefix(a: Sequence[int], b: Sequence[int]) -> int:
    n, limit = 0, min(len(a), len(b))
    while n < limit and a[n] == b[n]:
        n += 1
    return n
