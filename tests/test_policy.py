"""auto's decisions: draft lengths from the cost curve and learnt acceptance; the token tree;
the cost model's interpolation and its file cache."""

from __future__ import annotations

import json
import logging
from pathlib import Path

import numpy as np
import pytest

from lookahead_lsp.engine.cost_model import CostModel, load_or_measure
from lookahead_lsp.engine.policy import AcceptanceModel, best_draft_length, prior_probability
from lookahead_lsp.engine.runtime import ModelRuntime, RuntimeSettings
from lookahead_lsp.engine.tree import DraftTree
from tiny_gguf import write_tiny_gguf

# The 2-core CPU curve of the reference: 2 positions cost 1.76 passes, 4 cost 2.40, 8 cost 3.71.
CPU = CostModel((1, 2, 3, 4, 8, 16), (1.0, 1.76, 2.16, 2.40, 3.71, 5.93))
# A GPU-like curve: extra positions nearly free.
GPU = CostModel((1, 2, 4, 8, 16, 32), (1.0, 1.01, 1.02, 1.04, 1.08, 1.2))


def test_cost_interpolation() -> None:
    assert CPU.relative(1) == 1.0
    assert CPU.relative(6) == pytest.approx(2.40 + (3.71 - 2.40) / 2)
    assert CPU.relative(32) > CPU.relative(16)  # extrapolated


def test_draft_length_follows_cost_and_confidence() -> None:
    # Below break-even (~76 % for one token on the CPU curve) nothing is drafted.
    assert best_draft_length([0.7], CPU) == 0
    assert best_draft_length([0.9], CPU) == 1
    # Near-certain long drafts pay on the CPU; uncertain tails are cut off.
    assert best_draft_length([0.99] * 8, CPU) == 8
    assert best_draft_length([0.99, 0.99, 0.99, 0.2, 0.99], CPU) == 3
    # Where passes are nearly free, even doubtful drafts are worth verifying.
    assert best_draft_length([0.3] * 4, GPU) > 0


def test_acceptance_is_learnt_and_forgotten() -> None:
    model = AcceptanceModel()
    row = np.array([[0, 4, 3, 3]], dtype=np.int64)  # context, 4-gram, count 3 of 3
    prior = model.probabilities(row)[0]
    assert prior == pytest.approx(prior_probability([0, 4, 3, 3]))
    for _ in range(20):
        model.observe(row, 1, 0)  # always rejected
    low = model.probabilities(row)[0]
    assert low < 0.2
    for _ in range(200):
        model.decline(row)
    assert model.probabilities(row)[0] > low + 0.3  # back towards the prior: tried again later
    for _ in range(20):
        model.observe(np.repeat(row, 3, axis=0), 3, 3)
    assert model.probabilities(row)[0] > 0.9


def test_observe_counts_only_verified_tokens() -> None:
    model = AcceptanceModel()
    rows = np.array([[1, 2, 5, 5], [1, 3, 5, 5], [1, 4, 5, 5]], dtype=np.int64)
    before = model.probabilities(rows)
    model.observe(rows, 3, 1)  # first accepted, second rejected, third never reached
    after = model.probabilities(rows)
    assert after[0] > before[0] and after[1] < before[1] and after[2] == before[2]


def test_tree_merges_paths_and_finds_the_accepted_one() -> None:
    tree = DraftTree()
    tree.add_path([5, 6, 7], [0, 0, 0], 10)
    tree.add_path([5, 6, 9, 10], [1, 1, 1, 1], 10)
    tree.add_path([8], [3], 10)
    assert tree.tokens == [5, 6, 7, 9, 10, 8] and tree.parents == [-1, 0, 1, 1, 3, -1]
    assert tree.leaves() == [2, 4, 5]
    choices = [6, 9, 0, 10, 11, 0]  # the model's choice after each node
    assert tree.accepted_path(5, choices) == [0, 1, 3, 4]
    assert tree.accepted_path(8, choices) == [5]
    assert tree.accepted_path(4, choices) == []
    capped = DraftTree()
    capped.add_path([1, 2, 3], [0, 0, 0], 2)
    assert capped.tokens == [1, 2]


def test_cost_model_file_cache(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    info = write_tiny_gguf(tmp_path / "tiny.gguf")
    runtime = ModelRuntime(RuntimeSettings(info.path, n_ctx=512, n_threads=1, n_batch=64))
    try:
        first = load_or_measure(runtime, tmp_path)
        (saved,) = tmp_path.glob("cost-*.json")
        assert json.loads(saved.read_text())["key"]["threads"] == 1
        assert load_or_measure(runtime, tmp_path) == first  # read back, not measured again
        saved.write_text("{not json")
        with caplog.at_level(logging.WARNING):
            again = load_or_measure(runtime, tmp_path)
        assert "unreadable cost model" in caplog.text
        assert again.sizes == first.sizes and all(b >= a for a, b in zip(again.ms, again.ms[1:]))
        assert runtime.kv_tokens == []
    finally:
        runtime.close()
