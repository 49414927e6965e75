"""Decoding speed on a busy machine: the thread count the engine chooses from the load (the
default, `threads` unset) against every fixed count, side by side in one run.

One spinning process per --busy keeps that many cores taken for the whole run (as a compile in
a terminal would), at --busy-niceness (0 by default; 10 for load that yields, as the daemon's
own indexing or a compile started with `nice`). For each thread setting an engine is loaded with it (the default model
unless --model) and completes the same held-out Python prefixes (as bench/decode_bench.py draws
them), `draft` none, the KV cache emptied before each so that every setting does the same work;
the settings take turns per prefix. Reported per setting: the median of generation tokens/s
(after the prompt), the median prompt ms, and the threads the engine ran with; and each
setting's median over the best fixed count's.

--cli measures `lookahead-lsp complete` instead, as a user runs it: one process per completion
(`--threads N` or unset, `--draft none --no-stop-rules --json`, the prefix written to a file
and the cursor at its end), so that the unset count is chosen right after the model loads;
its wall time, model load included, is reported too.

    .venv/bin/python bench/threads_bench.py [--cli] [--busy 1] [--busy-niceness 0] [--prefixes 6] [--json FILE]
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from tasks import LANGUAGES, corpus_root, pick_tasks, request_of
from report import write_report

from lookahead_lsp.engine import CompletionRequest, DecodeOptions, Engine, EngineSettings
from lookahead_lsp.engine.threads import cores
from lookahead_lsp.models.resolve import resolve_model_path


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--busy", type=int, default=1, help="cores kept busy by spinning processes")
    parser.add_argument("--busy-niceness", type=int, default=0, help="the niceness the spinning processes run at")
    parser.add_argument("--prefixes", type=int, default=6)
    parser.add_argument("--max-tokens", type=int, default=48)
    parser.add_argument("--seed", type=int, default=7)
    parser.add_argument("--model", type=Path)
    parser.add_argument("--cli", action="store_true", help="time `lookahead-lsp complete`, one process per completion")
    parser.add_argument("--json", type=Path)
    args = parser.parse_args()
    model = resolve_model_path(None, str(args.model) if args.model else None, asker="cli")
    tasks = pick_tasks(LANGUAGES["python"], corpus_root("python"), args.prefixes, args.seed)
    settings: list[int | None] = [None, *range(1, cores() + 1)]
    options = DecodeOptions(draft="none", max_tokens=args.max_tokens, stop_rules=False)
    spin = f"import os; os.nice({args.busy_niceness})\nwhile True: pass"
    busy = [subprocess.Popen([sys.executable, "-c", spin]) for _ in range(args.busy)]
    speeds: dict[str, list[float]] = {}
    prompts: dict[str, list[float]] = {}
    used: dict[str, list[int]] = {}
    walls: dict[str, list[float]] = {}
    try:
        with tempfile.TemporaryDirectory(prefix="threads-bench-") as work:
            engines = {} if args.cli else {s: Engine(EngineSettings(model, 4096, s, cache_dir=Path(work))) for s in settings}
            try:
                for n, task in enumerate(tasks):
                    order = settings[n % len(settings) :] + settings[: n % len(settings)]
                    for setting in order:
                        name = "chosen" if setting is None else f"fixed {setting}"
                        began = time.perf_counter()
                        if args.cli:
                            stats = _cli_complete(model, request_of(task), setting, args.max_tokens, Path(work))
                        else:
                            engine = engines[setting]
                            engine.forget_kv()
                            stats = engine.complete(request_of(task), options).stats.as_dict()
                        walls.setdefault(name, []).append((time.perf_counter() - began) * 1000)
                        speeds.setdefault(name, []).append(float(stats["tokens_per_s"]))  # type: ignore[arg-type]
                        prompts.setdefault(name, []).append(float(stats["ms_prompt"]))  # type: ignore[arg-type]
                        used.setdefault(name, []).append(int(stats["threads"]))  # type: ignore[call-overload]
            finally:
                for engine in engines.values():
                    engine.close()
    finally:
        for process in busy:
            process.kill()
            process.wait()
    medians = {name: statistics.median(values) for name, values in speeds.items()}
    best = max(v for k, v in medians.items() if k != "chosen")
    report: dict[str, object] = {"arguments": {k: str(v) for k, v in vars(args).items()}, "cores": cores()}
    for name in speeds:
        report[name] = {
            "median_tokens_per_s": round(medians[name], 1),
            "over_best_fixed": round(medians[name] / best, 3),
            "median_ms_prompt": round(statistics.median(prompts[name]), 1),
            "threads": sorted(set(used[name])),
            "median_wall_ms": round(statistics.median(walls[name]), 1),
        }
    write_report(report, args.json)
    return 0


def _cli_complete(model: Path, request: CompletionRequest, threads: int | None, max_tokens: int, work: Path) -> dict[str, object]:
    """`lookahead-lsp complete --json` at the end of request's prefix, in a process of its own."""
    document = work / "task.py"
    document.write_text(request.prefix)
    lines = request.prefix.split("\n")
    position = f"{document}:{len(lines)}:{len(lines[-1]) + 1}"
    command = [sys.executable, "-m", "lookahead_lsp", "complete", position, "--model", str(model), "--json",
               "--draft", "none", "--no-stop-rules", "--max-tokens", str(max_tokens)]  # fmt: skip
    if threads is not None:
        command += ["--threads", str(threads)]
    done = subprocess.run(command, capture_output=True, text=True, check=True)
    stats: dict[str, object] = json.loads(done.stdout)["stats"]
    return stats


if __name__ == "__main__":
    sys.exit(main())
