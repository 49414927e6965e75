"""Benchmark of the workspace index on folders of any size (the issue: "a workspace of any size:
memory budget, bulk on disk, ready at once"). What a user of a large folder should get: a daemon
whose memory stays near its budget however large the folder, completions before the folder is
indexed, a restart that drafts from the folder at once (its folder table mapped, not read), and
drafts about as good as if the whole folder were in memory. Each part measures one of these.

Folders: each --folder as it is; each --kernel-mb a slice of that many MB of the kernel's C and
header files (the first files in path order, bench/cluster_build_bench.py's make_slice) from
/usr/src/linux-source-*.tar.* (apt-get install linux-source), whose .c and .h files outside
arch/, Documentation/, tools/, scripts/, samples/ and usr/ are extracted once into the cache
folder (~/.cache/lookahead-lsp/bench-corpora); arch/ holds dozens of ports of the same code and
would make up the first slices alone. Without either option: a 30 MB kernel slice, and the
running interpreter's standard library (site-packages and __pycache__ left out) copied into the
work folder as a plain folder: a second language, with tests and text files besides the code
(the report gives each folder's source files and MB as the index lists them).

Part A, the daemon as an editor starts it (unless --skip-daemon), per folder with a fresh cache
folder (only the measured pass cost curve, cost-*.json, is copied in from the user's cache or an
earlier daemon of the run, when there is one, so that no start but possibly the first one
measures it; the report says which did):
  first start  `serve --standalone` with the folder as its one workspace folder and
               indexMemoryMib --budget-mib (else the daemon's default budget). The daemon's
               resident memory (VmRSS, of it anon: RssAnon; the table's pages are file pages)
               and the summed VmRSS of its child processes (the tokenizer workers) are sampled
               from /proc every 0.5 s from its start. Once the model is loaded, one document of
               the folder is opened (a mid-sized file in path order, the cursor in the middle of
               a line near its middle) and an inline completion asked for (invoked: no
               debounce): the time from the daemon's start to that answer is the wait for a
               first suggestion, while the folder is still indexing. Then lookahead/status every
               0.5 s until the folder's index is "ready": the time to fully indexed, the peak
               and final memory, the folder's index in the status (files, tokens, memory against
               the budget, the folder table's files and bytes).
  restart      a clean shutdown (the index is saved), then a new daemon on the same cache
               folder, its status polled every 0.1 s once the model is loaded; the same
               document opened and the same completion asked for as soon as the daemon is
               initialized (it waits for the model), as an editor reopened on the file does: the
               time from the start to its answer; the time until the folder's index is usable
               (table_bytes > 0 for a folder past its budget, the table mapped; "ready" for one
               that fits), the time until it is "ready" (every file's stamp checked), and the
               memory then.
  two windows  the daemon as editors start it, shared by their windows (`serve` relayed to it,
               its socket in a runtime folder of the run's own): a first window on the folder
               until its index is ready (from the saved index, as in the restart), then a second
               window on the same folder until its own status says ready; the shared daemon's
               memory with one window and with two, the second window's wait, and how many
               folders the daemon holds (`shared.folders`: 1 when the windows share the index).
Summed RSS counts pages the workers share more than once; VmHWM is the kernel's own peak, not
a sample.

Part B, draft acceptance in this process (unless --skip-acceptance; the vocabulary only, no
model): per folder --held-out files (every k-th of the source files in path order with at least
200 tokens) are left out of two indexes of the folder (ignore patterns): "unbounded" (everything
in memory, however much that takes) and "budgeted" (--budget-mib, 64 MiB
by default here, lower than the daemon's: the comparison needs a table, and the report says
whether the budgeted index was table-backed). At positions 64, 80, ... of each held-out
file (at most 400, spread over the file) the context is the file up to there, as when the user
types it, and the lookup core drafts 8 tokens from the context and each index; accepted is the
drafted prefix the file really continues with. Per index: acceptance (accepted / drafted),
accepted tokens per position, ns per draft call, build time and memory; "context only" (no
workspace) shows what the workspace adds at all. The difference budgeted - unbounded is what
keeping the bulk in a table (keys seen once are left out) costs.

Part C, retrieval's cost per folder (unless --skip-retrieval; no model): the symbol table of
the files the index lists filled, its memory, and 300 drawn cursors' requests for context
(bench/retrieval_bench.py's method and report: the read-ahead, the first request in a file, the
next line, later keys of a line, how often the chunks change on new lines).

Everything goes to --out (default <work>/index_bench.json) with the command line, the machine
and the date; a short table per folder is printed.

    .venv/bin/python bench/index_bench.py [--folder DIR ...] [--kernel-mb MB ...] [--budget-mib N]
        [--work DIR] [--held-out N] [--skip-daemon] [--skip-acceptance] [--skip-retrieval] [--timeout-s S]
        [--out report.json]
    .venv/bin/python bench/index_bench.py --kernel-mb 4 --budget-mib 16 --held-out 8   # a quick look
"""

from __future__ import annotations

# Before numpy: on a CUDA build, numpy loaded before llama.cpp's libraries made the model load
# crash (SIGSEGV in llama_model_load_from_file); lookahead_lsp loads them first.
import lookahead_lsp  # noqa: F401  # isort: skip
import argparse
import asyncio
import gc
import json
import os
import shlex
import shutil
import signal
import statistics
import subprocess
import sys
import tarfile
import tempfile
import threading
import time
from contextlib import suppress
from dataclasses import dataclass, field
from datetime import datetime, timezone
from pathlib import Path, PurePosixPath
from typing import Any, Sequence

import numpy as np
import numpy.typing as npt
import retrieval_bench
from cluster_build_bench import make_slice
import support_path  # noqa: F401  (tests/ on sys.path, before support)
from support.daemon import Daemon, end_of, items_of, plain

