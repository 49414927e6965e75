"""The build-cache and inspect-cache commands, run as the installed command line."""

from __future__ import annotations

import os
import pty
import shutil
import signal
import subprocess
import sys
import sysconfig
import time
from collections import Counter
from pathlib import Path

import pytest

from lookahead_lsp._lookup import StaticCache
from lookahead_lsp.base.tokenizer import Tokenizer

CLI = Path(sys.executable).with_name("lookahead-lsp")
SECRET = "ignored_marker_zebra_quasar = 'only in the ignored file'\n"
TRACKED = {
    ".gitignore": "secret.py\n*.log\n",
    "README.md": "# Demo\n\nA tiny project for the cache tests.\n",
    "src/app.py": "from util import double\n\n\ndef main():\n    print(double(21))\n",
    "src/util.py": "def double(x):\n    return x * 2\n\n\ndef triple(x):\n    return x * 3\n",
}


def _run(*args: str, timeout: float = 60) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [str(CLI), *args], capture_output=True, text=True, timeout=timeout, check=False
    )


def _git(repo: Path, *args: str) -> None:
    env = {key: value for key, value in os.environ.items() if not key.startswith("GIT_")}
    subprocess.run(
        ["git", "-c", "user.name=test", "-c", "user.email=test@example.com",
         "-c", "commit.gpgsign=false", *args],
        cwd=repo, check=True, capture_output=True, env=env,
    )  # fmt: skip


