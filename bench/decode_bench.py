"""Decode benchmark: the draft modes side by side on real completion tasks.

Tasks are drawn (fixed seed) from the Python standard library on this machine: a file, a cursor
at a line start (after the indentation) or in the middle of a line, the text before the cursor as
the prompt. The file's own folder is the workspace, with the file itself cut at the cursor: no
cache ever sees the code after the cursor. Every task runs `none`, `lookup`, `lookahead` and
`auto` (order rotated between tasks) for exactly --max-tokens tokens, and the figures are tokens/s
after the prompt, as ratios to `none` on the same task. A task "repeats workspace code" when at
least 80 % of the plain continuation's tokens complete a 4-gram already in the workspace (the
file before the cursor included).

Also measured: warm request latency (one more character typed after a completion, KV reused, a
one-line completion of up to 16 tokens) and, with --upstream-bin, upstream llama.cpp on the same
tasks: llama-bench (plain decoding at the prompt's depth, same threads) and llama-lookup
(n_draft 3, the same prompt window).

    .venv/bin/python bench/decode_bench.py [--tasks 20] [--upstream-bin DIR]
"""

from __future__ import annotations

import argparse
import json
import random
import re
import statistics
import subprocess
import sys
import sysconfig
import tempfile
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from lookahead_lsp._lookup import NgramCache
from lookahead_lsp.engine import (
    CompletionRequest,
    DecodeOptions,
    DraftCaches,
    Engine,
    EngineSettings,
    PromptWindows,
)
from lookahead_lsp.engine.prompt import stable_prefix_start
from lookahead_lsp.models import resolve_model_path
from lookahead_lsp.tokenizer import TokenArray, tokenize_file_text

MODES = ("none", "lookup", "lookahead", "auto")
_SKIP_DIRS = {"test", "tests", "idle_test", "site-packages", "__pycache__", "lib2to3"}
_MAX_FOLDER_BYTES = 2_000_000
_REPETITIVE_SHARE = 0.8


@dataclass
class Task:
    path: Path
    cursor: int  # character offset
    kind: str  # "line-start" or "mid-line"
    text: str

    @property
    def name(self) -> str:
        return f"{self.path.parent.name}/{self.path.name}@{self.cursor} ({self.kind})"


@dataclass
class TaskResult:
    task: str
    kind: str
    repeat_share: float  # of the plain continuation's tokens, those completing a workspace 4-gram
    tokens_per_s: dict[str, float] = field(default_factory=dict)
    tokens_per_pass: dict[str, float] = field(default_factory=dict)
    accepted: dict[str, dict[str, int]] = field(default_factory=dict)
    same_as_none: dict[str, int] = field(default_factory=dict)  # tokens equal to none's, from the start
    upstream: dict[str, float] = field(default_factory=dict)

    @property
    def repetitive(self) -> bool:
        return self.repeat_share >= _REPETITIVE_SHARE

    def ratio(self, mode: str) -> float:
        return self.tokens_per_s[mode] / self.tokens_per_s["none"]


def candidate_folders(root: Path) -> list[Path]:
    folders = []
    for folder in sorted([root, *(p for p in root.rglob("*") if p.is_dir())]):
        if any(part in _SKIP_DIRS for part in folder.relative_to(root).parts):
            continue
        files = list(folder.glob("*.py"))
        size = sum(f.stat().st_size for f in files)
        if len(files) >= 3 and size <= _MAX_FOLDER_BYTES:
            folders.append(folder)
    return folders


