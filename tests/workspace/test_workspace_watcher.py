"""The workspace watcher: files created, modified, renamed and deleted on disk reach the index
through a debounced queue, shared with events forwarded by the editor; only folders that can
hold indexed files are watched, and a watcher that cannot watch polls."""

from __future__ import annotations

import ctypes
import errno
import logging
import mmap
import os
import shutil
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any, Callable, Iterator

import pytest
from watchdog.observers.api import BaseObserver

from lookahead_lsp._lookup import NgramCache
from lookahead_lsp.base.tokenizer import Tokenizer, tokenize_file_text
from lookahead_lsp.workspace import inotify
from lookahead_lsp.workspace.index import IndexSettings, WorkspaceIndex
from lookahead_lsp.workspace.index_stats import IndexStats
from lookahead_lsp.workspace.watcher import BatchReport, WatcherSettings, WorkspaceWatcher

# watchdog's inotify thread registers a folder twice when folders are created in quick
# succession (mkdir -p) and warns about it; harmless, but under the project's "warnings are
# errors" the warning would end that thread, and with it all watching in the process.
pytestmark = [
    pytest.mark.filterwarnings("ignore:Callback with id:RuntimeWarning"),
    pytest.mark.usefixtures("hermetic_git"),
]

TIMEOUT_S = 10.0
POLL_S = 0.02
# The event sources: inotify watches on single folders (Linux), watchdog's whole-tree observer.
SOURCES_OF_EVENTS = ["inotify", "watchdog"] if inotify.available() else ["watchdog"]
needs_inotify = pytest.mark.skipif(not inotify.available(), reason="inotify is Linux's")

SOURCES = {
    "main.py": "def main() -> None:\n    print('hello')\n",
    "pkg/util.py": "def add(a: int, b: int) -> int:\n    return a + b\n",
    ".gitignore": "*.log\n",
}


class Watched:
    """A folder, its index and a running watcher, with the batches it applied. The watcher's
    thread and the test share the tokenizer, under one lock."""

    def __init__(
        self, root: Path, tokenizer: Tokenizer, settings: WatcherSettings | None = None
    ) -> None:
        self.root = root
        self.tokenizer = tokenizer
        self.lock = threading.Lock()
        self.index = WorkspaceIndex(
            tokenizer.n_vocab,
            root=root,
            tokenizer=tokenizer,
            tokenizer_lock=self.lock,
            settings=IndexSettings(ignore=["secret/"]),
        )
        self.texts = dict(SOURCES)
        self.reports: list[BatchReport] = []
        self.modes: list[str] = []  # the watcher's mode each time it said it changed
        self.watcher = WorkspaceWatcher(
            self.index, settings, on_batch=self.reports.append,
            on_mode=lambda: self.modes.append(self.watcher.status.mode),
        )  # fmt: skip

    def write(self, relative: str, text: str) -> Path:
        path = self.root / relative
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
        return path

    def put(self, relative: str, text: str) -> Path:
        """Writes a file in one step (renamed into place), so that no batch can read it half
        written: then every change costs exactly one update."""
        staged = self.root.parent / "staged"
        staged.write_text(text)
        path = self.root / relative
        path.parent.mkdir(parents=True, exist_ok=True)
        os.replace(staged, path)
        return path

    def expected(self) -> NgramCache:
        cache = NgramCache(self.tokenizer.n_vocab)
        with self.lock:
            for text in self.texts.values():
                cache.add(tokenize_file_text(self.tokenizer, text.encode()))
        return cache

    def wait_until_current(self) -> None:
        """Waits until the index holds exactly self.texts. The watcher reports a batch after
        applying it: a test that counts reports waits for them too."""
        expected = self.expected()
        wait_until(lambda: self.index.cache == expected and self.files() == len(self.texts))

    def files(self) -> int:
        return self.index.status().files

    def rescans(self) -> list[IndexStats]:
        return [report.rescan for report in list(self.reports) if report.rescan is not None]

    def total(self, field: str) -> int:
        return sum(getattr(report, field) for report in list(self.reports))


