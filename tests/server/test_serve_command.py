"""`lookahead-lsp serve` as a process: TCP on the loopback only and with the token, garbage on
stdin survived, shutdown by a closed stdin or SIGTERM saving the workspace index, and a restart
that reuses it."""

from __future__ import annotations

import json
import shutil
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest

from lookahead_lsp.base.errors import UserError
from lookahead_lsp.commands.serve import parse_listen_address
from support.lsp_peer import Peer, initialize, no_model_env, wait_for_line

SAMPLE = Path(__file__).parents[2] / "examples" / "sample-project"


def test_listen_addresses() -> None:
    assert parse_listen_address("127.0.0.1:7000", False) == ("127.0.0.1", 7000)
    assert parse_listen_address(":7000", False) == ("127.0.0.1", 7000)
    assert parse_listen_address("7000", False) == ("127.0.0.1", 7000)
    assert parse_listen_address("[::1]:7000", False) == ("::1", 7000)
    assert parse_listen_address("localhost:7000", False) == ("localhost", 7000)
    assert parse_listen_address("0.0.0.0:7000", True) == ("0.0.0.0", 7000)
    for bad in ("0.0.0.0:7000", "10.1.2.3:1", "host:port", "127.0.0.1:70000"):
        with pytest.raises(UserError):
            parse_listen_address(bad, False)


def _command(cache: Path, *extra: str) -> list[str]:
    return [sys.executable, "-m", "lookahead_lsp", "serve", "--cache-dir", str(cache), *extra]


def test_non_loopback_tcp_is_refused(tmp_path: Path) -> None:
    done = subprocess.run(_command(tmp_path, "--tcp", "0.0.0.0:0"), capture_output=True, text=True, timeout=60)
    assert done.returncode == 2 and "--allow-remote" in done.stderr
    both = subprocess.run(_command(tmp_path, "--stdio", "--tcp", ":0"), capture_output=True, text=True, timeout=60)
    assert both.returncode == 2 and "not allowed with" in both.stderr


def _frame(message: dict[str, Any]) -> bytes:
    body = json.dumps(message).encode()
    return b"Content-Length: %d\r\n\r\n" % len(body) + body


def _read_message(stream: Any) -> dict[str, Any]:
    length = 0
    while True:
        line = stream.readline()
        if not line:
            raise EOFError("server closed the stream")
        if line in (b"\r\n", b"\n"):
            break
        name, _, value = line.decode().partition(":")
        if name.lower() == "content-length":
            length = int(value)
    data: dict[str, Any] = json.loads(stream.read(length))
    return data


def _response(stream: Any, request_id: int) -> dict[str, Any]:
    while True:
        message = _read_message(stream)
        if message.get("id") == request_id and "method" not in message:
            return message


def _initialize(root: Path) -> dict[str, Any]:
    return {
        "jsonrpc": "2.0", "id": 1, "method": "initialize",
        "params": {"processId": None, "capabilities": {},
                   "workspaceFolders": [{"uri": root.as_uri(), "name": "project"}]},
    }


def _status(process: subprocess.Popen[bytes], request_id: int) -> dict[str, Any]:
    assert process.stdin is not None
    process.stdin.write(_frame({"jsonrpc": "2.0", "id": request_id, "method": "lookahead/status", "params": {}}))
    process.stdin.flush()
    result: dict[str, Any] = _response(process.stdout, request_id)["result"]
    return result


def _wait_ready(process: subprocess.Popen[bytes]) -> dict[str, Any]:
    for request_id in range(100, 2000):
        status = _status(process, request_id)
        if status["model_state"] != "loading" and status["index"]["state"] == "ready":
            return status
        time.sleep(0.1)
    raise AssertionError("server never got ready")


def test_garbage_on_stdin_then_shutdown_by_closed_stdin(tmp_path: Path) -> None:
    root = tmp_path / "project"
    shutil.copytree(SAMPLE, root)
    cache = tmp_path / "cache"
    # --stdio (the default transport) as VS Code's language client adds it.
    with subprocess.Popen(
        _command(cache, "--stdio", "--standalone"), stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL
    ) as process:
        assert process.stdin is not None and process.stdout is not None
        # Not JSON, JSON that is not JSON-RPC, an unknown method: each logged or answered with an
        # error, and the server goes on.
        process.stdin.write(b"Content-Length: 9\r\n\r\nnot json!")
        process.stdin.write(_frame({"hello": "world"}))
        process.stdin.write(_frame(_initialize(root)))
        process.stdin.flush()
        assert "capabilities" in _response(process.stdout, 1)["result"]
        process.stdin.write(_frame({"jsonrpc": "2.0", "method": "initialized", "params": {}}))
        process.stdin.write(_frame({"jsonrpc": "2.0", "id": 2, "method": "no/such/method", "params": {}}))
        process.stdin.flush()
        assert "error" in _response(process.stdout, 2)
        status = _wait_ready(process)
        assert status["index"]["files"] == 2
        process.stdin.close()  # the editor went away
        assert process.wait(timeout=60) is not None
    saved = list(cache.glob("index-*.bin"))
    assert len(saved) == 1 and saved[0].stat().st_size > 0


def test_sigterm_saves_and_a_restart_reuses_the_index(tmp_path: Path) -> None:
    root = tmp_path / "project"
    shutil.copytree(SAMPLE, root)
    cache = tmp_path / "cache"
    for round_ in range(2):
        log_path = tmp_path / f"server-{round_}.log"
        # Info on stderr (over stdio it holds warnings only unless asked for more).
        with log_path.open("wb") as log_file, subprocess.Popen(
            _command(cache, "--standalone", "--log-level", "info"), stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=log_file
        ) as process:
            assert process.stdin is not None and process.stdout is not None
            process.stdin.write(_frame(_initialize(root)))
            process.stdin.write(_frame({"jsonrpc": "2.0", "method": "initialized", "params": {}}))
            process.stdin.flush()
            _response(process.stdout, 1)
            _wait_ready(process)
            process.send_signal(signal.SIGTERM)
            process.wait(timeout=60)
        log = log_path.read_text()
        if round_ == 1:
            # Nothing changed on disk: the saved index is reused, no file tokenized again.
            assert "(0 tokenized, 2 unchanged)" in log, log
    assert len(list(cache.glob("index-*.bin"))) == 1


def test_tcp_on_loopback_with_the_token(tmp_path: Path) -> None:
    log = tmp_path / "serve.log"
    token_file = tmp_path / "token"
    command = _command(tmp_path / "cache", "--tcp", "127.0.0.1:0", "--token-file", str(token_file))
    with log.open("wb") as log_file, subprocess.Popen(command, stderr=log_file, env=no_model_env(tmp_path)) as process:
        try:
            port = int(wait_for_line(log, r"listening on 127\.0\.0\.1:(\d+)", process)[1])
            assert str(token_file) in log.read_text()  # where a client finds the token
            with socket.create_connection(("127.0.0.1", port), timeout=30) as connection:
                peer = Peer.over_socket(connection)
                peer.send(initialize(1, {"token": token_file.read_text().strip()}))
                result = peer.response(1)["result"]
                assert result["capabilities"]["inlineCompletionProvider"] is not None
        finally:
            process.send_signal(signal.SIGTERM)
            process.wait(timeout=60)
