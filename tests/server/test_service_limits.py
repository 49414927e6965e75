"""The service's bounds and the files it opens, with the real default model in this process
(loaded once for the module): documents above maxDocumentKb are neither completed nor indexed,
a closed document's suggestions are forgotten, a static cache that is not a regular file is
skipped without opening it, and one replaced on disk is opened again before the next
completion uses it."""

from __future__ import annotations

import os
import tempfile
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from lookahead_lsp._lookup import StaticCacheBuilder
from lookahead_lsp.service.service import LookaheadService
from lookahead_lsp.workspace.folder import STATIC_CACHE_NAME
from lookahead_lsp.base.tokenizer import Tokenizer
from support.recording_client import RecordingClient
from support.waiting import wait_until

# The cost model is measured once per cache folder; the server tests share this one.
CACHE = Path(tempfile.gettempdir()) / "lookahead-lsp-test-cache"
SAMPLE = Path(__file__).parents[2] / "examples" / "sample-project" / "shop" / "orders.py"
WAIT_S = 300.0  # a loaded machine shared with other work


@pytest.fixture(scope="module")
def loaded() -> Iterator[tuple[LookaheadService, RecordingClient]]:
    client = RecordingClient()
    service = LookaheadService(client, CACHE)
    service.configure({"maxTokens": 8, "debounceMs": 0})
    service.start_model()
    _until(lambda: service.status()["model_state"] != "loading")
    assert service.status()["model_state"] == "ready"
    assert client.status_changes >= 1, "the editor must learn that the model is ready without asking"
    status = service.status()
    assert status["backend"] and status["sampling"] in ("backend", "host")
    yield service, client
    service.shutdown()


def _until(check: Callable[[], bool]) -> None:
    wait_until(check, WAIT_S)


def _indexed(service: LookaheadService, root: Path) -> None:
    service.add_folder(root)
    _until(lambda: service.status()["index"]["state"] == "ready")


def _tokens(service: LookaheadService) -> int:
    return int(service.status()["index"]["tokens"])


def test_the_sampling_setting_reloads_the_model_with_the_argmax_where_the_user_asked() -> None:
    service = LookaheadService(RecordingClient(), CACHE)
    try:
        service.configure({"sampling": "backend"})
        service.start_model()
        _until(lambda: service.status()["model_state"] != "loading")
        assert (service.status()["model_state"], service.status()["sampling"]) == ("ready", "backend")
        service.configure({"sampling": "host"})
        _until(lambda: service.status()["model_state"] == "ready" and service.status()["sampling"] == "host")
        service.configure({"sampling": "sideways"})  # refused in one line; the model stays as it is
        assert (service.status()["model_state"], service.status()["sampling"]) == ("ready", "host")
    finally:
        service.shutdown()


def test_documents_above_the_cap_are_neither_completed_nor_indexed(
    loaded: tuple[LookaheadService, RecordingClient], tmp_path: Path
) -> None:
    service, client = loaded
    root = tmp_path / "capped"
    (root / "pkg").mkdir(parents=True)
    (root / "pkg" / "small.py").write_text("x = 1\n")
    _indexed(service, root)
    service.configure({"maxDocumentKb": 4})
    try:
        path = root / "pkg" / "edited.py"  # not on disk: only the editor's text can index it
        uri = path.as_uri()
        before = _tokens(service)
        service.open_document(uri, path, "value = compute(1, 2)\n" * 10)
        _until(lambda: _tokens(service) > before)  # indexed off the caller's thread, soon after
        big = "value = compute(1, 2)\n" * 400  # 8.6 KiB
        for edit in range(3):
            service.change_document(uri, path, big + "#" * edit, len(big) + edit)
        _until(lambda: _tokens(service) == before)  # the index went back to the disk, where it is not
        answers = [service.complete(uri, path, big, len(big) - i, "python", invoked=True) for i in range(3)]
        assert all(answer.done() and answer.result() is None for answer in answers)
        assert len(client.matching("maxDocumentKb")) == 1  # one line, not one per keystroke
        small = "value = compute(1, 2)\n" * 10
        service.change_document(uri, path, small, len(small))
        _until(lambda: _tokens(service) > before)
        answer = service.complete(uri, path, small, len(small), "python", invoked=True).result(timeout=WAIT_S)
        assert answer is not None and answer.source == "model"
        service.close_document(uri, path)
    finally:
        service.configure({"maxDocumentKb": 1024})
        service.remove_folder(root, save=False)


