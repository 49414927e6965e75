"""build-cache --dask: the same bytes as the one-machine build, on a real LocalCluster, on a
scheduler and workers started as separate processes, and when a worker is killed mid-build."""

# distributed's Client has untyped signatures.
# mypy: disallow-untyped-calls=False

from __future__ import annotations

import json
import os
import pty
import random
import signal
import subprocess
import sys
import sysconfig
import threading
import time
from pathlib import Path
from typing import Iterator

import numpy as np
import pytest

from lookahead_lsp._lookup import StaticCacheBuilder

pytest.importorskip("distributed")

from distributed import Client  # noqa: E402

from lookahead_lsp.cluster.build import (  # noqa: E402
    Counts,
    WorkerSetupError,
    count_shard,
    split_counts,
)
from lookahead_lsp.cluster.shards import Shard, SourceFile, make_shards  # noqa: E402
from lookahead_lsp.base.tokenizer import Tokenizer  # noqa: E402

N_VOCAB = 50


def _build(*args: str, timeout: float = 180) -> subprocess.CompletedProcess[str]:
    # The command line as a user runs it: a process of its own, which starts its own cluster
    # or connects to one.
    return subprocess.run(
        [sys.executable, "-m", "lookahead_lsp", "build-cache", *args],
        capture_output=True, text=True, timeout=timeout, check=False,
    )  # fmt: skip


def _built(output: Path, *args: str) -> tuple[bytes, str]:
    completed = _build(*args, "-o", str(output))
    assert completed.returncode == 0, completed.stderr
    return output.read_bytes(), completed.stdout


@pytest.fixture(scope="module")
def corpus(tmp_path_factory: pytest.TempPathFactory) -> list[Path]:
    """Two plain folders of about 400 KB in about 70 files: real Python, plus what could make
    two builds differ if counting depended on grouping or order: the same file in both folders,
    a file repeated many times over (large counts, ties between followers), an empty file, a
    one-token file and bytes that are not UTF-8."""
    base = tmp_path_factory.mktemp("corpus")
    roots = [base / "first", base / "second"]
    modules = sorted(Path(sysconfig.get_paths()["stdlib"]).glob("*.py"), key=lambda p: p.name)
    picked = [m for m in random.Random(7).sample(modules, 60) if m.stat().st_size < 40_000][:30]
    assert len(picked) >= 20, "a standard library with few modules under 40 KB"
    for i, module in enumerate(picked):
        target = roots[i % 2] / f"m{i:02d}.py"
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_bytes(module.read_bytes())
    for root in roots:
        (root / "shared.py").write_text("def shared(x):\n    return x + 1\n" * 20)
        for i in range(15):
            (root / "small" / f"s{i:02d}.py").parent.mkdir(exist_ok=True)
            (root / "small" / f"s{i:02d}.py").write_text(f"value_{i} = {i} * {i % 3}\n" * (i + 1))
    (roots[0] / "repeat.py").write_text("a = b\na = c\n" * 3000)
    (roots[0] / "empty.py").write_text("")
    (roots[1] / "one.py").write_text("x")
    (roots[1] / "latin1.txt").write_bytes("caf\xe9 = 'na\xefve'\n".encode("latin-1") * 50)
    return roots


@pytest.fixture(scope="module")
def single(corpus: list[Path], tmp_path_factory: pytest.TempPathFactory) -> bytes:
    """The cache built on this machine alone."""
    data, _ = _built(tmp_path_factory.mktemp("single") / "one.lacache", *map(str, corpus))
    return data


