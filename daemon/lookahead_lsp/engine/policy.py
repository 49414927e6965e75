"""How much to speculate (draft=auto): the chance that each drafted token is accepted, learnt
online from what the model accepted before, against what longer passes cost today; and a guard
that stops speculating where it has been losing to plain decoding.

A drafted token must be right ~76 % of the time on a 2-core CPU just to pay for itself as the
only token of a draft (a pass of 2 positions costs 1.76 passes of 1). So a draft is cut where its
expected tokens per unit of cost peak, and skipped when no length beats a plain pass. Estimates
of evidence that stopped drafting drift back to their prior while unused, so speculation is
tried again later instead of being switched off for good. Within a completion the estimates
are scaled by how its drafts have fared so far; across completions a guard holds speculation
back where its passes have been costing more per token than plain ones."""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass, field
from importlib import resources

from lookahead_lsp.engine.cost_model import CostModel, OnlineCost
from lookahead_lsp.engine.sources import PREVIOUS, Evidence

BucketKey = tuple[int, int, int, int]  # source, n-gram size, count bucket, share bucket

# Pseudo-observations behind the prior: enough to steady the first decisions, few enough to
# be overruled within a completion or two.
_PRIOR_WEIGHT = 4.0
# Per declined offer, observations of that bucket decay by this factor (back towards the prior).
_DECAY_WHEN_UNUSED = 0.97
# Observations kept per bucket (older ones scaled down): a bucket keeps following the model
# after weeks of use instead of freezing at its long-run average.
_MAX_TRIED = 200.0
_PREVIOUS_PRIOR = 0.9
_COUNT_EDGES = (1, 2, 4, 8)  # buckets: 1, 2-3, 4-7, 8+
_SHARE_EDGES = (0.5, 0.7, 0.85, 0.97)  # buckets by the chosen follower's share of its key
# The longest draft considered.
AUTO_MAX_DRAFT = 16

# Acceptance per bucket before any observation, measured by an offline replay of the default
# model's greedy completions in three languages (fitted_priors.json; bench/fit_priors.py writes
# it, docs/benchmarks.md says on what). Buckets it lacks fall back to prior_formula().
_FITTED_PRIORS_FILE = "fitted_priors.json"


def _load_fitted_priors() -> dict[BucketKey, float]:
    data = json.loads(resources.files("lookahead_lsp.engine").joinpath(_FITTED_PRIORS_FILE).read_text(encoding="utf-8"))
    return {
        (int(b["source"]), int(b["ngram"]), int(b["count_bucket"]), int(b["share_bucket"])): float(b["acceptance"])
        for b in data["buckets"]
    }


FITTED_PRIORS: dict[BucketKey, float] = _load_fitted_priors()


def _bucket(edges: Sequence[float], value: float) -> int:
    b = 0
    while b + 1 < len(edges) and value >= edges[b + 1]:
        b += 1
    return b


def bucket_key(row: Sequence[int]) -> BucketKey:
    """The kind of evidence behind one drafted token (a row of draft_with_evidence)."""
    source, ngram, count, total = (int(x) for x in row)
    share = count / total if total else 0.0
    return source, ngram, _bucket(_COUNT_EDGES, count), _bucket(_SHARE_EDGES, share)


def prior_formula(row: Sequence[int]) -> float:
    """Without a fitted prior: the follower's share of its key, discounted for thin evidence
    (a follower seen once is right about half the time); the model's own last completion, when
    the user typed its beginning, is nearly always right."""
    source, _, count, total = (int(x) for x in row)
    if source == PREVIOUS:
        return _PREVIOUS_PRIOR
    share = count / total if total else 0.0
    return share * count / (count + 1.0)


def prior_probability(row: Sequence[int]) -> float:
    """Before any observation: the fitted prior of the row's bucket, else prior_formula."""
    return FITTED_PRIORS.get(bucket_key(row), prior_formula(row))


@dataclass
class AcceptanceBucket:
    prior: float
    accepted: float = 0.0
    tried: float = 0.0

    @property
    def probability(self) -> float:
        return (self.accepted + _PRIOR_WEIGHT * self.prior) / (self.tried + _PRIOR_WEIGHT)