def wait_until(condition: Callable[[], bool], timeout_s: float = TIMEOUT_S) -> None:
    deadline = time.monotonic() + timeout_s
    while not condition():
        if time.monotonic() > deadline:
            raise AssertionError(f"condition not met within {timeout_s} s")
        time.sleep(POLL_S)


@pytest.fixture
def make(tmp_path: Path, tokenizer: Tokenizer) -> Iterator[Callable[..., Watched]]:
    """Makes an indexed folder with a watcher not started yet (WatcherSettings from the
    keywords); stops the watchers at the end."""
    made: list[Watched] = []

    def build(**settings: Any) -> Watched:
        watched = Watched(tmp_path / "workspace", tokenizer, WatcherSettings(**settings))
        for relative, text in SOURCES.items():
            watched.write(relative, text)
        watched.index.index_folder()
        made.append(watched)
        return watched

    yield build
    for watched in made:
        watched.watcher.stop()


@pytest.fixture(params=SOURCES_OF_EVENTS)
def unstarted(request: pytest.FixtureRequest, make: Callable[..., Watched]) -> Watched:
    """Indexed, watcher not started yet; once for each source of events."""
    return make(inotify=request.param == "inotify")


@pytest.fixture
def watched(unstarted: Watched) -> Watched:
    unstarted.watcher.start()
    return unstarted


def test_create_modify_rename_delete(watched: Watched) -> None:
    watched.texts["new.py"] = "created = 1\n"
    watched.write("new.py", watched.texts["new.py"])
    watched.wait_until_current()

    watched.texts["new.py"] = "modified = 2\nagain = 3\n"
    watched.write("new.py", watched.texts["new.py"])
    watched.wait_until_current()

    (watched.root / "new.py").rename(watched.root / "renamed.py")
    watched.texts["renamed.py"] = watched.texts.pop("new.py")
    watched.wait_until_current()

    (watched.root / "renamed.py").unlink()
    del watched.texts["renamed.py"]
    watched.wait_until_current()
    assert watched.watcher.watching


def test_folders_created_renamed_and_deleted(watched: Watched) -> None:
    staging = watched.root.parent / "staging"
    (staging / "deep").mkdir(parents=True)
    (staging / "a.py").write_text("alpha = 1\n")
    (staging / "deep" / "b.py").write_text("beta = 2\n")
    staging.rename(watched.root / "lib")  # a folder moved in: no event per file on disk
    watched.texts.update({"lib/a.py": "alpha = 1\n", "lib/deep/b.py": "beta = 2\n"})
    watched.wait_until_current()

    (watched.root / "lib").rename(watched.root / "vendored")
    watched.texts["vendored/a.py"] = watched.texts.pop("lib/a.py")
    watched.texts["vendored/deep/b.py"] = watched.texts.pop("lib/deep/b.py")
    watched.wait_until_current()

    (watched.root / "vendored").rename(watched.root.parent / "away")  # moved out of the folder
    del watched.texts["vendored/a.py"], watched.texts["vendored/deep/b.py"]
    watched.wait_until_current()

    shutil.rmtree(watched.root / "pkg")
    del watched.texts["pkg/util.py"]
    watched.wait_until_current()


def test_ignored_paths_do_nothing(watched: Watched) -> None:
    before = watched.index.status()
    for relative in (
        "node_modules/dep/index.js",
        ".git/objects/ab/cdef",
        "build/generated.py",
        "secret/keys.py",
        "trace.log",
    ):
        watched.write(relative, "ignored = True\n")
    # A file after them: once it is indexed, the earlier events have been dealt with.
    watched.texts["sentinel.py"] = "sentinel = 1\n"
    watched.put("sentinel.py", watched.texts["sentinel.py"])
    watched.wait_until_current()
    wait_until(lambda: watched.total("updated") >= 1)
    assert watched.total("updated") == 1
    assert watched.index.status().files == before.files + 1


def test_notify_duplicates_are_applied_once(unstarted: Watched) -> None:
    # Changed before the watcher started, so only the editor reports it, three times.
    unstarted.texts["main.py"] = "def main() -> int:\n    return 1\n"
    path = unstarted.write("main.py", unstarted.texts["main.py"])
    unstarted.watcher.start()
    for kind in ("changed", "changed", "created"):
        unstarted.watcher.notify(path, kind)
    unstarted.wait_until_current()
    wait_until(lambda: unstarted.total("updated") == 1)
    assert [(r.paths, r.updated) for r in unstarted.reports] == [(1, 1)]


