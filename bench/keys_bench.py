"""Warm one-line latency through the LSP when the user types what the model did not suggest
(issue 10, item 5).

Real LSP clients start one `lookahead-lsp serve` per draft mode of --drafts (default model
unless --model; `debounceMs` 0), all at once, on held-out mid-line prefixes drawn per language
as bench/decode_bench.py draws them (Python from the running interpreter, JavaScript from the
extension's node_modules, C from linux-source). For each prefix: the file's folder's other files
are the workspace, the document is the file cut at the cursor, one completion warms the model's
KV cache, then the user types the file's next --keys characters one at a time (up to the line's
end), each followed by an inline completion request that is awaited before the next key. The
daemons take turns per prefix (order rotated), so they see the same keys under the same load.
A key that continues what the daemon suggested is answered from the suggestion cache and does
not count: the figures are the answer times of the requests the model computed (read from
`lookahead/status`: the cache's counter and the last completion's statistics), p50 and p95 per
mode and language, with where the time went (prompt, passes) and how many tokens those
completions had; and over the keys that every mode computed, the median per-key ratio of the
last mode's answer time to the first's.

    .venv/bin/python bench/keys_bench.py [--prefixes 8] [--keys 12] [--drafts auto,none] [--json FILE]
"""

from __future__ import annotations

import argparse
import asyncio
import shutil
import statistics
import sys
import tempfile
from dataclasses import dataclass, field
from pathlib import Path

from tasks import LANGUAGES, Task, corpus_root, pick_tasks
from report import write_report
import support_path  # noqa: F401  (tests/ on sys.path, before support)
from support.daemon import Daemon, end_of


@dataclass
class Sample:
    language: str
    ms: float  # request sent to answer received
    tokens: int  # of the completion the model computed
    passes: int
    ms_prompt: float
    ms_engine: float  # the engine's own total
    stop_reason: str


@dataclass
class Run:
    computed: list[Sample] = field(default_factory=list)
    from_cache: int = 0
    warmups_ms: list[float] = field(default_factory=list)


def _workspace(task: Task, into: Path) -> tuple[Path, Path]:
    """A copy of the task's folder's files of its language, the task's file cut at the cursor
    (no cache sees the code after it): the workspace folder and the document's path."""
    folder = into / f"{task.language}-{task.path.parent.name}-{task.cursor}"
    folder.mkdir(parents=True)
    language = LANGUAGES[task.language]
    for other in sorted(task.path.parent.iterdir()):
        if other != task.path and other.is_file() and language.matches(other):
            shutil.copyfile(other, folder / other.name)
    document = folder / task.path.name
    document.write_text(task.text[: task.cursor])
    return folder, document


class ModeDaemon(Daemon):
    """The daemon of one draft mode, and what it measured."""

    def __init__(self, draft: str) -> None:
        super().__init__(f"keys-bench-{draft}")
        self.draft = draft
        self.result = Run()

    async def type_keys(self, task: Task, document: Path, keys: int) -> list[Sample | None]:
        """One prefix: the warming request, then a key at a time; per key its Sample, or None
        when the suggestion cache answered it."""
        uri, text = document.as_uri(), task.text[: task.cursor]
        self.open(uri, task.language, text)
        self.result.warmups_ms.append((await self.complete(uri, end_of(text)))[1])
        cached = (await self.status()).completions.from_cache
        samples: list[Sample | None] = []
        for version, char in enumerate(task.text[task.cursor : task.cursor + keys], start=2):
            if char == "\n":
                break  # the line is done: a one-line measure
            self.insert(uri, version, end_of(text), char)
            text += char
            await asyncio.sleep(0.05)  # a fast typist's gap: the edit is applied before the request
            _, ms = await self.complete(uri, end_of(text))
            status = await self.status()
            if status.completions.from_cache != cached:
                cached = status.completions.from_cache
                self.result.from_cache += 1
                samples.append(None)
                continue
            last = status.last
            sample = Sample(task.language, ms, last.tokens, last.passes, last.ms_prompt, last.ms_total, last.stop_reason)
            self.result.computed.append(sample)
            samples.append(sample)
        self.close(uri)
        return samples


