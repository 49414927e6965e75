"""The build-cache and inspect-cache commands: prebuild a repository's static 2-gram cache, and
look into one."""

from __future__ import annotations

import argparse
import os
import sys
import time
from collections import Counter
from contextlib import closing
from dataclasses import dataclass, field
from pathlib import Path
from typing import Generator, TextIO

from lookahead_lsp._lookup import NgramCache, StaticCache, StaticCacheBuilder
from lookahead_lsp.base.errors import UserError
from lookahead_lsp.models.resolve import resolve_model_path
from lookahead_lsp.base.tokenizer import POOL_MIN_BYTES, TokenArray, Tokenizer, tokenize_files
from lookahead_lsp.workspace.files import list_source_files
from lookahead_lsp.workspace.folder import STATIC_CACHE_NAME

_MB = 1e6
_REDRAW_SECONDS = 0.1


@dataclass
class BuildSummary:
    """What build-cache did, as printed at its end."""

    output: Path
    files_indexed: int = 0
    skipped: dict[str, int] = field(default_factory=dict)
    bytes_read: int = 0
    tokens: int = 0
    header: dict[str, int] = field(default_factory=dict)
    tokenize_seconds: float = 0.0
    seconds: float = 0.0
    cluster: str | None = None  # how the Dask cluster counted, with --dask


def build_cache(args: argparse.Namespace) -> int:
    """Tokenize every source file of the repositories args.repos, each file as one document, and
    write the 2-gram cache to args.output, on this machine or (args.dask) on a Dask cluster:
    the same bytes either way. The output appears complete or not at all: an interrupted build
    leaves an existing file there untouched."""
    started = time.monotonic()
    roots, output = [Path(repo) for repo in args.repos], Path(args.output)
    _make_project_cache_folder(output)
    _check_build_arguments(roots, output, args.jobs, args.max_file_kb, args.shard_mb)
    cluster = _dask_cluster(args.dask) if args.dask else None
    model_path = resolve_model_path(args.model)
    summary = BuildSummary(output=output)
    with Tokenizer(model_path) as tokenizer:
        # Loaded before the long part, so that a bad file fails the command at once.
        upstream = (
            NgramCache.load_upstream(args.from_upstream, tokenizer.n_vocab)
            if args.from_upstream
            else None
        )
        repositories = _list_repositories(roots, args.max_file_kb * 1024, summary)
        builder = StaticCacheBuilder(tokenizer.n_vocab)
        if cluster is not None:
            shard_bytes = int(args.shard_mb * _MB)
            _count_on_cluster(cluster, shard_bytes, model_path, tokenizer, repositories, builder, summary)
        else:
            files = [path for _root, paths in repositories for path in paths]
            total_bytes = _total_bytes(files)
            jobs = args.jobs if total_bytes >= POOL_MIN_BYTES else 1
            results = tokenize_files(model_path, files, jobs, tokenizer)
            progress = _Progress.on_terminal(len(files), total_bytes)
            _add_files(builder, results, progress, summary)
        if upstream is not None:
            builder.add_cache(upstream)
        try:
            summary.header = builder.write(str(output), tokenizer.fingerprint)
        except OSError as error:
            raise UserError(f"cannot write the cache: {error}") from error
    summary.seconds = time.monotonic() - started
    _print_build_summary(summary, sys.stdout)
    return 0


def _list_repositories(
    roots: list[Path], max_bytes: int, summary: BuildSummary
) -> list[tuple[Path, list[Path]]]:
    """Each root with its source files; a file reached through two roots (one inside the
    other, or named twice) is counted once, under the first."""
    repositories = []
    seen: set[str] = set()
    skipped: Counter[str] = Counter()
    for root in roots:
        listing = list_source_files(root, max_bytes=max_bytes)
        skipped.update(listing.skipped)
        files = listing.files
        if len(roots) > 1:
            files = [path for path in files if _first_sight(path, seen)]
        repositories.append((root, files))
    summary.skipped = dict(skipped)
    return repositories


