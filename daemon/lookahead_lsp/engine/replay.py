"""Offline replay of auto against a known greedy continuation: no model, no noise.

A task's plain greedy completion (the "truth") fixes what the lookup core drafts at every
position, since the text before each position is the same whatever the passes were. So the
drafts can be computed once, and any policy replayed against them by charging each pass its
cost from a curve: the real AutoPolicy (acceptance learning, online cost, guard) in seconds,
and the oracle, the cheapest sequence of passes any policy could choose with these drafts
(dynamic programming over where passes start, each drafting at most the tokens that will be
accepted). Used by bench/decode_bench.py to bound every live figure, and to fit the acceptance
priors (engine/fitted_priors.json, bench/fit_priors.py) over several languages."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

import numpy as np

from lookahead_lsp._lookup import NgramCache, StaticCache, draft_with_evidence
from lookahead_lsp.engine.cost_model import CostModel
from lookahead_lsp.engine.policy import AUTO_MAX_DRAFT, AutoPolicy, BucketKey, bucket_key
from lookahead_lsp.engine.sources import Evidence, evidence_of
from lookahead_lsp.base.tokenizer import TokenArray


@dataclass(frozen=True)
class Draft:
    """What the lookup core drafts at one position, and how many of its tokens the truth
    confirms from the start."""

    tokens: list[int]
    evidence: Evidence
    accepted: int


@dataclass
class ReplayTask:
    name: str
    key: str  # the guard's key (the language)
    n_vocab: int
    sources: list[TokenArray]  # the prompt's sources: the context cache starts from them
    prompt: list[int]
    truth: list[int]  # plain greedy decoding's tokens after the prompt
    workspace: NgramCache | None = None
    repository: StaticCache | None = None
    drafts: list[Draft] = field(default_factory=list)

    def compute_drafts(self) -> None:
        """The draft at every position of the truth, as the engine's context cache would see
        it there (the prompt's sources, then the truth so far)."""
        context = NgramCache(self.n_vocab)
        for source in self.sources:
            context.add(source)
        history = list(self.prompt)
        self.drafts = []
        n = len(self.truth)
        for i in range(n):
            tail = np.asarray(history[-4:], dtype=np.int32)
            room = min(AUTO_MAX_DRAFT, n - i - 1)
            tokens, evidence = draft_with_evidence(tail, room, context, self.workspace, self.repository) if room else _none()
            drafted = tokens.tolist()
            accepted = 0
            while accepted < len(drafted) and drafted[accepted] == self.truth[i + accepted]:
                accepted += 1
            self.drafts.append(Draft(drafted, evidence, accepted))
            history.append(self.truth[i])
            tail_new = history[-4:]
            context.add(np.asarray(tail_new, dtype=np.int32), first=len(tail_new) - 1)


def _none() -> tuple[np.ndarray, Evidence]:
    return np.empty(0, dtype=np.int32), evidence_of(0, 0)


@dataclass(frozen=True)
class ReplayResult:
    name: str
    tokens: int
    plain_ms: float
    policy_ms: float
    policy_passes: int
    oracle_ms: float
    oracle_passes: int

    @property
    def policy_speedup(self) -> float:
        return self.plain_ms / self.policy_ms if self.policy_ms else 1.0

    @property
    def oracle_speedup(self) -> float:
        return self.plain_ms / self.oracle_ms if self.oracle_ms else 1.0


def oracle(drafts: Sequence[Draft], cost: CostModel) -> tuple[float, int]:
    """The least total cost (and its passes) of emitting every token, where a pass at position
    i may verify up to drafts[i].accepted drafted tokens (all then accepted): the best any
    policy could do with these drafts on this cost curve."""
    n = len(drafts)
    best = [0.0] * (n + 1)
    passes = [0] * (n + 1)
    for i in range(n - 1, -1, -1):
        top = min(drafts[i].accepted, n - 1 - i)
        best[i], passes[i] = min(
            (cost.pass_ms(1 + k) + best[i + 1 + k], passes[i + 1 + k] + 1) for k in range(top + 1)
        )
    return best[0], passes[0]


def replay_policy(task: ReplayTask, policy: AutoPolicy, cost: CostModel) -> tuple[float, int]:
    """Runs auto's decisions through the task as the engine would, each pass charged (and
    reported to the policy as taking) cost.pass_ms of its size. Returns total ms and passes."""
    i, total, passes = 0, 0.0, 0
    n = len(task.truth)
    policy.begin()
    while i < n:
        draft = task.drafts[i]
        k = 0
        if draft.tokens:
            choice = policy.choose(draft.evidence, task.key)
            k = choice.length
            offered = None if choice.held_back else draft.evidence[k : k + 1]
            accepted = min(k, draft.accepted)
            policy.learn(draft.evidence[:k], accepted, offered)
        else:
            accepted = 0
        ms = cost.pass_ms(1 + k)
        policy.record_pass(task.key, 1 + k, ms, accepted + 1, k > 0)
        total += ms
        passes += 1
        i += accepted + 1
    return total, passes


def replay(task: ReplayTask, policy: AutoPolicy, cost: CostModel) -> ReplayResult:
    if not task.drafts and task.truth:
        task.compute_drafts()
    policy_ms, policy_passes = replay_policy(task, policy, cost)
    oracle_ms, oracle_passes = oracle(task.drafts, cost)
    plain = len(task.truth) * cost.pass_ms(1)
    return ReplayResult(task.name, len(task.truth), plain, policy_ms, policy_passes, oracle_ms, oracle_passes)


def acceptance_counts(tasks: Sequence[ReplayTask]) -> dict[BucketKey, list[int]]:
    """Per kind of evidence, [accepted, tried] over every position of every task, a drafted
    token counted while all tokens before it in its draft matched: what a fresh install's
    priors should say."""
    counts: dict[BucketKey, list[int]] = {}
    for task in tasks:
        if not task.drafts and task.truth:
            task.compute_drafts()
        for draft in task.drafts:
            for j, row in enumerate(draft.evidence.tolist()):
                if j > draft.accepted:
                    break
                entry = counts.setdefault(bucket_key(row), [0, 0])
                entry[1] += 1
                entry[0] += j < draft.accepted
    return counts