def test_disk_and_editor_events_for_one_change(watched: Watched) -> None:
    watched.texts["both.py"] = "reported = 'twice'\n"
    path = watched.put("both.py", watched.texts["both.py"])
    watched.watcher.notify(path, "created")
    watched.wait_until_current()
    # The editor's report may arrive after the batch: it finds the file unchanged.
    watched.watcher.notify(path, "changed")
    wait_until(lambda: watched.total("unchanged") >= 1)
    assert watched.total("updated") == 1


def test_open_documents_shield_disk_events(watched: Watched) -> None:
    path = watched.root / "main.py"
    watched.texts["main.py"] = "editor = 'text'\n"
    watched.index.open_document(path, watched.texts["main.py"])
    watched.write("main.py", "disk = 'text'\n")
    wait_until(lambda: watched.total("ignored") >= 1)
    watched.wait_until_current()
    watched.index.close_document(path)
    watched.texts["main.py"] = "disk = 'text'\n"
    watched.wait_until_current()


def test_lost_events_lead_to_a_rescan(make: Callable[..., Watched]) -> None:
    unstarted = make(inotify=False)
    # Changed while nobody watched: only a rescan can find it.
    unstarted.texts["pkg/util.py"] = "missed = True\n"
    unstarted.write("pkg/util.py", unstarted.texts["pkg/util.py"])
    unstarted.watcher.start()
    # How watchdog reports a kernel queue overflow.
    logging.getLogger("watchdog.observers.inotify_c").warning(
        "Inotify queue overflowed; filesystem events were lost"
    )
    unstarted.wait_until_current()
    wait_until(lambda: unstarted.rescans() != [])
    rescans = unstarted.rescans()
    assert len(rescans) == 1 and rescans[0].tokenized == 1 and rescans[0].unchanged == 2


def test_stop_is_clean_and_idempotent(unstarted: Watched) -> None:
    before = set(threading.enumerate())
    unstarted.watcher.start()
    with pytest.raises(RuntimeError):
        unstarted.watcher.start()
    unstarted.watcher.stop()
    unstarted.watcher.stop()
    assert not unstarted.watcher.watching
    assert set(threading.enumerate()) <= before
    assert not logging.getLogger("watchdog").handlers


def test_stopping_before_starting(unstarted: Watched) -> None:
    unstarted.watcher.stop()
    assert not unstarted.watcher.watching


@pytest.mark.parametrize("source", SOURCES_OF_EVENTS)
def test_a_folder_that_cannot_be_watched_is_polled(
    tmp_path: Path, tokenizer: Tokenizer, source: str
) -> None:
    root = tmp_path / "missing"
    index = WorkspaceIndex(tokenizer.n_vocab, root=root, tokenizer=tokenizer)
    settings = WatcherSettings(inotify=source == "inotify", poll_s=0.2, health_check_s=0.05)
    watcher = WorkspaceWatcher(index, settings)
    watcher.start()
    try:
        status = watcher.status
        assert (status.mode, status.folders) == ("polling", 0)
        assert "No such file or directory" in status.reason
        root.mkdir()
        (root / "late.py").write_text("late = 1\n")
        wait_until(lambda: index.status().files == 1)
    finally:
        watcher.stop()
    assert watcher.status.mode == "stopped"
    with pytest.raises(ValueError):
        WorkspaceWatcher(WorkspaceIndex(tokenizer.n_vocab))


def _inotify_fds() -> set[int]:
    """This process's open inotify instances."""
    fds = set()
    for name in os.listdir("/proc/self/fd"):
        try:
            if os.readlink(f"/proc/self/fd/{name}") == "anon_inode:inotify":
                fds.add(int(name))
        except OSError:  # the listing's own descriptor, closed by now
            pass
    return fds


def _kernel_watches(fds: set[int]) -> list[int]:
    """How many watches the kernel holds for each of these inotify instances."""
    counts = []
    for fd in sorted(fds):
        with open(f"/proc/self/fdinfo/{fd}") as info:
            counts.append(sum(line.startswith("inotify wd:") for line in info))
    return counts


