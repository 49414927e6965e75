"""Text of one folder never reaches another folder's completions: with the real default model in
this process and the daemon's hosts shared as `serve` shares them among its sessions (editor
windows), two folders hold a file of the same relative name, and one folder has another document
open that holds a secret. A completion in the other folder's file, where the secret would be the
obvious continuation, must not name it, nor may its status or log; in the secret's own folder the
same completion does (so the model copies what its prompt holds, and the check can fail)."""

from __future__ import annotations

import json
import tempfile
from pathlib import Path

from lookahead_lsp.service.folder_host import FolderHost
from lookahead_lsp.service.model_host import ModelHost
from lookahead_lsp.service.model_work import Computed
from lookahead_lsp.service.service import LookaheadService
from support.hosts import hosts  # noqa: F401  (the fixture)
from support.recording_client import RecordingClient
from support.waiting import wait_until

CACHE = Path(tempfile.gettempdir()) / "lookahead-lsp-test-cache"
WAIT_S = 300.0
SECRET = "Quokka7781zx"
# Cut where the secret's value would come next.
ASKS = 'API_TOKEN = "'
# No work done ahead (its idle jobs would make the order of the model's work a race) and one
# token at a time: what is tested is which text a prompt may hold.
SETTINGS = {"workAhead": False, "draft": "none", "maxTokens": 16}


def _window(hosts: tuple[ModelHost[Computed], FolderHost], *roots: Path) -> tuple[LookaheadService, RecordingClient]:
    client = RecordingClient()
    service = LookaheadService(client, CACHE, *hosts)
    service.configure(SETTINGS)
    service.start_model()
    for root in roots:
        service.add_folder(root)
    wait_until(lambda: service.status()["model_state"] != "loading" and service.status()["index"]["state"] == "ready", WAIT_S)
    assert service.status()["model_state"] == "ready"
    return service, client


def _main(name: str) -> str:
    """A main.py of some length (its own part of a prompt is well over what a saved state must
    spare to be kept), ending where a token is assigned."""
    body = "".join(f"def {name}_step_{i}(value):\n    return value + {i}\n\n" for i in range(12))
    return f"import os\n\n{body}\n{ASKS}"


def _secrets() -> str:
    lines = [f"SETTING_{i} = {i}\n" for i in range(10)]
    return "".join(lines) + f'API_TOKEN = "{SECRET}"\n' + "".join(f"LIMIT_{i} = {i * 10}\n" for i in range(10))


def _open(service: LookaheadService, path: Path, text: str, edited_line: int = 0) -> str:
    uri = path.as_uri()
    service.open_document(uri, path, text)
    service.change_document(uri, path, text, len("".join(text.splitlines(keepends=True)[:edited_line])))
    return uri


def _complete(service: LookaheadService, path: Path, text: str) -> str:
    answer = service.complete(path.as_uri(), path, text, len(text), "python", invoked=True).result(WAIT_S)
    assert answer is not None
    return answer.text


def _project(root: Path, name: str) -> Path:
    root.mkdir(parents=True)
    (root / "main.py").write_text(_main(name))
    return root


def test_another_windows_folder_never_reaches_a_prompt(tmp_path: Path, hosts: tuple[ModelHost[Computed], FolderHost]) -> None:
    a, b = _project(tmp_path / "a", "alpha"), _project(tmp_path / "b", "beta")
    first, first_log = _window(hosts, a)
    try:
        _open(first, a / "settings.py", _secrets(), edited_line=10)
        # In the secret's own folder its value is what the model writes: the prompt holds it.
        own = a / "main.py"
        _open(first, own, _main("alpha"))
        assert SECRET in _complete(first, own, _main("alpha")), "the model does not copy its context here"
        # Another file of the first window: the state of main.py's prompt (with the secret) is
        # saved, for coming back to it.
        other = a / "tools.py"
        tools = "".join(f"def tool_{i}(items):\n    return sorted(items)[{i}:]\n\n" for i in range(30)) + "def tool_"
        _open(first, other, tools)
        _complete(first, other, tools)
        second, second_log = _window(hosts, b)
        try:
            theirs = b / "main.py"
            _open(second, theirs, _main("beta"))
            suggestion = _complete(second, theirs, _main("beta"))
            assert SECRET not in suggestion, f"another window's text in a completion: {suggestion!r}"
            seen = json.dumps(second.status()) + "\n".join(message for _, message in second_log.lines)
            assert SECRET not in seen and "settings.py" not in seen
        finally:
            second.shutdown()
    finally:
        first.shutdown()
    assert SECRET not in "\n".join(message for _, message in first_log.lines)


def test_another_folder_of_the_same_window_never_reaches_a_prompt(
    tmp_path: Path, hosts: tuple[ModelHost[Computed], FolderHost]
) -> None:
    a, b = _project(tmp_path / "a", "alpha"), _project(tmp_path / "b", "beta")
    window, _ = _window(hosts, a, b)
    try:
        _open(window, a / "settings.py", _secrets(), edited_line=10)
        theirs = b / "main.py"
        _open(window, theirs, _main("beta"))
        suggestion = _complete(window, theirs, _main("beta"))
        assert SECRET not in suggestion, f"another folder's text in a completion: {suggestion!r}"
        # The same document in the secret's folder is given it: the recent edit still serves there.
        own = a / "main.py"
        _open(window, own, _main("alpha"))
        assert SECRET in _complete(window, own, _main("alpha"))
    finally:
        window.shutdown()


def _uses_the_token(name: str) -> str:
    """A main.py that imports API_TOKEN from the folder's settings.py and compares it, cut
    where the model would write its value."""
    return f"from settings import API_TOKEN\n\n{_main(name)[: -len(ASKS)]}\nassert API_TOKEN == \""


def test_definitions_come_from_the_requests_own_folder_on_disk(
    tmp_path: Path, hosts: tuple[ModelHost[Computed], FolderHost]
) -> None:
    a, b = _project(tmp_path / "a", "alpha"), _project(tmp_path / "b", "beta")
    (a / "settings.py").write_text(_secrets())
    (a / "main.py").write_text(_uses_the_token("alpha"))
    (b / "main.py").write_text(_uses_the_token("beta"))
    window, _ = _window(hosts, a, b)
    try:
        folder_a = window.workspace.of(a / "main.py")
        assert folder_a is not None
        wait_until(lambda: folder_a.retrieval.files == 2, WAIT_S)  # filled once indexed
        theirs = b / "main.py"
        _open(window, theirs, _uses_the_token("beta"))
        suggestion = _complete(window, theirs, _uses_the_token("beta"))
        assert SECRET not in suggestion, f"another folder's definition in a completion: {suggestion!r}"
        assert window.status()["last"]["context"] == []
        # In the folder that defines it, the definition is in the prompt, and the model uses it.
        own = a / "main.py"
        _open(window, own, _uses_the_token("alpha"))
        assert SECRET in _complete(window, own, _uses_the_token("alpha"))
        context = window.status()["last"]["context"]
        assert context[0]["path"] == "settings.py" and context[0]["why"] == "definitions" and context[0]["tokens"] > 0
    finally:
        window.shutdown()
