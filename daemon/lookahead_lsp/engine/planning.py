"""What one pass verifies, by draft mode: the token tree of candidates after the pending token
and the lookahead window that rides along.

  none       nothing: one token per pass (the baseline);
  lookup     the lookup core's token tree (context, workspace and static caches);
  lookahead  the lookup tree plus the Jacobi window's pooled n-grams, and the window itself;
  auto       the lookup core's draft cut to the length that pays by today's pass costs and the
             running acceptance (policy.py), the window only where wide passes are cheap.
In every mode but none, the rest of the last completion comes first while the user types it."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

import numpy as np
import numpy.typing as npt

from lookahead_lsp._lookup import NgramCache, draft_tree, draft_with_evidence
from lookahead_lsp.engine.cost_model import CostModel
from lookahead_lsp.engine.options import AUTO_WINDOW_SHAPES, DecodeOptions, DraftCaches
from lookahead_lsp.engine.policy import AUTO_MAX_DRAFT, AutoPolicy
from lookahead_lsp.engine.sources import PREVIOUS, WINDOW, Evidence, EvidenceColumn, evidence_of
from lookahead_lsp.engine.tree import DraftTree
from lookahead_lsp.engine.window import LookaheadWindow
# auto: a window runs only where its positions cost at most this many plain passes.
_FREE_WINDOW_COST = 1.10


@dataclass
class StepPlan:
    """One pass's candidates; after the pass, what it gave."""

    tree: DraftTree
    window: LookaheadWindow | None = None
    evidence: Evidence | None = None  # auto: the drafted tokens' evidence (for learning)
    offered: Evidence | None = None  # auto: evidence of tokens offered but not drafted
    # After the pass: the tokens it produced (before any cut) and, when every position of the
    # batch had an output and no prompt tokens rode along, its size on the cost curve's scale.
    produced: int = 0
    positions: int | None = None


class Planner:
    """Plans the passes of one completion in one draft mode."""

    def __init__(
        self,
        options: DecodeOptions,
        caches: DraftCaches,
        context: NgramCache,
        policy: Callable[[], AutoPolicy],
        key: str,
        window: LookaheadWindow | None,
    ) -> None:
        self.options = options
        self.caches = caches
        self.context = context  # the request's own n-grams (prompt and generated text)
        self._policy = policy  # auto's state, created on first use
        self.key = key  # whose record auto's guard keeps
        self.window = window
        mode = options.mode
        # lookahead's window n-grams join its lookup tree in plan().
        self._draft = self._auto_path if mode.adaptive else self._lookup_tree if mode.drafts else self._no_draft

    def plan(self, history: list[int], previous: list[int], remaining: int) -> StepPlan:
        """The next pass after `history` (the prompt and every accepted token) when `remaining`
        tokens may still be emitted; `previous`: the rest of the last completion."""
        room = max(0, remaining - 1)  # the pass adds one token of its own
        step = StepPlan(DraftTree(), self.window)
        if room and previous and self.options.mode.drafts:
            self._previous(step, previous[:room])
        elif room:
            self._draft(step, np.asarray(history[-4:], dtype=np.int32), room)
        if self.window is not None and room:
            for gram in self.window.candidates(history[-1]):
                step.tree.add_path(gram[:room], [WINDOW] * len(gram[:room]), len(step.tree) + room)
        return step

    def _previous(self, step: StepPlan, tokens: list[int]) -> None:
        if self.options.mode.adaptive:
            evidence = evidence_of(PREVIOUS, len(tokens))
            k = self._policy().choose(evidence, self.key).length
            tokens, step.evidence = tokens[:k], evidence[:k]
        step.tree.add_path(tokens, [PREVIOUS] * len(tokens), len(tokens))

    def _no_draft(self, step: StepPlan, tail: npt.NDArray[np.int32], room: int) -> None:
        pass

    def _lookup_tree(self, step: StepPlan, tail: npt.NDArray[np.int32], room: int) -> None:
        branches = self.options.lookup_branches
        if not branches:
            return
        n = min(self.options.lookup_draft, room)
        caches = self.caches
        tokens, parents, evidence = draft_tree(tail, n, branches, self.context, caches.workspace, caches.repository)
        step.tree.add_tree(tokens.tolist(), parents.tolist(), evidence[:, EvidenceColumn.SOURCE].tolist(), n * branches)

    def _auto_path(self, step: StepPlan, tail: npt.NDArray[np.int32], room: int) -> None:
        caches = self.caches
        tokens, evidence = draft_with_evidence(
            tail, min(AUTO_MAX_DRAFT, room), self.context, caches.workspace, caches.repository
        )
        if not len(tokens):
            return
        choice = self._policy().choose(evidence, self.key)
        k = choice.length
        step.tree.add_path(tokens[:k].tolist(), evidence[:k, EvidenceColumn.SOURCE].tolist(), k)
        step.evidence = evidence[:k]
        # Held back by the guard, the offer says nothing about the evidence.
        step.offered = None if choice.held_back else evidence[k : k + 1]


def auto_window(policy: AutoPolicy, cost: CostModel, key: str, seed: list[int]) -> LookaheadWindow | None:
    """A Jacobi window only where the measured cost says wide passes are nearly free (a GPU,
    typically): the widest shape whose positions cost at most 10 % more than a plain pass,
    unless the guard holds speculation back here."""
    if not policy.guard.allows(key):
        return None
    for shape in AUTO_WINDOW_SHAPES:
        extra = shape.positions + shape.candidates * (shape.ngram - 1)
        if cost.relative(1 + extra) <= _FREE_WINDOW_COST:
            return LookaheadWindow(shape, seed)
    return None