def _first_sight(path: Path, seen: set[str]) -> bool:
    real = os.path.realpath(path)
    if real in seen:
        return False
    seen.add(real)
    return True


def _dask_cluster(address: str) -> str | int:
    """--dask's scheduler address, or the number of local workers of local:N."""
    if address.startswith("local:"):
        n_workers = address.removeprefix("local:")
        if not n_workers.isdigit() or int(n_workers) < 1:
            raise UserError(f"--dask local:N needs a number of workers N >= 1, not {address!r}")
        return int(n_workers)
    if "://" not in address:
        raise UserError(f"--dask takes tcp://HOST:PORT or local:N, not {address!r}")
    return address


def _count_on_cluster(
    cluster: str | int,
    shard_bytes: int,
    model_path: Path,
    tokenizer: Tokenizer,
    repositories: list[tuple[Path, list[Path]]],
    builder: StaticCacheBuilder,
    summary: BuildSummary,
) -> None:
    try:
        from lookahead_lsp.cluster.build import count_on_cluster
    except ImportError as error:
        raise UserError(f"--dask needs Dask ({error}): pip install 'lookahead-lsp[dask]'") from error
    counts, stats = count_on_cluster(cluster, model_path, tokenizer, repositories, shard_bytes, builder)
    summary.files_indexed = counts.files_indexed
    summary.bytes_read = counts.bytes_read
    summary.tokens = counts.tokens
    summary.tokenize_seconds = stats.count_seconds
    summary.cluster = (
        f"{stats.workers} workers, {stats.shards} shards, {stats.partitions} partitions, {stats.merges} merges"
        f" ({stats.merge_seconds:.2f} s after the last shard)"
    )


def _add_files(
    builder: StaticCacheBuilder,
    results: Generator[tuple[Path, TokenArray | None, int], None, None],
    progress: _Progress | None,
    summary: BuildSummary,
) -> None:
    """Each file's tokens as one document (no 2-gram spans two files), counted in summary."""
    started = time.monotonic()
    done = 0
    with closing(results):  # stops the worker processes however this ends
        for _path, tokens, n_bytes in results:
            done += 1
            if tokens is not None:  # else vanished since listed
                builder.add(tokens)
                summary.files_indexed += 1
                summary.bytes_read += n_bytes
            if progress is not None:
                progress.update(done, summary.bytes_read)
    if progress is not None:
        progress.clear()
    summary.tokens = builder.n_tokens
    summary.tokenize_seconds = time.monotonic() - started


def _make_project_cache_folder(output: Path) -> None:
    """Creates the folder of an output that is a project's own cache (`<folder>/.lookahead/...`,
    where the daemon looks) when the project's folder exists and that one does not. Any other
    missing folder is the user's mistake, refused by _check_build_arguments."""
    folder = output.absolute().parent
    if folder.name != STATIC_CACHE_NAME.parent.name or not folder.parent.is_dir() or os.path.lexists(folder):
        return
    try:
        folder.mkdir()
    except OSError as error:
        raise UserError(f"cannot create {folder}: {error.strerror or error}") from None


def _check_build_arguments(
    roots: list[Path], output: Path, jobs: int, max_file_kb: int, shard_mb: float
) -> None:
    # Checked up front: these would otherwise fail only after minutes of tokenizing.
    for root in roots:
        if not root.is_dir():
            raise UserError(f"not a folder: {root}")
    if output.is_dir():
        raise UserError(f"output is a folder: {output}")
    if not output.absolute().parent.is_dir():
        raise UserError(f"output folder does not exist: {output.absolute().parent}")
    if jobs < 1:
        raise UserError("--jobs must be at least 1")
    if max_file_kb < 1:
        raise UserError("--max-file-kb must be at least 1")
    if not shard_mb > 0:
        raise UserError("--shard-mb must be above 0")


def _total_bytes(paths: list[Path]) -> int:
    total = 0
    for path in paths:
        try:
            total += path.stat().st_size
        except OSError:  # vanished: tokenize_files will skip it
            pass
    return total