from lookahead_lsp._lookup import NgramCache, WorkspaceView, draft
from lookahead_lsp.base.cache_files import default_cache_dir
from lookahead_lsp.base.tokenizer import TokenArray, Tokenizer, tokenize_file_text
from lookahead_lsp.models.resolve import resolve_model_path
from lookahead_lsp.workspace.files import list_source_files
from lookahead_lsp.workspace.index import MIB, IndexSettings, WorkspaceIndex
from lookahead_lsp.workspace.index_stats import IGNORED

REPO = Path(__file__).resolve().parent.parent
_MB = 1e6

DEFAULT_KERNEL_MB = 30.0
# Part B's budget without --budget-mib: the comparison is moot unless the index is table-backed.
DEFAULT_ACCEPTANCE_BUDGET_MIB = 64
RETRIEVAL_REQUESTS = 300
UNBOUNDED = 1 << 40

_KERNEL_SUFFIXES = {".c", ".h"}
_KERNEL_LEFT_OUT = {"arch", "Documentation", "tools", "scripts", "samples", "usr", "LICENSES"}

# Part A
SAMPLE_S = 0.5
FIRST_POLL_S = 0.5
RESTART_POLL_S = 0.1
STOP_TIMEOUT_S = 600.0
# The document opened: a file an editor opens without thinking twice, not a generated table.
_DOCUMENT_BYTES = (4_000, 64_000)
_CURSOR_LINE_CHARS = 24
_LANGUAGES = {".py": "python", ".c": "c", ".h": "c", ".js": "javascript", ".ts": "typescript", ".rs": "rust", ".go": "go"}

# Part B, as the daemon drafts: 8 tokens, its scan on 2 tokenizer processes.
N_DRAFT = 8
FIRST_POSITION = 64
POSITION_STEP = 16
MAX_POSITIONS = 400
MIN_HELD_OUT_TOKENS = 200
JOBS = 2


# -- folders ----------------------------------------------------------------------------------


@dataclass(frozen=True)
class Folder:
    label: str
    path: Path
    origin: str  # "folder", "kernel slice", "standard library copy"


def kernel_corpus() -> tuple[Path, Path]:
    """(the kernel's C and header files outside _KERNEL_LEFT_OUT, extracted once into the cache
    folder; the tarball they came from)."""
    tarballs = sorted(Path("/usr/src").glob("linux-source-*.tar.*"))
    if not tarballs:
        raise SystemExit("no kernel source for --kernel-mb: apt-get install linux-source (or pass --folder)")
    tarball = tarballs[-1]
    target = default_cache_dir() / "bench-corpora" / f"{tarball.name.split('.tar')[0]}-c"
    done = target / ".complete"
    if done.exists():
        return target, tarball
    # Without the mark a run stopped half-way: what it left is incomplete.
    shutil.rmtree(target, ignore_errors=True)
    print(f"extracting the C files of {tarball} into {target} (once)", file=sys.stderr, flush=True)
    with tarfile.open(tarball, "r|*") as archive:
        for member in archive:
            name = PurePosixPath(member.name)
            parts = name.parts
            if (
                not member.isfile()
                or name.is_absolute()
                or ".." in parts
                or len(parts) < 3
                or parts[1] in _KERNEL_LEFT_OUT
                or name.suffix not in _KERNEL_SUFFIXES
            ):
                continue
            source = archive.extractfile(member)
            if source is None:
                continue
            destination = target.joinpath(*parts[1:])
            destination.parent.mkdir(parents=True, exist_ok=True)
            with source, destination.open("wb") as out:
                shutil.copyfileobj(source, out)
    done.touch()
    return target, tarball


def kernel_slice(megabytes: float, work: Path) -> Folder:
    corpus, _ = kernel_corpus()
    slices = work / "kernel"
    slices.mkdir(parents=True, exist_ok=True)
    # make_slice reuses a slice folder that exists: one a stopped run left half-copied must go.
    mark = slices / f"slice-{megabytes:g}mb.complete"
    if not mark.exists():
        shutil.rmtree(slices / f"slice-{megabytes:g}mb", ignore_errors=True)
    path = make_slice(corpus, _KERNEL_SUFFIXES, megabytes, slices)
    mark.touch()
    return Folder(f"kernel-{megabytes:g}mb", path.resolve(), "kernel slice")


def standard_library_copy(work: Path) -> Folder:
    """The interpreter's standard library as a plain folder of the work folder: the installed
    one may sit in a checkout or hold site-packages, which the index would treat otherwise."""
    source = Path(json.__file__).parent.parent
    target = work / f"stdlib-{sys.version_info.major}.{sys.version_info.minor}"
    mark = work / f"{target.name}.complete"
    if not mark.exists():
        shutil.rmtree(target, ignore_errors=True)
        shutil.copytree(source, target, symlinks=True, ignore=shutil.ignore_patterns("site-packages", "__pycache__"))
        mark.touch()
    return Folder(target.name, target.resolve(), "standard library copy")


def source_files(folder: Path) -> list[Path]:
    """The files the index would take, as its scan lists them."""
    return sorted(list_source_files(folder, untracked=True).files)


# -- Part A: the daemon -------------------------------------------------------------------------


@dataclass(frozen=True)
class Sample:
    t_s: float  # since the daemon's start
    rss_kb: int
    anon_kb: int
    hwm_kb: int
    children_rss_kb: int  # summed over every descendant
    children: int


