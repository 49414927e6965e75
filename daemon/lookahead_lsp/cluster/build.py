"""build-cache on a Dask cluster: the listed files are cut into shards of similar size, each
shard's 2-grams are counted on a worker into sorted (word, count) arrays dealt into partitions
by a hash of the word, and each partition is merged a few parts at a time on the workers until
one remains, which the client adds to the file it writes. A partition holds a share of the
final table, so no worker ever holds all of it.

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

import logging
import operator
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
from lookahead_lsp.cluster.progress import PROGRESS_TOPIC, ClusterProgress, ShardReporter
from lookahead_lsp.cluster.shards import Shard, list_sizes, make_shards, shard_count
from lookahead_lsp.base.errors import UserError
from lookahead_lsp.base.tokenizer import Tokenizer, tokenize_files

# Partial results merged by one task: few enough that a merge holds little beyond its output,
# enough that the tree stays shallow.
MERGE_FAN_IN = 4
# The merged table is dealt into as many partitions as there are shards, so that the top of a
# partition's merge tree holds about what one shard's counting held; at most this many, which
# keeps the tasks (shards x partitions pieces) in the thousands.
MAX_PARTITIONS = 64
_CONNECT_SECONDS = 30.0


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
    partitions: int = 1
    merges: int = 0
    count_seconds: float = 0.0  # from the first task submitted to the last shard counted
    merge_seconds: float = 0.0  # from the last shard counted to the last partition on the client


class WorkerSetupError(RuntimeError):
    """A worker cannot take part: it lacks a repository, or has another model at that path."""


def count_shard(
    shard: Shard, model_path: str, fingerprint: int, build: str | None, n_partitions: int = 1
) -> list[Counts]:
    """Runs on a worker: the 2-grams of shard's files, each file one document, dealt into
    n_partitions parts (split_counts). Memory is bounded by the shard: its tokens one file at a
    time and its distinct 2-grams. With a build id, the shard's progress is reported under it."""
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
    return split_counts(result, n_partitions)


def split_counts(counts: Counts, n_partitions: int) -> list[Counts]:
    """counts dealt into n_partitions parts by a hash of each word, each part still ascending;
    the first part carries the totals (files, bytes, tokens). Any deal gives the same file: a
    word's count is summed within its part, and the parts hold no word in common."""
    if n_partitions == 1:
        return [counts]
    mixed = (counts.words * np.uint64(0x9E3779B97F4A7C15)) >> np.uint64(32)
    part = (mixed % np.uint64(n_partitions)).astype(np.uint16)
    order = np.argsort(part, kind="stable")  # keeps each part's words ascending
    ends = np.cumsum(np.bincount(part, minlength=n_partitions))
    parts = []
    for p in range(n_partitions):
        taken = order[ends[p - 1] if p else 0 : ends[p]]
        parts.append(Counts(counts.words[taken], counts.counts[taken]))
    parts[0].files_indexed, parts[0].bytes_read, parts[0].tokens = counts.files_indexed, counts.bytes_read, counts.tokens
    return parts


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
    into: StaticCacheBuilder,
) -> tuple[Counts, ClusterStats]:
    """Adds into `into` the summed 2-gram counts of the files of repositories ((root, files)),
    counted and merged on a Dask cluster: the scheduler at that address (tcp://HOST:PORT or
    another of Dask's schemes), or a number of local worker processes started for the run.
    Returns the totals (files, bytes, tokens; no arrays) and what the cluster did."""
    with _Connection(cluster) as client:
        return _count(client, model_path, tokenizer, repositories, shard_bytes, into)


def partition_count(n_shards: int) -> int:
    return max(1, min(n_shards, MAX_PARTITIONS))


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
    into: StaticCacheBuilder,
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
    stats = ClusterStats(workers=len(workers), shards=len(shards), partitions=partition_count(len(shards)))
    build = uuid.uuid4().hex
    progress = (
        ClusterProgress(build, len(workers), len(files), total_bytes, sys.stderr)
        if sys.stderr.isatty()
        else None
    )
    if progress is not None:
        client.subscribe_topic(PROGRESS_TOPIC, progress.on_event)
    try:
        totals = _count_and_merge(
            client, shards, model_path, tokenizer, build, progress is not None, stats, into
        )
    finally:
        if progress is not None:
            client.unsubscribe_topic(PROGRESS_TOPIC)
            progress.clear()
    return totals, stats


def _count_and_merge(
    client: Client,
    shards: list[Shard],
    model_path: Path,
    tokenizer: Tokenizer,
    build: str,
    reporting: bool,
    stats: ClusterStats,
    into: StaticCacheBuilder,
) -> Counts:
    started = time.monotonic()
    report_as = build if reporting else None
    n_partitions = stats.partitions
    # Keys unique to this build: two builds on one cluster never share a result. A key names
    # what its result is: a shard's parts, one part of a shard, or a merge within a partition.
    results = as_completed(
        [
            client.submit(count_shard, shard, str(model_path), tokenizer.fingerprint, report_as, n_partitions,
                          key=f"lookahead-count-{build}-{shard.index}", pure=False)
            for shard in shards
        ],
        loop=client.loop,
    )  # fmt: skip
    partition_of: dict[object, int] = {}
    shards_left = len(shards)
    live = [len(shards)] * n_partitions  # a partition's parts not yet merged into another
    ready: list[list[Future[Counts]]] = [[] for _ in range(n_partitions)]
    totals = Counts(np.empty(0, np.uint64), np.empty(0, np.uint32))
    for future in results:
        _raise_task_error(future)
        if future.key.startswith(f"lookahead-count-{build}"):
            shards_left -= 1
            if shards_left == 0:
                stats.count_seconds = time.monotonic() - started
            for p in range(n_partitions):
                # The shard's result stays on its worker until every part is taken from it.
                part = client.submit(operator.getitem, future, p, key=f"lookahead-part-{p}-{future.key}", pure=False)
                partition_of[part.key] = p
                results.add(part)
            continue
        p = partition_of.pop(future.key)
        if live[p] == 1:  # the partition's sum: added on the client, then let go
            _add_partition(into, future.result(), totals)
            continue
        ready[p].append(future)
        # Merged as results arrive: the trees form while the last shards are still counted.
        while len(ready[p]) >= MERGE_FAN_IN or (len(ready[p]) > 1 and len(ready[p]) == live[p]):
            group, ready[p] = ready[p][:MERGE_FAN_IN], ready[p][MERGE_FAN_IN:]
            stats.merges += 1
            merged = client.submit(merge_counts, tokenizer.n_vocab, *group,
                                   key=f"lookahead-merge-{build}-{p}-{stats.merges}", pure=False)  # fmt: skip
            partition_of[merged.key] = p
            results.add(merged)
            live[p] -= len(group) - 1
    assert all(n == 1 for n in live) and not partition_of, "every partition is merged into one"
    stats.merge_seconds = time.monotonic() - started - stats.count_seconds
    return totals


def _add_partition(into: StaticCacheBuilder, part: Counts, totals: Counts) -> None:
    into.add_entries(part.words, part.counts)
    totals.files_indexed += part.files_indexed
    totals.bytes_read += part.bytes_read
    totals.tokens += part.tokens


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


