"""Benchmark of build-cache on one machine against build-cache --dask, on slices of a corpus of
growing size, through the command line as a user runs it.

    .venv/bin/python bench/cluster_build_bench.py [--corpus DIR] [--sizes-mb 8,24] [--workers 2]
        [--variants 'one machine,dask']

The corpus is a folder of source (default: the Python standard library, .py files only; for a
large one, the C of linux-source). Each slice is the first files of the folder, in path order,
up to that many MB, copied into a work folder. For each slice and each N of --workers it runs
`build-cache --jobs N` (one machine, N tokenizer processes) and `build-cache --dask local:N` (a
LocalCluster of N worker processes), and reports wall time, tokens per second per worker, CPU time
of all its processes (tokens per CPU second: what a dedicated core would do), the merge time
after the last shard, and the peak resident memory of the client and of the largest
worker process (sampled from /proc while the build runs; Linux only). The check: every variant
writes the same bytes as `--jobs 1`.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import re
import shutil
import subprocess
import sys
import sysconfig
import tempfile
import threading
import time
from dataclasses import asdict, dataclass
from pathlib import Path

from lookahead_lsp.workspace.files import list_source_files

_MB = 1e6
_SAMPLE_SECONDS = 0.2


@dataclass
class Run:
    """One build of one slice: the figures of its summary and its memory."""

    slice_mb: float
    variant: str
    workers: int
    seconds: float
    tokens: int
    tokenize_seconds: float
    merge_seconds: float | None
    cpu_seconds: float  # of the command and every process it started
    client_peak_mb: float
    worker_peak_mb: float
    file_mb: float
    sha256: str

    @property
    def tokens_per_second_per_worker(self) -> float:
        return self.tokens / max(self.tokenize_seconds, 1e-9) / self.workers

    @property
    def tokens_per_cpu_second(self) -> float:
        """What one dedicated core would do: unlike wall time, not skewed by a busy machine."""
        return self.tokens / max(self.cpu_seconds, 1e-9)


def make_slice(corpus: Path, suffixes: set[str], megabytes: float, work: Path) -> Path:
    """The first source files of corpus (path order) up to megabytes, copied under work."""
    target = work / f"slice-{megabytes:g}mb"
    if target.exists():
        return target
    files = sorted(p for p in list_source_files(corpus, max_bytes=1 << 20).files if p.suffix in suffixes)
    taken = 0
    for path in files:
        if taken >= megabytes * _MB:
            break
        destination = target / path.relative_to(corpus)
        destination.parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(path, destination)
        taken += destination.stat().st_size
    if taken < megabytes * _MB:
        raise SystemExit(f"{corpus} has only {taken / _MB:.1f} MB of {sorted(suffixes)} files")
    return target


class PeakMemory:
    """Peak resident memory (VmHWM) of a process and of each of its descendants, sampled from
    /proc until stop(): a process's high-water mark is read before it exits."""

    def __init__(self, pid: int) -> None:
        self._pid = pid
        self.peaks: dict[int, int] = {}
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._sample, daemon=True)
        self._thread.start()

    def stop(self) -> tuple[float, float]:
        """(the process's peak MB, the largest descendant's peak MB)."""
        self._stop.set()
        self._thread.join()
        others = [kb for pid, kb in self.peaks.items() if pid != self._pid]
        return self.peaks.get(self._pid, 0) / 1e3, max(others, default=0) / 1e3

    def _sample(self) -> None:
        while not self._stop.is_set():
            for pid in [self._pid, *_descendants(self._pid)]:
                kb = _high_water_kb(pid)
                if kb is not None:
                    self.peaks[pid] = max(self.peaks.get(pid, 0), kb)
            self._stop.wait(_SAMPLE_SECONDS)


def _descendants(pid: int) -> list[int]:
    children: dict[int, list[int]] = {}
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                parent = int((entry / "stat").read_text().rsplit(")", 1)[1].split()[1])
            except (OSError, IndexError, ValueError):
                continue
            children.setdefault(parent, []).append(int(entry.name))
    found, stack = [], [pid]
    while stack:
        for child in children.get(stack.pop(), []):
            found.append(child)
            stack.append(child)
    return found


def _high_water_kb(pid: int) -> int | None:
    try:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith("VmHWM:"):
                return int(line.split()[1])
    except (OSError, ValueError):
        pass
    return None


