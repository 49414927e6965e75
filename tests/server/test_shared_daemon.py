"""One model per user: `lookahead-lsp serve` over stdio, as every editor starts it, relays to the
user's shared daemon (started by the first, found by the next), which serves each client in a
session of its own; the real default model is loaded once for two editors, a client's
documents close when it leaves, the daemon leaves when no client has been connected for its
--idle-exit, and where no private folder can hold its socket the relay serves in its own
process instead."""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import socket
import struct
import subprocess
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest

from support.lsp_peer import Peer, initialize, no_model_env, request, serve_command, wait_for_line

from lookahead_lsp.lsp.relay import shared_socket

SAMPLE = Path(__file__).parents[2] / "examples" / "sample-project"
WAIT_S = 300.0  # the model loads on a machine shared with other work


@pytest.fixture
def runtime() -> Iterator[Path]:
    """A private runtime folder of the test's own, with a short path: a Unix socket's path has
    room for about 100 bytes. Any daemon listening there is stopped at the end."""
    folder = Path(tempfile.mkdtemp(prefix="la-"))
    try:
        yield folder
    finally:
        for sock in folder.rglob("*.sock"):
            with contextlib.suppress(OSError):
                os.kill(_daemon_pid(sock), signal.SIGTERM)
        shutil.rmtree(folder, ignore_errors=True)


def _runtime_env(runtime: Path, base: dict[str, str] | None = None) -> dict[str, str]:
    return {**(base if base is not None else os.environ), "XDG_RUNTIME_DIR": str(runtime)}


def _shared_socket(runtime: Path, cache: Path) -> Path:
    """Where the editors' relays find their daemon (the runtime folder is theirs)."""
    return runtime / "lookahead-lsp" / shared_socket(cache, os.environ.get("LOOKAHEAD_LSP_MODEL", "")).name


@contextmanager
def _editor(cache: Path, env: dict[str, str], log: Path) -> Iterator[tuple[subprocess.Popen[bytes], Peer]]:
    """`serve` as an editor starts it (stdio, no flag), initialized; stdin closed at the end."""
    with log.open("ab") as log_file, subprocess.Popen(
        serve_command(cache, "--log-level", "info"),
        stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=log_file, env=env,
    ) as process:
        peer = Peer.over_pipes(process)
        try:
            yield process, peer
        finally:
            if process.stdin is not None and not process.stdin.closed:
                process.stdin.close()
            process.wait(timeout=60)


def _start(peer: Peer, root: Path | None = None) -> None:
    params: dict[str, Any] = {"processId": None, "capabilities": {}}
    if root is not None:
        params["workspaceFolders"] = [{"uri": root.as_uri(), "name": root.name}]
    peer.send(request(1, "initialize", params))
    assert "capabilities" in peer.response(1, timeout=WAIT_S)["result"]
    peer.send({"jsonrpc": "2.0", "method": "initialized", "params": {}})


def _ready(peer: Peer, first_id: int) -> tuple[dict[str, Any], int]:
    """The status once the model is loaded and the folders indexed, and the next request id."""
    deadline = time.monotonic() + WAIT_S
    request_id = first_id
    while True:
        peer.send(request(request_id, "lookahead/status"))
        status: dict[str, Any] = peer.response(request_id, timeout=WAIT_S)["result"]
        request_id += 1
        if status["model_state"] != "loading" and status["index"]["state"] == "ready":
            return status, request_id
        assert time.monotonic() < deadline, "the daemon never got ready"
        time.sleep(0.1)


def _daemon_pid(path: Path) -> int:
    """The process listening on the shared socket (its peer credentials)."""
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as sock:
        sock.connect(str(path))
        pid, _, _ = struct.unpack("3i", sock.getsockopt(socket.SOL_SOCKET, socket.SO_PEERCRED, struct.calcsize("3i")))
    return int(pid)


@contextmanager
def _stopped_at_the_end(path: Path) -> Iterator[None]:
    """The shared daemon outlives its clients by minutes: a test ends it."""
    try:
        yield
    finally:
        if path.exists():
            try:
                pid = _daemon_pid(path)
            except OSError:
                return
            os.kill(pid, signal.SIGTERM)
            deadline = time.monotonic() + 60
            while path.exists() and time.monotonic() < deadline:
                time.sleep(0.1)


def test_two_editors_share_one_daemon_and_one_model(tmp_path: Path, runtime: Path) -> None:
    env, cache = _runtime_env(runtime), tmp_path / "cache"
    path = _shared_socket(runtime, cache)
    with _stopped_at_the_end(path):
        with _editor(cache, env, tmp_path / "one.log") as (one, first), _editor(cache, env, tmp_path / "two.log") as (_, second):
            _start(first)
            _start(second)
            status, next_first = _ready(first, 2)
            assert status["model_state"] == "ready"
            status, next_second = _ready(second, 2)
            assert status["shared"] == {"sessions": 2, "models": 1, "folders": 0}, "a second model for the second editor"
            assert [p.name for p in path.parent.glob("*.sock")] == [path.name]
            daemon = _daemon_pid(path)
            assert daemon not in (one.pid, os.getpid())
            # The first editor leaves as LSP says: its session ends, the daemon stays.
            first.send(request(next_first, "shutdown"))
            assert first.response(next_first)["result"] is None
            first.send({"jsonrpc": "2.0", "method": "exit"})
            assert one.wait(timeout=60) == 0
            second.send(request(next_second, "lookahead/status"))
            assert second.response(next_second)["result"]["shared"] == {"sessions": 1, "models": 1, "folders": 0}
        # Both gone: the daemon waits for the next editor, its model loaded.
        assert _daemon_pid(path) == daemon