def _print_build_summary(summary: BuildSummary, out: TextIO) -> None:
    header = summary.header
    skipped = ", ".join(f"{count} {reason}" for reason, count in summary.skipped.items())
    rate = summary.bytes_read / _MB / max(summary.tokenize_seconds, 1e-9)
    files_rate = summary.files_indexed / max(summary.tokenize_seconds, 1e-9)
    lines = [
        ("wrote", str(summary.output)),
        ("files indexed", str(summary.files_indexed)),
        ("files skipped", skipped or "none"),
        ("bytes read", f"{summary.bytes_read / _MB:.2f} MB"),
        ("tokens", str(summary.tokens)),
        ("keys", str(header["n_keys"])),
        ("followers", str(header["n_followers"])),
        ("file size", f"{header['file_size'] / _MB:.2f} MB ({header['file_size']} bytes)"),
        (
            "tokenizing",
            f"{summary.tokenize_seconds:.2f} s ({rate:.2f} MB/s, {files_rate:.0f} files/s)",
        ),
        *([("cluster", summary.cluster)] if summary.cluster else []),
        ("seconds", f"{summary.seconds:.2f}"),
    ]
    for name, value in lines:
        print(f"{name:<14} {value}", file=out)


class _Progress:
    """A one-line report redrawn in place with a carriage return, for a terminal."""

    @staticmethod
    def on_terminal(total_files: int, total_bytes: int) -> _Progress | None:
        """A report on stderr if that is a terminal (not a log file or a pipe), else None."""
        return _Progress(total_files, total_bytes, sys.stderr) if sys.stderr.isatty() else None

    def __init__(self, total_files: int, total_bytes: int, stream: TextIO) -> None:
        self._total = total_files
        self._total_mb = total_bytes / _MB
        self._stream = stream
        self._started = time.monotonic()
        self._last_drawn = 0.0
        self._width = 0

    def update(self, files: int, n_bytes: int) -> None:
        now = time.monotonic()
        if now - self._last_drawn < _REDRAW_SECONDS and files < self._total:
            return
        self._last_drawn = now
        rate = n_bytes / _MB / max(now - self._started, 1e-9)
        line = (
            f"{files}/{self._total} files  {n_bytes / _MB:.1f}/{self._total_mb:.1f} MB"
            f"  {rate:.2f} MB/s"
        )
        self._width = max(self._width, len(line))
        self._stream.write("\r" + line.ljust(self._width))
        self._stream.flush()

    def clear(self) -> None:
        if self._width:
            self._stream.write("\r" + " " * self._width + "\r")
            self._stream.flush()


def inspect_cache(args: argparse.Namespace) -> int:
    """Print a static cache's header and statistics; with --verify check it whole, with
    --export-upstream also write it in llama.cpp's lookup cache format (after verifying)."""
    started = time.perf_counter()
    cache = StaticCache.open(args.file)
    open_ms = (time.perf_counter() - started) * 1e3
    try:
        header = cache.header
        _print_header(cache.path, header, open_ms, sys.stdout)
        if args.verify or args.export_upstream:
            # Export reads every entry, so the file must be known to be sound first.
            started = time.perf_counter()
            cache.verify()
            print(f"verified in {(time.perf_counter() - started) * 1e3:.1f} ms", flush=True)
        if args.export_upstream:
            try:
                cache.save_upstream(args.export_upstream)
            except OSError as error:
                raise UserError(f"cannot export: {error}") from error
            print(f"exported {args.export_upstream}")
    finally:
        cache.close()
    return 0


def _print_header(path: str, header: dict[str, int], open_ms: float, out: TextIO) -> None:
    hex_fields = {"fingerprint", "checksum"}
    print(f"{'file':<24} {path}", file=out)
    for name, value in header.items():
        shown = f"0x{value:016x}" if name in hex_fields else str(value)
        print(f"{name:<24} {shown}", file=out)
    mean = header["n_followers"] / header["n_keys"] if header["n_keys"] else 0.0
    print(f"{'mean followers per key':<24} {mean:.3f}", file=out)
    print(f"{'opened in':<24} {open_ms:.2f} ms", file=out, flush=True)
