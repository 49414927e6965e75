"""How long writing a folder table takes, and in how many passes, at several memory limits.

The folder table (native/folder_table_builder.cpp) is what a workspace past its memory budget
keeps on disk; the daemon writes it in the background, from the folder's saved tokens, within
what the budget leaves. This times that build alone, through the same binding the daemon calls
(`build_folder_table`), on the first --mb megabytes (path order) of the kernel's C and header
files (bench/index_bench.py's corpus: apt-get install linux-source), tokenized once with the
default model's vocabulary and kept in --work. Every limit must write the same bytes (checked:
the SHA-256 of each table is in the report).

With --threads, each limit is built with each thread count in turn (the passes after the first
are shared among them). Each build gets its documents either as arrays in memory or, with --mapped, as views of one
mapped file (as the daemon's store is, and then with release_pages, where the binding has it).
The binding in use is whichever lookahead_lsp the interpreter imports: run it with PYTHONPATH set
to another build to compare two versions side by side.

    .venv/bin/python bench/table_build_bench.py [--mb 30] [--limit-mib 40 128 ...] [--mapped]
        [--threads 1 2] [--work DIR] [--json FILE]
"""

from __future__ import annotations

# Before numpy: on a CUDA build, numpy loaded before llama.cpp's libraries made the model load
# crash (SIGSEGV in llama_model_load_from_file); lookahead_lsp loads them first.
import lookahead_lsp  # noqa: F401  # isort: skip
import argparse
import hashlib
import inspect
import mmap
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np

from report import write_report
from index_bench import kernel_corpus

import lookahead_lsp
from lookahead_lsp._lookup import build_folder_table
from lookahead_lsp.base.tokenizer import Tokenizer, tokenize_files
from lookahead_lsp.models.resolve import resolve_model_path

MIB = 1 << 20


def tokenized_slice(megabytes: float, work: Path) -> tuple[Path, list[int], int, int]:
    """(tokens file, document lengths, n_vocab, fingerprint) of the slice, tokenized once."""
    model = resolve_model_path(None)
    with Tokenizer(model) as tokenizer:
        n_vocab, fingerprint = tokenizer.n_vocab, tokenizer.fingerprint
    tokens_file = work / f"kernel-{megabytes:g}mb.i32"
    lengths_file = tokens_file.with_suffix(".lengths")
    if not (tokens_file.exists() and lengths_file.exists()):
        corpus, _ = kernel_corpus()
        paths, total = [], 0
        for path in sorted(p for p in corpus.rglob("*") if p.is_file() and p.suffix in (".c", ".h")):
            size = path.stat().st_size
            if total + size > megabytes * 1e6:
                break
            paths.append(path)
            total += size
        arrays: dict[Path, np.ndarray] = {}
        for path, tokens, _ in tokenize_files(model, paths, jobs=2):
            if tokens is not None:
                arrays[path] = np.asarray(tokens, dtype=np.int32)
        ordered = [arrays[p] for p in paths if p in arrays]
        work.mkdir(parents=True, exist_ok=True)
        np.concatenate(ordered).tofile(tokens_file)
        np.array([len(a) for a in ordered], dtype=np.int64).tofile(lengths_file)
    lengths = [int(n) for n in np.fromfile(lengths_file, dtype=np.int64)]
    return tokens_file, lengths, n_vocab, fingerprint


def documents(data: Any, lengths: list[int]) -> list[np.ndarray]:
    out, offset = [], 0
    for n in lengths:
        out.append(np.frombuffer(data, dtype=np.int32, count=n, offset=4 * offset))
        offset += n
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--mb", type=float, default=30.0, help="megabytes of kernel source")
    parser.add_argument("--limit-mib", type=int, nargs="+", default=[40, 128, 512], help="memory limits to build with")
    parser.add_argument("--mapped", action="store_true", help="documents as views of a mapped file")
    parser.add_argument("--threads", type=int, nargs="+", default=[1], help="threads to build with, each in turn")
    parser.add_argument("--work", type=Path, default=Path("/tmp/table-build-bench"), help="tokens and tables")
    parser.add_argument("--json", type=Path, help="write the report here too")
    args = parser.parse_args()

    tokens_file, lengths, n_vocab, fingerprint = tokenized_slice(args.mb, args.work)
    signature = inspect.getdoc(build_folder_table) or ""
    releases, threaded = "release_pages" in signature, "threads" in signature
    runs = []
    with tokens_file.open("rb") as file, mmap.mmap(file.fileno(), 0, access=mmap.ACCESS_READ) as mapping:
        source: Any = mapping if args.mapped else np.fromfile(tokens_file, dtype=np.int32).tobytes()
        docs = documents(source, lengths)
        for limit in args.limit_mib:
            for threads in args.threads if threaded else [1]:
                table = args.work / f"limit-{limit}.table"
                extra: dict[str, Any] = {"release_pages": True} if args.mapped and releases else {}
                if threaded:
                    extra["threads"] = threads
                began = time.perf_counter()
                stats = build_folder_table(docs, str(table), n_vocab, fingerprint, memory_limit=limit * MIB, **extra)
                seconds = time.perf_counter() - began
                digest = hashlib.sha256(table.read_bytes()).hexdigest()
                table.unlink()
                runs.append({"limit_mib": limit, "threads": threads, "seconds": round(seconds, 2), "sha256": digest, **stats})
                print(f"limit {limit} MiB, {threads} threads: {seconds:.1f} s, "
                      f"{stats.get('passes', stats.get('partitions'))} passes, peak {stats['peak_bytes'] / MIB:.0f} MiB",
                      file=sys.stderr, flush=True)
        del docs
    report = {
        "command": " ".join(sys.argv),
        "binding": str(Path(lookahead_lsp.__file__).parent),
        "documents": len(lengths),
        "tokens": sum(lengths),
        "mapped": args.mapped,
        "same_bytes_at_every_limit": len({r["sha256"] for r in runs}) == 1,
        "runs": runs,
    }
    write_report(report, args.json)


if __name__ == "__main__":
    main()
