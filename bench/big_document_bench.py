"""Typing in a large document: what indexing the editor's text costs the daemon, and what that
does to the completions the user waits for.

A real LSP client starts `lookahead-lsp serve` (default model, `debounceMs` 0) on a generated
Python workspace with one small document (--small-kb) and one large one (--big-kb, under the
default `maxDocumentKb`), then in each document in turn types the same line, a key every
--gap-ms, each key followed by an inline completion request that is awaited. The workspace
index re-tokenizes the pieces of a document an edit changed and replaces its n-grams, off the
event loop; the folder thread spends at most a share of its time on it (workspace/folder.py),
so in the large document the index lags instead of taking a core from the model.

Reported per document: the daemon's CPU seconds per second of typing (utime + stime from /proc,
Linux), and the p50 / p95 answer time of the requests (those the suggestion cache answered
counted apart).

    .venv/bin/python bench/big_document_bench.py [--big-kb 900] [--small-kb 20] [--keys 60]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import random
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from lsprotocol import types
from pygls.lsp.client import LanguageClient

from flood_bench import _python_file

_LINE = "    result = compute_total(items, price, count) + adjust(order.value, cart.line)\n"


def _cpu_seconds(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")  # utime, stime


async def _status(client: LanguageClient) -> Any:
    return await client.protocol.send_request_async("lookahead/status", None)


async def type_line(client: LanguageClient, pid: int, path: Path, keys: int, gap_s: float) -> dict[str, Any]:
    uri, text = path.as_uri(), path.read_text()
    client.text_document_did_open(
        types.DidOpenTextDocumentParams(text_document=types.TextDocumentItem(uri=uri, language_id="python", version=1, text=text))
    )
    await asyncio.sleep(3.0)  # the open document indexed once
    line = text.count("\n")
    cached = (await _status(client)).completions.from_cache
    computed: list[float] = []
    from_cache = 0
    cpu, started = _cpu_seconds(pid), time.monotonic()
    for version, char in enumerate(_LINE[:keys], start=2):
        column = version - 2
        at = types.Position(line=line, character=column)
        client.text_document_did_change(
            types.DidChangeTextDocumentParams(
                text_document=types.VersionedTextDocumentIdentifier(uri=uri, version=version),
                content_changes=[types.TextDocumentContentChangePartial(range=types.Range(start=at, end=at), text=char)],
            )
        )
        await asyncio.sleep(gap_s)
        sent = time.perf_counter()
        await client.text_document_inline_completion_async(
            types.InlineCompletionParams(
                text_document=types.TextDocumentIdentifier(uri=uri),
                position=types.Position(line=line, character=column + 1),
                context=types.InlineCompletionContext(trigger_kind=types.InlineCompletionTriggerKind.Automatic),
            )
        )
        ms = (time.perf_counter() - sent) * 1000
        now_cached = (await _status(client)).completions.from_cache
        if now_cached != cached:
            cached, from_cache = now_cached, from_cache + 1
        else:
            computed.append(ms)
    seconds = time.monotonic() - started
    used = _cpu_seconds(pid) - cpu
    client.text_document_did_close(types.DidCloseTextDocumentParams(text_document=types.TextDocumentIdentifier(uri=uri)))
    ordered = sorted(computed)
    return {
        "document_kb": round(len(text.encode()) / 1024),
        "typing_seconds": round(seconds, 1),
        "daemon_cpu_per_second": round(used / seconds, 2),
        "computed": len(computed),
        "from_cache": from_cache,
        "p50_ms": round(statistics.median(ordered), 1) if ordered else None,
        "p95_ms": round(ordered[min(len(ordered) - 1, int(0.95 * len(ordered)))], 1) if ordered else None,
    }


async def run(args: argparse.Namespace) -> dict[str, Any]:
    rng = random.Random(args.seed)
    root = Path(tempfile.mkdtemp(prefix="lookahead-big-"))
    documents = {}
    for name, kb in (("small.py", args.small_kb), ("big.py", args.big_kb)):
        path = root / name
        path.write_text(_python_file(rng, kb * 1000) + "\n")
        documents[name] = path
    client = LanguageClient("big-document-bench", "1")
    await client.start_io(sys.executable, "-m", "lookahead_lsp", "serve", "--cache-dir", str(root / ".cache"))
    server = client._server
    assert server is not None
    await client.initialize_async(
        types.InitializeParams(
            capabilities=types.ClientCapabilities(
                text_document=types.TextDocumentClientCapabilities(inline_completion=types.InlineCompletionClientCapabilities()),
                window=types.WindowClientCapabilities(work_done_progress=False),
            ),
            workspace_folders=[types.WorkspaceFolder(uri=root.as_uri(), name=root.name)],
            initialization_options={"debounceMs": 0},
        )
    )
    client.initialized(types.InitializedParams())
    while True:
        status = await _status(client)
        if status.model_state != "loading" and status.index.state == "ready":
            break
        await asyncio.sleep(0.2)
    out: dict[str, Any] = {}
    try:
        for name, path in documents.items():
            out[name] = await type_line(client, server.pid, path, args.keys, args.gap_ms / 1000)
    finally:
        await client.shutdown_async(None)
        client.exit(None)
        await client.stop()  # type: ignore[no-untyped-call]
    return out


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--big-kb", type=int, default=900)
    parser.add_argument("--small-kb", type=int, default=20)
    parser.add_argument("--keys", type=int, default=60)
    parser.add_argument("--gap-ms", type=float, default=120.0, help="from a key to its request")
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--json", type=Path)
    args = parser.parse_args()
    out = asyncio.run(run(args))
    print(json.dumps(out, indent=1))
    if args.json:
        args.json.parent.mkdir(parents=True, exist_ok=True)
        args.json.write_text(json.dumps(out, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
