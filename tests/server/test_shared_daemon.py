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
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest

from support.lsp_peer import Peer, initialize, no_model_env, request, serve_command, wait_for_line

from lookahead_lsp.lsp.relay import shared_socket_name
from lookahead_lsp.lsp.transport import MAX_SESSIONS

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
                os.kill(daemon_pid(sock), signal.SIGTERM)
        shutil.rmtree(folder, ignore_errors=True)


def runtime_env(runtime: Path, base: dict[str, str] | None = None) -> dict[str, str]:
    return {**(base if base is not None else os.environ), "XDG_RUNTIME_DIR": str(runtime)}


def shared_socket_path(runtime: Path, cache: Path) -> Path:
    """Where the editors' relays find their daemon (the runtime folder is theirs)."""
    return runtime / "lookahead-lsp" / shared_socket_name(cache, os.environ.get("LOOKAHEAD_LSP_MODEL", ""))


@contextmanager
def editor(cache: Path, env: dict[str, str], log: Path) -> Iterator[tuple[subprocess.Popen[bytes], Peer]]:
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


def start(peer: Peer, root: Path | None = None) -> None:
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


def daemon_pid(path: Path) -> int:
    """The process listening on the shared socket (its peer credentials)."""
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as sock:
        sock.connect(str(path))
        pid, _, _ = struct.unpack("3i", sock.getsockopt(socket.SOL_SOCKET, socket.SO_PEERCRED, struct.calcsize("3i")))
    return int(pid)


@contextmanager
def stopped_at_the_end(path: Path) -> Iterator[None]:
    """The shared daemon outlives its clients by minutes: a test ends it."""
    try:
        yield
    finally:
        if path.exists():
            try:
                pid = daemon_pid(path)
            except OSError:
                return
            os.kill(pid, signal.SIGTERM)
            deadline = time.monotonic() + 60
            while path.exists() and time.monotonic() < deadline:
                time.sleep(0.1)


def test_two_editors_share_one_daemon_and_one_model(tmp_path: Path, runtime: Path) -> None:
    env, cache = runtime_env(runtime), tmp_path / "cache"
    path = shared_socket_path(runtime, cache)
    with stopped_at_the_end(path):
        with editor(cache, env, tmp_path / "one.log") as (one, first), editor(cache, env, tmp_path / "two.log") as (_, second):
            start(first)
            start(second)
            status, next_first = _ready(first, 2)
            assert status["model_state"] == "ready"
            status, next_second = _ready(second, 2)
            assert status["shared"] == {"sessions": 2, "models": 1, "folders": 0}, "a second model for the second editor"
            assert [p.name for p in path.parent.glob("*.sock")] == [path.name]
            daemon = daemon_pid(path)
            assert daemon not in (one.pid, os.getpid())
            # The first editor leaves as LSP says: its session ends, the daemon stays.
            first.send(request(next_first, "shutdown"))
            assert first.response(next_first)["result"] is None
            first.send({"jsonrpc": "2.0", "method": "exit"})
            assert one.wait(timeout=60) == 0
            second.send(request(next_second, "lookahead/status"))
            assert second.response(next_second)["result"]["shared"] == {"sessions": 1, "models": 1, "folders": 0}
        # Both gone: the daemon waits for the next editor, its model loaded.
        assert daemon_pid(path) == daemon


