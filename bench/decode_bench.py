"""Decode benchmark: the draft modes side by side on real completion tasks in several languages
(python, javascript, c: tasks.py says where each comes from and how tasks are drawn, with a
fixed seed), warm and cold, each figure set against the offline replay's oracle. Per model, one long-lived engine runs
every mode on every task (warm; languages interleaved, mode order rotated) for exactly
--max-tokens tokens; figures are tokens/s after the prompt, as ratios to `none` on the task.

  cold    a fresh process per task runs `auto` as its first request (with the calibration the
          warm run saved, as after a restart): its tokens/s against the warm `auto`.
  replay  `none`'s tokens are the greedy truth; the lookup core's draft at every position is
          then fixed, and auto's policy (fresh priors, learning across the tasks in run order)
          and the oracle (the cheapest passes any policy could choose with these drafts) are
          replayed against today's cost curve (the engine's online curve after the warm run).
          auto_live / oracle says how far the live figure is from the best these drafts allow.

    .venv/bin/python bench/decode_bench.py [--languages python,javascript,c] [--tasks 8]
        [--model FILE.gguf ...] [--no-cold] [--json OUT.json] [--upstream-bin DIR]
    .venv/bin/python bench/decode_bench.py --replay [--cost 1:1,2:1.76,4:2.4,8:3.71]
        # no live timing: the truth is decoded once (cached) and replayed

bench/fit_priors.py fits auto's priors on the same tasks and replay.
"""

from __future__ import annotations

# Before numpy: on a CUDA build, numpy loaded before llama.cpp's libraries made the model load
# crash (SIGSEGV in llama_model_load_from_file); lookahead_lsp loads them first.
import lookahead_lsp  # noqa: F401  # isort: skip
import argparse
import json
import re
import statistics
import subprocess
import sys
import tempfile
from dataclasses import asdict, dataclass, field
from pathlib import Path

import numpy as np

from lookahead_lsp.base.cache_files import default_cache_dir
from lookahead_lsp.engine import CompletionRequest, DecodeOptions, DraftCaches, Engine, EngineSettings
from lookahead_lsp.engine.prompt import stable_prefix_start
from lookahead_lsp.engine.runtime import SAMPLING_MODES
from lookahead_lsp.models.resolve import resolve_model_path
from tasks import (
    LANGUAGES,
    Task,
    TruthCache,
    Workspaces,
    corpus_root,
    interleaved,
    options_of,
    parse_curve,
    pick_tasks,
    replay_all,
    replay_task,
    replay_tasks_of,
    request_of,
)

MODES = ("none", "lookup", "lookahead", "auto")


# -- live runs --------------------------------------------------------------------------------


@dataclass
class TaskResult:
    task: str
    language: str
    kind: str
    tokens_per_s: dict[str, float] = field(default_factory=dict)
    tokens_per_pass: dict[str, float] = field(default_factory=dict)
    accepted: dict[str, dict[str, int]] = field(default_factory=dict)
    same_as_none: dict[str, int] = field(default_factory=dict)  # tokens equal to none's, from the start
    truth: list[int] = field(default_factory=list)  # none's tokens
    cold_auto_tokens_per_s: float | None = None
    replay_auto: float | None = None  # the replayed policy's speed-up over plain
    replay_oracle: float | None = None
    upstream: dict[str, float] = field(default_factory=dict)

    def ratio(self, mode: str) -> float:
        return self.tokens_per_s[mode] / self.tokens_per_s["none"]


def run_task(
    engine: Engine, task: Task, index: int, modes: tuple[str, ...], max_tokens: int, workspaces: Workspaces
) -> TaskResult:
    caches = DraftCaches(workspace=workspaces.cache_for(task))
    order = modes[index % len(modes) :] + modes[: index % len(modes)]
    outputs = {}
    result = TaskResult(task.name, task.language, task.kind)
    for mode in order:
        # Each mode starts without the previous mode's output as a "previous completion" draft.
        engine.previous = None
        done = engine.complete(request_of(task), options_of(mode, max_tokens), caches)
        outputs[mode] = done.tokens
        result.tokens_per_s[mode] = done.stats.tokens_per_s
        result.tokens_per_pass[mode] = done.stats.tokens_per_pass
        result.accepted[mode] = {k: v for k, v in done.stats.accepted_by_source.items() if v}
    for mode in modes:
        same = 0
        for a, b in zip(outputs[mode], outputs["none"]):
            if a != b:
                break
            same += 1
        result.same_as_none[mode] = same
    result.truth = outputs["none"]
    return result


