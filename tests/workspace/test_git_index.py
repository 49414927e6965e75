"""A checkout's tracked files come from its index, read as data: whatever the repository's config
says, listing its files runs no program, and an index git would have to repair or expand
first, or one that is damaged or crafted, leaves a walk of the folder."""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import stat
import subprocess
import sys
import threading
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from lookahead_lsp.workspace.files import list_source_files
from lookahead_lsp.workspace.git_index import find_checkout
from lookahead_lsp.workspace.git_index_file import NAME_MAX_BYTES, NAMES_PER_INDEX_BYTE, NAMES_SLACK_BYTES, IndexRefused, index_entries
from support.folders import git, relative_names, write_file

needs_git = pytest.mark.skipif(shutil.which("git") is None, reason="git is not installed")
pytestmark = [pytest.mark.usefixtures("hermetic_git"), needs_git]


def _checkout(tmp_path: Path) -> Path:
    repo = tmp_path / "repo"
    write_file(repo, "main.py")
    write_file(repo, "a/x.py")
    write_file(repo, "b/y.py")
    git(repo, "init", "-q")
    git(repo, "add", "-A")
    git(repo, "commit", "-q", "-m", "initial")
    return repo


def _listed_in_time(root: Path, untracked: bool = False) -> list[str]:
    """The listing, taken on a thread so that a listing that blocks fails the test instead of
    hanging it."""
    result: list[list[str]] = []
    worker = threading.Thread(
        target=lambda: result.append(relative_names(root, list_source_files(root, untracked=untracked).files)), daemon=True
    )
    worker.start()
    worker.join(30.0)
    assert result, "listing the folder did not end"
    return result[0]