@pytest.fixture(scope="module")
def scheduler(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """A Dask scheduler and two workers (one thread each, each under a nanny that restarts it
    when it dies), started as separate processes on loopback; yields the scheduler's address."""
    folder = tmp_path_factory.mktemp("dask")
    scheduler_file = folder / "scheduler.json"
    common = ["--no-dashboard"]
    processes = [
        subprocess.Popen(
            [sys.executable, "-m", "distributed.cli.dask_scheduler", "--host", "127.0.0.1",
             "--port", "0", "--scheduler-file", str(scheduler_file), *common],
            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
        )
    ]  # fmt: skip
    try:
        deadline = time.monotonic() + 60
        while not scheduler_file.exists() and time.monotonic() < deadline:
            time.sleep(0.1)
        address = json.loads(scheduler_file.read_text())["address"]
        for _ in range(2):
            processes.append(
                subprocess.Popen(
                    [sys.executable, "-m", "distributed.cli.dask_worker", address, "--host",
                     "127.0.0.1", "--nthreads", "1", "--nworkers", "1", *common],
                    stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                )
            )  # fmt: skip
        with Client(address, timeout=60) as client:
            client.wait_for_workers(2, timeout=120)
        yield str(address)
    finally:
        for process in reversed(processes):
            process.send_signal(signal.SIGINT)
        for process in reversed(processes):
            try:
                process.wait(timeout=30)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait()


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="uses a Linux pseudo-terminal")
def test_local_cluster_of_two_workers_writes_the_same_bytes_and_shows_progress(
    corpus: list[Path], single: bytes, tmp_path: Path
) -> None:
    output = tmp_path / "two.lacache"
    completed, shown = _build_on_terminal(*map(str, corpus), "-o", str(output), "--dask", "local:2")
    assert completed.returncode == 0, shown
    assert output.read_bytes() == single
    # Enough shards that partial results were merged, not handed through whole.
    assert "2 workers" in completed.stdout and " 0 merges" not in completed.stdout, completed.stdout
    assert " files  " in shown and " tokens/s" in shown, shown
    assert shown.endswith("\r")  # the line is cleared for what comes next


def _build_on_terminal(*args: str) -> tuple[subprocess.CompletedProcess[str], str]:
    """build-cache with its stderr on a pseudo-terminal, read as it comes (a full terminal
    buffer would stop the command)."""
    terminal, terminal_side = pty.openpty()
    chunks: list[bytes] = []
    reader = threading.Thread(target=_read_until_closed, args=(terminal, chunks))
    reader.start()
    try:
        completed = subprocess.run(
            [sys.executable, "-m", "lookahead_lsp", "build-cache", *args],
            stdout=subprocess.PIPE, stderr=terminal_side, text=True, timeout=180, check=False,
        )  # fmt: skip
    finally:
        os.close(terminal_side)
        reader.join()
    return completed, b"".join(chunks).decode()


def _read_until_closed(terminal: int, chunks: list[bytes]) -> None:
    try:
        while chunk := os.read(terminal, 4096):
            chunks.append(chunk)
    except OSError:  # EIO: the other side is closed
        pass
    finally:
        os.close(terminal)


def test_separate_scheduler_and_workers_write_the_same_bytes(
    corpus: list[Path], single: bytes, scheduler: str, tmp_path: Path
) -> None:
    # Small shards: many partial results and a deeper merge tree than the default would give.
    data, stdout = _built(
        tmp_path / "remote.lacache", *map(str, corpus), "--dask", scheduler, "--shard-mb", "0.02"
    )
    assert data == single
    assert "2 workers" in stdout, stdout


def test_a_worker_killed_during_the_build_still_gives_the_same_bytes(
    corpus: list[Path], single: bytes, scheduler: str, tmp_path: Path
) -> None:
    output = tmp_path / "killed.lacache"
    build = subprocess.Popen(
        [sys.executable, "-m", "lookahead_lsp", "build-cache", *map(str, corpus), "-o",
         str(output), "--dask", scheduler],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
    )  # fmt: skip
    try:
        with Client(scheduler, timeout=60) as client:
            victim = _worker_counting_a_shard(client, build)
            pid = client.run(os.getpid, workers=[victim])[victim]
            os.kill(pid, signal.SIGKILL)
            stdout, stderr = build.communicate(timeout=180)
            assert build.returncode == 0, stderr
            # The worker was lost while it counted, not after the build had finished.
            assert victim not in client.scheduler_info(n_workers=-1)["workers"]
    finally:
        if build.poll() is None:
            build.kill()
            build.wait()
    assert output.read_bytes() == single


def _worker_counting_a_shard(client: Client, build: subprocess.Popen[str]) -> str:
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline and build.poll() is None:
        for worker, keys in client.processing().items():
            if any(str(key).startswith("lookahead-count-") for key in keys):
                return str(worker)
        time.sleep(0.02)
    raise AssertionError("no worker was seen counting a shard")