@dataclass
class AcceptanceModel:
    """Running acceptance per kind of evidence: (source, n-gram size, count bucket, share
    bucket). Lives as long as the engine, and beyond it in the calibration file: what was learnt
    on one completion serves the next."""

    buckets: dict[BucketKey, AcceptanceBucket] = field(default_factory=dict)

    def _bucket_of(self, row: Sequence[int]) -> AcceptanceBucket:
        key = bucket_key(row)
        bucket = self.buckets.get(key)
        if bucket is None:
            bucket = self.buckets[key] = AcceptanceBucket(prior_probability(row))
        return bucket

    def probabilities(self, evidence: Evidence) -> list[float]:
        """Per drafted token, the chance that it is accepted if all before it are."""
        return [self._bucket_of(row).probability for row in evidence.tolist()]

    def observe(self, evidence: Evidence, n_verified: int, n_accepted: int) -> None:
        """The first n_verified tokens of a draft were checked by the model and the first
        n_accepted of them accepted (the one after those was rejected, if verified)."""
        for i, row in enumerate(evidence.tolist()[:n_verified]):
            if i > n_accepted:
                break
            bucket = self._bucket_of(row)
            if bucket.tried >= _MAX_TRIED:
                scale = (_MAX_TRIED - 1) / bucket.tried
                bucket.tried *= scale
                bucket.accepted *= scale
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


# -- the guard -----------------------------------------------------------------------------

# Speculative passes behind a verdict: decayed sums with this factor per pass (about the last 20
# count); speculation is held back once those of at least _MIN_WEIGHT passes took more than
# _LOSS_TOLERANCE times a plain pass per token. The tolerance keeps chance (a few rejected
# drafts in a row, a noisy timing) from stopping speculation that pays on average.
_GUARD_DECAY = 0.95
_MIN_WEIGHT = 8.0
_LOSS_TOLERANCE = 1.03
# A probe is judged on its first passes (decayed weight 3.5: four passes); it must win outright.
_PROBE_WEIGHT = 3.5
# Passes that wanted to speculate but were held back before the next probe; doubled after each
# probe that lost again, so a key where speculation never pays costs a few passes in hundreds.
_FIRST_PROBE = 8
_MAX_PROBE = 512
# Keys remembered (the least recently used are forgotten first).
_MAX_GUARD_KEYS = 256


@dataclass
class GuardState:
    """One key's recent speculative passes and its verdict."""

    on: bool = True
    probing: bool = False
    ms: float = 0.0  # decayed sum of speculative passes' milliseconds
    tokens: float = 0.0  # decayed sum of the tokens they emitted
    weight: float = 0.0  # decayed number of them
    held: int = 0  # passes held back since the last verdict
    interval: int = _FIRST_PROBE  # held-back passes before the next probe

    def add(self, ms: float, tokens: int) -> None:
        self.ms = self.ms * _GUARD_DECAY + ms
        self.tokens = self.tokens * _GUARD_DECAY + tokens
        self.weight = self.weight * _GUARD_DECAY + 1.0

    def reset(self) -> None:
        self.ms = self.tokens = self.weight = 0.0


