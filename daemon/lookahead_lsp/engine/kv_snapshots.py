"""The KV states of recently used documents, kept in host memory so that coming back to a file
costs a copy (milliseconds) instead of its prompt's evaluation (seconds on a CPU).

There is one KV cache and it holds one document's prompt at a time. When a request needs a
prompt the cache does not hold, the state it is about to lose is saved first, under the
document it belongs to; a request whose prompt a saved state shares more of than the cache
does gets that state put back before its prompt is evaluated. Which state serves is decided by
the tokens alone, so a wrong label costs at most a useless copy, never a wrong completion."""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Sequence
from dataclasses import dataclass

from lookahead_lsp.engine.runtime import KvState, ModelRuntime

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
        self.stats = SnapshotStats()

    @property
    def nbytes(self) -> int:
        return sum(state.nbytes for state in self._states.values())

    def __len__(self) -> int:
        return len(self._states)

    def prepare(self, runtime: ModelRuntime, tokens: Sequence[int], owner: str | None) -> None:
        """Before `tokens` are evaluated: saves the cache's state under `owner` (the document
        it was last used for) if it is about to lose much, and restores the saved state that
        shares the most of `tokens` if that beats what the cache holds."""
        have = runtime.common_prefix(tokens)
        if len(tokens) - have < MIN_GAIN_TOKENS:
            return
        if owner is not None and len(runtime.kv_tokens) - have >= MIN_GAIN_TOKENS and self.budget_bytes > 0:
            self._put(owner, runtime.save_state())
        best_owner, best = self._best(tokens)
        if best_owner is not None and best - have >= MIN_GAIN_TOKENS:
            runtime.load_state(self._states[best_owner])
            self._states.move_to_end(best_owner)
            self.stats.restored += 1
            self.stats.tokens_restored += best - have

    def clear(self) -> None:
        self._states.clear()

    def _best(self, tokens: Sequence[int]) -> tuple[str | None, int]:
        best_owner, best = None, 0
        for owner, state in self._states.items():
            n = _common_prefix(state.tokens, tokens)
            if n > best:
                best_owner, best = owner, n
        return best_owner, best

    def _put(self, owner: str, state: KvState) -> None:
        self._states.pop(owner, None)
        if state.nbytes > self.budget_bytes:
            return
        self._states[owner] = state
        self.stats.saved += 1
        while self.nbytes > self.budget_bytes:
            self._states.popitem(last=False)


def _common_prefix(a: Sequence[int], b: Sequence[int]) -> int:
    n, limit = 0, min(len(a), len(b))
    while n < limit and a[n] == b[n]:
        n += 1
    return n
