"""build-cache on a Dask cluster: the listed files are cut into shards of similar size, each
shard's 2-grams are counted on a worker into sorted (word, count) arrays, and those are merged
a few at a time on the workers until one remains, which the client writes.

Why the file is byte-identical to the one-machine build: a static cache is a function of the
map from each (t0, t1, follower) triple to its count, saturated at 2**32 - 1 (plus the vocabulary
size and fingerprint). Each file is tokenized whole by the same code with the same vocabulary,
and no 2-gram spans two files, in either build, so each file contributes the same triples;
adding counts is commutative and associative, and so is adding them with saturation. How files
fall into shards and in which order partial results merge therefore cannot change a byte.

The workers read the files and the model at the paths the client lists (a shared file system,
or the same image and volumes): only paths travel, so a lost shard is recomputed cheaply.
"""

# distributed's Client, LocalCluster and as_completed have untyped signatures.
# mypy: disallow-untyped-calls=False

from __future__ import annotations

import heapq
import logging
import math
import stat
import sys
import threading
import time
import uuid
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import numpy.typing as npt
from distributed import Client, Future, LocalCluster, as_completed

from lookahead_lsp._lookup import StaticCacheBuilder
from lookahead_lsp.cluster_progress import PROGRESS_TOPIC, ClusterProgress, ShardReporter
from lookahead_lsp.errors import UserError
from lookahead_lsp.tokenizer import Tokenizer, tokenize_files

# Partial results merged by one task: few enough that a merge holds little beyond its output,
# enough that the tree stays shallow.
MERGE_FAN_IN = 4
_CONNECT_SECONDS = 30.0


@dataclass(frozen=True)
class Shard:
    """Files counted by one task; roots are the repositories they come from (checked on the
    worker, so that a worker without them fails loudly instead of counting nothing)."""

    index: int
    roots: tuple[str, ...]
    paths: tuple[str, ...]
    n_bytes: int


@dataclass
class Counts:
    """The 2-grams of some files: packed (t0, t1, follower) words ascending and distinct, with
    their counts, and what it took to count them. Summed up the merge tree."""

    words: npt.NDArray[np.uint64]
    counts: npt.NDArray[np.uint32]
    files_indexed: int = 0
    bytes_read: int = 0
    tokens: int = 0


@dataclass
class ClusterStats:
    """What the cluster did, for build-cache's summary."""

    workers: int = 0
    shards: int = 0
    merges: int = 0
    count_seconds: float = 0.0  # from the first task submitted to the last shard counted
    merge_seconds: float = 0.0  # from the last shard counted to the merged result on the client


class WorkerSetupError(RuntimeError):
    """A worker cannot take part: it lacks a repository, or has another model at that path."""


@dataclass(frozen=True)
class SourceFile:
    """A listed file, its size when listed, and the index of its repository."""

    path: str
    size: int
    repository: int


def list_sizes(repositories: list[tuple[Path, list[Path]]]) -> list[SourceFile]:
    """The files of repositories ((root, files)) with their sizes."""
    return [
        SourceFile(str(path), _size(path), i)
        for i, (_root, paths) in enumerate(repositories)
        for path in paths
    ]


def make_shards(files: list[SourceFile], roots: list[Path], n_shards: int) -> list[Shard]:
    """files dealt into at most n_shards shards of similar total size: largest file first, each
    to the lightest shard so far. Deterministic."""
    n_shards = max(1, min(n_shards, len(files)))
    heap = [(0, i) for i in range(n_shards)]
    members: list[list[SourceFile]] = [[] for _ in range(n_shards)]
    for file in sorted(files, key=lambda f: (-f.size, f.path)):
        load, i = heapq.heappop(heap)
        members[i].append(file)
        heapq.heappush(heap, (load + file.size, i))
    loads = {i: load for load, i in heap}
    return [
        Shard(
            index=i,
            roots=tuple(sorted({str(roots[f.repository]) for f in shard})),
            paths=tuple(f.path for f in shard),
            n_bytes=loads[i],
        )
        for i, shard in enumerate(members)
    ]


def _size(path: Path) -> int:
    try:
        return path.stat().st_size
    except OSError:  # vanished: skipped when its shard is counted
        return 0