def test_a_departed_editors_documents_leave_the_index(tmp_path: Path, runtime: Path) -> None:
    env, cache = runtime_env(runtime), tmp_path / "cache"
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
    path = shared_socket_path(runtime, cache)
    with stopped_at_the_end(path):
        with editor(cache, env, tmp_path / "one.log") as (_, first):
            start(first, root)
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
        with editor(cache, env, tmp_path / "two.log") as (_, second):
            start(second, root)
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
    env = runtime_env(runtime, no_model_env(tmp_path)) | {"XDG_CACHE_HOME": str(runtime / "cache-home")}
    shared = runtime / "lookahead-lsp"
    shared.mkdir(mode=0o777)
    shared.chmod(0o777)  # others could replace the socket there
    fallback = runtime / "cache-home" / "lookahead-lsp" / "run"
    fallback.parent.mkdir(parents=True)
    fallback.symlink_to(shared)  # and the cache folder's is not a folder of its own
    log = tmp_path / "serve.log"
    with editor(tmp_path / "cache", env, log) as (process, peer):
        peer.send(initialize(1))
        assert "capabilities" in peer.response(1)["result"]
        peer.send(request(2, "lookahead/status"))
        assert peer.response(2)["result"]["shared"]["sessions"] >= 0
    said = log.read_text()
    assert f"{shared} is not a private folder of this user" in said
    assert f"no shared daemon ({fallback} is a symbolic link, which is not followed): serving in this process" in said
    assert not list(shared.iterdir())


def _served(peer: Peer, first_id: int) -> int:
    """Asserts that the editor's server answers, the next request id."""
    peer.send(request(first_id, "lookahead/status"))
    assert "index" in peer.response(first_id)["result"]
    return first_id + 1


@contextmanager
def _closing_daemon(path: Path, at_once: bool) -> Iterator[list[bytes]]:
    """A listener of this user at the shared socket that, as a full daemon or one leaving at
    its idle time, closes each connection without a byte back (at_once: unread, else once the
    initialize came): what each connection had sent."""
    path.parent.mkdir(mode=0o700, exist_ok=True)
    received: list[bytes] = []
    listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    listener.bind(str(path))
    listener.listen()

    def close_each() -> None:
        with contextlib.suppress(OSError):
            while True:
                connection, _ = listener.accept()
                with connection:
                    data = b""
                    connection.settimeout(30)
                    while not at_once and b"initialize" not in data and (chunk := connection.recv(65536)):
                        data += chunk
                    received.append(data)

    thread = threading.Thread(target=close_each, daemon=True)
    thread.start()
    try:
        yield received
    finally:
        listener.shutdown(socket.SHUT_RDWR)
        listener.close()
        thread.join(timeout=30)


@pytest.mark.parametrize("at_once", [False, True], ids=["after-initialize", "at-once"])
def test_a_daemon_that_closes_before_answering_leaves_the_editor_served(tmp_path: Path, runtime: Path, at_once: bool) -> None:
    env = runtime_env(runtime, no_model_env(tmp_path))
    path = runtime / "lookahead-lsp" / shared_socket_name(tmp_path / "cache", env["LOOKAHEAD_LSP_MODEL"])
    log = tmp_path / "serve.log"
    with _closing_daemon(path, at_once) as received, editor(tmp_path / "cache", env, log) as (_, peer):
        # The initialize the daemon dropped, then what the editor sends next: all answered here.
        peer.send(initialize(1, {"noSuchSetting": 1}))
        assert "capabilities" in peer.response(1)["result"]
        peer.send({"jsonrpc": "2.0", "method": "initialized", "params": {}})
        uri = (tmp_path / "a.py").as_uri()
        peer.send({"jsonrpc": "2.0", "method": "textDocument/didOpen", "params": {
            "textDocument": {"uri": uri, "languageId": "python", "version": 1, "text": "x = 1\n" * 20000}}})
        request_id = _served(peer, 2)
        for _ in range(3):
            request_id = _served(peer, request_id)
    assert len(received) == 1 and (at_once or b'"initialize"' in received[0])
    assert "the shared daemon closed the connection before answering" in log.read_text()