def build(folder: Path, output: Path, variant: str, workers: int, slice_mb: float) -> Run:
    extra = ["--jobs", str(workers)] if variant == "one machine" else ["--dask", f"local:{workers}"]
    command = [sys.executable, "-m", "lookahead_lsp", "build-cache", str(folder), "-o", str(output), *extra]
    started = time.monotonic()
    with tempfile.TemporaryFile("w+") as out, tempfile.TemporaryFile("w+") as err:
        process = subprocess.Popen(command, stdout=out, stderr=err, text=True)
        memory = PeakMemory(process.pid)
        # wait4's usage covers the command and the descendants it waited for: all of them, as
        # both builds stop their workers before they exit.
        _, status, usage = os.wait4(process.pid, 0)
        process.returncode = os.waitstatus_to_exitcode(status)
        seconds = time.monotonic() - started
        client_mb, worker_mb = memory.stop()
        out.seek(0)
        err.seek(0)
        stdout, stderr = out.read(), err.read()
    if process.returncode != 0:
        raise SystemExit(f"{' '.join(command)} failed:\n{stderr}")
    # build-cache's summary: each name left-aligned in 14 columns, a space, the value.
    summary = {line[:14].strip(): line[15:] for line in stdout.splitlines()}
    merge = re.search(r"\(([\d.]+) s after the last shard\)", summary.get("cluster", ""))
    return Run(
        slice_mb=slice_mb,
        variant=variant,
        workers=workers,
        seconds=seconds,
        tokens=int(summary["tokens"]),
        tokenize_seconds=float(summary["tokenizing"].split()[0]),
        merge_seconds=float(merge.group(1)) if merge else None,
        cpu_seconds=usage.ru_utime + usage.ru_stime,
        client_peak_mb=client_mb,
        worker_peak_mb=worker_mb,
        file_mb=output.stat().st_size / _MB,
        sha256=hashlib.sha256(output.read_bytes()).hexdigest(),
    )


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--corpus", type=Path, default=Path(sysconfig.get_paths()["stdlib"]))
    parser.add_argument("--suffixes", default=".py", help="comma-separated file suffixes (e.g. .c,.h)")
    parser.add_argument("--sizes-mb", default="8,24", help="slice sizes, comma-separated")
    parser.add_argument("--workers", default="2", help="worker counts to compare, comma-separated")
    parser.add_argument(
        "--variants", default="one machine,dask", help="what to compare with --jobs 1: 'one machine' (--jobs N), 'dask'"
    )
    parser.add_argument("--work", type=Path, help="keep slices and caches here (default: a temporary folder)")
    parser.add_argument("--json", type=Path, help="also write every figure here")
    args = parser.parse_args()
    work = args.work or Path(tempfile.mkdtemp(prefix="cluster-build-bench-"))
    work.mkdir(parents=True, exist_ok=True)
    suffixes = set(args.suffixes.split(","))
    unknown = set(args.variants.split(",")) - {"one machine", "dask"}
    if unknown:
        raise SystemExit(f"unknown --variants {', '.join(sorted(unknown))} (known: 'one machine', 'dask')")
    runs: list[Run] = []
    for size in (float(s) for s in args.sizes_mb.split(",")):
        folder = make_slice(args.corpus, suffixes, size, work)
        reference = build(folder, work / "reference.lacache", "one machine", 1, size)
        runs.append(reference)
        _print(reference)
        for workers in (int(n) for n in args.workers.split(",")):
            for variant in args.variants.split(","):
                if variant == "one machine" and workers == 1:
                    continue
                run = build(folder, work / "variant.lacache", variant, workers, size)
                if run.sha256 != reference.sha256:
                    raise SystemExit(f"{variant} with {workers} workers wrote other bytes than --jobs 1")
                runs.append(run)
                _print(run)
    print(f"every variant wrote the same bytes as --jobs 1 (load average {os.getloadavg()[0]:.1f})")
    if args.json:
        args.json.write_text(json.dumps([asdict(r) for r in runs], indent=2))
    return 0


def _print(run: Run) -> None:
    merge = f"{run.merge_seconds:5.2f} s" if run.merge_seconds is not None else "    -  "
    print(
        f"{run.slice_mb:5g} MB  {run.variant:<11} x{run.workers}  {run.seconds:7.1f} s"
        f"  {run.tokens:>10,} tokens  {run.tokens_per_second_per_worker:>8,.0f} tokens/s/worker"
        f"  {run.cpu_seconds:6.1f} CPU s ({run.tokens_per_cpu_second:>7,.0f} tokens/CPU s)"
        f"  merge {merge}  client {run.client_peak_mb:6.0f} MB  worker {run.worker_peak_mb:6.0f} MB"
        f"  file {run.file_mb:6.1f} MB",
        flush=True,
    )


if __name__ == "__main__":
    raise SystemExit(main())