def shard_count(total_bytes: int, n_files: int, shard_bytes: int, n_threads: int) -> int:
    """Enough shards to keep each near shard_bytes, and at least four per worker thread (when
    there are files enough) so that a slow or lost worker is a small part of the run."""
    return max(1, min(n_files, max(math.ceil(total_bytes / shard_bytes), 4 * n_threads)))


def count_shard(shard: Shard, model_path: str, fingerprint: int, build: str | None) -> Counts:
    """Runs on a worker: the 2-grams of shard's files, each file one document. Memory is bounded
    by the shard: its tokens one file at a time and its distinct 2-grams. With a build id, the
    shard's progress is reported under it."""
    for root in shard.roots:
        if not Path(root).is_dir():
            raise WorkerSetupError(f"a worker cannot see the repository {root}: workers need the "
                                   "repositories at the same paths as the client")  # fmt: skip
    tokenizer = _tokenizer_of_this_thread(model_path, fingerprint)
    builder = StaticCacheBuilder(tokenizer.n_vocab)
    report = ShardReporter(build, shard.index) if build is not None else None
    result = Counts(np.empty(0, np.uint64), np.empty(0, np.uint32))
    paths = [Path(p) for p in shard.paths]
    for _path, tokens, n_bytes in tokenize_files(Path(model_path), paths, 1, tokenizer):
        if tokens is not None:  # else vanished since listed, as on one machine
            builder.add(tokens)
            result.files_indexed += 1
            result.bytes_read += n_bytes
        if report is not None:
            report.file_done(n_bytes, builder.n_tokens)
    if report is not None:
        report.send()
    result.words, result.counts = builder.take_entries()
    result.tokens = builder.n_tokens
    return result


def merge_counts(n_vocab: int, *parts: Counts) -> Counts:
    """Runs on a worker: the sum of parts, as sorted arrays again."""
    builder = StaticCacheBuilder(n_vocab)
    merged = Counts(np.empty(0, np.uint64), np.empty(0, np.uint32))
    for part in parts:
        builder.add_entries(part.words, part.counts)
        merged.files_indexed += part.files_indexed
        merged.bytes_read += part.bytes_read
        merged.tokens += part.tokens
    merged.words, merged.counts = builder.take_entries()
    return merged


# Each worker thread keeps the vocabulary it loaded (1-2 s) for its next shards, and loads it
# again when the file at that path changes; a Tokenizer is not thread-safe, so one per thread.
_thread_state = threading.local()


def _tokenizer_of_this_thread(model_path: str, fingerprint: int) -> Tokenizer:
    try:
        status = Path(model_path).stat()
    except OSError:
        status = None
    if status is None or not stat.S_ISREG(status.st_mode):
        raise WorkerSetupError(f"a worker has no model at {model_path}: workers need the "
                               "model at the same path as the client")  # fmt: skip
    identity = (model_path, status.st_size, status.st_mtime_ns)
    held: Tokenizer | None = getattr(_thread_state, "tokenizer", None)
    if held is None or getattr(_thread_state, "identity", None) != identity:
        if held is not None:
            held.close()
            _thread_state.tokenizer = None
        held = Tokenizer(model_path)
        _thread_state.tokenizer, _thread_state.identity = held, identity
    # Checked for every shard: the file at that path may differ from one worker to the next.
    if held.fingerprint != fingerprint:
        raise WorkerSetupError(f"a worker's {model_path} has another vocabulary than the client's")
    return held


def count_on_cluster(
    cluster: str | int,
    model_path: Path,
    tokenizer: Tokenizer,
    repositories: list[tuple[Path, list[Path]]],
    shard_bytes: int,
) -> tuple[Counts, ClusterStats]:
    """The summed 2-gram counts of the files of repositories ((root, files)), counted and
    merged on a Dask cluster: the scheduler at that address (tcp://HOST:PORT or another of
    Dask's schemes), or a number of local worker processes started for the run."""
    with _Connection(cluster) as client:
        return _count(client, model_path, tokenizer, repositories, shard_bytes)