def test_closing_a_document_forgets_its_suggestions(loaded: tuple[LookaheadService, RecordingClient]) -> None:
    service, _ = loaded
    uri = "untitled:Orders"
    text = SAMPLE.read_text()
    offset = sum(len(line) for line in text.splitlines(keepends=True)[:17]) + 8
    before = service.suggestions.retained_chars()
    service.open_document(uri, None, text)
    answer = service.complete(uri, None, text, offset, "python", invoked=True).result(timeout=WAIT_S)
    assert answer is not None and len(answer.text) > 1
    assert service.suggestions.retained_chars() > before
    # Typing its first character is answered from the cache, not the model.
    typed = text[:offset] + answer.text[0] + text[offset:]
    cached = service.complete(uri, None, typed, offset + 1, "python").result(timeout=WAIT_S)
    assert cached is not None and (cached.source, cached.text) == ("cache", answer.text[1:])
    service.close_document(uri, None)
    assert service.suggestions.retained_chars() == before
    service.open_document(uri, None, typed)
    again = service.complete(uri, None, typed, offset + 1, "python", invoked=True).result(timeout=WAIT_S)
    assert again is not None and again.source == "model"
    service.close_document(uri, None)


def test_a_settings_change_forgets_the_suggestions_made_under_the_old_ones(
    loaded: tuple[LookaheadService, RecordingClient],
) -> None:
    service, _ = loaded
    uri = "untitled:Settings"
    text = SAMPLE.read_text()
    offset = sum(len(line) for line in text.splitlines(keepends=True)[:17]) + 8
    service.open_document(uri, None, text)
    answer = service.complete(uri, None, text, offset, "python", invoked=True).result(timeout=WAIT_S)
    assert answer is not None and len(answer.text) > 1
    typed = text[:offset] + answer.text[0] + text[offset:]
    service.configure({"maxTokens": 4})
    try:
        again = service.complete(uri, None, typed, offset + 1, "python", invoked=True).result(timeout=WAIT_S)
        assert again is not None and again.source == "model"
    finally:
        service.configure({"maxTokens": 8})
        service.close_document(uri, None)


def test_the_editor_is_told_when_the_model_cannot_load(tmp_path: Path) -> None:
    client = RecordingClient()
    service = LookaheadService(client, CACHE)
    try:
        service.configure({"modelPath": str(tmp_path / "missing.gguf")})
        service.start_model()
        _until(lambda: service.status()["model_state"] == "error")
        assert client.status_changes >= 1
        assert service.status()["backend"] is None
        assert client.matching("missing.gguf")
    finally:
        service.shutdown()