class MemorySampler:
    """Samples a process and its descendants from /proc every SAMPLE_S in a thread of its own,
    so that the event loop waiting on the daemon does not delay the samples."""

    def __init__(self, pid: int, started: float) -> None:
        self.pid = pid
        self.started = started
        self.samples: list[Sample] = []
        self.largest_child_hwm_kb = 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="memory sampler", daemon=True)
        self._thread.start()

    def sample(self) -> Sample | None:
        """One sample now (None once the process is gone), kept with the others."""
        own = _proc_status(self.pid)
        if own is None:
            return None
        children = 0
        summed = 0
        for child in _descendants(self.pid):
            status = _proc_status(child)
            if status is not None:
                children += 1
                summed += status.get("VmRSS", 0)
                self.largest_child_hwm_kb = max(self.largest_child_hwm_kb, status.get("VmHWM", 0))
        sample = Sample(
            round(time.monotonic() - self.started, 3),
            own.get("VmRSS", 0),
            own.get("RssAnon", 0),
            own.get("VmHWM", 0),
            summed,
            children,
        )
        self.samples.append(sample)
        return sample

    def stop(self) -> None:
        self._stop.set()
        self._thread.join()

    def peaks(self) -> dict[str, float]:
        return {
            "peak_rss_mb": _mb(max((s.rss_kb for s in self.samples), default=0)),
            "peak_rss_anon_mb": _mb(max((s.anon_kb for s in self.samples), default=0)),
            "hwm_mb": _mb(max((s.hwm_kb for s in self.samples), default=0)),
            "peak_children_rss_mb": _mb(max((s.children_rss_kb for s in self.samples), default=0)),
            "most_children": max((s.children for s in self.samples), default=0),
            "largest_child_hwm_mb": _mb(self.largest_child_hwm_kb),
        }

    def series(self) -> list[list[float]]:
        """[t_s, rss_mb, anon_mb, children_rss_mb] per sample: compact, for plotting."""
        return [[s.t_s, _mb(s.rss_kb), _mb(s.anon_kb), _mb(s.children_rss_kb)] for s in self.samples]

    def _run(self) -> None:
        while not self._stop.is_set():
            self.sample()
            self._stop.wait(SAMPLE_S)


def _mb(kb: int) -> float:
    return round(kb / 1024, 1)


def _proc_status(pid: int) -> dict[str, int] | None:
    """The kB fields of /proc/<pid>/status that matter here."""
    try:
        text = Path(f"/proc/{pid}/status").read_text()
    except OSError:
        return None
    fields: dict[str, int] = {}
    for line in text.splitlines():
        name, _, value = line.partition(":")
        if name in ("VmRSS", "RssAnon", "VmHWM"):
            try:
                fields[name] = int(value.split()[0])
            except (IndexError, ValueError):
                pass
    return fields


def _descendants(pid: int) -> list[int]:
    """Every process below pid: the tokenizer pool may start its workers through a helper
    process, whose children are the daemon's grandchildren."""
    found: list[int] = []
    stack = [pid]
    while stack:
        for child in _children(stack.pop()):
            found.append(child)
            stack.append(child)
    return found


# A kernel without CONFIG_PROC_CHILDREN has no children files: the parent ids of every process
# tell then.
_CHILDREN_FILES = Path(f"/proc/self/task/{os.getpid()}/children").exists()


def _children(pid: int) -> list[int]:
    if not _CHILDREN_FILES:
        return _children_by_scan(pid)
    try:
        tasks = list(Path(f"/proc/{pid}/task").iterdir())
    except OSError:
        return []
    children: list[int] = []
    for task in tasks:
        try:
            children += [int(each) for each in (task / "children").read_text().split()]
        except (OSError, ValueError):  # a thread that ended meanwhile
            continue
    return children


def _children_by_scan(pid: int) -> list[int]:
    children = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                parent = int((entry / "stat").read_text().rsplit(")", 1)[1].split()[1])
            except (OSError, IndexError, ValueError):
                continue
            if parent == pid:
                children.append(int(entry.name))
    return children


@dataclass(frozen=True)
class Document:
    path: Path
    text: str
    offset: int  # the cursor, in characters

    @property
    def language(self) -> str:
        return _LANGUAGES.get(self.path.suffix, "plaintext")


