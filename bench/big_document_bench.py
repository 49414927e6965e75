"""Typing in a large document: what indexing the editor's text costs the daemon, and what that
does to the completions the user waits for.

A real LSP client starts `lookahead-lsp serve` (default model, `debounceMs` 0) on a generated
Python workspace with one small document (--small-kb) and one large one (--big-kb, under the
default `maxDocumentKb`), then in each document in turn types the same line, a key every
--gap-ms, each key followed by an inline completion request that is awaited. The workspace
index re-tokenizes the pieces of a document an edit changed and recounts the n-grams of the
changed span, off the event loop; the folder thread spends at most a share of its time on it
(workspace/folder.py), so in a large document the index lags instead of taking a core from the
model.

Reported per document: what indexing the editor's text costs per key (measured in this
process, the daemon's code on the same text), the daemon's CPU seconds per second of typing
(utime + stime from /proc, Linux), and the p50 / p95 answer time of the requests (those the
suggestion cache answered counted apart).

    .venv/bin/python bench/big_document_bench.py [--big-kb 900] [--small-kb 20] [--keys 60]
"""

from __future__ import annotations

import argparse
import asyncio
import os
import random
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from flood_bench import python_file
from report import write_report
import support_path  # noqa: F401  (tests/ on sys.path, before support)
from support.daemon import Daemon
from lsprotocol import types

from lookahead_lsp.models.resolve import resolve_model_path
from lookahead_lsp.base.tokenizer import Tokenizer
from lookahead_lsp.workspace.index import WorkspaceIndex

_LINE = "    result = compute_total(items, price, count) + adjust(order.value, cart.line)\n"


def index_cost_ms(text: str, keys: int = 20) -> float:
    """What indexing the editor's text costs per key in this document, in this process: the
    p50 of WorkspaceIndex.change_document after a key typed in its middle."""
    with tempfile.TemporaryDirectory() as folder, Tokenizer(resolve_model_path(None)) as tokenizer:
        root = Path(folder)
        index = WorkspaceIndex(tokenizer.n_vocab, root=root, tokenizer=tokenizer)
        index.index_folder()
        path = root / "document.py"
        index.open_document(path, text)
        spent = []
        for key in range(keys):
            at = len(text) // 2 + key
            text = text[:at] + "x" + text[at:]
            started = time.perf_counter()
            index.change_document(path, text)
            spent.append((time.perf_counter() - started) * 1000)
    return round(statistics.median(spent), 1)


def _cpu_seconds(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")  # utime, stime


async def type_line(daemon: Daemon, path: Path, keys: int, gap_s: float) -> dict[str, Any]:
    uri, text = path.as_uri(), path.read_text()
    index_ms = index_cost_ms(text)
    daemon.open(uri, "python", text)
    await asyncio.sleep(3.0)  # the open document indexed once
    line = text.count("\n")
    cached = (await daemon.status()).completions.from_cache
    computed: list[float] = []
    from_cache = 0
    cpu, started = _cpu_seconds(daemon.pid), time.monotonic()
    for version, char in enumerate(_LINE[:keys], start=2):
        column = version - 2
        daemon.insert(uri, version, types.Position(line=line, character=column), char)
        await asyncio.sleep(gap_s)
        _, ms = await daemon.complete(uri, types.Position(line=line, character=column + 1))
        now_cached = (await daemon.status()).completions.from_cache
        if now_cached != cached:
            cached, from_cache = now_cached, from_cache + 1
        else:
            computed.append(ms)
    seconds = time.monotonic() - started
    used = _cpu_seconds(daemon.pid) - cpu
    daemon.close(uri)
    ordered = sorted(computed)
    return {
        "document_kb": round(len(text.encode()) / 1024),
        "index_ms_per_key": index_ms,
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
        path.write_text(python_file(rng, kb * 1000) + "\n")
        documents[name] = path
    daemon = Daemon("big-document-bench")
    await daemon.start([root], root / ".cache", {"debounceMs": 0})
    out: dict[str, Any] = {}
    try:
        for name, path in documents.items():
            out[name] = await type_line(daemon, path, args.keys, args.gap_ms / 1000)
    finally:
        await daemon.stop()
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
    write_report(asyncio.run(run(args)), args.json)
    return 0


if __name__ == "__main__":
    sys.exit(main())