def warm_latency(engine: Engine, task: Task, workspaces: Workspaces) -> float:
    """ms of the request after one more typed character (a one-line completion, <= 16 tokens)."""
    caches = DraftCaches(workspace=workspaces.cache_for(task))
    options = DecodeOptions(draft="auto", max_tokens=16)
    engine.complete(request_of(task), options, caches)
    typed = task.text[: task.cursor + 1]
    return engine.complete(CompletionRequest(typed, "", task.path.name), options, caches).stats.ms_total


def cold_sample(task: Task, model: Path, cache_dir: Path, args: argparse.Namespace) -> float:
    """auto's tokens/s on `task` as the first request of a fresh process."""
    spec = {
        "language": task.language, "path": str(task.path), "cursor": task.cursor, "model": str(model),
        "cache_dir": str(cache_dir), "max_tokens": args.max_tokens, "threads": args.threads, "sampling": args.sampling,
    }
    done = subprocess.run(
        [sys.executable, str(Path(__file__).resolve()), "--cold-task", json.dumps(spec)],
        capture_output=True, text=True, check=False,
    )
    if done.returncode != 0:
        raise SystemExit(f"cold sample failed on {task.name}:\n{done.stderr[-2000:]}")
    return float(json.loads(done.stdout.strip().splitlines()[-1])["tokens_per_s"])


def run_cold_task(spec_text: str) -> int:
    spec = json.loads(spec_text)
    path = Path(spec["path"])
    task = Task(spec["language"], path, int(spec["cursor"]), "cold", path.read_text(errors="replace"))
    model, cache_dir = Path(spec["model"]), Path(spec["cache_dir"])
    settings = EngineSettings(
        model, n_ctx=4096, n_threads=spec["threads"], cache_dir=cache_dir, sampling=spec.get("sampling", "auto")
    )
    engine = Engine(settings)
    try:
        caches = DraftCaches(workspace=Workspaces(engine).cache_for(task))
        done = engine.complete(request_of(task), options_of("auto", int(spec["max_tokens"])), caches)
    finally:
        engine.close()
    print(json.dumps({"tokens_per_s": done.stats.tokens_per_s, **done.stats.as_dict()}))
    return 0


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
                # -b: the whole window in one batch (this llama.cpp aborts on a prompt longer
                # than the batch, 2048 by default, as a C window of 1536 x 4 characters can be).
                "-c", "4096", "-b", "4096", "--ignore-eos",
            ],
            capture_output=True, text=True, errors="replace", check=False,
        )
        out["llama-lookup"] = _decoded_speed(lookup.stderr + lookup.stdout)
    return out


def _decoded_speed(log: str) -> float:
    match = re.search(r"decoded\s+\d+ tokens in\s+[\d.]+ seconds, speed:\s+([\d.]+) t/s", log)
    return float(match.group(1)) if match else float("nan")


# -- replay -----------------------------------------------------------------------------------


# -- report -----------------------------------------------------------------------------------


def _median(values: list[float]) -> float:
    return statistics.median(values) if values else float("nan")


def _spread(values: list[float]) -> dict[str, float]:
    if not values:
        return {}
    return {"median": round(_median(values), 3), "worst": round(min(values), 3), "best": round(max(values), 3)}


def language_summary(results: list[TaskResult], modes: tuple[str, ...]) -> dict[str, object]:
    summary: dict[str, object] = {"tasks": len(results)}
    summary["none_tokens_per_s"] = round(_median([r.tokens_per_s["none"] for r in results]), 2)
    for mode in modes[1:]:
        summary[mode] = {
            **_spread([r.ratio(mode) for r in results]),
            "tokens_per_pass": round(_median([r.tokens_per_pass[mode] for r in results]), 3),
        }
    replayed = [r for r in results if r.replay_auto is not None and r.replay_oracle is not None]
    if replayed:
        summary["replay_auto"] = _spread([r.replay_auto or 0.0 for r in replayed])
        summary["replay_oracle"] = _spread([r.replay_oracle or 0.0 for r in replayed])
        summary["auto_live_vs_oracle"] = round(
            _median([r.ratio("auto") for r in replayed]) / _median([r.replay_oracle or 0.0 for r in replayed]), 3
        )
    cold = [r for r in results if r.cold_auto_tokens_per_s is not None]
    if cold:
        summary["cold_vs_warm_auto"] = _spread(
            [(r.cold_auto_tokens_per_s or 0.0) / r.tokens_per_s["auto"] for r in cold]
        )
    upstream = [r for r in results if r.upstream]
    if upstream:
        summary["none_vs_llama_bench"] = round(
            _median([r.tokens_per_s["none"] / r.upstream["llama-bench"] for r in upstream]), 3
        )
        summary["upstream_lookup_vs_plain"] = _spread(
            [r.upstream["llama-lookup"] / r.upstream["llama-bench"] for r in upstream]
        )
    return summary