def test_a_departed_editors_documents_leave_the_index(tmp_path: Path, runtime: Path) -> None:
    env, cache = _runtime_env(runtime), tmp_path / "cache"
    root = tmp_path / "project"
    root.mkdir()
    for name in ("shop", "tests"):
        source = SAMPLE / name
        if source.is_dir():
            (root / name).mkdir()
            for file in source.iterdir():
                if file.is_file():
                    (root / name / file.name).write_bytes(file.read_bytes())
    unsaved = (root / "shop" / "draft.py").as_uri()
    path = _shared_socket(runtime, cache)
    with _stopped_at_the_end(path):
        with _editor(cache, env, tmp_path / "one.log") as (_, first):
            _start(first, root)
            on_disk, next_id = _ready(first, 2)
            first.send({"jsonrpc": "2.0", "method": "textDocument/didOpen", "params": {"textDocument": {
                "uri": unsaved, "languageId": "python", "version": 1,
                "text": "def draft(order):\n    return sorted(order.lines)\n" * 40}}})
            deadline = time.monotonic() + WAIT_S
            while True:
                status, next_id = _ready(first, next_id)
                if status["index"]["tokens"] > on_disk["index"]["tokens"]:
                    break
                assert time.monotonic() < deadline, "the editor's text never joined the index"
                time.sleep(0.1)
        # The first editor went away without a word (its stdin closed).
        with _editor(cache, env, tmp_path / "two.log") as (_, second):
            _start(second, root)
            status, _ = _ready(second, 2)
            assert status["index"]["tokens"] == on_disk["index"]["tokens"], "a departed editor's document is still indexed"


def test_the_shared_daemon_leaves_once_no_client_came_for_its_idle_exit(tmp_path: Path, runtime: Path) -> None:
    path = runtime / "shared.sock"
    log = tmp_path / "serve.log"
    with log.open("wb") as log_file, subprocess.Popen(
        serve_command(tmp_path / "cache", "--socket", str(path), "--idle-exit", "2"),
        stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=log_file, env=no_model_env(tmp_path),
    ) as process:
        wait_for_line(log, "listening on", process)
        with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as sock:
            sock.connect(str(path))
            peer = Peer.over_socket(sock)
            peer.send(initialize(1))
            assert "capabilities" in peer.response(1)["result"]
            time.sleep(3)  # longer than --idle-exit, with a client: it stays
            assert process.poll() is None
        assert process.wait(timeout=60) == 0
    assert "no client for 2 s: leaving" in log.read_text()
    assert not path.exists()


def test_without_a_private_folder_for_the_socket_the_editor_is_served_in_process(tmp_path: Path, runtime: Path) -> None:
    env = _runtime_env(runtime, no_model_env(tmp_path))
    shared = Path(env["XDG_RUNTIME_DIR"]) / "lookahead-lsp"
    shared.mkdir(mode=0o777)
    shared.chmod(0o777)  # others could replace the socket there
    log = tmp_path / "serve.log"
    with _editor(tmp_path / "cache", env, log) as (process, peer):
        peer.send(initialize(1))
        assert "capabilities" in peer.response(1)["result"]
        peer.send(request(2, "lookahead/status"))
        assert peer.response(2)["result"]["shared"]["sessions"] >= 0
    assert "no shared daemon" in log.read_text()
    assert not list(shared.glob("*.sock"))


def test_an_isolated_editor_gets_an_isolated_daemon(tmp_path: Path, runtime: Path) -> None:
    # As the VS Code extension starts it: python -I, so neither PYTHONPATH nor the user's site
    # folder can put a module in front of the daemon's.
    env = _runtime_env(runtime, no_model_env(tmp_path))
    path = runtime / "lookahead-lsp" / shared_socket(tmp_path / "cache", env["LOOKAHEAD_LSP_MODEL"]).name
    command = serve_command(tmp_path / "cache")
    with _stopped_at_the_end(path), tmp_path.joinpath("serve.log").open("wb") as log, subprocess.Popen(
        [command[0], "-I", *command[1:]], stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=log, env=env
    ) as process:
        peer = Peer.over_pipes(process)
        peer.send(initialize(1))
        assert "capabilities" in peer.response(1, timeout=WAIT_S)["result"]
        arguments = Path(f"/proc/{_daemon_pid(path)}/cmdline").read_bytes().split(b"\0")
        assert arguments[1] == b"-I" and b"--socket" in arguments
        assert process.stdin is not None
        process.stdin.close()
        process.wait(timeout=60)


def test_the_shared_socket_is_one_per_version_python_cache_and_default_model(tmp_path: Path) -> None:
    assert shared_socket(tmp_path / "a", "") == shared_socket(tmp_path / "a", "")
    assert shared_socket(tmp_path / "a", "") != shared_socket(tmp_path / "b", "")
    assert shared_socket(tmp_path / "a", "") != shared_socket(tmp_path / "a", "/models/other.gguf")