def pick_tasks(root: Path, n: int, seed: int) -> list[Task]:
    rng = random.Random(seed)
    files = [
        f
        for folder in candidate_folders(root)
        for f in sorted(folder.glob("*.py"))
        if 6_000 <= f.stat().st_size <= 80_000
    ]
    tasks: list[Task] = []
    while len(tasks) < n:
        path = rng.choice(files)
        text = path.read_text(errors="replace")
        lines = text.splitlines(keepends=True)
        index = rng.randrange(len(lines) * 3 // 10, len(lines) * 95 // 100)
        line = lines[index]
        code = line.strip()
        if len(code) < 12 or code.startswith(("#", '"', "'")):
            continue
        start = sum(len(x) for x in lines[:index])
        indent = len(line) - len(line.lstrip())
        kind = "line-start" if len(tasks) % 2 == 0 else "mid-line"
        if kind == "line-start":
            cursor = start + indent
        else:
            cursor = start + indent + rng.randrange(3, len(code) - 3)
        tasks.append(Task(path, cursor, kind, text))
    return tasks


class Workspaces:
    """Token arrays per file, tokenized once for all tasks of a folder."""

    def __init__(self, engine: Engine) -> None:
        self.engine = engine
        self._tokens: dict[Path, TokenArray] = {}

    def tokens(self, path: Path) -> TokenArray:
        if path not in self._tokens:
            self._tokens[path] = tokenize_file_text(self.engine.tokenizer, path.read_bytes())
        return self._tokens[path]

    def cache_for(self, task: Task) -> NgramCache:
        cache = NgramCache(self.engine.tokenizer.n_vocab)
        for other in sorted(task.path.parent.glob("*.py")):
            if other != task.path:
                cache.add(self.tokens(other))
        cache.add(tokenize_file_text(self.engine.tokenizer, task.text[: task.cursor].encode()))
        return cache


def repeat_share(tokens: list[int], prefix_tail: list[int], cache: NgramCache) -> float:
    seq = prefix_tail[-3:] + tokens
    hits = sum(1 for i in range(3, len(seq)) if seq[i] in cache.followers(seq[i - 3 : i])[:, 0])
    return hits / max(1, len(tokens))


def run_task(engine: Engine, task: Task, index: int, max_tokens: int, workspaces: Workspaces) -> TaskResult:
    cache = workspaces.cache_for(task)
    caches = DraftCaches(dynamic=cache)
    request = CompletionRequest(task.text[: task.cursor], "", task.path.name)
    order = MODES[index % len(MODES) :] + MODES[: index % len(MODES)]
    outputs = {}
    result = TaskResult(task.name, task.kind, 0.0)
    for mode in order:
        # Each mode starts without the previous mode's output as a "previous completion" draft.
        engine.last = None
        done = engine.complete(request, DecodeOptions(draft=mode, max_tokens=max_tokens, stop_rules=False), caches)
        outputs[mode] = done.tokens
        result.tokens_per_s[mode] = done.stats.tokens_per_s
        result.tokens_per_pass[mode] = done.stats.tokens_per_pass
        result.accepted[mode] = {k: v for k, v in done.stats.accepted_by_source.items() if v}
    for mode in MODES:
        same = 0
        for a, b in zip(outputs[mode], outputs["none"]):
            if a != b:
                break
            same += 1
        result.same_as_none[mode] = same
    prefix_tokens = engine.tokenizer.tokenize(task.text[max(0, task.cursor - 200) : task.cursor]).tolist()
    result.repeat_share = repeat_share(outputs["none"], prefix_tokens, cache)
    return result


def warm_latency(engine: Engine, task: Task, workspaces: Workspaces) -> float:
    """ms of the request after one more typed character (a one-line completion, <= 16 tokens)."""
    caches = DraftCaches(dynamic=workspaces.cache_for(task))
    options = DecodeOptions(draft="auto", max_tokens=16)
    prefix = task.text[: task.cursor]
    engine.complete(CompletionRequest(prefix, "", task.path.name), options, caches)
    typed = task.text[: task.cursor + 1]
    return engine.complete(CompletionRequest(typed, "", task.path.name), options, caches).stats.ms_total


def upstream_speeds(
    bin_dir: Path, model: Path, task: Task, max_tokens: int, threads: int, depth: int
) -> dict[str, float]:
    """Upstream llama.cpp on the task: plain decoding (llama-bench, tg at the prompt's depth,
    same threads) and llama-lookup (n_draft 3) on the same prompt window, decode tokens/s."""
    prefix = task.text[: task.cursor]
    window = prefix[stable_prefix_start(prefix, 1536 * 4) :]
    out: dict[str, float] = {}
    plain = subprocess.run(
        [str(bin_dir / "llama-bench"), "-m", str(model), "-p", "0", "-n", str(max_tokens), "-t", str(threads),
         "-d", str(depth), "-r", "1", "-o", "json"],
        capture_output=True, text=True, errors="replace", check=False,
    )
    try:
        out["llama-bench"] = float(json.loads(plain.stdout)[0]["avg_ts"])
    except (ValueError, KeyError, IndexError):
        out["llama-bench"] = float("nan")
    with tempfile.NamedTemporaryFile("w", suffix=".txt") as prompt_file:
        prompt_file.write(window)
        prompt_file.flush()
        lookup = subprocess.run(
            [
                str(bin_dir / "llama-lookup"), "-m", str(model), "-f", prompt_file.name,
                "-n", str(max_tokens), "--spec-draft-n-max", "3", "-t", str(threads), "--temp", "0",
                "-c", "4096", "--ignore-eos",
            ],
            capture_output=True, text=True, errors="replace", check=False,
        )
        out["llama-lookup"] = _decoded_speed(lookup.stderr + lookup.stdout)
    return out


def _decoded_speed(log: str) -> float:
    match = re.search(r"decoded\s+\d+ tokens in\s+[\d.]+ seconds, speed:\s+([\d.]+) t/s", log)
    return float(match.group(1)) if match else float("nan")


def _median(values: list[float]) -> float:
    return statistics.median(values) if values else float("nan")


def report(results: list[TaskResult], latencies: list[float], cost: object) -> dict[str, object]:
    summary: dict[str, object] = {"tasks": len(results), "cost_model": cost}
    for mode in MODES[1:]:
        ratios = [r.ratio(mode) for r in results]
        rep = [r.ratio(mode) for r in results if r.repetitive]
        summary[mode] = {
            "median_ratio": round(_median(ratios), 3),
            "worst_ratio": round(min(ratios), 3),
            "best_ratio": round(max(ratios), 3),
            "median_ratio_repetitive": round(_median(rep), 3),
            "n_repetitive": len(rep),
            "median_tokens_per_pass": round(_median([r.tokens_per_pass[mode] for r in results]), 3),
        }
    summary["none_tokens_per_s"] = round(_median([r.tokens_per_s["none"] for r in results]), 2)
    upstream = [r.upstream for r in results if r.upstream]
    if upstream:
        plain = [u["llama-bench"] for u in upstream]
        summary["upstream_plain_tokens_per_s"] = round(_median(plain), 2)
        summary["none_vs_upstream_plain"] = round(
            _median([r.tokens_per_s["none"] / r.upstream["llama-bench"] for r in results if r.upstream]), 3
        )
        lookup = [u["llama-lookup"] / u["llama-bench"] for u in upstream]
        summary["upstream_lookup_vs_plain"] = {
            "median": round(_median(lookup), 3), "worst": round(min(lookup), 3), "best": round(max(lookup), 3)
        }
    if latencies:
        summary["warm_latency_ms_p50"] = round(float(np.percentile(latencies, 50)), 1)
        summary["warm_latency_ms_p95"] = round(float(np.percentile(latencies, 95)), 1)
    return summary


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--tasks", type=int, default=20)
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--max-tokens", type=int, default=64)
    parser.add_argument("--threads", type=int, default=None)
    parser.add_argument("--corpus", type=Path, default=Path(sysconfig.get_paths()["stdlib"]))
    parser.add_argument("--upstream-bin", type=Path, help="folder with llama-simple and llama-lookup")
    parser.add_argument("--json", type=Path, help="also write every figure here")
    args = parser.parse_args()

    model = resolve_model_path(None)
    engine = Engine(EngineSettings(model, n_ctx=4096, n_threads=args.threads))
    cost = engine.cost_model
    print("pass cost (x one position):", ", ".join(f"{s}: {cost.relative(s):.2f}" for s in cost.sizes))
    tasks = pick_tasks(args.corpus, args.tasks, args.seed)
    workspaces = Workspaces(engine)
    results: list[TaskResult] = []
    print(f"{'task':58} {'kind':10} rep  " + " ".join(f"{m:>9}" for m in MODES) + "  tok/pass(auto)")
    for i, task in enumerate(tasks):
        result = run_task(engine, task, i, args.max_tokens, workspaces)
        if args.upstream_bin:
            depth = engine.prompts.build(
                CompletionRequest(task.text[: task.cursor], "", task.path.name), PromptWindows(), 4096
            ).tokens
            result.upstream = upstream_speeds(
                args.upstream_bin, model, task, args.max_tokens, engine.runtime.settings.threads, len(depth)
            )
        results.append(result)
        cells = [f"{result.tokens_per_s['none']:7.1f}/s"] + [f"{result.ratio(m):8.2f}x" for m in MODES[1:]]
        print(
            f"{task.name[:58]:58} {task.kind:10} {result.repeat_share:4.2f} "
            + " ".join(cells)
            + f"  {result.tokens_per_pass['auto']:.2f} {result.accepted['auto']}",
            flush=True,
        )
    latencies = [warm_latency(engine, t, workspaces) for t in tasks if t.kind == "mid-line"]
    summary = report(results, latencies, {s: round(cost.relative(s), 3) for s in cost.sizes})
    print(json.dumps(summary, indent=1))
    if args.json:
        args.json.write_text(json.dumps({"summary": summary, "tasks": [r.__dict__ for r in results]}, indent=1))
    engine.close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