async def run(tasks: list[Task], keys: int, model: Path | None, drafts: list[str], work: Path) -> tuple[list[ModeDaemon], list[float]]:
    """The daemons after typing every prefix, and per key that every mode computed the ratio
    of the last mode's answer time to the first's."""
    folders = [_workspace(task, work / "folders") for task in tasks]
    daemons = [ModeDaemon(draft) for draft in drafts]
    for i, daemon in enumerate(daemons):
        settings = {"debounceMs": 0, "draft": daemon.draft}
        await daemon.start([f for f, _ in folders], work / f"cache-{i}", settings, model)
    ratios: list[float] = []
    try:
        for n, (task, (_, document)) in enumerate(zip(tasks, folders)):
            order = daemons[n % len(daemons) :] + daemons[: n % len(daemons)]
            by_mode = {d.draft: await d.type_keys(task, document, keys) for d in order}
            first, last = by_mode[drafts[0]], by_mode[drafts[-1]]
            ratios += [b.ms / a.ms for a, b in zip(first, last) if a is not None and b is not None]
    finally:
        for daemon in daemons:
            await daemon.stop()
    return daemons, ratios


def _percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return round(ordered[min(len(ordered) - 1, int(q * len(ordered)))], 1)


def summary(samples: list[Sample]) -> dict[str, object]:
    if not samples:
        return {"computed": 0}
    ms = [s.ms for s in samples]
    return {
        "computed": len(samples),
        "p50_ms": round(statistics.median(ms), 1),
        "p95_ms": _percentile(ms, 0.95),
        "median_tokens": statistics.median(s.tokens for s in samples),
        "median_passes": statistics.median(s.passes for s in samples),
        "median_ms_prompt": round(statistics.median(s.ms_prompt for s in samples), 1),
        "median_ms_per_pass": round(statistics.median((s.ms_engine - s.ms_prompt) / max(1, s.passes) for s in samples), 1),
        "median_ms_outside_engine": round(statistics.median(s.ms - s.ms_engine for s in samples), 1),
        "stop_reasons": {r: sum(s.stop_reason == r for s in samples) for r in sorted({s.stop_reason for s in samples})},
    }


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--languages", type=lambda s: s.split(","), default=list(LANGUAGES))
    parser.add_argument("--prefixes", type=int, default=8, help="mid-line prefixes per language")
    parser.add_argument("--keys", type=int, default=12, help="characters typed after each prefix")
    parser.add_argument("--seed", type=int, default=3, help="decode_bench's default seed drew its tasks; this draws others")
    parser.add_argument("--drafts", type=lambda s: s.split(","), default=["auto", "none"])
    parser.add_argument("--model", type=Path)
    parser.add_argument("--json", type=Path)
    args = parser.parse_args()
    tasks: list[Task] = []
    for name in args.languages:
        drawn = pick_tasks(LANGUAGES[name], corpus_root(name), 2 * args.prefixes, args.seed)
        tasks += [t for t in drawn if t.kind == "mid-line"]
    with tempfile.TemporaryDirectory(prefix="keys-bench-") as work:
        daemons, ratios = asyncio.run(run(tasks, args.keys, args.model, args.drafts, Path(work)))
    out: dict[str, object] = {"arguments": {k: str(v) for k, v in vars(args).items()}, "prefixes": len(tasks)}
    for daemon in daemons:
        result = daemon.result
        per_mode: dict[str, object] = {
            "from_cache": result.from_cache,
            "first_request_p50_ms": round(statistics.median(result.warmups_ms), 1) if result.warmups_ms else None,
            "all": summary(result.computed),
        }
        for name in args.languages:
            per_mode[name] = summary([s for s in result.computed if s.language == name])
        out[daemon.draft] = per_mode
    if len(daemons) > 1 and ratios:
        out[f"{args.drafts[-1]}_ms_over_{args.drafts[0]}_ms"] = {"keys": len(ratios), "median": round(statistics.median(ratios), 3)}
    write_report(out, args.json)
    return 0


if __name__ == "__main__":
    sys.exit(main())
