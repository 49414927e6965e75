"""Protocol faults over stdio, as an editor with a bug (or a fuzzer) sends them: every request gets
an answer (InvalidParams, InvalidRequest, ParseError, ServerNotInitialized), a huge
Content-Length is skipped without reading it, a Content-Length larger than its body swallows none
of the next messages, and the server answers well-formed requests after each."""

from __future__ import annotations

import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest

from support.lsp_peer import Peer, frame, initialize, no_model_env, request, serve_command

URI = "file:///nowhere/a.py"


def _inline(request_id: int, params: object) -> dict[str, object]:
    return request(request_id, "textDocument/inlineCompletion", params)


@pytest.fixture
def server(tmp_path: Path) -> Iterator[tuple[subprocess.Popen[bytes], Peer]]:
    with subprocess.Popen(
        serve_command(tmp_path / "cache", "--standalone"),
        stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, env=no_model_env(tmp_path),
    ) as process:
        try:
            yield process, Peer.over_pipes(process)
        finally:
            process.kill()
            process.wait(timeout=60)


def _error(peer: Peer, request_id: object) -> dict[str, object]:
    answer = peer.response(request_id)
    assert "error" in answer, answer
    error: dict[str, object] = answer["error"]
    assert "\n" not in str(error["message"])
    return error


def _initialized(server: tuple[subprocess.Popen[bytes], Peer]) -> Peer:
    _, peer = server
    peer.send(initialize(1))
    assert "capabilities" in peer.response(1)["result"]
    return peer


def test_params_that_fail_validation_get_invalid_params(server: tuple[subprocess.Popen[bytes], Peer]) -> None:
    peer = _initialized(server)
    position = {"line": -1, "character": 0}
    peer.send(_inline(2, {"textDocument": {"uri": URI}, "position": position, "context": {"triggerKind": 1}}))
    negative = _error(peer, 2)
    assert negative["code"] == -32602 and "line" in str(negative["message"])
    peer.send(_inline(3, {"textDocument": {"uri": URI}, "context": {"triggerKind": 1}}))
    missing = _error(peer, 3)
    assert missing["code"] == -32602 and "position" in str(missing["message"])
    # A bad notification is not answered, and loses nothing after it.
    peer.send({"jsonrpc": "2.0", "method": "textDocument/didOpen", "params": {"textDocument": {}}})
    peer.send(request(4, "lookahead/status"))
    assert "index" in peer.response(4)["result"]


def test_malformed_messages_get_invalid_request_or_parse_error(server: tuple[subprocess.Popen[bytes], Peer]) -> None:
    peer = _initialized(server)
    peer.send(_inline(2, "a string"))
    assert _error(peer, 2)["code"] == -32600
    peer.send({"jsonrpc": "2.0", "id": 3, "method": 42})
    assert _error(peer, 3)["code"] == -32600
    peer.send({"jsonrpc": "1.0", "id": 4, "method": "lookahead/status"})
    assert _error(peer, 4)["code"] == -32600
    peer.send({"jsonrpc": "2.0", "id": {"an": "object"}, "method": "lookahead/status"})
    assert _error(peer, None)["code"] == -32600
    peer.send([request(5, "lookahead/status")])  # a batch
    assert _error(peer, None)["code"] == -32600
    peer.send(b"Content-Length: 9\r\n\r\nnot json!")
    assert _error(peer, None)["code"] == -32700
    peer.send(request(6, "no/such/method"))
    assert _error(peer, 6)["code"] == -32601
    peer.send(request(7, "lookahead/status"))
    assert "index" in peer.response(7)["result"]


def test_requests_before_initialize_and_after_shutdown_are_answered(
    server: tuple[subprocess.Popen[bytes], Peer],
) -> None:
    process, peer = server
    peer.send(request(1, "lookahead/status"))
    assert _error(peer, 1)["code"] == -32002
    peer.send(initialize(2))
    assert "capabilities" in peer.response(2)["result"]
    peer.send(request(3, "shutdown"))
    assert peer.response(3)["result"] is None
    peer.send(request(4, "lookahead/status"))
    assert _error(peer, 4)["code"] == -32600
    peer.send({"jsonrpc": "2.0", "method": "exit"})
    assert process.wait(timeout=60) == 0


def test_a_huge_content_length_is_skipped(server: tuple[subprocess.Popen[bytes], Peer]) -> None:
    process, _ = server
    peer = _initialized(server)
    # Neither allocated nor waited for: the next well-formed request is answered.
    peer.send(b"Content-Length: 1000000000000\r\n\r\n")
    peer.send(request(2, "lookahead/status"))
    assert "index" in peer.response(2)["result"]
    peer.send(b"Content-Length: 10^12\r\n\r\n" + frame(request(3, "lookahead/status")))
    assert "index" in peer.response(3)["result"]
    assert process.poll() is None


def test_a_content_length_larger_than_its_body_swallows_nothing(server: tuple[subprocess.Popen[bytes], Peer]) -> None:
    peer = _initialized(server)
    # The first frame claims 40 bytes more than it has: they belong to the next frame.
    peer.send(frame(request(2, "lookahead/status"), extra=40) + frame(request(3, "lookahead/status")))
    peer.send(frame(request(4, "lookahead/status")))
    for request_id in (2, 3, 4):
        assert "index" in peer.response(request_id)["result"]
    # Fewer bytes than its body: that frame is lost (a ParseError), the next ones are not.
    peer.send(frame(request(5, "lookahead/status"), extra=-5) + frame(request(6, "lookahead/status")))
    assert _error(peer, None)["code"] == -32700
    assert "index" in peer.response(6)["result"]