def test_recently_edited_documents_join_the_prompt(loaded: tuple[LookaheadService, RecordingClient]) -> None:
    service, _ = loaded
    uri, other = "untitled:Totals", "untitled:Rates"
    text = "def total(items):\n    return sum(item.price for item in items)\n\n\ndef average(items):\n"

    def prompt_tokens() -> int:
        service.open_document(uri, None, text)
        answer = service.complete(uri, None, text, len(text), "python", invoked=True).result(timeout=WAIT_S)
        assert answer is not None and answer.source == "model" and service.last_completion is not None
        service.close_document(uri, None)  # its suggestion forgotten: the next one asks the model
        return int(service.last_completion["prompt_tokens"])

    # The whole prompt every time: on a slow machine a cold one would be cut to the text before
    # the cursor (coldPromptMs), which leaves the other files out by design.
    service.configure({"coldPromptMs": None})
    try:
        alone = prompt_tokens()
        rates = "".join(f"RATE_{i} = {i} / 100\n" for i in range(60))
        service.open_document(other, None, rates)
        service.change_document(other, None, rates, rates.index("RATE_30 "))  # the lines around line 30 join the prompt
        try:
            assert prompt_tokens() > alone
            assert service.last_completion is not None
            assert [(c["path"], c["why"]) for c in service.last_completion["context"]] == [("untitled:Rates", "recent")]
        finally:
            service.close_document(other, None)
        assert prompt_tokens() == alone
    finally:
        service.configure({"coldPromptMs": 1500.0})


@pytest.mark.skipif(not hasattr(os, "mkfifo"), reason="no FIFOs here")
def test_a_static_cache_that_is_not_a_file_is_skipped(
    loaded: tuple[LookaheadService, RecordingClient], tmp_path: Path
) -> None:
    service, client = loaded
    root = tmp_path / "fifo"
    (root / STATIC_CACHE_NAME).parent.mkdir(parents=True)
    (root / "app.py").write_text("def main():\n    return 1\n")
    os.mkfifo(root / STATIC_CACHE_NAME)  # opening it for reading would wait for a writer
    try:
        _indexed(service, root)
        assert service.status()["static_cache"] is None
        assert len(client.matching(f"{root / STATIC_CACHE_NAME} is not a regular file")) == 1
        path = root / "app.py"
        service.open_document(path.as_uri(), path, path.read_text())
        answer = service.complete(path.as_uri(), path, path.read_text(), 11, "python", invoked=True)
        assert answer.result(timeout=WAIT_S) is not None
        assert len(client.matching("is not a regular file")) == 1  # not again per completion
        service.close_document(path.as_uri(), path)
    finally:
        service.remove_folder(root, save=False)


def test_a_static_cache_replaced_on_disk_is_opened_again(
    loaded: tuple[LookaheadService, RecordingClient], tokenizer: Tokenizer, tmp_path: Path
) -> None:
    service, client = loaded
    root = tmp_path / "replaced"
    cache_file = root / STATIC_CACHE_NAME
    cache_file.parent.mkdir(parents=True)
    path = root / "orders.py"
    path.write_text(SAMPLE.read_text())
    _write_static(tokenizer, path.read_text(), cache_file)
    try:
        _indexed(service, root)
        assert service.status()["static_cache"] == str(cache_file)
        service.open_document(path.as_uri(), path, path.read_text())

        def complete(offset: int) -> None:
            # Each at its own offset: one the suggestion cache answers never reaches the caches.
            text = path.read_text()
            assert service.complete(path.as_uri(), path, text, offset, "python", invoked=True).result(timeout=WAIT_S)

        # Replaced by a damaged copy: refused before the next completion drafts with it.
        damaged = tmp_path / "damaged.cache"
        damaged.write_bytes(cache_file.read_bytes()[:100])
        os.replace(damaged, cache_file)
        complete(300)
        assert service.status()["static_cache"] is None
        refusals = [m for m in client.matching("static cache not used") if str(cache_file) in m]
        assert len(refusals) == 1
        # A good one written again (as build-cache would): used from the next completion on.
        _write_static(tokenizer, path.read_text() * 2, cache_file)
        complete(200)
        assert service.status()["static_cache"] == str(cache_file)
        service.close_document(path.as_uri(), path)
    finally:
        service.remove_folder(root, save=False)


def _write_static(tokenizer: Tokenizer, text: str, path: Path) -> None:
    builder = StaticCacheBuilder(tokenizer.n_vocab)
    builder.add(tokenizer.tokenize(text))
    builder.write(str(path), tokenizer.fingerprint)