class _Connection:
    """A client of the cluster's scheduler, and the local cluster it started if any."""

    def __init__(self, cluster: str | int) -> None:
        self.client: Client | None = None
        self.cluster: LocalCluster | None = None
        if isinstance(cluster, int):
            # One thread per worker process, as the one-machine build runs one tokenizer per
            # process: llama.cpp's tokenizer holds the GIL for part of its work.
            self.cluster = LocalCluster(
                n_workers=cluster, threads_per_worker=1, processes=True,
                dashboard_address=None, silence_logs=logging.ERROR,
            )  # fmt: skip
        try:
            self.client = Client(self.cluster or cluster, timeout=_CONNECT_SECONDS, set_as_default=False)
        except (OSError, TimeoutError) as error:
            self.close()
            raise UserError(f"cannot reach the Dask scheduler at {cluster}: {error}") from error

    def close(self) -> None:
        if self.client is not None:
            self.client.close()
        if self.cluster is not None:
            self.cluster.close()

    def __enter__(self) -> Client:
        assert self.client is not None
        return self.client

    def __exit__(self, *exc_info: object) -> None:
        self.close()


def _count(
    client: Client,
    model_path: Path,
    tokenizer: Tokenizer,
    repositories: list[tuple[Path, list[Path]]],
    shard_bytes: int,
) -> tuple[Counts, ClusterStats]:
    try:
        client.wait_for_workers(1, timeout=_CONNECT_SECONDS)
    except TimeoutError as error:
        raise UserError(f"no Dask worker joined the scheduler in {_CONNECT_SECONDS:.0f} s") from error
    workers = client.scheduler_info(n_workers=-1)["workers"]
    threads = sum(int(w.get("nthreads", 1)) for w in workers.values())
    files = list_sizes(repositories)
    total_bytes = sum(f.size for f in files)
    roots = [root for root, _paths in repositories]
    shards = make_shards(files, roots, shard_count(total_bytes, len(files), shard_bytes, threads))
    stats = ClusterStats(workers=len(workers), shards=len(shards))
    build = uuid.uuid4().hex
    progress = (
        ClusterProgress(build, len(workers), len(files), total_bytes, sys.stderr)
        if sys.stderr.isatty()
        else None
    )
    if progress is not None:
        client.subscribe_topic(PROGRESS_TOPIC, progress.on_event)
    try:
        merged = _count_and_merge(
            client, shards, model_path, tokenizer, build, progress is not None, stats
        )
    finally:
        if progress is not None:
            client.unsubscribe_topic(PROGRESS_TOPIC)
            progress.clear()
    return merged, stats


def _count_and_merge(
    client: Client,
    shards: list[Shard],
    model_path: Path,
    tokenizer: Tokenizer,
    build: str,
    reporting: bool,
    stats: ClusterStats,
) -> Counts:
    started = time.monotonic()
    report_as = build if reporting else None
    # Keys unique to this build: two builds on one cluster never share a result.
    counting = [
        client.submit(count_shard, shard, str(model_path), tokenizer.fingerprint, report_as,
                      key=f"lookahead-count-{build}-{shard.index}", pure=False)
        for shard in shards
    ]  # fmt: skip
    shards_left = len(counting)
    live = len(counting)  # partial results not yet merged into another
    ready: list[Future[Counts]] = []
    results = as_completed(counting, loop=client.loop)
    for future in results:
        _raise_task_error(future)
        if future.key.startswith(f"lookahead-count-{build}"):
            shards_left -= 1
            if shards_left == 0:
                stats.count_seconds = time.monotonic() - started
        ready.append(future)
        # Merged as results arrive: the tree forms while the last shards are still counted.
        while len(ready) >= MERGE_FAN_IN or (len(ready) > 1 and len(ready) == live):
            group, ready = ready[:MERGE_FAN_IN], ready[MERGE_FAN_IN:]
            stats.merges += 1
            results.add(
                client.submit(merge_counts, tokenizer.n_vocab, *group,
                              key=f"lookahead-merge-{build}-{stats.merges}", pure=False)
            )  # fmt: skip
            live -= len(group) - 1
    assert len(ready) == 1 and live == 1, "every partial result is merged into one"
    final: Counts = ready[0].result()
    stats.merge_seconds = time.monotonic() - started - stats.count_seconds
    return final


def _raise_task_error(future: Future[Counts]) -> None:
    if future.status == "finished":
        return
    if future.status == "cancelled":
        raise UserError("the Dask cluster cancelled the build (its scheduler restarted?)")
    error = future.exception()
    if isinstance(error, WorkerSetupError):
        raise UserError(str(error)) from error
    # KilledWorker: the scheduler gave up on a task after its workers died allowed-failures times.
    raise UserError(f"the Dask cluster failed the build: {type(error).__name__}: {error}") from error