def _fail_inotify_watches(monkeypatch: pytest.MonkeyPatch) -> None:
    """Every new inotify watch fails from now on, as when the user's watch limit is reached:
    the C library's inotify_add_watch returns -1 with errno ENOSPC."""

    def add_watch(fd: int, path: bytes, mask: int) -> int:
        ctypes.set_errno(errno.ENOSPC)
        return -1

    monkeypatch.setattr(inotify._libc, "inotify_add_watch", add_watch)


def _fail_watches(monkeypatch: pytest.MonkeyPatch, source: str) -> None:
    """Watching fails as at the watch limit, for either source of events."""
    if source == "inotify":
        _fail_inotify_watches(monkeypatch)
        return

    def schedule(*args: object, **kwargs: object) -> None:
        raise OSError(errno.ENOSPC, "inotify watch limit reached")

    monkeypatch.setattr(BaseObserver, "schedule", schedule)


@needs_inotify
def test_only_folders_that_can_hold_indexed_files_are_watched(
    make: Callable[..., Watched],
) -> None:
    watched = make(inotify=True)
    root = watched.root
    # What a project carries besides its sources: dependencies, a checkout's internals, build
    # outputs, and a folder its .gitignore excludes.
    for n in range(300):
        (root / "node_modules" / f"dep{n}" / "lib").mkdir(parents=True)
    for n in range(100):
        (root / ".git" / "objects" / f"{n:02x}").mkdir(parents=True)
    (root / "build" / "lib").mkdir(parents=True)
    watched.texts["docs/.gitignore"] = "generated/\n"
    watched.write("docs/.gitignore", watched.texts["docs/.gitignore"])
    for n in range(50):
        (root / "docs" / "generated" / f"page{n}").mkdir(parents=True)
    watched.index.index_folder()
    before = _inotify_fds()

    watched.watcher.start()

    instances = _inotify_fds() - before
    # The root, pkg and docs.
    assert watched.watcher.status.folders == 3 and _kernel_watches(instances) == [3]
    # Folders come and go.
    staging = root.parent / "staging"
    (staging / "deep").mkdir(parents=True)
    (staging / "deep" / "b.py").write_text("beta = 2\n")
    staging.rename(root / "lib")
    (root / "node_modules" / "newdep").mkdir()
    watched.texts["lib/deep/b.py"] = "beta = 2\n"
    watched.wait_until_current()
    wait_until(lambda: _kernel_watches(instances) == [5])
    assert watched.watcher.status.folders == 5
    shutil.rmtree(root / "lib")
    del watched.texts["lib/deep/b.py"]
    watched.wait_until_current()
    wait_until(lambda: _kernel_watches(instances) == [3] and watched.watcher.status.folders == 3)


@pytest.mark.parametrize("source", SOURCES_OF_EVENTS)
def test_at_the_watch_limit_the_watcher_polls(
    make: Callable[..., Watched], monkeypatch: pytest.MonkeyPatch, source: str
) -> None:
    _fail_watches(monkeypatch, source)
    watched = make(inotify=source == "inotify", poll_s=0.3, health_check_s=0.05)

    watched.watcher.start()

    status = watched.watcher.status
    assert (status.mode, status.folders) == ("polling", 0)
    assert "inotify watch limit is reached" in status.reason
    assert watched.modes == ["polling"]  # the editor is told
    watched.texts["pkg/new.py"] = "polled = True\n"
    watched.put("pkg/new.py", watched.texts["pkg/new.py"])
    watched.wait_until_current()
    wait_until(lambda: watched.rescans() != [])


@pytest.mark.parametrize("source", SOURCES_OF_EVENTS)
def test_editor_events_apply_when_watching_failed(
    make: Callable[..., Watched], monkeypatch: pytest.MonkeyPatch, source: str
) -> None:
    _fail_watches(monkeypatch, source)
    watched = make(inotify=source == "inotify", poll_s=3600.0)
    watched.watcher.start()
    assert watched.watcher.status.mode == "polling"

    watched.texts["reported.py"] = "reported = True\n"
    path = watched.put("reported.py", watched.texts["reported.py"])
    watched.watcher.notify(path, "created")

    watched.wait_until_current()
    wait_until(lambda: watched.reports != [])
    assert [(report.paths, report.updated, report.rescan) for report in watched.reports] == [
        (1, 1, None)
    ]


