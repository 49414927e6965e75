"""LSP daemon benchmarks.

1. Indexing throughput: WorkspaceIndex.index_folder over the Python installation's lib/ tree
   (both cores), in MB/s and files/s, then a rescan with nothing changed.
2. Typing latency through the full LSP round trip: a real LSP client starts `lookahead-lsp
   serve`, opens real files of a standard-library package (the package is the workspace), and
   types a line of each file character by character with pauses drawn like a person's
   (80-250 ms between keys, a longer pause now and then), requesting an inline completion after
   every keystroke, as editors do. Reported: p50/p95 latency of requests answered with a
   suggestion, how many were answered from the suggestion cache, and how many answers arrived
   for a keystroke the user had already moved past (should be none: newer requests supersede).

    .venv/bin/python bench/lsp_bench.py [--skip-indexing] [--lines 12] [--json FILE]
"""

from __future__ import annotations

import argparse
import asyncio
import random
import statistics
import sys
import sysconfig
import tempfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from report import write_report
import support_path  # noqa: F401  (tests/ on sys.path, before support)
from support.daemon import Daemon, items_of, plain
from lsprotocol import types

from lookahead_lsp.models.resolve import resolve_model_path
from lookahead_lsp.base.tokenizer import Tokenizer
from lookahead_lsp.workspace.index import WorkspaceIndex


def index_throughput(root: Path) -> dict[str, float]:
    model = resolve_model_path(None)
    with Tokenizer(model) as tokenizer:
        index = WorkspaceIndex(tokenizer.n_vocab, root=root, tokenizer=tokenizer)
        first = index.index_folder(jobs=2)
        again = index.index_folder(jobs=2)
        status = index.status()
    mb = first.bytes_tokenized / 1e6
    return {
        "files": status.files,
        "tokens": status.tokens,
        "mb": round(mb, 1),
        "seconds": round(first.seconds, 1),
        "mb_per_s": round(mb / first.seconds, 2),
        "files_per_s": round(first.tokenized / first.seconds, 1),
        "rescan_unchanged_s": round(again.seconds, 2),
    }


@dataclass
class Typing:
    latencies_ms: list[float] = field(default_factory=list)
    empty: int = 0
    stale: int = 0  # answers with a suggestion that arrived after a newer keystroke was sent
    requests: int = 0


async def type_files(files: list[Path], root: Path, lines: int, seed: int) -> tuple[Typing, dict[str, Any]]:
    rng = random.Random(seed)
    daemon = Daemon("lsp-bench")
    await daemon.start([root], Path(tempfile.mkdtemp(prefix="lookahead-bench-")))
    result = Typing()
    latest: dict[str, int] = {}
    pending: list[asyncio.Task[None]] = []

    async def request(uri: str, line: int, col: int, serial: int) -> None:
        answer, elapsed = await daemon.complete(uri, types.Position(line=line, character=col))
        has_item = bool(items_of(answer))
        if has_item and latest[uri] != serial:
            result.stale += 1
        elif has_item:
            result.latencies_ms.append(elapsed)
        else:
            result.empty += 1

    serial = 0
    for path in files:
        text = path.read_text()
        source_lines = text.splitlines(keepends=True)
        candidates = [i for i, l in enumerate(source_lines) if 20 <= len(l.strip()) <= 70 and not l.strip().startswith("#")]
        chosen = sorted(rng.sample(candidates[len(candidates) // 3 :], min(lines, len(candidates) // 2)))
        uri = path.as_uri()
        # The file as the user has it: the chosen lines are still to be typed (blank).
        doc_lines = list(source_lines)
        for i in chosen:
            doc_lines[i] = source_lines[i][: len(source_lines[i]) - len(source_lines[i].lstrip())] + "\n"
        version = 1
        daemon.open(uri, "python", "".join(doc_lines))
        for i in chosen:
            target = source_lines[i].rstrip("\n")
            col = len(target) - len(target.lstrip())
            for ch in target[col:]:
                version += 1
                daemon.insert(uri, version, types.Position(line=i, character=col), ch)
                col += 1
                serial += 1
                latest[uri] = serial
                result.requests += 1
                pending.append(asyncio.ensure_future(request(uri, i, col, serial)))
                pause = rng.uniform(0.08, 0.25) if rng.random() > 0.1 else rng.uniform(0.5, 1.2)
                await asyncio.sleep(pause)
        daemon.close(uri)
    await asyncio.gather(*pending)
    final = await daemon.status()
    await daemon.stop()
    return result, plain(final)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--skip-indexing", action="store_true")
    parser.add_argument("--lines", type=int, default=6, help="lines typed per file")
    parser.add_argument("--package", default="json", help="standard-library package typed in")
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--json", type=Path)
    args = parser.parse_args()
    lib = Path(sysconfig.get_paths()["stdlib"])
    indexing = None if args.skip_indexing else {"folder": str(lib), **index_throughput(lib)}
    root = lib / args.package
    files = sorted(p for p in root.glob("*.py") if p.stat().st_size > 4000)
    typing, status = asyncio.run(type_files(files, root, args.lines, args.seed))
    lat = sorted(typing.latencies_ms)
    summary = {
        "indexing": indexing,
        "requests": typing.requests,
        "answered_with_suggestion": len(lat),
        "empty_or_superseded": typing.empty,
        "stale_answers": typing.stale,
        "p50_ms": round(statistics.median(lat), 1) if lat else None,
        "p95_ms": round(lat[int(0.95 * (len(lat) - 1))], 1) if lat else None,
        "server_completions": status.get("completions"),
    }
    write_report(summary, args.json)
    return 0


if __name__ == "__main__":
    sys.exit(main())
