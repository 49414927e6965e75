"""How build-cache --dask deals the listed files into shards: one counting task each, of
similar size, deterministic."""

from __future__ import annotations

import heapq
import math
from dataclasses import dataclass
from pathlib import Path


@dataclass(frozen=True)
class Shard:
    """Files counted by one task; roots are the repositories they come from (checked on the
    worker, so that a worker without them fails loudly instead of counting nothing)."""

    index: int
    roots: tuple[str, ...]
    paths: tuple[str, ...]
    n_bytes: int


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