@needs_inotify
def test_reaching_the_watch_limit_later(
    make: Callable[..., Watched], monkeypatch: pytest.MonkeyPatch
) -> None:
    watched = make(inotify=True, poll_s=3600.0, health_check_s=0.05)
    before = _inotify_fds()
    watched.watcher.start()
    assert watched.watcher.status.mode == "watching"
    _fail_inotify_watches(monkeypatch)

    staging = watched.root.parent / "staging"
    staging.mkdir()
    (staging / "a.py").write_text("alpha = 1\n")
    staging.rename(watched.root / "lib")  # a new folder: its watch fails

    # Events may have been lost: a rescan at once finds the file.
    watched.texts["lib/a.py"] = "alpha = 1\n"
    watched.wait_until_current()
    status = watched.watcher.status
    assert (status.mode, status.folders) == ("polling", 0)
    assert "inotify watch limit is reached" in status.reason
    assert watched.modes == ["polling"]  # the editor is told
    # The inotify instance is given back, with its watches.
    wait_until(lambda: _inotify_fds() <= before)


_FLOOD = """
import mmap, os, sys, time
root, count, flag = sys.argv[1], int(sys.argv[2]), sys.argv[3]
with open(flag, "r+b") as file:
    signal = mmap.mmap(file.fileno(), 1)
    give_up = time.monotonic() + 120.0
    while signal[0] != 1 and time.monotonic() < give_up:
        time.sleep(0.001)
    for n in range(count):
        os.close(os.open(os.path.join(root, f"f{n}.min.js"), os.O_CREAT | os.O_WRONLY, 0o644))
    with open(os.path.join(root, "missed.py"), "w") as last:
        last.write("missed = True\\n")
    signal[0] = 2
"""


@needs_inotify
def test_a_kernel_queue_overflow_leads_to_a_rescan(
    make: Callable[..., Watched], tmp_path: Path
) -> None:
    with open("/proc/sys/fs/inotify/max_queued_events") as limit:
        queue_limit = int(limit.read())
    if queue_limit > 100_000:
        pytest.skip("the kernel's event queue is too long to fill in a test")
    watched = make(inotify=True)
    watched.watcher.start()
    flag = tmp_path / "flag"
    flag.write_bytes(b"\0")

    # A child floods the folder with events while this process holds the interpreter lock
    # (a long switch interval and a loop that never releases it), so that the watcher's
    # thread cannot read them: the kernel's queue overflows, and the last file's events are
    # lost. Each file makes two events; the files' names are generated ones, not indexed.
    # The child starts only once this loop has held the lock for a while: a thread that was
    # already waiting for it under the old, short interval may take it once, and the flood
    # must not begin before this loop has it back.
    with open(flag, "r+b") as file, mmap.mmap(file.fileno(), 1) as signal:
        child = subprocess.Popen(
            [sys.executable, "-c", _FLOOD, str(watched.root), str(queue_limit), str(flag)]
        )
        interval = sys.getswitchinterval()
        sys.setswitchinterval(600.0)
        try:
            go = time.monotonic() + 0.2
            while time.monotonic() < go:
                pass
            signal[0] = 1
            deadline = time.monotonic() + 120.0
            while signal[0] != 2 and time.monotonic() < deadline:
                pass
        finally:
            sys.setswitchinterval(interval)
    assert child.wait() == 0

    watched.texts["missed.py"] = "missed = True\n"
    watched.wait_until_current()
    wait_until(lambda: watched.rescans() != [])


def test_many_files_at_once(watched: Watched) -> None:
    for n in range(200):
        watched.texts[f"gen/m{n}.py"] = f"value_{n} = {n}\n"
        watched.put(f"gen/m{n}.py", watched.texts[f"gen/m{n}.py"])
    watched.wait_until_current()
    wait_until(lambda: watched.total("updated") >= 200)
    assert watched.total("updated") == 200
    assert len(watched.reports) < 50  # debounced into batches