def print_table(model: str, summaries: dict[str, dict[str, object]], modes: tuple[str, ...]) -> None:
    print(f"\n== {model}")
    head = f"{'language':11} {'none tok/s':>10} " + " ".join(f"{m + ' med/worst':>17}" for m in modes[1:])
    print(head + f" {'replay auto':>11} {'oracle':>7} {'live/oracle':>11} {'cold/warm':>9}")
    for language, s in summaries.items():
        cells = []
        for mode in modes[1:]:
            m = s[mode]
            assert isinstance(m, dict)
            cells.append(f"{m['median']:>8.2f}x/{m['worst']:>6.2f}x")
        replay_auto, oracle, cold = s.get("replay_auto", {}), s.get("replay_oracle", {}), s.get("cold_vs_warm_auto", {})
        assert isinstance(replay_auto, dict) and isinstance(oracle, dict) and isinstance(cold, dict)
        print(
            f"{language:11} {s['none_tokens_per_s']:>10} " + " ".join(f"{c:>17}" for c in cells)
            + f" {replay_auto.get('median', float('nan')):>10.2f}x {oracle.get('median', float('nan')):>6.2f}x"
            + f" {s.get('auto_live_vs_oracle', float('nan')):>11} {cold.get('median', float('nan')):>8.2f}x"
        )


# -- main -------------------------------------------------------------------------------------


def live(args: argparse.Namespace, model: Path, tasks: list[Task], cache_dir: Path) -> dict[str, object]:
    modes = tuple(args.modes)
    engine = Engine(EngineSettings(model, n_ctx=4096, n_threads=args.threads, cache_dir=cache_dir, sampling=args.sampling))
    seed = engine.auto_policy().cost.seed
    print("seed pass cost (x one position):", ", ".join(f"{s}: {seed.relative(s):.2f}" for s in seed.sizes))
    workspaces = Workspaces(engine)
    results: list[TaskResult] = []
    print(f"{'task':58} {'lang':10} " + " ".join(f"{m:>9}" for m in modes) + "  tok/pass(auto)")
    for i, task in enumerate(tasks):
        result = run_task(engine, task, i, modes, args.max_tokens, workspaces)
        if args.upstream_bin:
            depth = len(engine.build_prompt(request_of(task), options_of("none", args.max_tokens)).tokens)
            threads = engine.runtime.settings.threads
            result.upstream = upstream_speeds(args.upstream_bin, model, task, args.max_tokens, threads, depth)
        results.append(result)
        cells = [f"{result.tokens_per_s['none']:7.1f}/s"] + [f"{result.ratio(m):8.2f}x" for m in modes[1:]]
        print(
            f"{task.name[:58]:58} {task.language:10} " + " ".join(cells)
            + f"  {result.tokens_per_pass['auto']:.2f} {result.accepted['auto']}",
            flush=True,
        )
    latencies = [warm_latency(engine, t, workspaces) for t in tasks if t.kind == "mid-line"] if args.latency else []
    curve = engine.cost_curve()
    replay_tasks = [replay_task(engine, t, r.truth, workspaces, args.max_tokens) for t, r in zip(tasks, results)]
    replays = replay_all(replay_tasks, curve)
    for result, replayed in zip(results, replays):
        result.replay_auto, result.replay_oracle = replayed.policy_speedup, replayed.oracle_speedup
    engine.close()  # saves the calibration the cold processes start from
    if args.cold:
        for task, result in zip(tasks, results):
            result.cold_auto_tokens_per_s = cold_sample(task, model, cache_dir, args)
            cold = result.cold_auto_tokens_per_s / result.tokens_per_s["auto"]
            print(f"cold {task.name[:58]:58} {cold:.2f}x of warm", flush=True)
    summaries = {
        language: language_summary([r for r in results if r.language == language], modes) for language in args.languages
    }
    print_table(model.name, summaries, modes)
    out: dict[str, object] = {
        "languages": summaries,
        "cost_curve_today": {s: round(curve.relative(s), 3) for s in curve.sizes},
        "tasks": [asdict(r) for r in results],
    }
    if latencies:
        out["warm_latency_ms_p50"] = round(float(np.percentile(latencies, 50)), 1)
        out["warm_latency_ms_p95"] = round(float(np.percentile(latencies, 95)), 1)
    return out


