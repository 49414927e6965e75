"""The offline replay behind the decode benchmark's oracle: the oracle is the cheapest way to
emit the truth with the drafts the lookup core makes (checked against brute force), auto's
replayed policy never beats it, and the acceptance counts are what a fresh install's priors
are fitted from."""

from __future__ import annotations

import functools

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from lookahead_lsp.engine.cost_model import CostModel, OnlineCost
from lookahead_lsp.engine.policy import AcceptanceModel, AutoPolicy, SpeculationGuard
from lookahead_lsp.engine.replay import Draft, ReplayTask, acceptance_counts, oracle, replay

CPU = CostModel((1, 2, 3, 4, 8, 16), (1.0, 1.76, 2.16, 2.40, 3.71, 5.93))
N_VOCAB = 50


def _drafts(accepted: list[int]) -> list[Draft]:
    return [Draft([0] * a, np.zeros((a, 4), dtype=np.int64), a) for a in accepted]


def _brute_force(accepted: list[int], cost: CostModel) -> float:
    @functools.lru_cache(maxsize=None)
    def best(i: int) -> float:
        if i >= len(accepted):
            return 0.0
        top = min(accepted[i], len(accepted) - 1 - i)
        return min(cost.pass_ms(1 + k) + best(i + 1 + k) for k in range(top + 1))

    return best(0)


def test_oracle_on_a_hand_made_case() -> None:
    # Position 0 offers 3 right tokens, position 4 one: passes of 4 and 2, one plain pass left.
    ms, passes = oracle(_drafts([3, 0, 0, 0, 1, 0, 0]), CPU)
    assert ms == pytest.approx(2.40 + 1.76 + 1.0)
    assert passes == 3


@settings(deadline=None, max_examples=60)
@given(
    st.lists(st.integers(0, 6), min_size=1, max_size=14),
    st.lists(st.floats(0.0, 2.0), min_size=5, max_size=5),
)
def test_oracle_is_the_cheapest_schedule(accepted: list[int], steps: list[float]) -> None:
    ms = np.cumsum([1.0, *steps]).tolist()
    cost = CostModel((1, 2, 3, 4, 8, 16), tuple(ms))
    best, _ = oracle(_drafts(accepted), cost)
    assert best == pytest.approx(_brute_force(accepted, cost))
    assert best <= len(accepted) * cost.pass_ms(1) + 1e-9  # never worse than plain


def _task(prompt: list[int], truth: list[int]) -> ReplayTask:
    return ReplayTask("t", ".x", N_VOCAB, [np.asarray(prompt, dtype=np.int32)], prompt, truth)


def test_copying_code_pays_and_stays_below_the_oracle() -> None:
    line = [7, 8, 9, 10, 11, 12, 13, 14, 2]
    task = _task(line * 6, line * 5)  # the continuation repeats what the prompt repeats
    policy = AutoPolicy(AcceptanceModel(), OnlineCost(CPU), SpeculationGuard())
    result = replay(task, policy, CPU)
    assert result.tokens == len(task.truth)
    assert 1.3 < result.policy_speedup <= result.oracle_speedup
    assert result.policy_passes < result.tokens


def test_nothing_to_draft_is_plain_speed() -> None:
    task = _task([1, 2, 3, 4], [5, 6, 7, 8, 9, 10, 11, 12])
    result = replay(task, AutoPolicy(AcceptanceModel(), OnlineCost(CPU), SpeculationGuard()), CPU)
    assert result.policy_speedup == result.oracle_speedup == 1.0


@settings(deadline=None, max_examples=40)
@given(
    st.lists(st.integers(3, 12), min_size=4, max_size=60),
    st.lists(st.integers(3, 12), min_size=1, max_size=40),
)
def test_no_policy_beats_the_oracle(prompt: list[int], truth: list[int]) -> None:
    task = _task(prompt, truth)
    result = replay(task, AutoPolicy(AcceptanceModel(), OnlineCost(CPU), SpeculationGuard()), CPU)
    assert result.oracle_ms <= result.policy_ms + 1e-9
    assert result.oracle_ms <= result.plain_ms + 1e-9
    for i, draft in enumerate(task.drafts):  # every draft is checked against the truth from i on
        assert draft.tokens[: draft.accepted] == truth[i : i + draft.accepted]
        assert len(draft.tokens) <= len(truth) - i - 1


def test_acceptance_counts_follow_the_sequential_rule() -> None:
    line = [7, 8, 9, 10, 11, 12, 2]
    task = _task(line * 4, line * 2 + [30, 31, 32])
    counts = acceptance_counts([task])
    tried = sum(n for _, n in counts.values())
    accepted = sum(a for a, _ in counts.values())
    # Each position counts its accepted tokens and at most one rejected one after them.
    assert accepted == sum(d.accepted for d in task.drafts)
    assert tried == sum(min(len(d.tokens), d.accepted + 1) for d in task.drafts)
    assert 0 < accepted < tried