def test_the_same_file_is_indexed_once_when_two_repositories_overlap(
    corpus: list[Path], single: bytes, tmp_path: Path
) -> None:
    # Named twice, and once through a folder inside it: still each file once.
    data, _ = _built(tmp_path / "overlap.lacache", *map(str, corpus), str(corpus[0]),
                     str(corpus[0] / "small"))  # fmt: skip
    assert data == single


def test_a_dask_address_of_no_known_form_is_refused_in_one_line(
    corpus: list[Path], tmp_path: Path
) -> None:
    for address in ("127.0.0.1:8786", "local:0", "local:two"):
        completed = _build(str(corpus[0]), "-o", str(tmp_path / "x.lacache"), "--dask", address)
        assert completed.returncode == 2
        assert completed.stderr.count("\n") == 1 and "--dask" in completed.stderr
    assert not (tmp_path / "x.lacache").exists()


def _documents(seed: int, n: int) -> list[np.ndarray]:
    rng = np.random.default_rng(seed)
    # A small vocabulary and skewed draws: many repeated 2-grams and ties between followers.
    return [
        np.minimum(rng.zipf(1.6, size=int(rng.integers(0, 300))), N_VOCAB) - 1 for _ in range(n)
    ]


def _written(builder: StaticCacheBuilder, path: Path) -> bytes:
    builder.write(str(path), 1234)
    return path.read_bytes()


@pytest.mark.parametrize("n_parts", [1, 2, 3, 7])
def test_any_grouping_of_documents_and_order_of_merging_writes_the_same_bytes(
    n_parts: int, tmp_path: Path
) -> None:
    documents = _documents(n_parts, 120)
    whole = StaticCacheBuilder(N_VOCAB)
    for tokens in documents:
        whole.add(tokens.astype(np.int32))
    parts = [StaticCacheBuilder(N_VOCAB) for _ in range(n_parts)]
    rng = random.Random(n_parts)
    for tokens in documents:
        rng.choice(parts).add(tokens.astype(np.int32))
    taken = [part.take_entries() for part in parts]
    rng.shuffle(taken)
    # Merged in two levels, as a tree would.
    upper = []
    for group in (taken[::2], taken[1::2]):
        merger = StaticCacheBuilder(N_VOCAB)
        for words, counts in group:
            merger.add_entries(words, counts)
        upper.append(merger.take_entries())
    final = StaticCacheBuilder(N_VOCAB)
    for words, counts in reversed(upper):
        final.add_entries(words, counts)
    assert _written(final, tmp_path / "merged") == _written(whole, tmp_path / "whole")


@pytest.mark.parametrize("n_partitions", [1, 2, 5, 64])
def test_partitions_of_counts_write_the_same_bytes(n_partitions: int, tmp_path: Path) -> None:
    whole = StaticCacheBuilder(N_VOCAB)
    for tokens in _documents(n_partitions, 60):
        whole.add(tokens.astype(np.int32))
    words, counts = whole.take_entries()
    for tokens in _documents(n_partitions, 60):  # the same documents again, for the file
        whole.add(tokens.astype(np.int32))
    parts = split_counts(Counts(words, counts, files_indexed=60, bytes_read=7, tokens=9), n_partitions)
    assert len(parts) == n_partitions
    assert sorted(int(w) for part in parts for w in part.words) == words.tolist()  # each word once
    assert all(np.all(np.diff(part.words.astype(np.int64)) > 0) for part in parts)
    if n_partitions > 1:
        assert sum(len(part.words) > 0 for part in parts) > 1  # dealt, not all in one part
    assert [(p.files_indexed, p.bytes_read, p.tokens) for p in parts[:1]] == [(60, 7, 9)]
    assert all(p.files_indexed == p.bytes_read == p.tokens == 0 for p in parts[1:])
    merged = StaticCacheBuilder(N_VOCAB)
    for part in reversed(parts):
        merged.add_entries(part.words, part.counts)
    assert _written(merged, tmp_path / "parts") == _written(whole, tmp_path / "whole")


