"""What retrieval (workspace/retrieval.py) costs on a large folder: filling the symbol table
from every file the index would hold, its memory, and the time one request's context takes,
on a new line (nothing cached) and at the following keys of that line, and how often the chunks
change as the user writes on, line after line (each change evaluates the whole prompt again).
The table's memory is reported twice: the process's growth while it fills, and what the table
counts against its budget (files past it are left out, and counted).

The folder: --folder, default /usr/include (C and C++ headers; ~130 MB here), listed as the
index lists a folder (workspace/files.list_source_files: .gitignore, generated and oversized
files left out). Requests: --requests cursors drawn with --seed, each at a line start in the
middle 60 % of a file of the folder, the file's text before it as the prefix; after each, the
file's next _TYPED_LINES lines typed one by one, asked at each line's start. Before a file's
first request its read-ahead runs (`prepare`, timed apart), as the daemon's folder thread
runs it when a document is opened or edited; --cold leaves it out (the first request then
reads everything itself).

    .venv/bin/python bench/retrieval_bench.py [--folder DIR] [--requests 400] [--seed 1] [--cold] [--json OUT]
"""

from __future__ import annotations

# Before numpy: on a CUDA build, numpy loaded before llama.cpp's libraries made the model load
# crash (SIGSEGV in llama_model_load_from_file); lookahead_lsp loads them first.
import lookahead_lsp  # noqa: F401  # isort: skip
import argparse
import hashlib
import json
import random
import resource
import time
from pathlib import Path
from typing import Any

import numpy as np

from lookahead_lsp.workspace.files import list_source_files
from lookahead_lsp.workspace.retrieval import FolderRetrieval

_TYPED_LINES = 12


def _rss_mb() -> float:
    with open("/proc/self/statm") as statm:
        return int(statm.read().split()[1]) * resource.getpagesize() / 1e6


def _percentiles(values: list[float]) -> dict[str, float]:
    return {"p50": round(float(np.percentile(values, 50)), 3), "p95": round(float(np.percentile(values, 95)), 3),
            "max": round(max(values), 3)}  # fmt: skip


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--folder", type=Path, default=Path("/usr/include"))
    parser.add_argument("--requests", type=int, default=400)
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--cold", action="store_true", help="no read-ahead before a file's first request")
    parser.add_argument("--json", type=Path)
    args = parser.parse_args()
    root = args.folder.resolve()
    started = time.perf_counter()
    files = list_source_files(root).files
    listed_s = time.perf_counter() - started
    report = {"folder": str(root), "listing_s": round(listed_s, 2), **measure(root, files, args.requests, args.seed, args.cold)}
    print(json.dumps(report, indent=1))
    if args.json:
        args.json.write_text(json.dumps(report, indent=1))


def measure(root: Path, files: list[Path], requests: int, seed: int, cold: bool) -> dict[str, Any]:
    """The table's filling and memory, and `requests` drawn cursors' requests (the module doc),
    on the folder root whose files the index lists as files."""
    megabytes = sum(path.stat().st_size for path in files) / 1e6
    rss_before = _rss_mb()
    retrieval = FolderRetrieval(root)
    started = time.perf_counter()
    retrieval.rebuild(files)
    filled_s = time.perf_counter() - started
    rss_after = _rss_mb()
    table = retrieval.status()
    answers = hashlib.sha256()  # of every answer's chunks: two versions that choose alike agree
    rng = random.Random(seed)
    first, next_line, same_line, chunks, prepared = [], [], [], [], []
    changed = new_lines = 0
    for _ in range(requests):
        path = rng.choice(files)
        lines = path.read_text(errors="replace").split("\n")
        if len(lines) < 20:
            continue
        at = rng.randrange(len(lines) * 2 // 10, len(lines) * 8 // 10)
        prefix = "\n".join(lines[:at]) + "\n"
        if not cold:
            started = time.perf_counter()
            retrieval.prepare(path)
            prepared.append((time.perf_counter() - started) * 1e3)
        started = time.perf_counter()
        retrieval.retrieve(path, prefix)
        first.append((time.perf_counter() - started) * 1e3)
        prefix += lines[at] + "\n"
        started = time.perf_counter()
        found = retrieval.retrieve(path, prefix)
        answers.update(repr([(str(c.path), c.start, c.end, c.why) for c in found]).encode())
        next_line.append((time.perf_counter() - started) * 1e3)
        chunks.append(len(found))
        for typed in ("x", "x = ", "x = f("):
            started = time.perf_counter()
            again = retrieval.retrieve(path, prefix + typed)
            same_line.append((time.perf_counter() - started) * 1e3)
            assert again == found, "the chunks changed within a line"
        for line in lines[at + 1 : at + 1 + _TYPED_LINES]:
            prefix += line + "\n"
            now = retrieval.retrieve(path, prefix)
            changed += now != found
            new_lines += 1
            found = now
    return {
        "files": len(files), "mb": round(megabytes, 1), "fill_s": round(filled_s, 2), "table_rss_mb": round(rss_after - rss_before, 1),
        "table_counted_mb": round(table.memory_bytes / 1e6, 1), "table_budget_mb": round(table.budget_bytes / 1e6, 1),
        "table_files": table.files, "table_left_out": table.left_out, "answers_sha256": answers.hexdigest()[:16],
        "prepare_ms": _percentiles(prepared) if prepared else None, "first_in_file_ms": _percentiles(first), "next_line_ms": _percentiles(next_line), "same_line_ms": _percentiles(same_line),
        "chunks_mean": round(sum(chunks) / len(chunks), 2), "requests": len(first),
        "changed_on_new_lines_pct": round(100 * changed / max(1, new_lines), 1), "new_lines": new_lines,
    }  # fmt: skip


if __name__ == "__main__":
    main()
