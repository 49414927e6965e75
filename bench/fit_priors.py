"""Fits auto's acceptance priors (daemon/lookahead_lsp/engine/fitted_priors.json): the share of
drafted tokens the model accepted, per kind of evidence (source, n-gram size, count bucket,
share bucket), over the decode benchmark's tasks (tasks.py) replayed offline: every drafted
token counts while all before it matched the greedy truth. Buckets seen fewer than 30 times are
left out (the policy's prior_formula stands for them); none is quite certain, so that a prior
leaves room to learn. Use other tasks than the benchmark's own figures (--seed 1) use.

    .venv/bin/python bench/fit_priors.py [--tasks 8] [--seed 2] [--languages python,javascript,c]
        [--model FILE.gguf] [--output FILE.json]   # default: the package's fitted_priors.json
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
from pathlib import Path

from lookahead_lsp.base.cache_files import atomic_writer, default_cache_dir
from lookahead_lsp.engine.policy import BucketKey
from lookahead_lsp.engine.replay import ReplayTask, acceptance_counts
from lookahead_lsp.models.resolve import resolve_model_path
from tasks import LANGUAGES, REPO, Task, TruthCache, corpus_root, interleaved, pick_tasks, replay_tasks_of

import support_path  # noqa: F401  (tests/ on sys.path, before support)
from support.engines import engine_on

PACKAGED = REPO / "daemon" / "lookahead_lsp" / "engine" / "fitted_priors.json"
_MIN_TRIED = 30
_MOST_LIKELY = 0.99


def fit(replay_tasks: list[ReplayTask], tasks: list[Task]) -> list[dict[str, object]]:
    """The buckets, pooled over the languages, each with its figures per language."""
    pooled = acceptance_counts(replay_tasks)
    by_language: dict[str, dict[BucketKey, list[int]]] = {
        language: acceptance_counts([r for r, t in zip(replay_tasks, tasks) if t.language == language])
        for language in sorted({t.language for t in tasks})
    }
    buckets: list[dict[str, object]] = []
    for key, (accepted, tried) in sorted(pooled.items()):
        if tried < _MIN_TRIED:
            continue
        per_language = {
            language: {"acceptance": round(counts[key][0] / counts[key][1], 2), "tried": counts[key][1]}
            for language, counts in by_language.items()
            if key in counts
        }
        source, ngram, count_bucket, share_bucket = key
        buckets.append({
            "source": source, "ngram": ngram, "count_bucket": count_bucket, "share_bucket": share_bucket,
            "acceptance": round(min(_MOST_LIKELY, accepted / tried), 3), "tried": tried, "per_language": per_language,
        })
    return buckets


def write(path: Path, buckets: list[dict[str, object]], produced_by: str, model: str) -> None:
    """One bucket a line, so that a refit reads as a diff of the buckets that moved."""
    lines = ["{", f' "produced_by": {json.dumps(produced_by)},', f' "model": {json.dumps(model)},', ' "buckets": [']
    lines += [f"  {json.dumps(b)}" + ("," if i < len(buckets) - 1 else "") for i, b in enumerate(buckets)]
    lines += [" ]", "}"]
    with atomic_writer(path) as out:
        out.write(("\n".join(lines) + "\n").encode())


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--languages", type=lambda s: s.split(","), default=list(LANGUAGES))
    parser.add_argument("--model", type=Path, help="a GGUF model; default: the default model")
    parser.add_argument("--tasks", type=int, default=8, help="tasks per language")
    parser.add_argument("--seed", type=int, default=2)
    parser.add_argument("--max-tokens", type=int, default=64)
    parser.add_argument("--truth", type=Path, help="the file that keeps decoded truths")
    parser.add_argument("--output", type=Path, default=PACKAGED)
    args = parser.parse_args()
    unknown = [name for name in args.languages if name not in LANGUAGES]
    if unknown:
        parser.error(f"--languages from {', '.join(LANGUAGES)}")
    per_language = {name: pick_tasks(LANGUAGES[name], corpus_root(name), args.tasks, args.seed) for name in args.languages}
    tasks = interleaved(per_language)
    model = args.model or resolve_model_path(None)
    truths = TruthCache(args.truth or default_cache_dir() / "bench-truth.json", model, args.max_tokens)
    with tempfile.TemporaryDirectory(prefix="fit-priors-") as fresh:
        engine = engine_on(model, Path(fresh), 4096, threads=None)
        try:
            replay_tasks = replay_tasks_of(engine, tasks, truths, args.max_tokens)
        finally:
            engine.close()
    buckets = fit(replay_tasks, tasks)
    command = f"bench/fit_priors.py --tasks {args.tasks} --seed {args.seed} --languages {','.join(args.languages)}"
    write(args.output, buckets, command, model.name)
    for b in buckets:
        print(json.dumps(b), file=sys.stderr)
    print(f"{len(buckets)} buckets written to {args.output}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
