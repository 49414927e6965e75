"""Warm one-line latency through the LSP when the user types what the model did not suggest
(issue 10, item 5).

A real LSP client starts `lookahead-lsp serve` (default model unless --model; `debounceMs` 0,
`draft` as --draft) on held-out mid-line prefixes drawn per language as bench/decode_bench.py
draws them (Python from the running interpreter, JavaScript from the extension's node_modules,
C from linux-source). For each prefix: the file's folder's other files are the workspace, the
document is the file cut at the cursor, one completion warms the model's KV cache, then the
user types the file's next --keys characters one at a time, each followed by an inline
completion request that is awaited before the next key. A key that continues what the daemon
suggested is answered from the suggestion cache and does not count: the figures are the answer
times of the requests the model computed (read from `lookahead/status`: the cache's counter and
the last completion's statistics), p50 and p95 per language and over all, with where the time
went (prompt, passes) and how many tokens those completions had.

    .venv/bin/python bench/keys_bench.py [--prefixes 4] [--keys 8] [--draft auto|none] [--json FILE]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import shutil
import statistics
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from decode_bench import LANGUAGES, Task, corpus_root, pick_tasks
from lsprotocol import types
from pygls.lsp.client import LanguageClient


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


def _position(text: str) -> types.Position:
    """The LSP position at the end of text (UTF-16 columns)."""
    line = text.count("\n")
    last = text[text.rfind("\n") + 1 :]
    return types.Position(line=line, character=len(last.encode("utf-16-le")) // 2)


async def _status(client: LanguageClient) -> Any:
    return await client.protocol.send_request_async("lookahead/status", None)


async def run(tasks: list[Task], keys: int, model: Path | None, draft: str, work: Path) -> Run:
    client = LanguageClient("keys-bench", "1")
    args = ["-m", "lookahead_lsp", "serve", "--cache-dir", str(work / "cache")]
    if model is not None:
        args += ["--model", str(model)]
    await client.start_io(sys.executable, *args)
    folders = [_workspace(task, work / "folders") for task in tasks]
    await client.initialize_async(
        types.InitializeParams(
            capabilities=types.ClientCapabilities(
                text_document=types.TextDocumentClientCapabilities(inline_completion=types.InlineCompletionClientCapabilities()),
                window=types.WindowClientCapabilities(work_done_progress=False),
            ),
            workspace_folders=[types.WorkspaceFolder(uri=f.as_uri(), name=f.name) for f, _ in folders],
            initialization_options={"debounceMs": 0, "draft": draft},
        )
    )
    client.initialized(types.InitializedParams())
    while True:
        status = await _status(client)
        if status.model_state != "loading" and status.index.state == "ready" and status.model_state != "error":
            break
        await asyncio.sleep(0.2)
    result = Run()

    async def ask(uri: str, text: str) -> float:
        start = time.perf_counter()
        await client.text_document_inline_completion_async(
            types.InlineCompletionParams(
                text_document=types.TextDocumentIdentifier(uri=uri),
                position=_position(text),
                context=types.InlineCompletionContext(trigger_kind=types.InlineCompletionTriggerKind.Automatic),
            )
        )
        return (time.perf_counter() - start) * 1000

    for task, (_, document) in zip(tasks, folders):
        uri = document.as_uri()
        text = task.text[: task.cursor]
        client.text_document_did_open(
            types.DidOpenTextDocumentParams(
                text_document=types.TextDocumentItem(uri=uri, language_id=task.language, version=1, text=text)
            )
        )
        result.warmups_ms.append(await ask(uri, text))
        cached = (await _status(client)).completions.from_cache
        for version, char in enumerate(task.text[task.cursor : task.cursor + keys], start=2):
            if char == "\n":
                break  # the line is done: a one-line measure
            at = _position(text)
            client.text_document_did_change(
                types.DidChangeTextDocumentParams(
                    text_document=types.VersionedTextDocumentIdentifier(uri=uri, version=version),
                    content_changes=[types.TextDocumentContentChangePartial(range=types.Range(start=at, end=at), text=char)],
                )
            )
            text += char
            await asyncio.sleep(0.05)  # a fast typist's gap: the edit is applied before the request
            ms = await ask(uri, text)
            status = await _status(client)
            if status.completions.from_cache != cached:
                cached = status.completions.from_cache
                result.from_cache += 1
                continue
            last = status.last
            result.computed.append(
                Sample(task.language, ms, last.tokens, last.passes, last.ms_prompt, last.ms_total, last.stop_reason)
            )
        client.text_document_did_close(types.DidCloseTextDocumentParams(text_document=types.TextDocumentIdentifier(uri=uri)))
    await client.shutdown_async(None)
    client.exit(None)
    await client.stop()
    return result


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
    parser.add_argument("--prefixes", type=int, default=4, help="mid-line prefixes per language")
    parser.add_argument("--keys", type=int, default=8, help="characters typed after each prefix")
    parser.add_argument("--seed", type=int, default=3, help="decode_bench's default seed drew its tasks; this draws others")
    parser.add_argument("--draft", default="auto")
    parser.add_argument("--model", type=Path)
    parser.add_argument("--json", type=Path)
    args = parser.parse_args()
    tasks: list[Task] = []
    for name in args.languages:
        drawn = pick_tasks(LANGUAGES[name], corpus_root(name), 2 * args.prefixes, args.seed)
        tasks += [t for t in drawn if t.kind == "mid-line"]
    with tempfile.TemporaryDirectory(prefix="keys-bench-") as work:
        result = asyncio.run(run(tasks, args.keys, args.model, args.draft, Path(work)))
    out: dict[str, object] = {
        "arguments": {k: str(v) for k, v in vars(args).items()},
        "prefixes": len(tasks),
        "from_cache": result.from_cache,
        "first_request_p50_ms": round(statistics.median(result.warmups_ms), 1) if result.warmups_ms else None,
        "all": summary(result.computed),
    }
    for name in args.languages:
        out[name] = summary([s for s in result.computed if s.language == name])
    print(json.dumps(out, indent=1))
    if args.json:
        args.json.parent.mkdir(parents=True, exist_ok=True)
        args.json.write_text(json.dumps(out, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
