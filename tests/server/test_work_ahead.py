"""Work done while the model is idle, with the real default model in this process: the
continuation of a shown suggestion is decoded before the user accepts it, and accepting is then
answered from it with what the model gives for that text; where the cursor rests, the
completion is computed before the user types; the KV states of files left behind are put back
when the user comes back; and workAhead off leaves the model idle."""

from __future__ import annotations

import sysconfig
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from lookahead_lsp.engine.cold_prompt import MIN_SHORT_TOKENS
from lookahead_lsp.service.model_work import Computed
from lookahead_lsp.service.next_places import after_enter
from lookahead_lsp.service.service import Answer, LookaheadService
from support.recording_client import RecordingClient

from test_service_limits import CACHE, WAIT_S, _until

STDLIB = Path(sysconfig.get_paths()["stdlib"])
# Prompts are never cut short here (coldPromptMs off) but in the tests of that: where they are,
# which prompt a text gets depends on how fast this machine evaluates one.
SETTINGS = {"maxTokens": 12, "debounceMs": 0, "draft": "none", "timeBudgetMs": None, "coldPromptMs": None}
# (file, text just before the cursor): the cursor at the end of that text's first occurrence.
SPOTS = [
    ("json/encoder.py", "    def iterencode(self, o, _one_shot=False):"),
    ("argparse.py", "    def _get_optional_actions(self):"),
    ("csv.py", "    def writerow(self, rowdict):"),
    ("string.py", "    def convert_field(self, value, conversion):"),
]


def _session() -> Iterator[LookaheadService]:
    loaded = LookaheadService(RecordingClient(), CACHE)
    loaded.configure(SETTINGS)
    loaded.start_model()
    _until(lambda: loaded.status()["model_state"] != "loading")
    assert loaded.status()["model_state"] == "ready"
    yield loaded
    loaded.shutdown()


@pytest.fixture(scope="module")
def service() -> Iterator[LookaheadService]:
    yield from _session()


@pytest.fixture
def new_session() -> Iterator[LookaheadService]:
    """A session of its own: what the tests before did (accepts never followed by Enter) would
    have taught the shared one not to prepare the line after Enter."""
    yield from _session()


def _spot(name: str, before: str) -> tuple[str, str, int]:
    text = (STDLIB / name).read_text()
    return f"file:///stdlib/{name}", text, text.index(before) + len(before)


def _line_end_spot(name: str, before: str) -> tuple[str, str, int]:
    """The cursor in the body's first line after `before`, the rest of that line gone: a
    suggestion there ends its line."""
    uri, text, offset = _spot(name, before)
    line_start = text.index("\n", offset) + 1
    line_end = text.index("\n", line_start)
    cut = line_start + (len(text[line_start:line_end]) - len(text[line_start:line_end].lstrip())) + 2
    return uri, text[:cut] + text[line_end:], cut


def _cut_every_cold_prompt(service: LookaheadService, settings: dict[str, object] | None = None) -> None:
    """Cold prompts cut where what the cache lacks would take longer than 64 tokens do on this
    machine: every cold prompt is, to the shortest length (with `settings` besides)."""
    _complete(service, "file:///timing.py", "x = 1\n" * 40, 240)  # a prompt pass is timed
    token_ms = _ahead(service)["prompt_token_ms"]
    assert token_ms is not None
    service.configure({"coldPromptMs": 64 * token_ms, **(settings or {})})


def _complete(service: LookaheadService, uri: str, text: str, offset: int) -> Answer:
    answer = service.complete(uri, None, text, offset, "python", invoked=True).result(timeout=WAIT_S)
    assert answer is not None
    return answer


def _ahead(service: LookaheadService) -> dict[str, int]:
    ahead: dict[str, int] = service.status()["ahead"]
    return ahead


def _settled(service: LookaheadService) -> None:
    """Waits until the work ahead's counts stop changing (a run cancelled or done)."""
    before: dict[str, int] | None = None
    deadline = time.monotonic() + WAIT_S
    while (now := _ahead(service)) != before and time.monotonic() < deadline:
        before = now
        time.sleep(1.0)