def replay_only(args: argparse.Namespace, model: Path, tasks: list[Task], cache_dir: Path) -> dict[str, object]:
    engine = Engine(EngineSettings(model, n_ctx=4096, n_threads=args.threads, cache_dir=cache_dir, sampling=args.sampling))
    truths = TruthCache(args.truth or default_cache_dir() / "bench-truth.json", model, args.max_tokens)
    replay_tasks = replay_tasks_of(engine, tasks, truths, args.max_tokens)
    curve = engine.cost_curve() if args.cost == "measured" else parse_curve(args.cost)
    engine.close()
    results = replay_all(replay_tasks, curve)
    summaries: dict[str, object] = {}
    print(f"\n== {model.name}, replayed on {', '.join(f'{s}: {curve.relative(s):.2f}' for s in curve.sizes)}")
    columns = ("auto med/worst/best", "oracle med/worst/best", "auto/oracle", "tok/pass")
    print(f"{'language':11} {columns[0]:>24} {columns[1]:>24} {columns[2]:>11} {columns[3]:>8}")
    for language in args.languages:
        mine = [(t, r) for t, r in zip(tasks, results) if t.language == language]
        auto = [r.policy_speedup for _, r in mine]
        best = [r.oracle_speedup for _, r in mine]
        per_pass = _median([r.tokens / r.policy_passes for _, r in mine])
        summaries[language] = {
            "replay_auto": _spread(auto), "replay_oracle": _spread(best),
            "auto_vs_oracle": round(_median(auto) / _median(best), 3), "auto_tokens_per_pass": round(per_pass, 3),
        }
        print(
            f"{language:11} {_median(auto):>10.2f}/{min(auto):.2f}/{max(auto):.2f}x"
            f" {_median(best):>10.2f}/{min(best):.2f}/{max(best):.2f}x"
            f" {_median(auto) / _median(best):>11.3f} {per_pass:>8.2f}"
        )
    out: dict[str, object] = {"languages": summaries, "tasks": [asdict(r) for r in results]}
    return out


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--languages", type=lambda s: s.split(","), default=list(LANGUAGES))
    parser.add_argument(
        "--model", type=Path, action="append", help="a GGUF model (repeat for several); default: the default model"
    )
    parser.add_argument("--tasks", type=int, default=8, help="tasks per language")
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--max-tokens", type=int, default=64)
    parser.add_argument("--threads", type=int, default=None)
    parser.add_argument("--sampling", choices=SAMPLING_MODES, default="auto", help="where the argmax is taken (engine setting)")
    parser.add_argument("--modes", type=lambda s: s.split(","), default=["none", "lookup", "auto"])
    parser.add_argument("--no-cold", dest="cold", action="store_false", help="skip the fresh-process samples")
    parser.add_argument("--no-latency", dest="latency", action="store_false", help="skip the warm one-line latency")
    parser.add_argument(
        "--cache-dir", type=Path, help="keep cost model and calibration here (default: a fresh folder, a fresh install)"
    )
    parser.add_argument("--upstream-bin", type=Path, help="folder with llama-bench and llama-lookup")
    parser.add_argument(
        "--replay", action="store_true", help="no live timing: replay auto and the oracle against --cost"
    )
    parser.add_argument("--cost", default="measured", help="replay's curve: measured, or e.g. 1:1,2:1.76,4:2.4,8:3.71")
    parser.add_argument("--truth", type=Path, help="replay: the file that keeps decoded truths")
    parser.add_argument("--json", type=Path, help="also write every figure here")
    parser.add_argument("--cold-task", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.cold_task:
        return run_cold_task(args.cold_task)
    unknown = [name for name in args.languages if name not in LANGUAGES]
    if unknown or not {"none", "auto"} <= set(args.modes) or not set(args.modes) <= set(MODES):
        parser.error(f"--languages from {', '.join(LANGUAGES)}; --modes from {', '.join(MODES)} with none and auto")
    args.modes = ["none", *(m for m in MODES[1:] if m in args.modes)]
    per_language = {
        name: pick_tasks(LANGUAGES[name], corpus_root(name), args.tasks, args.seed) for name in args.languages
    }
    tasks = interleaved(per_language)
    models = args.model or [resolve_model_path(None)]
    report: dict[str, object] = {"arguments": {k: str(v) for k, v in vars(args).items()}}
    with tempfile.TemporaryDirectory(prefix="decode-bench-") as fresh:
        for model in models:
            cache_dir = args.cache_dir or Path(fresh) / model.name
            run = replay_only if args.replay else live
            report[model.name] = run(args, model, tasks, cache_dir)
    if args.json:
        args.json.parent.mkdir(parents=True, exist_ok=True)
        args.json.write_text(json.dumps(report, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