@pytest.fixture(scope="module")
def repo(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A git repository with four tracked files, an ignored one and a binary one."""
    if shutil.which("git") is None:
        pytest.skip("git is not installed")
    root = tmp_path_factory.mktemp("repo")
    for name, text in TRACKED.items():
        (root / name).parent.mkdir(parents=True, exist_ok=True)
        (root / name).write_text(text)
    (root / "logo.png").write_bytes(b"\x89PNG\r\n\x1a\n\0\0\0\rIHDR")
    _git(root, "init", "-q")
    _git(root, "add", "-A")
    _git(root, "commit", "-q", "-m", "initial")
    (root / "secret.py").write_text(SECRET)
    return root


@pytest.fixture(scope="module")
def big_folder(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A plain folder of about 9 MB of Python, enough for build-cache to start its workers."""
    root = tmp_path_factory.mktemp("big")
    for copy in ("a", "b"):
        (root / copy).mkdir()
        for module in Path(sysconfig.get_paths()["stdlib"]).glob("*.py"):
            shutil.copyfile(module, root / copy / module.name)
    return root


@pytest.fixture(scope="module")
def built(repo: Path, tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, str]:
    """The cache of repo built by the command line, and its standard output."""
    output = tmp_path_factory.mktemp("built") / "repo.lacache"
    completed = _run("build-cache", str(repo), "-o", str(output))
    assert completed.returncode == 0, completed.stderr
    # No progress bar without a terminal, and llama.cpp's log does not leak.
    assert completed.stderr == ""
    return output, completed.stdout


def _entries(cache: StaticCache) -> Counter[tuple[int, int, int]]:
    keys, offsets, followers = cache.to_arrays()
    entries: Counter[tuple[int, int, int]] = Counter()
    for index, key in enumerate(keys):
        assert list(key[2:]) == [-1, -1]
        for token, count in followers[offsets[index] : offsets[index + 1]]:
            entries[(int(key[0]), int(key[1]), int(token))] = int(count)
    return entries


def _trigrams(tokens: list[int]) -> Counter[tuple[int, int, int]]:
    return Counter(zip(tokens, tokens[1:], tokens[2:]))


def test_cache_holds_the_2grams_of_the_tracked_files(
    built: tuple[Path, str], repo: Path, tokenizer: Tokenizer
) -> None:
    output, _ = built
    expected: Counter[tuple[int, int, int]] = Counter()
    for name in TRACKED:  # each file on its own: no 2-gram spans two files
        expected += _trigrams(tokenizer.tokenize((repo / name).read_bytes()).tolist())

    cache = StaticCache.open(
        str(output), n_vocab=tokenizer.n_vocab, fingerprint=tokenizer.fingerprint
    )
    cache.verify()
    entries = _entries(cache)

    assert entries == expected
    secret = _trigrams(tokenizer.tokenize(SECRET).tolist())
    assert not any(entries[trigram] for trigram in secret if trigram not in expected)
    assert cache.header["total_count"] == sum(expected.values())


def test_build_summary(built: tuple[Path, str]) -> None:
    output, stdout = built
    fields = {line[:14].strip(): line[15:] for line in stdout.splitlines()}

    assert fields["wrote"] == str(output)
    assert fields["files indexed"] == str(len(TRACKED))
    assert fields["files skipped"] == "1 binary"
    assert int(fields["keys"]) > 0 and int(fields["followers"]) >= int(fields["keys"])
    assert f"({output.stat().st_size} bytes)" in fields["file size"]


def test_a_hostile_repository_gives_away_nothing(tmp_path: Path, tokenizer: Tokenizer) -> None:
    if shutil.which("git") is None:
        pytest.skip("git is not installed")
    repo, pwned = tmp_path / "repo", tmp_path / "PWNED"
    secret = "TOKEN=ultraviolet_pangolin_7731\n"
    (tmp_path / "outside").mkdir()
    (tmp_path / "outside" / "secret.env").write_text(secret)
    repo.mkdir()
    (repo / "main.py").write_text(TRACKED["src/util.py"])
    (repo / "link.py").symlink_to("../outside/secret.env")
    _git(repo, "init", "-q")
    _git(repo, "add", "-A")
    _git(repo, "commit", "-q", "-m", "initial")
    with (repo / ".git" / "config").open("a") as config:
        config.write(f"[core]\n\tfsmonitor = \"touch '{pwned}'; false\"\n")
    output = tmp_path / "repo.lacache"

    completed = _run("build-cache", str(repo), "-o", str(output))

    assert completed.returncode == 0, completed.stderr
    assert not pwned.exists()
    fields = {line[:14].strip(): line[15:] for line in completed.stdout.splitlines()}
    assert (fields["files indexed"], fields["files skipped"]) == ("1", "1 outside")
    cache = StaticCache.open(
        str(output), n_vocab=tokenizer.n_vocab, fingerprint=tokenizer.fingerprint
    )
    cache.verify()
    expected = _trigrams(tokenizer.tokenize(TRACKED["src/util.py"]).tolist())
    assert _entries(cache) == expected
    assert not any(trigram in expected for trigram in _trigrams(tokenizer.tokenize(secret).tolist()))


def test_inspect_and_verify(built: tuple[Path, str]) -> None:
    output, _ = built
    header = StaticCache.open(str(output)).header

    completed = _run("inspect-cache", str(output), "--verify")

    assert completed.returncode == 0, completed.stderr
    lines = {line[:24].strip(): line[25:] for line in completed.stdout.splitlines()}
    assert lines["file"] == str(output)
    for name in ("n_keys", "n_followers", "total_count", "file_size", "n_vocab"):
        assert lines[name] == str(header[name])
    assert lines["fingerprint"] == f"0x{header['fingerprint']:016x}"
    assert float(lines["mean followers per key"]) >= 1
    assert "verified in" in completed.stdout


def test_corrupted_cache_fails_verification_in_one_line(
    built: tuple[Path, str], tmp_path: Path
) -> None:
    output, _ = built
    corrupted = tmp_path / "corrupted.lacache"
    data = bytearray(output.read_bytes())
    data[len(data) // 2] ^= 0x40
    corrupted.write_bytes(bytes(data))

    completed = _run("inspect-cache", str(corrupted), "--verify")

    assert completed.returncode == 2
    assert completed.stderr.count("\n") == 1
    assert completed.stderr.startswith("lookahead-lsp: ")
    assert str(corrupted) in completed.stderr


def test_upstream_export_imports_back(
    built: tuple[Path, str], tmp_path: Path, tokenizer: Tokenizer
) -> None:
    output, _ = built
    upstream = tmp_path / "upstream.bin"
    empty_folder = tmp_path / "empty"
    empty_folder.mkdir()
    rebuilt = tmp_path / "rebuilt.lacache"

    exported = _run("inspect-cache", str(output), "--export-upstream", str(upstream))
    imported = _run(
        "build-cache", str(empty_folder), "-o", str(rebuilt), "--from-upstream", str(upstream)
    )

    assert exported.returncode == 0, exported.stderr
    assert imported.returncode == 0, imported.stderr
    original, copy = StaticCache.open(str(output)), StaticCache.open(str(rebuilt))
    original.verify()
    copy.verify()
    assert _entries(copy) == _entries(original)


@pytest.mark.parametrize(
    ("arguments", "named"),
    [
        (["--model", "/nonexistent/model.gguf"], "/nonexistent/model.gguf"),
        (["-o", "/nonexistent/folder/out.lacache"], "/nonexistent/folder"),
        (["--from-upstream", "/nonexistent/upstream.bin"], "/nonexistent/upstream.bin"),
    ],
)
def test_user_errors_are_one_line(
    repo: Path, tmp_path: Path, arguments: list[str], named: str
) -> None:
    completed = _run("build-cache", str(repo), "-o", str(tmp_path / "out.lacache"), *arguments)

    assert completed.returncode == 2
    assert completed.stderr.count("\n") == 1
    assert completed.stderr.startswith("lookahead-lsp: ")
    assert named in completed.stderr
    assert list(tmp_path.iterdir()) == []


def test_the_projects_own_cache_folder_is_created(repo: Path, tmp_path: Path) -> None:
    project = tmp_path / "project"
    shutil.copytree(repo, project, ignore=shutil.ignore_patterns(".git"))

    built = _run("build-cache", str(project), "-o", str(project / ".lookahead" / "static.cache"))
    elsewhere = _run("build-cache", str(project), "-o", str(tmp_path / "missing" / "out.lacache"))

    assert built.returncode == 0, built.stderr
    assert (project / ".lookahead" / "static.cache").is_file()
    # Any other missing folder is still a mistake, refused in one line.
    assert elsewhere.returncode == 2 and "output folder does not exist" in elsewhere.stderr
    assert not (tmp_path / "missing").exists()


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="uses a Linux pseudo-terminal")
def test_progress_is_shown_on_a_terminal(repo: Path, tmp_path: Path) -> None:
    terminal, terminal_side = pty.openpty()
    try:
        completed = subprocess.run(
            [str(CLI), "build-cache", str(repo), "-o", str(tmp_path / "out.lacache")],
            stdout=subprocess.PIPE, stderr=terminal_side, text=True, timeout=60, check=False,
        )  # fmt: skip
    finally:
        os.close(terminal_side)
    shown = _read_until_closed(terminal)

    assert completed.returncode == 0
    assert f"\r{len(TRACKED)}/{len(TRACKED)} files" in shown
    assert shown.endswith("\r")  # the line is cleared for what comes next
    assert completed.stdout.startswith("wrote")


def _read_until_closed(terminal: int) -> str:
    chunks = []
    try:
        while chunk := os.read(terminal, 4096):
            chunks.append(chunk)
    except OSError:  # EIO: the other side is closed
        pass
    finally:
        os.close(terminal)
    return b"".join(chunks).decode()


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="reads /proc")
def test_interrupted_build_leaves_no_file(big_folder: Path, tmp_path: Path) -> None:
    output_folder = tmp_path / "out"
    output_folder.mkdir()
    output = output_folder / "big.lacache"
    process = subprocess.Popen(
        [str(CLI), "build-cache", str(big_folder), "-o", str(output), "--jobs", "2"],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        workers = _wait_for_children(process.pid, count=2, timeout=30)
        _wait_for_work(workers, cpu_s=0.5, timeout=60)  # the workers are into tokenizing
        process.send_signal(signal.SIGINT)
        _, stderr = process.communicate(timeout=30)
    finally:
        process.kill()
        process.wait()

    assert process.returncode == 130, stderr
    assert stderr == "lookahead-lsp: interrupted\n"
    assert list(output_folder.iterdir()) == []
    _wait_until_gone(workers, timeout=10)


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="reads /proc")
def test_workers_exit_when_the_build_is_killed(big_folder: Path, tmp_path: Path) -> None:
    process = subprocess.Popen(
        [str(CLI), "build-cache", str(big_folder), "-o", str(tmp_path / "big.lacache")],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        workers = _wait_for_children(process.pid, count=2, timeout=30)
    finally:
        process.kill()  # no chance to stop its pool
        process.wait()

    _wait_until_gone(workers, timeout=10)


def _wait_until_gone(pids: list[int], timeout: float) -> None:
    deadline = time.monotonic() + timeout
    while any(Path(f"/proc/{pid}").exists() for pid in pids) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert not any(Path(f"/proc/{pid}").exists() for pid in pids)


def _wait_for_children(pid: int, count: int, timeout: float) -> list[int]:
    """The pool's worker processes of pid, once there are count of them."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        workers = [
            int(entry.name)
            for entry in Path("/proc").iterdir()
            if entry.name.isdigit() and _is_spawned_worker_of(entry, pid)
        ]
        if len(workers) >= count:
            return workers
        time.sleep(0.05)
    raise AssertionError(f"build-cache did not start {count} workers")


def _wait_for_work(pids: list[int], cpu_s: float, timeout: float) -> None:
    """Until each process has run cpu_s seconds on a CPU (importing, then its share of work)."""
    tick = os.sysconf("SC_CLK_TCK")
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            times = [sum(int(f) for f in Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[11:13]) for pid in pids]
        except OSError:  # one ended already: past its work
            return
        if min(times) >= cpu_s * tick:
            return
        time.sleep(0.05)
    raise AssertionError("the workers did not start working")


def _is_spawned_worker_of(proc_entry: Path, pid: int) -> bool:
    try:
        stat = (proc_entry / "stat").read_text()
        command = (proc_entry / "cmdline").read_bytes()
    except OSError:  # gone meanwhile
        return False
    parent = int(stat.rsplit(")", 1)[1].split()[1])
    return parent == pid and b"spawn_main" in command