def _fake_git_on_path(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A `git` first on PATH that leaves a mark when anything runs it."""
    marker = tmp_path / "git-ran"
    fake = write_file(tmp_path / "bin", "git", f"#!/bin/sh\ntouch '{marker}'\nexit 1\n")
    fake.chmod(0o755)
    monkeypatch.setenv("PATH", f"{fake.parent}{os.pathsep}{os.environ['PATH']}")
    return marker


def test_listing_a_checkout_runs_no_git_at_all(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    repo = _checkout(tmp_path)
    write_file(repo, "new.py")
    marker = _fake_git_on_path(tmp_path, monkeypatch)

    assert _listed_in_time(repo) == ["a/x.py", "b/y.py", "main.py"]
    assert _listed_in_time(repo, untracked=True) == ["a/x.py", "b/y.py", "main.py", "new.py"]
    assert not marker.exists()


def _partial_clone_with_a_missing_tree(repo: Path, pwned: Path) -> None:
    """The audit's attack: a sparse index whose folder entry names a tree that is not there, in
    a checkout that says it is a partial clone, so git fetches the tree through the remote's
    ssh command."""
    git(repo, "sparse-checkout", "init", "--cone", "--sparse-index")
    git(repo, "sparse-checkout", "set", "a")
    tree = subprocess.run(["git", "rev-parse", "HEAD:b"], cwd=repo, capture_output=True, text=True, check=True).stdout.strip()
    (repo / ".git" / "objects" / tree[:2] / tree[2:]).unlink()
    for key, value in [
        ("core.repositoryformatversion", "1"),
        ("extensions.partialClone", "origin"),
        ("remote.origin.url", "ssh://example.invalid/x"),
        ("remote.origin.promisor", "true"),
        ("core.sshCommand", f"touch '{pwned}'; false"),
    ]:
        git(repo, "config", key, value)


def _config(repo: Path, tmp_path: Path, pwned: Path, mechanism: str) -> None:
    """A .git/config (and what it names) that makes git run a command creating `pwned` through
    one of git's mechanisms for running programs."""
    script = write_file(tmp_path / "attack", "run", f"#!/bin/sh\ntouch '{pwned}'\nexit 1\n")
    script.chmod(0o755)
    settings: list[tuple[str, str]] = []
    if mechanism == "lazy fetch over ssh":
        _partial_clone_with_a_missing_tree(repo, pwned)
    elif mechanism == "lazy fetch through a remote helper":
        _partial_clone_with_a_missing_tree(repo, pwned)
        settings = [("remote.origin.url", f"ext::{script}"), ("protocol.ext.allow", "always")]
    elif mechanism == "fsmonitor command":
        settings = [("core.fsmonitor", f"touch '{pwned}'; false")]
    elif mechanism == "fsmonitor hook, included":
        write_file(repo / ".git", "extra.cfg", f"[core]\n\tfsmonitor = {script}\n")
        settings = [("include.path", "extra.cfg")]
    elif mechanism == "index hooks":
        (tmp_path / "attack" / "post-index-change").symlink_to(script)
        settings = [("core.hooksPath", str(tmp_path / "attack")), ("core.untrackedCache", "true")]
    elif mechanism == "pager":
        settings = [("core.pager", str(script)), ("pager.ls-files", "true")]
    elif mechanism == "clean filter":
        write_file(repo, ".gitattributes", "*.py filter=evil\n")
        settings = [("filter.evil.clean", str(script)), ("filter.evil.smudge", str(script))]
    elif mechanism == "excludes file that is a FIFO":
        fifo = tmp_path / "attack" / "excludes"
        os.mkfifo(fifo)  # git opens it and waits for a writer
        settings = [("core.excludesFile", str(fifo))]
    for key, value in settings:
        git(repo, "config", key, value)


MECHANISMS = [
    "lazy fetch over ssh",
    "lazy fetch through a remote helper",
    "fsmonitor command",
    "fsmonitor hook, included",
    "index hooks",
    "pager",
    "clean filter",
    "excludes file that is a FIFO",
]


@pytest.mark.parametrize("mechanism", MECHANISMS)
def test_the_repository_config_runs_nothing_and_blocks_nothing(tmp_path: Path, mechanism: str) -> None:
    repo, pwned = _checkout(tmp_path), tmp_path / "PWNED"
    _config(repo, tmp_path, pwned, mechanism)
    write_file(repo, "new.py")

    listed = _listed_in_time(repo)
    live = _listed_in_time(repo, untracked=True)

    assert not pwned.exists()
    assert "main.py" in listed and "a/x.py" in listed
    assert "new.py" in live


def test_a_sparse_index_is_walked_as_a_plain_folder(tmp_path: Path) -> None:
    repo, pwned = _checkout(tmp_path), tmp_path / "PWNED"
    _partial_clone_with_a_missing_tree(repo, pwned)
    assert not (repo / "b").exists()  # outside the sparse cone

    assert find_checkout(repo) is None
    assert _listed_in_time(repo) == ["a/x.py", "main.py"]


def test_a_split_index_is_walked_as_a_plain_folder(tmp_path: Path) -> None:
    repo = _checkout(tmp_path)
    git(repo, "update-index", "--split-index")
    write_file(repo, "a/x.py", "x = 2\n")
    git(repo, "add", "a/x.py")
    write_file(repo, "ignored.log")
    write_file(repo, ".gitignore", "*.log\n")

    assert find_checkout(repo) is None
    assert _listed_in_time(repo) == [".gitignore", "a/x.py", "b/y.py", "main.py"]


def test_a_checkout_of_another_user_is_walked(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    repo = _checkout(tmp_path)
    write_file(repo, "untracked.py")
    owner = os.lstat(repo / ".git").st_uid
    # As git's safe.directory: a checkout someone else owns (a shared drive, /tmp) is not read.
    monkeypatch.setattr(os, "geteuid", lambda: owner + 1)

    assert find_checkout(repo) is None
    assert _listed_in_time(repo) == ["a/x.py", "b/y.py", "main.py", "untracked.py"]


def test_a_worktree_gitdir_file_is_followed(tmp_path: Path) -> None:
    repo = _checkout(tmp_path)
    git(repo, "worktree", "add", "-q", str(tmp_path / "second"))
    write_file(tmp_path / "second", "only_here.py")

    assert _listed_in_time(tmp_path / "second") == ["a/x.py", "b/y.py", "main.py"]


def test_index_names_that_leave_the_folder_are_dropped(tmp_path: Path) -> None:
    repo = _checkout(tmp_path)
    write_file(tmp_path, "secret.py", "TOKEN = 1\n")
    index = repo / ".git" / "index"
    data = index.read_bytes()
    # Rename "main.py" in place to a name of the same length that climbs out of the checkout.
    crafted = data.replace(b"main.py", b"../s.py")
    index.write_bytes(crafted)

    checkout = find_checkout(repo)

    assert checkout is not None
    assert [path.as_posix() for path in checkout.files] == ["a/x.py", "b/y.py"]


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(cut=st.integers(min_value=0, max_value=400), flips=st.lists(st.tuples(st.integers(0, 400), st.integers(0, 255)), max_size=8))
def test_a_damaged_index_is_no_index(tmp_path: Path, cut: int, flips: list[tuple[int, int]]) -> None:
    repo = tmp_path / "fuzz"
    if not repo.exists():
        _checkout(tmp_path)
        (tmp_path / "repo").rename(repo)
        (tmp_path / "pristine").write_bytes((repo / ".git" / "index").read_bytes())
    data = bytearray((tmp_path / "pristine").read_bytes())
    for offset, value in flips:
        if offset < len(data):
            data[offset] = value
    (repo / ".git" / "index").write_bytes(bytes(data[: len(data) - cut] if cut else data))

    checkout = find_checkout(repo)  # never raises

    assert checkout is None or all(not path.is_absolute() and ".." not in path.parts for path in checkout.files)


def test_an_index_that_is_a_fifo_is_not_waited_on(tmp_path: Path) -> None:
    repo = _checkout(tmp_path)
    (repo / ".git" / "index").unlink()
    os.mkfifo(repo / ".git" / "index")
    assert stat.S_ISFIFO(os.lstat(repo / ".git" / "index").st_mode)

    assert _listed_in_time(repo) == ["a/x.py", "b/y.py", "main.py"]


def test_the_search_for_a_checkout_stops_at_the_users_ceiling(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    repo = _checkout(tmp_path)
    write_file(repo, "a/untracked.py")
    assert find_checkout(repo / "a") is not None
    monkeypatch.setenv("GIT_CEILING_DIRECTORIES", str(repo))

    assert find_checkout(repo / "a") is None
    assert _listed_in_time(repo / "a") == ["untracked.py", "x.py"]


def _git_listing(repo: Path) -> list[str]:
    out = subprocess.run(["git", "ls-files", "-z"], cwd=repo, capture_output=True, check=True).stdout
    return sorted(os.fsdecode(name) for name in out.split(b"\0") if name)


@pytest.mark.parametrize("version", [2, 3, 4])
def test_the_tracked_files_are_the_ones_git_lists(tmp_path: Path, version: int) -> None:
    repo = tmp_path / "repo"
    for i in range(40):
        write_file(repo, f"pkg/deep/er/module_{i}.py")
        write_file(repo, f"pkg/deep/module_{i:03}_with_a_long_shared_name.py")
    write_file(repo, "names with spaces/ünïcode.py")
    write_file(repo, "skipped.py")
    git(repo, "init", "-q")
    git(repo, "add", "-A")
    git(repo, "update-index", "--index-version", str(version))
    if version >= 3:  # an extended entry, which only versions 3 and 4 have
        git(repo, "update-index", "--skip-worktree", "skipped.py")

    checkout = find_checkout(repo)

    assert checkout is not None
    assert sorted(path.as_posix() for path in checkout.files) == _git_listing(repo)


def _v4_index(entries: list[tuple[int, bytes]]) -> bytes:
    """A version 4 index whose entries are (bytes dropped from the previous name, suffix)."""
    body = bytearray(b"DIRC" + (4).to_bytes(4, "big") + len(entries).to_bytes(4, "big"))
    name = b""
    for drop, suffix in entries:
        name = name[: len(name) - drop] + suffix
        body += bytes(24) + (0o100644).to_bytes(4, "big") + bytes(12 + 20)
        body += min(len(name), 0xFFF).to_bytes(2, "big")
        assert drop < 0x80  # one varint byte
        body += bytes([drop]) + suffix + b"\0"
    return bytes(body) + hashlib.sha1(body).digest()


def _v2_index(name: bytes) -> bytes:
    entry = bytes(24) + (0o100644).to_bytes(4, "big") + bytes(12 + 20) + min(len(name), 0xFFF).to_bytes(2, "big") + name
    entry += bytes(8 - len(entry) % 8)
    body = b"DIRC" + (2).to_bytes(4, "big") + (1).to_bytes(4, "big") + entry
    return body + hashlib.sha1(body).digest()


# The peak is the process's own (VmHWM): ru_maxrss would keep the parent's across exec.
_LIST_IN_A_CHILD = """
import json, logging, re, sys, time
from pathlib import Path
logging.basicConfig(level=logging.INFO, format="%(message)s")
from lookahead_lsp.workspace.files import list_source_files
start = time.monotonic()
files = list_source_files(Path(sys.argv[1])).files
seconds = time.monotonic() - start
peak_kib = int(re.search(r"VmHWM:\\s+(\\d+)", open("/proc/self/status").read()).group(1))
print(json.dumps({"files": [path.name for path in files], "seconds": seconds, "peak_mib": peak_kib / 1024}))
"""

CRAFTED = {
    # N entries of 65 bytes, each "the previous name and one more byte": N*N/2 bytes of names.
    "each name one byte longer": lambda: _v4_index([(0, b"a")] * 40_000),
    # Names just under PATH_MAX, each differing from the previous in its last byte.
    "long names, each one byte new": lambda: _v4_index([(0, b"a" * 4000)] + [(1, b"b")] * 40_000),
    "one name of 8 MiB": lambda: _v4_index([(0, b"n" * (8 << 20))]),
    "one name of 8 MiB, version 2": lambda: _v2_index(b"n" * (8 << 20)),
}


@pytest.mark.skipif(not os.path.exists("/proc/self/status"), reason="the peak is read from /proc")
@pytest.mark.parametrize("shape", CRAFTED)
def test_a_crafted_index_costs_no_more_than_its_size(tmp_path: Path, shape: str) -> None:
    """The audit's indexes, of a few MB, took listing to 1.6 GB and 12 s (and build-cache,
    which lists the same way, past 2 minutes): refused, the folder is walked."""
    repo = _checkout(tmp_path)
    (repo / ".git" / "index").write_bytes(CRAFTED[shape]())
    child = subprocess.run(
        [sys.executable, "-c", _LIST_IN_A_CHILD, str(repo)],
        capture_output=True, text=True, timeout=60, env={**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)},
    )  # fmt: skip
    assert child.returncode == 0, child.stderr
    listed = json.loads(child.stdout)

    assert sorted(listed["files"]) == ["main.py", "x.py", "y.py"]
    assert listed["peak_mib"] < 256
    assert listed["seconds"] < 2.0
    assert child.stderr.count("walking the folder instead") == 1


@settings(max_examples=300, deadline=None)
@given(version=st.sampled_from([2, 3, 4]), body=st.binary(max_size=600), count=st.integers(0, 50))
def test_any_bytes_are_entries_or_a_refusal(version: int, body: bytes, count: int) -> None:
    data = b"DIRC" + version.to_bytes(4, "big") + count.to_bytes(4, "big") + body + bytes(20)
    names = 0
    try:
        for entry in index_entries(data):
            assert 0 < len(entry.name) <= NAME_MAX_BYTES
            names += len(entry.name)
    except IndexRefused:
        pass
    assert names <= NAMES_PER_INDEX_BYTE * len(data) + NAMES_SLACK_BYTES
