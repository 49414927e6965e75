"""The lookup-stats command: replay a text file through the drafter with llama.cpp's
`llama-lookup-stats` method and print the same fields, so the two compare line for line."""

from __future__ import annotations

import argparse
import json
import resource
import sys
from dataclasses import asdict, dataclass
from pathlib import Path

from lookahead_lsp._lookup import NgramCache, replay
from lookahead_lsp.base.errors import UserError
from lookahead_lsp.models.resolve import resolve_model_path
from lookahead_lsp.base.static_cache import open_static_cache
from lookahead_lsp.base.tokenizer import Tokenizer, tokenize_file_text

@dataclass
class LookupStats:
    n_draft: int
    n_predict: int
    n_drafted: int
    n_accept: int
    accept_pct: float
    us_per_drafted_token: float
    static_load_ms: float
    static_verify_ms: float
    peak_rss_mb: float


def lookup_stats(args: argparse.Namespace) -> int:
    if args.n_draft < 0 or args.ctx_size < 2 or not 1 <= args.branches <= 16:
        raise UserError("--n-draft must be >= 0, --ctx-size >= 2 and --branches in 1..16")
    text_path = Path(args.file)
    try:
        text = text_path.read_bytes()
    except OSError as e:
        raise UserError(f"cannot read {text_path}: {e.strerror}") from e
    with Tokenizer(resolve_model_path(args.model)) as tokenizer:
        # As upstream tokenizes its prompt (BOS, special texts parsed), but in ~16 KB pieces:
        # one call on a large file is super-linearly slow; tokens differ only at the cuts.
        tokens = tokenize_file_text(tokenizer, text, add_special=True, parse_special=True)
        repository = None
        if args.static_cache:
            # The fingerprint is computed once per tokenizer, outside the timed opening.
            fingerprint = tokenizer.fingerprint
            repository = open_static_cache(Path(args.static_cache), tokenizer.n_vocab, fingerprint, True)
        # Upstream's "dynamic" cache: the workspace source, grown by the replay as upstream does.
        workspace = NgramCache(tokenizer.n_vocab)
        if args.dynamic_cache and Path(args.dynamic_cache).exists():
            workspace = NgramCache.load_upstream(args.dynamic_cache, tokenizer.n_vocab)
    static = repository.cache if repository is not None else None
    counts = replay(tokens, args.ctx_size, args.n_draft, workspace, static, max_branches=args.branches)
    stats = LookupStats(
        n_draft=args.n_draft,
        n_predict=counts["n_predict"],
        n_drafted=counts["n_drafted"],
        n_accept=counts["n_accept"],
        accept_pct=100.0 * counts["n_accept"] / max(counts["n_drafted"], 1),
        us_per_drafted_token=counts["draft_ns"] / 1000.0 / max(counts["n_drafted"], 1),
        static_load_ms=repository.open_ms if repository is not None else 0.0,
        static_verify_ms=repository.verify_ms if repository is not None else 0.0,
        # ru_maxrss is in kilobytes on Linux.
        peak_rss_mb=resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024.0,
    )
    if counts["n_predict"] == 0:
        print(
            f"note: {text_path} has {len(tokens)} tokens, fewer than one chunk of --ctx-size {args.ctx_size}",
            file=sys.stderr,
        )
    print(json.dumps(asdict(stats)) if args.json else format_stats(stats, counts["draft_ns"]))
    return 0


def format_stats(s: LookupStats, draft_ns: int) -> str:
    draft_ms = draft_ns / 1e6
    tokens_per_s = s.n_drafted / (draft_ns / 1e9) if draft_ns else 0.0
    return "\n".join(
        [
            f"n_draft      = {s.n_draft}",
            f"n_predict    = {s.n_predict}",
            f"n_drafted    = {s.n_drafted}",
            f"t_draft_flat = {s.static_load_ms:.2f} ms",
            f"t_verify     = {s.static_verify_ms:.2f} ms",
            f"t_draft      = {draft_ms:.2f} ms, {s.us_per_drafted_token:.3f} us per token, "
            f"{tokens_per_s:.2f} tokens per second",
            f"n_accept     = {s.n_accept}",
            f"accept       = {s.accept_pct:.3f}%",
            f"peak_rss     = {s.peak_rss_mb:.1f} MB",
        ]
    )
