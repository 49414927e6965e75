"""The lookup-stats command: llama-lookup-stats' replay, run through the real CLI."""

from __future__ import annotations

import json
import subprocess
import sys
import sysconfig
from pathlib import Path

import numpy as np
import pytest

from lookahead_lsp._lookup import NgramCache, StaticCacheBuilder, replay
from lookahead_lsp.base.tokenizer import Tokenizer, tokenize_file_text

STDLIB = Path(sysconfig.get_paths()["stdlib"])
KEYS = {"n_draft", "n_predict", "n_drafted", "n_accept", "accept_pct", "us_per_drafted_token",
        "static_load_ms", "static_verify_ms", "peak_rss_mb"}


def run_stats(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "lookahead_lsp", "lookup-stats", *args],
        capture_output=True, text=True, timeout=300,
    )


@pytest.fixture(scope="module")
def replay_text(tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("stats") / "replay.py"
    path.write_bytes((STDLIB / "argparse.py").read_bytes() + (STDLIB / "typing.py").read_bytes())
    return path


@pytest.fixture(scope="module")
def static_cache(tmp_path_factory: pytest.TempPathFactory, tokenizer: Tokenizer) -> Path:
    """Ours, built from a few other stdlib modules."""
    builder = StaticCacheBuilder(tokenizer.n_vocab)
    for name in ("inspect.py", "dataclasses.py", "enum.py", "functools.py"):
        builder.add(tokenizer.tokenize((STDLIB / name).read_bytes()))
    path = tmp_path_factory.mktemp("stats") / "static.cache"
    builder.write(str(path), tokenizer.fingerprint)
    return path


def test_json_fields_and_counts_match_the_replay(replay_text: Path, tokenizer: Tokenizer) -> None:
    result = run_stats("--file", str(replay_text), "--json", "--ctx-size", "2048")
    assert result.returncode == 0, result.stderr
    stats = json.loads(result.stdout)
    assert set(stats) == KEYS
    tokens = tokenize_file_text(tokenizer, replay_text.read_bytes(), add_special=True, parse_special=True)
    expected = replay(tokens, 2048, 8, NgramCache(tokenizer.n_vocab))
    assert (stats["n_predict"], stats["n_drafted"], stats["n_accept"]) == (
        expected["n_predict"], expected["n_drafted"], expected["n_accept"])
    assert stats["n_predict"] == len(tokens) - len(tokens) % 2048
    assert 0 < stats["n_accept"] <= stats["n_drafted"]
    assert stats["static_load_ms"] == 0 and stats["peak_rss_mb"] > 0


def test_static_cache_raises_acceptance_and_is_timed(replay_text: Path, static_cache: Path) -> None:
    plain = json.loads(run_stats("--file", str(replay_text), "--json", "--n-draft", "3").stdout)
    result = run_stats("--file", str(replay_text), "--json", "--n-draft", "3",
                       "--static-cache", str(static_cache))
    assert result.returncode == 0, result.stderr
    with_static = json.loads(result.stdout)
    assert with_static["n_draft"] == 3
    assert with_static["static_load_ms"] > 0 and with_static["static_verify_ms"] > 0
    # Python code drafted from other Python code: the static cache adds drafts that hit.
    assert with_static["n_accept"] > plain["n_accept"]


def test_upstream_static_cache_gives_the_same_drafts(
    replay_text: Path, static_cache: Path, tmp_path: Path
) -> None:
    from lookahead_lsp._lookup import StaticCache

    ours = StaticCache.open(str(static_cache))
    ours.verify()
    upstream = tmp_path / "static.upstream.bin"
    ours.save_upstream(str(upstream))
    a = json.loads(run_stats("--file", str(replay_text), "--json", "--static-cache", str(static_cache)).stdout)
    b = json.loads(run_stats("--file", str(replay_text), "--json", "--static-cache", str(upstream)).stdout)
    assert (a["n_drafted"], a["n_accept"]) == (b["n_drafted"], b["n_accept"])


def test_text_output_has_upstream_field_names(replay_text: Path) -> None:
    result = run_stats("--file", str(replay_text), "--n-draft", "2")
    assert result.returncode == 0, result.stderr
    for name in ("n_draft", "n_predict", "n_drafted", "t_draft_flat", "t_draft", "n_accept", "accept"):
        assert any(line.startswith(name + " ") for line in result.stdout.splitlines()), name
    assert "n_draft      = 2" in result.stdout


def test_bad_inputs_are_one_line_errors(tmp_path: Path, replay_text: Path) -> None:
    missing = run_stats("--file", str(tmp_path / "nope.txt"))
    assert missing.returncode == 2 and "nope.txt" in missing.stderr
    assert len(missing.stderr.strip().splitlines()) == 1
    corrupt = tmp_path / "corrupt.cache"
    corrupt.write_bytes(b"LKAHSTC\n" + bytes(200))
    bad = run_stats("--file", str(replay_text), "--static-cache", str(corrupt))
    assert bad.returncode == 2 and "corrupt.cache" in bad.stderr
    assert len(bad.stderr.strip().splitlines()) == 1


def test_empty_and_short_text(tmp_path: Path) -> None:
    empty = tmp_path / "empty.txt"
    empty.write_bytes(b"")
    result = run_stats("--file", str(empty), "--json")
    assert result.returncode == 0, result.stderr
    stats = json.loads(result.stdout)
    assert stats["n_predict"] == 0 and stats["n_drafted"] == 0


def test_replay_updates_the_dynamic_cache_like_upstream(tokenizer: Tokenizer) -> None:
    """After replay, the dynamic cache holds every complete chunk's n-grams."""
    tokens = tokenizer.tokenize((STDLIB / "argparse.py").read_bytes())
    dynamic = NgramCache(tokenizer.n_vocab)
    replay(tokens, 1024, 4, dynamic)
    expected = NgramCache(tokenizer.n_vocab)
    n_chunks = (len(tokens) - 1) // 1024
    for c in range(n_chunks):
        expected.add(np.ascontiguousarray(tokens[c * 1024:(c + 1) * 1024]))
    assert dynamic == expected


def test_tree_drafts(replay_text: Path) -> None:
    """--branches K replays token trees (what the engine verifies) instead of single drafts."""
    result = run_stats("--file", str(replay_text), "--json", "--branches", "3")
    assert result.returncode == 0, result.stderr
    stats = json.loads(result.stdout)
    assert set(stats) == KEYS and 0 < stats["n_accept"] <= stats["n_drafted"]
    bad = run_stats("--file", str(replay_text), "--branches", "0")
    assert bad.returncode == 2 and "--branches" in bad.stderr