def test_accepting_a_suggestion_is_answered_from_what_was_decoded_ahead(service: LookaheadService) -> None:
    checked = 0
    for name, before in SPOTS:
        uri, text, offset = _spot(name, before)
        service.open_document(uri, None, text)
        runs = _ahead(service)["runs"]
        shown = _complete(service, uri, text, offset)
        if not shown.text:
            continue
        # While the user reads the suggestion, the model decodes what follows it.
        _until(lambda: _ahead(service)["runs"] > runs)
        accepted = text[:offset] + shown.text + text[offset:]
        at = offset + len(shown.text)
        served = _ahead(service)["served"]
        following = _complete(service, uri, accepted, at)
        assert following.source == "cache", "accepting made the model run again"
        assert _ahead(service)["served"] == served + 1
        # The lossless rule: what the model itself gives for the accepted text.
        service.suggestions.clear()
        service.worker.drop_ahead()
        fresh = _complete(service, uri, accepted, at)
        assert fresh.source == "model"
        assert following.text == fresh.text
        service.close_document(uri, None)
        checked += 1
    assert checked >= 2, "too few suggestions to check"
    # The status counts the accepts, and the Enters that did not follow them.
    places: dict[str, dict[str, int]] = service.status()["ahead"]["next_places"]
    assert places["accept"]["taken"] >= checked and places["enter"]["taken"] == 0


def test_after_a_suggestion_that_ends_its_line_the_line_after_enter_is_ready(new_session: LookaheadService) -> None:
    service = new_session
    served_texts, fresh_texts = [], []
    for name, before in SPOTS:
        uri, text, cut = _line_end_spot(name, before)
        service.open_document(uri, None, text)
        shown = _complete(service, uri, text, cut)
        accepted = text[:cut] + shown.text
        entered = accepted + after_enter(accepted, "python")

        def prepared() -> bool:  # decoded there, not typed through from the continuation before
            hit = service.suggestions.lookup(uri, entered, text[cut:])
            return hit is not None and not hit.typed

        # While the user reads the suggestion: its continuation, then the line after Enter.
        _until(prepared)
        served = _ahead(service)["served"]
        next_line = _complete(service, uri, entered + text[cut:], len(entered))
        service.worker.drop_ahead()
        assert next_line.source == "cache", "Enter after the suggestion made the model run again"
        assert _ahead(service)["served"] == served + 1
        # Lossless: what the model itself gives there.
        service.suggestions.clear()
        fresh = _complete(service, uri, entered + text[cut:], len(entered))
        assert fresh.source == "model"
        served_texts.append(next_line.text)
        fresh_texts.append(fresh.text)
        service.close_document(uri, None)
    assert sum(bool(t) for t in served_texts) >= 2, "too few suggestions on the next line to check"
    # llama.cpp's CPU kernels give logits that depend on how a prompt was split into passes (a
    # batch of several tokens against one): a close call between two tokens may go either way
    # between a prompt evaluated ahead in parts and the same prompt evaluated again (seen at one
    # or two spots of these four, each time a different one, as "This is ..." against "# This
    # is ..." in a docstring). A wrong prompt (another indentation, another text) differs at
    # nearly every spot.
    same = sum(a == b for a, b in zip(served_texts, fresh_texts))
    assert 2 * same >= len(SPOTS), f"prepared {served_texts} but the model gives {fresh_texts}"


def test_with_the_line_after_enter_prepared_the_accepted_line_is_not_decoded_twice(
    new_session: LookaheadService,
) -> None:
    """One-line suggestions: past the end of the accepted line, the continuation decoded at the
    end of the accepted text would be the next line, which the work at the place after Enter
    decodes again: it stops at its answer, so that the next line is ready sooner."""
    service = new_session
    service.configure({**SETTINGS, "multiline": "never"})
    checked = 0
    for name, before in SPOTS:
        uri, text, cut = _line_end_spot(name, before)
        service.open_document(uri, None, text)
        shown = _complete(service, uri, text, cut)
        if not shown.text:  # nothing to accept
            service.close_document(uri, None)
            continue
        accepted = text[:cut] + shown.text
        entered = accepted + after_enter(accepted, "python")
        _until(lambda: service.suggestions.lookup(uri, entered, text[cut:]) is not None)
        service.worker.drop_ahead()
        at_accept = service.suggestions.lookup(uri, accepted, text[cut:])
        assert at_accept is not None and at_accept.continuation
        assert "\n" in at_accept.text
        # At most the newline's token: no code of the next line.
        assert not at_accept.text.split("\n", 1)[1].strip(), f"decoded {at_accept.text!r} at the accepted text's end"
        service.close_document(uri, None)
        checked += 1
    assert checked >= 2, "too few suggestions to check"


def test_where_the_cursor_rests_the_completion_is_ready_before_the_request(service: LookaheadService) -> None:
    uri, text, offset = _spot(*SPOTS[1])
    other_uri, other_text, other_offset = _spot(*SPOTS[0])
    service.open_document(uri, None, text)
    service.open_document(other_uri, None, other_text)
    _complete(service, other_uri, other_text, other_offset)  # the KV cache holds another file
    service.worker.drop_ahead()
    runs = _ahead(service)["runs"]
    service.cursor_rests(uri, None, text, offset, "python")
    _until(lambda: _ahead(service)["runs"] > runs)
    answer = _complete(service, uri, text, offset)
    assert answer.source == "cache"
    # A key the model did not suggest: its prompt is warm, only the typed end is evaluated.
    typed = text[:offset] + "#" + text[offset:]
    service.suggestions.clear()
    service.worker.drop_ahead()
    warm = _complete(service, uri, typed, offset + 1)
    assert warm.completion is not None and warm.completion.stats.prompt_evaluated <= 8
    for closed in (uri, other_uri):
        service.close_document(closed, None)


