"""The workspace watcher: files created, modified, renamed and deleted on disk reach the index
through a debounced queue, shared with events forwarded by the editor."""

from __future__ import annotations

import logging
import os
import shutil
import threading
import time
from pathlib import Path
from typing import Callable, Iterator

import pytest

from lookahead_lsp._lookup import NgramCache
from lookahead_lsp.tokenizer import Tokenizer, tokenize_file_text
from lookahead_lsp.workspace.index import IndexSettings, WorkspaceIndex
from lookahead_lsp.workspace.watcher import BatchReport, WorkspaceWatcher

# watchdog's inotify thread registers a folder twice when folders are created in quick
# succession (mkdir -p) and warns about it; harmless, but under the project's "warnings are
# errors" the warning would end that thread, and with it all watching in the process.
pytestmark = [
    pytest.mark.filterwarnings("ignore:Callback with id:RuntimeWarning"),
    pytest.mark.usefixtures("hermetic_git"),
]

TIMEOUT_S = 10.0
POLL_S = 0.02

SOURCES = {
    "main.py": "def main() -> None:\n    print('hello')\n",
    "pkg/util.py": "def add(a: int, b: int) -> int:\n    return a + b\n",
    ".gitignore": "*.log\n",
}


class Watched:
    """A folder, its index and a running watcher, with the batches it applied. The watcher's
    thread and the test share the tokenizer, under one lock."""

    def __init__(self, root: Path, tokenizer: Tokenizer) -> None:
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
        self.watcher = WorkspaceWatcher(self.index, on_batch=self.reports.append)

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
        """Waits until the index holds exactly self.texts."""
        expected = self.expected()
        wait_until(lambda: self.index.cache == expected and self.files() == len(self.texts))

    def files(self) -> int:
        return self.index.status().files

    def total(self, field: str) -> int:
        return sum(getattr(report, field) for report in list(self.reports))


def wait_until(condition: Callable[[], bool], timeout_s: float = TIMEOUT_S) -> None:
    deadline = time.monotonic() + timeout_s
    while not condition():
        if time.monotonic() > deadline:
            raise AssertionError(f"condition not met within {timeout_s} s")
        time.sleep(POLL_S)


@pytest.fixture
def unstarted(tmp_path: Path, tokenizer: Tokenizer) -> Iterator[Watched]:
    """Indexed, watcher not started yet."""
    watched = Watched(tmp_path / "workspace", tokenizer)
    for relative, text in SOURCES.items():
        watched.write(relative, text)
    watched.index.index_folder()
    yield watched
    watched.watcher.stop()


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


def test_lost_events_lead_to_a_rescan(unstarted: Watched) -> None:
    # Changed while nobody watched: only a rescan can find it.
    unstarted.texts["pkg/util.py"] = "missed = True\n"
    unstarted.write("pkg/util.py", unstarted.texts["pkg/util.py"])
    unstarted.watcher.start()
    # How watchdog reports a kernel queue overflow.
    logging.getLogger("watchdog.observers.inotify_c").warning(
        "Inotify queue overflowed; filesystem events were lost"
    )
    unstarted.wait_until_current()
    rescans = [r.rescan for r in unstarted.reports if r.rescan is not None]
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


def test_an_unwatchable_folder(tmp_path: Path, tokenizer: Tokenizer) -> None:
    index = WorkspaceIndex(tokenizer.n_vocab, root=tmp_path / "missing", tokenizer=tokenizer)
    watcher = WorkspaceWatcher(index)
    with pytest.raises(OSError):
        watcher.start()
    watcher.stop()
    with pytest.raises(ValueError):
        WorkspaceWatcher(WorkspaceIndex(tokenizer.n_vocab))


def test_many_files_at_once(watched: Watched) -> None:
    for n in range(200):
        watched.texts[f"gen/m{n}.py"] = f"value_{n} = {n}\n"
        watched.put(f"gen/m{n}.py", watched.texts[f"gen/m{n}.py"])
    watched.wait_until_current()
    assert watched.total("updated") == 200
    assert len(watched.reports) < 50  # debounced into batches
