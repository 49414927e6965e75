"""How much to speculate (draft=auto): the chance that each drafted token is accepted, learnt
online from what the model accepted before, against the measured cost of longer passes.

A drafted token must be right ~76 % of the time on a 2-core CPU just to pay for itself as the
only token of a draft (a pass of 2 positions costs 1.76 passes of 1). So a draft is cut where its
expected tokens per unit of cost peak, and skipped when no length beats a plain pass. Estimates
of evidence that stopped drafting drift back to their prior while unused, so speculation is
tried again later instead of being switched off for good."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

import numpy as np
import numpy.typing as npt

from lookahead_lsp.engine.cost_model import CostModel
from lookahead_lsp.engine.tree import PREVIOUS

Evidence = npt.NDArray[np.int64]  # (n, 4): source, n-gram size, count, total

# Pseudo-observations behind the prior: enough to steady the first decisions, few enough to
# be overruled within a completion or two.
_PRIOR_WEIGHT = 2.0
# Per declined offer, observations of that bucket decay by this factor (back towards the prior).
_DECAY_WHEN_UNUSED = 0.97
_PREVIOUS_PRIOR = 0.9
_COUNT_EDGES = (1, 2, 4, 8)  # buckets: 1, 2-3, 4-7, 8+
_SHARE_EDGES = (0.5, 0.7, 0.85, 0.97)  # buckets by the chosen follower's share of its key


def _bucket(edges: Sequence[float], value: float) -> int:
    b = 0
    while b + 1 < len(edges) and value >= edges[b + 1]:
        b += 1
    return b


def _key(row: Sequence[int]) -> tuple[int, int, int, int]:
    source, ngram, count, total = (int(x) for x in row)
    share = count / total if total else 0.0
    return source, ngram, _bucket(_COUNT_EDGES, count), _bucket(_SHARE_EDGES, share)


def prior_probability(row: Sequence[int]) -> float:
    """Before any observation: the follower's share of its key, discounted for thin evidence
    (a follower seen once is right about half the time); the model's own last completion, when
    the user typed its beginning, is nearly always right."""
    source, _, count, total = (int(x) for x in row)
    if source == PREVIOUS:
        return _PREVIOUS_PRIOR
    share = count / total if total else 0.0
    return share * count / (count + 1.0)


@dataclass
class _Bucket:
    prior: float
    accepted: float = 0.0
    tried: float = 0.0

    @property
    def probability(self) -> float:
        return (self.accepted + _PRIOR_WEIGHT * self.prior) / (self.tried + _PRIOR_WEIGHT)


@dataclass
class AcceptanceModel:
    """Running acceptance per kind of evidence: (source, n-gram size, count bucket, share
    bucket). Lives as long as the engine: what was learnt on one completion serves the next."""

    _buckets: dict[tuple[int, int, int, int], _Bucket] = field(default_factory=dict)

    def _bucket_of(self, row: Sequence[int]) -> _Bucket:
        key = _key(row)
        bucket = self._buckets.get(key)
        if bucket is None:
            bucket = self._buckets[key] = _Bucket(prior_probability(row))
        return bucket

    def probabilities(self, evidence: Evidence) -> list[float]:
        return [self._bucket_of(row).probability for row in evidence.tolist()]

    def observe(self, evidence: Evidence, n_verified: int, n_accepted: int) -> None:
        """The first n_verified drafted tokens were checked by the model and the first
        n_accepted of them accepted (the one after those was rejected, if verified)."""
        for i, row in enumerate(evidence.tolist()[:n_verified]):
            if i > n_accepted:
                break
            bucket = self._bucket_of(row)
            bucket.tried += 1
            bucket.accepted += i < n_accepted

    def decline(self, evidence: Evidence) -> None:
        """These tokens were offered but not drafted: their estimates drift back to the prior."""
        for row in evidence.tolist():
            bucket = self._bucket_of(row)
            bucket.tried *= _DECAY_WHEN_UNUSED
            bucket.accepted *= _DECAY_WHEN_UNUSED


def best_draft_length(probabilities: Sequence[float], cost: CostModel, base: int = 1) -> int:
    """The draft length k that maximises expected tokens per unit of cost: (1 + E[accepted of
    the first k]) / cost(base + k), where a token counts only if all before it are accepted.
    `base` is the positions the pass needs anyway. 0 means a plain pass is best."""
    best_k, best_rate = 0, 1.0 / cost.relative(base)
    reach = 1.0  # probability that the first k drafted tokens are all accepted
    expected = 1.0
    for k, p in enumerate(probabilities, start=1):
        reach *= p
        expected += reach
        rate = expected / cost.relative(base + k)
        if rate > best_rate:
            best_k, best_rate = k, rate
    return best_k