def pick_document(folder: Path, files: list[Path]) -> Document:
    """A mid-sized file in the middle of the folder's files in path order, the cursor in the
    middle of the first long enough line from the file's middle line outward."""
    sized = [path for path in files if _DOCUMENT_BYTES[0] <= path.stat().st_size <= _DOCUMENT_BYTES[1]] or files
    middle = len(sized) // 2
    for path in sized[middle:] + sized[:middle]:
        try:
            text = path.read_bytes().decode("utf-8")
        except (OSError, UnicodeDecodeError):
            continue
        lines = text.splitlines(keepends=True)
        starts = [0]
        for line in lines:
            starts.append(starts[-1] + len(line))
        centre = len(lines) // 2
        for distance in range(len(lines)):
            for i in (centre + distance, centre - distance):
                if 0 <= i < len(lines) and len(lines[i].strip()) >= _CURSOR_LINE_CHARS:
                    indent = len(lines[i]) - len(lines[i].lstrip())
                    return Document(path, text, starts[i] + indent + len(lines[i].strip()) // 2)
    raise SystemExit(f"{folder} has no text file with a line of {_CURSOR_LINE_CHARS} characters to complete in")


@dataclass(frozen=True)
class Poll:
    t_s: float
    state: str | None  # None: the folder is not created yet (the model or tokenizer loading)
    files: int
    tokens: int
    table_bytes: int  # > 0 once a folder table is mapped (before its files' records load)
    memory_bytes: int

    def as_list(self) -> list[Any]:
        return [self.t_s, self.state, self.files, self.tokens, self.table_bytes, self.memory_bytes]


async def folder_index(daemon: Daemon) -> dict[str, Any] | None:
    """The folder's "index" entry of lookahead/status (None until the folder is created)."""
    status = plain(await daemon.status())
    folders = status.get("folders") or []
    if not folders:
        return None
    if "index" not in folders[0]:
        raise SystemExit("this daemon's lookahead/status has no per-folder index (service/status.py)")
    index: dict[str, Any] | None = folders[0]["index"]
    return index


async def poll_until_ready(
    daemon: Daemon, started: float, every_s: float, timeout_s: float
) -> tuple[list[Poll], dict[str, Any]]:
    polls: list[Poll] = []
    while True:
        index = await folder_index(daemon)
        t = round(time.monotonic() - started, 3)
        if index is None:
            polls.append(Poll(t, None, 0, 0, 0, 0))
        else:
            polls.append(
                Poll(t, index["state"], index["files"], index["tokens"], index["table_bytes"], index["memory_bytes"])
            )
            if index["state"] == "ready":
                return polls, index
        if t > timeout_s:
            raise SystemExit(f"the folder was not indexed within --timeout-s {timeout_s:g} s")
        await asyncio.sleep(every_s)


class Launch:
    """A daemon started on one folder, its stderr copied to a file, its memory sampled from its
    first moment on."""

    def __init__(self, folder: Path, cache: Path, settings: dict[str, Any], wait_model: bool = True) -> None:
        self.daemon = Daemon("index-bench")
        self.started = time.monotonic()
        self._start = asyncio.ensure_future(
            self.daemon.start([folder], cache, settings, wait_index=False, wait_model=wait_model)
        )
        self._stderr = asyncio.ensure_future(self.daemon.copy_stderr(cache.parent / f"{cache.name}-stderr.log"))
        self.sampler: MemorySampler | None = None

    async def model_loaded(self) -> float:
        """Seconds from the start until the model was loaded."""
        while self.daemon.process_id is None and not self._start.done():
            await asyncio.sleep(0.005)
        if self.daemon.process_id is not None:
            self.sampler = MemorySampler(self.daemon.process_id, self.started)
        await self._start
        return round(time.monotonic() - self.started, 3)

    async def stop(self) -> float:
        """Shuts the daemon down as an editor does (it saves its index first); the seconds that
        took. A daemon that does not stop within STOP_TIMEOUT_S is killed."""
        began = time.monotonic()
        pid = self.daemon.process_id
        if pid is None:  # start() failed before the process: nothing to stop or copy
            self._stderr.cancel()
            with suppress(asyncio.CancelledError):
                await self._stderr
            return 0.0
        try:
            await asyncio.wait_for(self.daemon.stop(), STOP_TIMEOUT_S)
        except Exception as error:  # cleanup, maybe after a failure: the daemon must not outlive the run
            print(f"the daemon did not stop cleanly ({error!r}): killed", file=sys.stderr)
            with suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
        seconds = round(time.monotonic() - began, 3)
        if self.sampler is not None:
            self.sampler.stop()
        await self._stderr
        return seconds


def _cost_models(folder: Path) -> dict[str, float]:
    return {path.name: path.stat().st_mtime for path in folder.glob("cost-*.json")}


def _copy_cost_models(source: Path, target: Path) -> None:
    target.mkdir(parents=True, exist_ok=True)
    for path in source.glob("cost-*.json"):
        shutil.copy2(path, target / path.name)


async def first_start(
    folder: Folder, document: Document, cache: Path, settings: dict[str, Any], seeds: Path, timeout_s: float
) -> dict[str, Any]:
    shutil.rmtree(cache, ignore_errors=True)
    (cache.parent / f"{cache.name}-stderr.log").unlink(missing_ok=True)
    _copy_cost_models(seeds, cache)
    seeded = _cost_models(cache)
    launch = Launch(folder.path, cache, settings)
    report: dict[str, Any] = {"cost_model_seeded": bool(seeded)}
    try:
        report["model_loaded_s"] = await launch.model_loaded()
        daemon = launch.daemon
        report.update(await _first_suggestion(launch, folder, document))
        index_while_answering = await folder_index(daemon)
        report["index_state_at_suggestion"] = index_while_answering["state"] if index_while_answering else None
        polls, index = await poll_until_ready(daemon, launch.started, FIRST_POLL_S, timeout_s)
        report["indexed_s"] = polls[-1].t_s
        report["table_first_seen_s"] = next((p.t_s for p in polls if p.table_bytes > 0), None)
        report.update(_at_the_end(launch, polls, index, "final_rss_mb", "final_rss_anon_mb"))
    finally:
        report.update(await _stopped(launch))
    report["cost_model_measured"] = _cost_models(cache) != seeded
    _copy_cost_models(cache, seeds)
    return report


async def _until_model_loaded(launch: Launch) -> float:
    while True:
        status = plain(await launch.daemon.status())
        if status["model_state"] != "loading":
            return round(time.monotonic() - launch.started, 3)
        await asyncio.sleep(RESTART_POLL_S)


async def _first_suggestion(launch: Launch, folder: Folder, document: Document) -> dict[str, Any]:
    """The editor's first request: the document opened and a completion asked for at its cursor
    (a daemon still loading its model makes it wait); the seconds from the daemon's start to the
    answer, the request's own time, and what it showed."""
    daemon = launch.daemon
    uri = document.path.as_uri()
    daemon.open(uri, document.language, document.text)
    at = end_of(document.text[: document.offset])
    answer, request_ms = await daemon.complete(uri, at, invoked=True)
    items = items_of(answer)
    shown = str(items[0].insert_text) if items else ""
    return {
        "first_suggestion_s": round(time.monotonic() - launch.started, 3),
        "first_request_ms": round(request_ms, 1),
        "suggestion_nonempty": bool(shown.strip()),
        "suggestion_chars": len(shown),
        "document": {"path": document.path.relative_to(folder.path).as_posix(), "line": at.line, "character": at.character},
    }


async def restart(
    folder: Folder, document: Document, cache: Path, settings: dict[str, Any], table_expected: bool, timeout_s: float
) -> dict[str, Any]:
    # Polled from the first moment: the folders open while the model loads.
    launch = Launch(folder.path, cache, settings, wait_model=False)
    report: dict[str, Any] = {"usable_by": "table_bytes > 0" if table_expected else "ready"}
    try:
        await launch.model_loaded()
        model = asyncio.ensure_future(_until_model_loaded(launch))
        first = asyncio.ensure_future(_first_suggestion(launch, folder, document))
        polls, index = await poll_until_ready(launch.daemon, launch.started, RESTART_POLL_S, timeout_s)
        report["model_loaded_s"] = await model
        report.update(await first)
        report["ready_s"] = polls[-1].t_s
        mapped = next((p.t_s for p in polls if p.table_bytes > 0), None)
        report["table_mapped_s"] = mapped
        report["usable_s"] = mapped if table_expected else polls[-1].t_s
        report.update(_at_the_end(launch, polls, index, "rss_at_ready_mb", "rss_anon_at_ready_mb"))
    finally:
        report.update(await _stopped(launch))
    return report


async def two_windows(folder: Folder, cache: Path, settings: dict[str, Any], runtime: Path, timeout_s: float) -> dict[str, Any]:
    runtime.mkdir(mode=0o700, parents=True, exist_ok=True)
    saved = os.environ.get("XDG_RUNTIME_DIR")
    os.environ["XDG_RUNTIME_DIR"] = str(runtime)  # the relays the windows start find it
    windows: list[Daemon] = []
    report: dict[str, Any] = {}
    daemon_pid: int | None = None
    try:
        for n in (1, 2):
            began = time.monotonic()
            window = Daemon(f"index-bench-window-{n}", shared=True)
            windows.append(window)
            await window.start([folder.path], cache, settings, wait_index=False)
            polls, _ = await poll_until_ready(window, began, RESTART_POLL_S, timeout_s)
            daemon_pid = daemon_pid or _shared_daemon(cache)
            own = _proc_status(daemon_pid) if daemon_pid is not None else None
            status = plain(await window.status())
            report[f"window_{n}"] = {
                "ready_s": polls[-1].t_s,
                "daemon_rss_mb": _mb(own.get("VmRSS", 0)) if own else None,
                "daemon_rss_anon_mb": _mb(own.get("RssAnon", 0)) if own else None,
                "shared": status["shared"],
            }
    finally:
        for window in windows:
            with suppress(Exception):
                await asyncio.wait_for(window.stop(), STOP_TIMEOUT_S)
        if daemon_pid is not None:
            # It would stay for the next window a while: stopped as at logout (its indexes saved).
            with suppress(ProcessLookupError):
                os.kill(daemon_pid, signal.SIGTERM)
            deadline = time.monotonic() + STOP_TIMEOUT_S
            while _proc_status(daemon_pid) is not None and time.monotonic() < deadline:
                await asyncio.sleep(0.1)
        if saved is None:
            del os.environ["XDG_RUNTIME_DIR"]
        else:
            os.environ["XDG_RUNTIME_DIR"] = saved
    return report


def _shared_daemon(cache: Path) -> int | None:
    """The shared daemon the relays started for cache: `serve --socket ... --cache-dir cache`."""
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            argv = (entry / "cmdline").read_bytes().split(b"\0")
        except OSError:
            continue
        if b"--socket" in argv and os.fsencode(cache) in argv:
            return int(entry.name)
    return None


def _at_the_end(launch: Launch, polls: list[Poll], index: Any, rss: str, anon: str) -> dict[str, Any]:
    """The daemon's memory now (under the names rss and anon), its last index status and the
    polls that led there."""
    assert launch.sampler is not None
    final = launch.sampler.sample()
    return {
        rss: _mb(final.rss_kb) if final else None,
        anon: _mb(final.anon_kb) if final else None,
        "index": index,
        "polls": [p.as_list() for p in polls],
    }


async def _stopped(launch: Launch) -> dict[str, Any]:
    """Stops the daemon: how long that took, and its memory's peaks and series."""
    out: dict[str, Any] = {"stop_s": await launch.stop()}
    if launch.sampler is not None:
        out.update(launch.sampler.peaks())
        out["memory"] = launch.sampler.series()
    return out


async def daemon_part(folder: Folder, files: list[Path], work: Path, budget_mib: int | None, timeout_s: float) -> dict[str, Any]:
    settings: dict[str, Any] = {"indexMemoryMib": budget_mib} if budget_mib is not None else {}
    cache = work / "daemon-caches" / folder.label
    document = pick_document(folder.path, files)
    first = await first_start(folder, document, cache, settings, work / "seed-cache", timeout_s)
    table_expected = bool(first.get("index") and first["index"]["table_files"] > 0)
    again = await restart(folder, document, cache, settings, table_expected, timeout_s)
    windows = await two_windows(folder, cache, settings, work / "run", timeout_s)
    return {"settings": settings, "first_start": first, "restart": again, "two_windows": windows}


def print_daemon(folder: Folder, part: dict[str, Any]) -> None:
    first, again = part["first_start"], part["restart"]
    index = first.get("index") or {}
    print(f"\n{folder.label}: daemon ({folder.path})")
    print(
        f"  first start  model {first['model_loaded_s']:6.1f} s  first suggestion {first['first_suggestion_s']:6.1f} s"
        f" ({'non-empty' if first['suggestion_nonempty'] else 'empty'}, index {first['index_state_at_suggestion']})"
        f"  indexed {first['indexed_s']:7.1f} s  stop {first['stop_s']:5.1f} s"
    )
    print(
        f"               {index.get('files', 0):,} files  {index.get('tokens', 0):,} tokens"
        f"  memory {index.get('memory_bytes', 0) / MIB:,.0f} of {index.get('budget_bytes', 0) / MIB:,.0f} MiB"
        f"  table {index.get('table_files', 0):,} files {index.get('table_bytes', 0) / MIB:,.0f} MiB"
    )
    print(
        f"               RSS peak {first['peak_rss_mb']:,.0f} MB (anon {first['peak_rss_anon_mb']:,.0f}),"
        f" final {first['final_rss_mb'] or 0:,.0f} MB (anon {first['final_rss_anon_mb'] or 0:,.0f}),"
        f" workers peak {first['peak_children_rss_mb']:,.0f} MB summed"
    )
    usable = again["usable_s"]
    print(
        f"  restart      model {again['model_loaded_s']:6.1f} s  first suggestion {again['first_suggestion_s']:6.1f} s"
        f" ({'non-empty' if again['suggestion_nonempty'] else 'empty'})  usable ({again['usable_by']})"
        f" {'never' if usable is None else f'{usable:6.1f} s'}  ready {again['ready_s']:6.1f} s"
        f"  RSS at ready {again['rss_at_ready_mb'] or 0:,.0f} MB (anon {again['rss_anon_at_ready_mb'] or 0:,.0f})",
        flush=True,
    )
    for n in (1, 2):
        window = part["two_windows"][f"window_{n}"]
        print(
            f"  {'two windows' if n == 1 else '':11}  window {n} ready {window['ready_s']:6.1f} s"
            f"  shared daemon RSS {window['daemon_rss_mb'] or 0:,.0f} MB (anon {window['daemon_rss_anon_mb'] or 0:,.0f})"
            f"  folders in the daemon {window['shared']['folders']}",
            flush=True,
        )


# -- Part B: draft acceptance -------------------------------------------------------------------


@dataclass
class Tally:
    positions: int = 0
    drafted: int = 0
    accepted: int = 0
    empty: int = 0  # positions where nothing was drafted
    ns: list[int] = field(default_factory=list)

    def add(self, drafted: npt.NDArray[np.int32], truth: TokenArray, ns: int) -> None:
        self.positions += 1
        self.drafted += len(drafted)
        self.empty += len(drafted) == 0
        accepted = 0
        for guess, real in zip(drafted.tolist(), truth.tolist()):
            if guess != real:
                break
            accepted += 1
        self.accepted += accepted
        self.ns.append(ns)

    def rate(self) -> float:
        return self.accepted / self.drafted if self.drafted else 0.0

    def per_position(self) -> float:
        return self.accepted / self.positions if self.positions else 0.0

    def summary(self) -> dict[str, Any]:
        ordered = sorted(self.ns)
        return {
            "positions": self.positions,
            "drafted": self.drafted,
            "accepted": self.accepted,
            "empty_drafts": self.empty,
            "acceptance": round(self.rate(), 4),
            "accepted_per_position": round(self.per_position(), 4),
            "ns_per_draft": round(statistics.fmean(ordered)) if ordered else None,
            "ns_per_draft_p50": ordered[len(ordered) // 2] if ordered else None,
            "ns_per_draft_p99": ordered[min(len(ordered) - 1, int(0.99 * len(ordered)))] if ordered else None,
        }


def pick_held_out(files: list[Path], tokenizer: Tokenizer, count: int) -> list[tuple[Path, TokenArray]]:
    """One file of each of `count` equal runs of files (path order): the first from the run's
    middle on, wrapping, with MIN_HELD_OUT_TOKENS tokens (shorter ones draft at few positions)."""
    stride = max(1, len(files) // max(count, 1))
    picked: list[tuple[Path, TokenArray]] = []
    for k in range(count):
        run = files[k * stride : (k + 1) * stride]
        if not run:
            break
        for path in run[len(run) // 2 :] + run[: len(run) // 2]:
            tokens = tokenize_file_text(tokenizer, path.read_bytes())
            if len(tokens) >= MIN_HELD_OUT_TOKENS:
                picked.append((path, tokens))
                break
    return picked


def _anchored_pattern(relative: str) -> str:
    """A gitignore pattern matching exactly this path from the root: anything git would read as
    a wildcard or escape is escaped, a trailing space kept."""
    escaped = "".join("\\" + c if c in "\\[]*?" else c for c in relative)
    if escaped.endswith(" "):
        escaped = escaped[:-1] + "\\ "
    return "/" + escaped


def positions_of(n_tokens: int) -> list[int]:
    every = list(range(FIRST_POSITION, n_tokens, POSITION_STEP))
    if len(every) <= MAX_POSITIONS:
        return every
    # Spread, not cut: the first MAX_POSITIONS would see the heads of long files only.
    return [every[j * len(every) // MAX_POSITIONS] for j in range(MAX_POSITIONS)]


def build_index(
    folder: Path, tokenizer: Tokenizer, ignore: Sequence[str], budget: int, store_dir: Path
) -> tuple[WorkspaceIndex, dict[str, Any]]:
    # A store left by an earlier run would load instead of being built.
    shutil.rmtree(store_dir, ignore_errors=True)
    store_dir.mkdir(parents=True)
    index = WorkspaceIndex(
        tokenizer.n_vocab, root=folder, tokenizer=tokenizer, settings=IndexSettings(ignore=ignore, memory_budget=budget)
    )
    fingerprint = tokenizer.fingerprint  # computed once, at the first call: not the build's time
    started = time.monotonic()
    index.load(store_dir / "index.bin", fingerprint)
    stats = index.index_folder(jobs=JOBS)
    seconds = time.monotonic() - started
    if stats.skipped.get(IGNORED, 0) != len(ignore):
        raise SystemExit(
            f"{folder}: the ignore patterns left out {stats.skipped.get(IGNORED, 0)} files, not the {len(ignore)} held out"
        )
    status = index.status()
    own = _proc_status(os.getpid()) or {}
    return index, {
        "budget_bytes": status.budget_bytes,
        "build_s": round(seconds, 2),
        "files": status.files,
        "tokens": status.tokens,
        "ngrams": status.ngrams,
        "memory_bytes": status.memory_bytes,
        "table_files": status.table_files,
        "table_bytes": status.table_bytes,
        "table_backed": status.table_files > 0,
        "drafting_from": type(index.drafting()).__name__,
        # Of this process, which holds the indexes built before too.
        "process_rss_after_build_mb": _mb(own.get("VmRSS", 0)),
    }


def acceptance_part(folder: Folder, files: list[Path], tokenizer: Tokenizer, work: Path, held_out: int, budget: int) -> dict[str, Any]:
    held = pick_held_out(files, tokenizer, held_out)
    if not held:
        raise SystemExit(f"{folder.path}: no source file of {MIN_HELD_OUT_TOKENS} tokens to hold out")
    relatives = [path.relative_to(folder.path).as_posix() for path, _ in held]
    ignore = [_anchored_pattern(relative) for relative in relatives]
    stores = work / "acceptance" / folder.label
    workspaces: dict[str, NgramCache | WorkspaceView | None] = {"context only": None}
    builds: dict[str, dict[str, Any]] = {}
    indexes: list[WorkspaceIndex] = []
    for name, memory in (("unbounded", UNBOUNDED), ("budgeted", budget)):
        index, built = build_index(folder.path, tokenizer, ignore, memory, stores / name)
        indexes.append(index)
        builds[name] = built
        workspaces[name] = index.drafting()
    tallies = {name: Tally() for name in workspaces}
    names = list(workspaces)
    turn = 0
    for _, tokens in held:
        context = NgramCache(tokenizer.n_vocab)
        done = 0
        for i in positions_of(len(tokens)):
            context.add(tokens[:i], first=done)
            done = i
            prefix, truth = tokens[:i], tokens[i : i + N_DRAFT]
            # The order rotates: the first draft at a position warms the caches for the others.
            turn += 1
            for name in names[turn % len(names) :] + names[: turn % len(names)]:
                began = time.perf_counter_ns()
                drafted = draft(prefix, N_DRAFT, context, workspaces[name])
                tallies[name].add(drafted, truth, time.perf_counter_ns() - began)
    result: dict[str, Any] = {
        "held_out_files": len(held),
        "held_out_tokens": sum(len(tokens) for _, tokens in held),
        "held_out": relatives,
        "indexes": {name: {**builds.get(name, {}), **tallies[name].summary()} for name in names},
        "difference_points": round(100 * (tallies["budgeted"].rate() - tallies["unbounded"].rate()), 2),
        "difference_accepted_per_position": round(
            tallies["budgeted"].per_position() - tallies["unbounded"].per_position(), 4
        ),
    }
    return result


def print_acceptance(folder: Folder, part: dict[str, Any]) -> None:
    print(f"\n{folder.label}: draft acceptance, {part['held_out_files']} held-out files ({part['held_out_tokens']:,} tokens)")
    print(f"  {'index':<13} {'table':>5} {'build s':>8} {'memory MiB':>10} {'table MiB':>9} {'positions':>9}"
          f" {'drafted':>8} {'accepted':>8} {'rate':>6} {'acc/pos':>7} {'ns/draft':>8}")
    for name, row in part["indexes"].items():
        built = "build_s" in row
        print(
            f"  {name:<13} {('yes' if row['table_backed'] else 'no') if built else '-':>5}"
            f" {row['build_s'] if built else '-':>8} {row['memory_bytes'] / MIB if built else 0:>10,.0f}"
            f" {row['table_bytes'] / MIB if built else 0:>9,.0f} {row['positions']:>9,} {row['drafted']:>8,}"
            f" {row['accepted']:>8,} {row['acceptance']:>6.1%} {row['accepted_per_position']:>7.3f} {row['ns_per_draft'] or 0:>8,}"
        )
    print(f"  budgeted - unbounded: {part['difference_points']:+.2f} points, {part['difference_accepted_per_position']:+.4f} accepted per position", flush=True)


# -- the report ---------------------------------------------------------------------------------


def machine() -> dict[str, Any]:
    cpu = ""
    try:
        for line in Path("/proc/cpuinfo").read_text(errors="replace").splitlines():
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    ram_kb = 0
    try:
        for line in Path("/proc/meminfo").read_text().splitlines():
            if line.startswith("MemTotal:"):
                ram_kb = int(line.split()[1])
    except (OSError, ValueError, IndexError):
        pass
    return {
        "cpu": cpu,
        "nproc": len(os.sched_getaffinity(0)),
        "cpu_count": os.cpu_count(),
        "ram_gib": round(ram_kb / (1 << 20), 1),
        "load_average_at_start": [round(x, 2) for x in os.getloadavg()],
        "python": sys.version.split()[0],
    }


def checkout() -> dict[str, Any]:
    def git(*args: str) -> str:
        try:
            return subprocess.run(["git", *args], cwd=REPO, capture_output=True, text=True, check=True).stdout.strip()
        except (OSError, subprocess.CalledProcessError):
            return ""

    return {"commit": git("rev-parse", "HEAD"), "modified": bool(git("status", "--porcelain", "--untracked-files=no"))}


def save(report: dict[str, Any], path: Path) -> None:
    """Written after every step, so that a run stopped later keeps what it measured."""
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(report, indent=1, default=str))


def print_retrieval(folder: Folder, part: dict[str, Any]) -> None:
    first, ahead = part["first_in_file_ms"], part["prepare_ms"]
    print(
        f"\n{folder.label}: retrieval over {part['files']} files ({part['mb']} MB): table filled in {part['fill_s']} s, "
        f"{part['table_rss_mb']} MB; read-ahead p95 {ahead['p95']} ms, first request in a file p50/p95 "
        f"{first['p50']}/{first['p95']} ms, next line p95 {part['next_line_ms']['p95']} ms, "
        f"chunks changed on {part['changed_on_new_lines_pct']} % of new lines"
    )


def _positive_mb(text: str) -> float:
    value = float(text)
    if value <= 0:
        raise argparse.ArgumentTypeError("a slice of a positive number of MB")
    return value


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--folder", type=Path, action="extend", nargs="+", default=[], help="a folder to index as it is")
    parser.add_argument("--kernel-mb", type=_positive_mb, action="extend", nargs="+", default=[], help="a kernel slice of this many MB")
    parser.add_argument(
        "--budget-mib", type=int, help=f"index memory budget: the daemon's indexMemoryMiB (default: the daemon's), and Part B's (default {DEFAULT_ACCEPTANCE_BUDGET_MIB})"
    )
    parser.add_argument("--work", type=Path, help="slices, caches, stores and the report (default: a new temporary folder, kept)")
    parser.add_argument("--held-out", type=int, default=40, help="files held out per folder in Part B")
    parser.add_argument("--skip-daemon", action="store_true", help="no Part A")
    parser.add_argument("--skip-acceptance", action="store_true", help="no Part B")
    parser.add_argument("--skip-retrieval", action="store_true", help="no Part C")
    parser.add_argument("--timeout-s", type=float, default=7200.0, help="longest wait for a folder to be indexed")
    parser.add_argument("--out", type=Path, help="the JSON report (default <work>/index_bench.json)")
    args = parser.parse_args()
    if args.budget_mib is not None and args.budget_mib < 16:
        parser.error("--budget-mib: at least 16 (the daemon's minimum for indexMemoryMiB)")
    if args.held_out < 1:
        parser.error("--held-out: at least 1")
    for folder in args.folder:
        if not folder.is_dir():
            parser.error(f"--folder {folder}: not a folder")
    work: Path = (args.work or Path(tempfile.mkdtemp(prefix="index-bench-"))).resolve()
    work.mkdir(parents=True, exist_ok=True)
    out: Path = args.out or work / "index_bench.json"
    print(f"work folder {work}, report {out}", file=sys.stderr, flush=True)

    folders = [Folder(path.resolve().name, path.resolve(), "folder") for path in args.folder]
    kernel_mb: list[float] = args.kernel_mb or ([] if args.folder else [DEFAULT_KERNEL_MB])
    folders += [kernel_slice(mb, work) for mb in kernel_mb]
    if not args.folder and not args.kernel_mb:
        folders.append(standard_library_copy(work))
    seen: dict[str, int] = {}
    for n, folder in enumerate(folders):
        # Labels name cache and store folders: two --folder of one name must not share them.
        seen[folder.label] = seen.get(folder.label, 0) + 1
        if seen[folder.label] > 1:
            folders[n] = Folder(f"{folder.label}-{seen[folder.label]}", folder.path, folder.origin)

    report: dict[str, Any] = {
        "command": shlex.join([sys.executable, *sys.argv]),
        "date": datetime.now(timezone.utc).isoformat(timespec="seconds"),
        "machine": machine(),
        "checkout": checkout(),
        "arguments": vars(args),
        "kernel_source": str(kernel_corpus()[1]) if kernel_mb else None,
        "folders": [],
    }
    listed: list[list[Path]] = []
    for folder in folders:
        files = source_files(folder.path)
        listed.append(files)
        report["folders"].append(
            {
                "label": folder.label,
                "path": str(folder.path),
                "origin": folder.origin,
                "source_files": len(files),
                "source_mb": round(sum(path.stat().st_size for path in files) / _MB, 1),
            }
        )
    save(report, out)

    if not args.skip_daemon:
        # A cost curve the user's daemon measured already spares the first start measuring it.
        seeds = work / "seed-cache"
        seeds.mkdir(parents=True, exist_ok=True)
        if not any(seeds.glob("cost-*.json")):
            _copy_cost_models(default_cache_dir(), seeds)
        for folder, files, entry in zip(folders, listed, report["folders"]):
            entry["daemon"] = asyncio.run(daemon_part(folder, files, work, args.budget_mib, args.timeout_s))
            save(report, out)
            print_daemon(folder, entry["daemon"])

    if not args.skip_acceptance:
        budget = (args.budget_mib or DEFAULT_ACCEPTANCE_BUDGET_MIB) * MIB
        with Tokenizer(resolve_model_path(None)) as tokenizer:
            for folder, files, entry in zip(folders, listed, report["folders"]):
                entry["acceptance"] = acceptance_part(folder, files, tokenizer, work, args.held_out, budget)
                # The indexes are gone with acceptance_part's frame, unless a cycle holds one.
                gc.collect()
                save(report, out)
                print_acceptance(folder, entry["acceptance"])

    if not args.skip_retrieval:
        for folder, files, entry in zip(folders, listed, report["folders"]):
            entry["retrieval"] = retrieval_bench.measure(folder.path, files, RETRIEVAL_REQUESTS, 1, cold=False)
            save(report, out)
            print_retrieval(folder, entry["retrieval"])

    report["load_average_at_end"] = [round(x, 2) for x in os.getloadavg()]
    save(report, out)
    print(f"\nreport: {out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
