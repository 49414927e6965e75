"""What auto learns survives a restart: the calibration file beside the cost model round-trips
through a closed and a new Engine, a damaged or foreign one is ignored with one log line, and
the first request of a new Engine obeys the guard's saved verdicts. With a tiny model written
by the test (real llama.cpp passes, no sensible text)."""

from __future__ import annotations

import json
import logging
from pathlib import Path

import numpy as np
import pytest

from lookahead_lsp.engine import CompletionRequest, DecodeOptions, Engine
from lookahead_lsp.engine.calibration import (
    Calibration,
    CalibrationError,
    decode,
    encode,
    model_identity,
)
from lookahead_lsp.engine.policy import AcceptanceBucket, GuardState
from support.engines import engine_on
from support.tiny_gguf import write_tiny_gguf

# Repetitive text: the context cache drafts from the first pass on.
REPETITIVE = CompletionRequest("def f(x):\n    return x\n" * 20, "\n", "a.py")


def _auto(engine: Engine, key: str | None = None, max_tokens: int = 24) -> int:
    """Drafted tokens of one auto completion."""
    engine.previous = None
    options = DecodeOptions(draft="auto", max_tokens=max_tokens, stop_rules=False, speculation_key=key)
    return engine.complete(REPETITIVE, options).stats.drafted


@pytest.fixture
def model(tmp_path: Path) -> Path:
    return write_tiny_gguf(tmp_path / "tiny.gguf").path


def test_what_auto_learnt_is_there_after_a_restart(model: Path, tmp_path: Path) -> None:
    cache = tmp_path / "cache"
    first = engine_on(model, cache)
    try:
        assert _auto(first) > 0
        policy = first.auto_policy()
        learnt = {k: (b.accepted, b.tried) for k, b in policy.acceptance.buckets.items() if b.tried}
        assert learnt  # drafts were verified and counted
        level, offsets = policy.cost.level, dict(policy.cost.offsets)
        assert offsets  # the passes' timings moved the curve
    finally:
        first.close()
    (saved,) = cache.glob("calibration-*.json")
    assert json.loads(saved.read_text())["version"] == 1
    second = engine_on(model, cache)
    try:
        again = second.auto_policy()
        for key, (accepted, tried) in learnt.items():
            bucket = again.acceptance.buckets[key]
            assert bucket.accepted == pytest.approx(accepted, abs=1e-3)
            assert bucket.tried == pytest.approx(tried, abs=1e-3)
        assert again.cost.level == pytest.approx(level)
        assert again.cost.offsets == pytest.approx(offsets)
    finally:
        second.close()


@pytest.mark.parametrize(
    "damage",
    [
        lambda text: text[: len(text) // 2],  # truncated
        lambda text: "\x00\xff garbage",
        lambda text: text.replace('"version": 1', '"version": 99'),
        lambda text: text.replace('"acceptance": [', '"acceptance": [[0, 1, 0, 0, 0.5, 7, 3], '),  # accepted > tried
        lambda text: text.replace('"level": ', '"level": 1e308, "x": '),
    ],
    ids=["truncated", "garbage", "other-version", "accepted-above-tried", "level-out-of-range"],
)
def test_a_damaged_calibration_is_ignored_with_one_log_line(
    model: Path, tmp_path: Path, caplog: pytest.LogCaptureFixture, damage: object
) -> None:
    cache = tmp_path / "cache"
    engine = engine_on(model, cache)
    _auto(engine)
    engine.close()
    (saved,) = cache.glob("calibration-*.json")
    assert callable(damage)
    saved.write_text(damage(saved.read_text()))
    with caplog.at_level(logging.WARNING):
        engine = engine_on(model, cache)
    try:
        warnings = [r for r in caplog.records if r.levelno >= logging.WARNING]
        assert len(warnings) == 1 and "calibration ignored" in warnings[0].getMessage()
        assert all(b.tried == 0 for b in engine.auto_policy().acceptance.buckets.values())
        assert _auto(engine) > 0  # it works from the priors
    finally:
        engine.close()
    json.loads(saved.read_text())  # and saves a good file again


def test_the_first_request_after_a_start_obeys_the_guard(model: Path, tmp_path: Path) -> None:
    cache = tmp_path / "cache"
    engine = engine_on(model, cache)
    try:
        # Speculative passes of this key took far longer per token than plain ones.
        plain = engine.auto_policy().cost.pass_ms(1)
        for _ in range(20):
            engine.auto_policy().guard.record("slow-here", 100 * plain, 2, plain)
    finally:
        engine.close()
    restarted = engine_on(model, cache)
    try:
        # Eight passes at most: too few for a probe, every pass is plain.
        assert _auto(restarted, "slow-here", max_tokens=8) == 0
        assert _auto(restarted, "elsewhere", max_tokens=8) > 0
    finally:
        restarted.close()


def test_timings_of_another_machine_are_dropped_and_acceptance_kept(model: Path) -> None:
    identity = model_identity(model)
    here, there = {"cpu": "a", "threads": 2}, {"cpu": "b", "threads": 2}
    calibration = Calibration(level=0.3, offsets={1: 0.1, 4: -0.05})
    calibration.acceptance.buckets[(0, 4, 3, 3)] = AcceptanceBucket(0.8, 9.0, 10.0)
    calibration.guard.states[".py"] = GuardState(on=False, ms=50.0, tokens=4.0, weight=3.0, held=5)
    data = encode(calibration, identity, here)
    same = decode(data, identity, here)
    assert same.level == 0.3 and same.offsets == {1: 0.1, 4: -0.05}
    assert same.acceptance.buckets == calibration.acceptance.buckets
    assert same.guard.states == calibration.guard.states
    moved = decode(data, identity, there)
    assert moved.acceptance.buckets == calibration.acceptance.buckets
    assert moved.level == 0.0 and moved.offsets == {} and moved.guard.states == {}
    with pytest.raises(CalibrationError, match="another model"):
        decode(data, {**identity, "size": 1}, here)
    assert np.isfinite(same.acceptance.buckets[(0, 4, 3, 3)].probability)