def test_take_entries_hands_out_sorted_counted_2grams_and_empties_the_builder() -> None:
    builder = StaticCacheBuilder(N_VOCAB)
    builder.add(np.array([1, 2, 3, 1, 2, 3, 1, 2, 4], dtype=np.int32))
    words, counts = builder.take_entries()
    triples = [(int(w) >> 42, (int(w) >> 21) & 0x1FFFFF, int(w) & 0x1FFFFF) for w in words]
    assert triples == [(1, 2, 3), (1, 2, 4), (2, 3, 1), (3, 1, 2)]
    assert counts.tolist() == [2, 1, 2, 2]
    assert words.dtype == np.uint64 and counts.dtype == np.uint32
    assert builder.n_tokens == 9
    assert [len(a) for a in builder.take_entries()] == [0, 0]


def test_merged_counts_saturate_as_one_builder_would() -> None:
    builder = StaticCacheBuilder(N_VOCAB)
    word = np.array([(1 << 42) | (2 << 21) | 3], dtype=np.uint64)
    builder.add_entries(word, np.array([0xFFFFFFF0], dtype=np.uint32))
    builder.add_entries(word, np.array([0x20], dtype=np.uint32))
    assert builder.take_entries()[1].tolist() == [0xFFFFFFFF]


@pytest.mark.parametrize(
    ("words", "counts", "message"),
    [
        ([5, 3], [1, 1], "not strictly ascending at index 1"),
        ([5, 5], [1, 1], "not strictly ascending at index 1"),
        ([N_VOCAB], [1], "outside the vocabulary"),
        ([N_VOCAB << 42], [1], "outside the vocabulary"),
        ([1, 2], [1, 0], "count of zero"),
    ],
)
def test_add_entries_refuses_entries_no_builder_makes(
    words: list[int], counts: list[int], message: str
) -> None:
    builder = StaticCacheBuilder(N_VOCAB)
    with pytest.raises(ValueError, match=message):
        builder.add_entries(np.array(words, dtype=np.uint64), np.array(counts, dtype=np.uint32))
    assert [len(a) for a in builder.take_entries()] == [0, 0]


def test_add_entries_refuses_other_types_and_lengths() -> None:
    builder = StaticCacheBuilder(N_VOCAB)
    with pytest.raises(ValueError, match="uint64 array of words"):
        builder.add_entries(np.array([1], dtype=np.int64), np.array([1], dtype=np.uint32))
    with pytest.raises(ValueError, match="as many counts as words"):
        builder.add_entries(np.array([1, 2], dtype=np.uint64), np.array([1], dtype=np.uint32))


def test_shards_hold_every_file_once_with_similar_sizes() -> None:
    sizes = [random.Random(3).randint(0, 10_000) for _ in range(200)]
    files = [SourceFile(f"/r{i % 2}/f{i}", size, i % 2) for i, size in enumerate(sizes)]
    shards = make_shards(files, [Path("/r0"), Path("/r1")], 8)
    assert sorted(p for s in shards for p in s.paths) == sorted(f.path for f in files)
    loads = [s.n_bytes for s in shards]
    assert sum(loads) == sum(sizes) and max(loads) - min(loads) <= max(sizes)
    assert all(s.roots == ("/r0", "/r1") for s in shards)
    assert make_shards(files, [Path("/r0"), Path("/r1")], 8) == shards
    assert len(make_shards(files[:3], [Path("/r0"), Path("/r1")], 8)) == 3


def test_a_worker_without_the_repository_or_the_model_refuses_its_shard(
    model_path: Path, tokenizer: Tokenizer, tmp_path: Path
) -> None:
    # What a worker on a machine that does not share the client's files would meet.
    fingerprint = tokenizer.fingerprint
    absent_root = Shard(0, (str(tmp_path / "absent"),), (), 0)
    with pytest.raises(WorkerSetupError, match="cannot see the repository .*absent"):
        count_shard(absent_root, str(model_path), fingerprint, None)
    present = Shard(0, (str(tmp_path),), (), 0)
    with pytest.raises(WorkerSetupError, match="no model at .*absent.gguf"):
        count_shard(present, str(tmp_path / "absent.gguf"), fingerprint, None)
    with pytest.raises(WorkerSetupError, match="another vocabulary"):
        count_shard(present, str(model_path), fingerprint ^ 1, None)