@dataclass
class SpeculationGuard:
    """Never slower than plain: per key (a document or a language), the milliseconds per emitted
    token of recent speculative passes against those of a plain pass (one position, with the
    loop's own work). Where speculation loses, it is held back; after `interval` held-back
    passes a few passes probe it again, and it resumes only if they win."""

    states: dict[str, GuardState] = field(default_factory=dict)

    def allows(self, key: str) -> bool:
        state = self.states.get(key)
        if state is None or state.on or state.probing:
            return True
        if state.held >= state.interval:
            state.probing = True
            state.reset()  # the probe is judged on its own passes
            return True
        return False

    def held_back(self, key: str) -> None:
        self._state(key).held += 1

    def record(self, key: str, ms: float, tokens: int, plain_ms: float) -> None:
        """A speculative pass of `key` took `ms` (loop work included) and emitted `tokens`; a
        plain pass costs `plain_ms` today."""
        state = self._state(key)
        state.add(ms, max(1, tokens))
        ratio = state.ms / state.tokens / plain_ms  # speculative ms per token over plain's
        if state.probing and state.weight >= _PROBE_WEIGHT:
            won = ratio <= 1.0
            state.probing, state.on, state.held = False, won, 0
            state.interval = _FIRST_PROBE if won else min(2 * state.interval, _MAX_PROBE)
        elif state.on and state.weight >= _MIN_WEIGHT and ratio > _LOSS_TOLERANCE:
            state.on, state.held = False, 0

    def _state(self, key: str) -> GuardState:
        state = self.states.pop(key, None) or GuardState()
        self.states[key] = state  # most recently used last
        while len(self.states) > _MAX_GUARD_KEYS:
            del self.states[next(iter(self.states))]
        return state


# -- auto, put together ----------------------------------------------------------------------

# Within one completion, drafts are trusted as far as they have held so far: estimates are scaled
# by (accepted + prior) / (predicted + prior) over its recent drafted tokens. Some files copy
# from their context far more than the average the buckets learnt, others far less.
_TRUST_PRIOR = 4.0
_TRUST_DECAY = 0.9
_MAX_PROBABILITY = 0.995


@dataclass(frozen=True)
class Choice:
    length: int  # tokens to draft
    held_back: bool  # the policy wanted to draft, the guard said no


@dataclass
class AutoPolicy:
    """auto's decisions and what it learns from each pass: acceptance per kind of evidence,
    today's pass costs, the guard and, within a completion, the trust in its drafts. The engine
    and the offline replay drive the same object."""

    acceptance: AcceptanceModel
    cost: OnlineCost
    guard: SpeculationGuard
    # This completion's drafted tokens accepted, and the estimates they were drafted with (both
    # decayed).
    _accepted: float = field(default=0.0, init=False)
    _predicted: float = field(default=0.0, init=False)

    def begin(self) -> None:
        """A new completion starts: its trust starts from the buckets' estimates."""
        self._accepted = self._predicted = 0.0

    @property
    def trust(self) -> float:
        return (self._accepted + _TRUST_PRIOR) / (self._predicted + _TRUST_PRIOR)

    def probabilities(self, evidence: Evidence) -> list[float]:
        """Acceptance estimates for drafted tokens with this evidence, in this completion."""
        trust = self.trust
        return [min(_MAX_PROBABILITY, p * trust) for p in self.acceptance.probabilities(evidence)]

    def choose(self, evidence: Evidence, key: str) -> Choice:
        """How many of the drafted tokens (with this evidence) to verify in the next pass."""
        k = best_draft_length(self.probabilities(evidence), self.cost.curve)
        if k and not self.guard.allows(key):
            self.guard.held_back(key)
            return Choice(0, True)
        return Choice(k, False)

    def learn(self, drafted: Evidence | None, n_accepted: int, offered: Evidence | None) -> None:
        """After a pass: `drafted` was verified and its first n_accepted tokens accepted;
        `offered` was drafted by the lookup core after them but cut off by the policy."""
        if drafted is not None and len(drafted):
            # Against the buckets' own estimates (trust is their ratio to what happened); tokens
            # after the first rejected one were never judged.
            for i, p in enumerate(self.acceptance.probabilities(drafted)[: n_accepted + 1]):
                self._accepted = self._accepted * _TRUST_DECAY + (i < n_accepted)
                self._predicted = self._predicted * _TRUST_DECAY + p
            self.acceptance.observe(drafted, len(drafted), n_accepted)
        if offered is not None and len(offered):
            self.acceptance.decline(offered)

    def record_pass(self, key: str, positions: int | None, ms: float, tokens: int, speculative: bool) -> None:
        """A pass took `ms`, loop work included. positions: its size when every position had
        logits (as the cost curve counts them), else None. Speculative passes feed the guard."""
        if positions is not None:
            self.cost.observe(positions, ms)
        if speculative:
            self.guard.record(key, ms, tokens, self.cost.pass_ms(1))