def test_windows_beyond_the_daemons_sessions_are_served_too(tmp_path: Path, runtime: Path) -> None:
    # One window more than the daemon serves at once: the last one's server is its own.
    env = runtime_env(runtime, no_model_env(tmp_path))
    path = runtime / "lookahead-lsp" / shared_socket_name(tmp_path / "cache", env["LOOKAHEAD_LSP_MODEL"])
    with stopped_at_the_end(path), contextlib.ExitStack() as windows:
        peers = []
        for number in range(MAX_SESSIONS + 1):
            _, peer = windows.enter_context(editor(tmp_path / "cache", env, tmp_path / f"window-{number}.log"))
            peer.send(initialize(1))
            assert "capabilities" in peer.response(1, timeout=WAIT_S)["result"], f"window {number}"
            peer.send({"jsonrpc": "2.0", "method": "initialized", "params": {}})
            peers.append(peer)
        for number, peer in enumerate(peers):
            # The model named cannot be loaded: every window is told so, the last one by its own server.
            shown = peer.message()
            while shown is not None and shown.get("method") != "window/showMessage":
                shown = peer.message()
            assert shown is not None and "no completions" in shown["params"]["message"], f"window {number}"
            peer.send(request(2, "lookahead/status"))
            sessions = peer.response(2)["result"]["shared"]["sessions"]
            assert sessions == (1 if number == MAX_SESSIONS else MAX_SESSIONS), f"window {number}"
    last = (tmp_path / f"window-{MAX_SESSIONS}.log").read_text()
    assert "the shared daemon closed the connection before answering (it is full" in last
    assert f"{MAX_SESSIONS} clients are connected already" in path.with_name(path.name + ".log").read_text()


def test_a_connection_still_to_initialize_keeps_the_daemon_past_its_idle_exit(tmp_path: Path, runtime: Path) -> None:
    # A relay connects as the idle time runs out, and sends its initialize a moment later.
    path = runtime / "shared.sock"
    log = tmp_path / "serve.log"
    with log.open("wb") as log_file, subprocess.Popen(
        serve_command(tmp_path / "cache", "--socket", str(path), "--idle-exit", "1"),
        stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=log_file, env=no_model_env(tmp_path),
    ) as process:
        wait_for_line(log, "listening on", process)
        with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as sock:
            sock.connect(str(path))
            time.sleep(2)  # past --idle-exit, and within the handshake's time
            peer = Peer.over_socket(sock)
            peer.send(initialize(1))
            assert "capabilities" in peer.response(1)["result"]
        assert process.wait(timeout=60) == 0
    assert "no client for 1 s: leaving" in log.read_text()


def test_an_isolated_editor_gets_an_isolated_daemon(tmp_path: Path, runtime: Path) -> None:
    # As the VS Code extension starts it: python -I, so neither PYTHONPATH nor the user's site
    # folder can put a module in front of the daemon's.
    env = runtime_env(runtime, no_model_env(tmp_path))
    path = runtime / "lookahead-lsp" / shared_socket_name(tmp_path / "cache", env["LOOKAHEAD_LSP_MODEL"])
    command = serve_command(tmp_path / "cache")
    with stopped_at_the_end(path), tmp_path.joinpath("serve.log").open("wb") as log, subprocess.Popen(
        [command[0], "-I", *command[1:]], stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=log, env=env
    ) as process:
        peer = Peer.over_pipes(process)
        peer.send(initialize(1))
        assert "capabilities" in peer.response(1, timeout=WAIT_S)["result"]
        arguments = Path(f"/proc/{daemon_pid(path)}/cmdline").read_bytes().split(b"\0")
        assert arguments[1] == b"-I" and b"--socket" in arguments
        assert process.stdin is not None
        process.stdin.close()
        process.wait(timeout=60)


def test_the_shared_socket_is_one_per_version_python_cache_and_default_model(tmp_path: Path) -> None:
    assert shared_socket_name(tmp_path / "a", "") == shared_socket_name(tmp_path / "a", "")
    assert shared_socket_name(tmp_path / "a", "") != shared_socket_name(tmp_path / "b", "")
    assert shared_socket_name(tmp_path / "a", "") != shared_socket_name(tmp_path / "a", "/models/other.gguf")