def test_cancelling_a_request_that_took_over_work_done_ahead_stops_that_work(service: LookaheadService) -> None:
    uri, text, offset = _spot("textwrap.py", "    def _wrap_chunks(self, chunks):")
    service.open_document(uri, None, text)
    before = _ahead(service)
    served = service.status()["completions"]["served"]
    service.cursor_rests(uri, None, text, offset, "python")  # a cold prompt: seconds of work
    _until(lambda: bool(_ahead(service)["running"]))  # else the request takes over work not started
    request = service.complete(uri, None, text, offset, "python", invoked=True)
    assert _ahead(service)["adopted"] == before["adopted"] + 1
    assert request.cancel()  # as the server's asyncio task does on $/cancelRequest
    service.cancel(request)
    deadline = time.monotonic() + 60
    while _ahead(service)["stopped"] == before["stopped"]:
        assert time.monotonic() < deadline, "the work the request took over went on"
        time.sleep(0.05)
    time.sleep(1)
    assert service.status()["completions"]["served"] == served, "the model ran for a cancelled request"
    service.close_document(uri, None)


def test_a_request_that_took_over_work_done_ahead_waits_for_its_own_answer_only(service: LookaheadService) -> None:
    """Work done ahead decodes up to the token budget without stop rules; the request that
    takes it over waits until its one line is there, not for the rest, and is shown what its
    own completion shows."""
    service.configure({"maxTokens": 48, "multiline": "never"})
    try:
        uri, text, offset = _spot("textwrap.py", "        # Arrange in reverse order")
        text = text[:offset] + text[text.index("\n", offset) :]  # the comment's end not typed yet
        service.open_document(uri, None, text)
        adopted = _ahead(service)["adopted"]
        service.cursor_rests(uri, None, text, offset, "python")  # a cold prompt: seconds of work
        answer = _complete(service, uri, text, offset)
        assert _ahead(service)["adopted"] == adopted + 1
        assert answer.completion is not None and answer.completion.stop_reason == "answered"
        assert answer.completion.stats.tokens < 48
        service.suggestions.clear()
        service.worker.drop_ahead()
        own = _complete(service, uri, text, offset)
        assert own.completion is not None and own.completion.stop_reason == "stop-rule"
        assert answer.text == own.text != ""
        service.close_document(uri, None)
    finally:
        service.configure({"maxTokens": 12, "multiline": "auto"})


def test_coming_back_to_a_file_starts_from_its_saved_kv_state(service: LookaheadService) -> None:
    service.configure({"workAhead": False})
    try:
        (uri, text, offset), (other_uri, other_text, other_offset) = _spot(*SPOTS[2]), _spot(*SPOTS[3])
        _complete(service, uri, text, offset)
        _complete(service, other_uri, other_text, other_offset)
        restored = _ahead(service)["kv_restored"]
        back = _complete(service, uri, text[:offset] + " " + text[offset:], offset + 1)
        assert back.completion is not None and back.completion.stats.prompt_evaluated <= 8
        assert _ahead(service)["kv_restored"] == restored + 1
        assert _ahead(service)["kv_states"] >= 1
    finally:
        service.configure({"workAhead": True})


def test_where_the_cursor_rested_while_the_model_loaded_is_computed_once_it_is_ready() -> None:
    """An editor opens a file as it starts the daemon: its cursor report comes while the model
    loads, and the completion there is computed as soon as the model is ready."""
    fresh = LookaheadService(RecordingClient(), CACHE)
    fresh.configure(SETTINGS)
    fresh.start_model()
    try:
        uri, text, offset = _spot(*SPOTS[2])
        fresh.open_document(uri, None, text)
        fresh.cursor_rests(uri, None, text, offset, "python")
        assert fresh.status()["model_state"] == "loading"
        _until(lambda: fresh.status()["model_state"] != "loading")
        _until(lambda: _ahead(fresh)["runs"] > 0)
        answer = _complete(fresh, uri, text, offset)
        assert answer.source == "cache"
    finally:
        fresh.shutdown()


def test_a_cold_prompt_is_cut_short_and_the_whole_one_evaluated_while_idle(service: LookaheadService) -> None:
    """A file opened far from its start: the first suggestion comes from a short prompt (the
    text just before the cursor), the whole prompt is evaluated while the model is idle, and
    the next key is answered from it, only the typed end evaluated."""
    _cut_every_cold_prompt(service)
    try:
        uri, text, offset = _spot("pprint.py", "    def _format(self, object, stream, indent, allowance, context, level):")
        service.open_document(uri, None, text)
        before = _ahead(service)
        first = _complete(service, uri, text, offset)
        assert first.completion is not None and first.completion.stats.short_prompt
        assert first.completion.stats.prompt_tokens <= MIN_SHORT_TOKENS
        _until(lambda: _ahead(service)["warmed_tokens"] > before["warmed_tokens"] + 1000)
        assert _ahead(service)["short_prompts"] > before["short_prompts"]
        typed = text[:offset] + "#" + text[offset:]
        service.suggestions.clear()
        service.worker.drop_ahead()
        warm = _complete(service, uri, typed, offset + 1)
        assert warm.completion is not None and not warm.completion.stats.short_prompt
        assert warm.completion.stats.prompt_tokens > 1000
        assert warm.completion.stats.prompt_evaluated <= 8
        service.close_document(uri, None)
    finally:
        service.configure({"coldPromptMs": None})
        # The work ahead this leaves is stopped before the next test counts.
        service.worker.drop_ahead()
        service.worker.submit_chore(lambda cancel: Computed()).result(timeout=WAIT_S)


def test_a_suggestion_from_a_short_prompt_gets_its_next_places_before_the_whole_prompt(
    new_session: LookaheadService,
) -> None:
    """A first suggestion that came from a short prompt: the places after it (the end of the
    accepted text, the line after Enter) are prepared before the whole prompt is evaluated,
    which would have replaced them: the next key needs them first."""
    service = new_session
    _cut_every_cold_prompt(service, {"multiline": "never"})
    checked = 0
    for name, before in SPOTS:
        uri, text, cut = _line_end_spot(name, before)
        service.open_document(uri, None, text)
        warmed = _ahead(service)["warmed_tokens"]
        first = _complete(service, uri, text, cut)
        assert first.completion is not None and first.completion.stats.short_prompt
        if first.text:
            accepted = text[:cut] + first.text
            entered = accepted + after_enter(accepted, "python")
            _until(lambda: service.suggestions.lookup(uri, entered, text[cut:]) is not None)
            checked += 1
        # And the whole prompt after them.
        _until(lambda: _ahead(service)["warmed_tokens"] > warmed + 1000)
        service.close_document(uri, None)
    assert checked >= 2, "too few suggestions to check"


def test_work_ahead_off_leaves_the_model_idle(service: LookaheadService) -> None:
    service.configure({"workAhead": False, "coldPromptMs": 1})
    try:
        # A file no other test opens: its prompt is cold.
        uri, text, offset = _spot("calendar.py", "    def formatmonth(self, theyear, themonth, w=0, l=0):")
        _settled(service)  # the work ahead of the tests before, stopped by the change
        before = _ahead(service)
        shown = _complete(service, uri, text, offset)
        service.cursor_rests(uri, None, text, offset + 1, "python")
        time.sleep(1.0)
        after = _ahead(service)
        assert (after["runs"], after["stopped"]) == (before["runs"], before["stopped"])
        assert after["enabled"] is False
        assert shown.source == "model"
        # Nothing would evaluate the whole prompt later: it is not cut.
        assert shown.completion is not None and not shown.completion.stats.short_prompt
        assert after["warmed_tokens"] == before["warmed_tokens"]
    finally:
        service.configure({"workAhead": True, "coldPromptMs": None})


def test_without_cursor_reports_the_end_of_the_last_edit_is_computed_once_edits_pause() -> None:
    """A fresh session (as Neovim's or Emacs's, which send no lookahead/cursor)."""
    service = LookaheadService(RecordingClient(), CACHE)
    service.configure(SETTINGS)
    service.start_model()
    try:
        _until(lambda: service.status()["model_state"] == "ready")
        uri, text, offset = _spot(*SPOTS[2])
        service.open_document(uri, None, text)
        service.edited(uri, None, text, offset, "python")
        assert _ahead(service)["runs"] == 0, "work ahead started before the edits paused"
        _until(lambda: _ahead(service)["runs"] == 1)
        assert _complete(service, uri, text, offset).source == "cache"
        # The places after that suggestion, prepared next, are not what this test is about.
        service.worker.drop_ahead()
        _settled(service)
        # Once the editor reports its cursor, edits no longer stand for it.
        service.cursor_rests(uri, None, text, offset, "python")  # known already: nothing to do
        runs = _ahead(service)["runs"]
        service.edited(uri, None, text, offset + 1, "python")
        time.sleep(1.5)
        assert _ahead(service)["runs"] == runs
    finally:
        service.shutdown()
