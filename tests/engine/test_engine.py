"""The speculative engine with the real default model: every emitted token is the argmax of the
pass that verified it, speculative output departs from plain greedy decoding only at near-ties,
the KV cache is reused across requests, cancellation leaves the next request correct, and prompts
are built as the model expects (fill-in-the-middle with a tiny GGUF written here)."""

from __future__ import annotations

import dataclasses
import sysconfig
import threading
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest

from lookahead_lsp._lookup import NgramCache, PassInterrupt
from lookahead_lsp.engine import (
    CancelToken,
    Completion,
    CompletionRequest,
    ContextChunk,
    DecodeOptions,
    DraftCaches,
    Engine,
    EngineSettings,
    PromptWindows,
)
from lookahead_lsp.engine.cold_prompt import MIN_SHORT_TOKENS
from lookahead_lsp.engine.cost_model import CostModel, OnlineCost
from lookahead_lsp.engine.healing import mid_word
from lookahead_lsp.engine.runtime import Cancelled
from lookahead_lsp.engine.stopping import Stopper, shown_from_continuation
from lookahead_lsp.base.errors import UserError
from lookahead_lsp.base.tokenizer import tokenize_file_text
from support.engines import engine_on
from support.tiny_gguf import write_tiny_gguf

# A margin of the plain run's top two logits below which batch-shape noise may flip the argmax.
NEAR_TIE = 0.5
STDLIB = Path(sysconfig.get_paths()["stdlib"])
# (file, a line whose start is the cursor): real code with repetition inside the file.
TASKS = [
    ("json/encoder.py", "        if _indent is not None:"),
    ("argparse.py", "    def _get_optional_actions(self):"),
    ("csv.py", "                d[key] = self.restval"),
    ("string.py", "    def convert_field("),
]
SPECULATIVE_MODES = ("lookup", "lookahead", "auto")


@pytest.fixture(scope="module")
def engine(model_path: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Engine]:
    loaded = engine_on(model_path, tmp_path_factory.mktemp("cost"), 2048, threads=None)
    yield loaded
    loaded.close()


def _task(engine: Engine, name: str, marker: str) -> tuple[CompletionRequest, DraftCaches]:
    """The file cut at the start of `marker`'s line (first match); its text before the cursor
    feeds the workspace cache, the text after it feeds nothing."""
    text = (STDLIB / name).read_text()
    cut = text.index(marker)
    prefix = text[:cut]
    workspace = NgramCache(engine.tokenizer.n_vocab)
    workspace.add(tokenize_file_text(engine.tokenizer, prefix.encode()))
    return CompletionRequest(prefix, "", name), DraftCaches(workspace=workspace)


def _run(engine: Engine, request: CompletionRequest, caches: DraftCaches, draft: str, **kw: object) -> Completion:
    options = DecodeOptions(draft=draft, max_tokens=48, stop_rules=False, trace=True, **kw)  # type: ignore[arg-type]
    engine.previous = None  # no "previous completion" draft from an earlier run of the same prompt
    return engine.complete(request, options, caches)


def _check_verified(result: Completion) -> None:
    """Every emitted token is the top logit of the row that verified it."""
    assert len(result.trace) == len(result.tokens) > 0
    for step in result.trace:
        assert step.token == step.top1, step


def _first_difference(a: list[int], b: list[int]) -> int | None:
    for i, (x, y) in enumerate(zip(a, b)):
        if x != y:
            return i
    return None


@pytest.mark.parametrize("name,marker", TASKS)
def test_speculation_is_lossless_up_to_near_ties(engine: Engine, name: str, marker: str) -> None:
    request, caches = _task(engine, name, marker)
    plain = _run(engine, request, caches, "none")
    _check_verified(plain)
    assert plain.stats.passes == plain.stats.tokens  # one token per pass
    for mode in SPECULATIVE_MODES:
        fast = _run(engine, request, caches, mode)
        _check_verified(fast)
        at = _first_difference(plain.tokens, fast.tokens)
        if at is None:
            assert fast.tokens[: len(plain.tokens)] == plain.tokens[: len(fast.tokens)]
        else:
            margin = plain.trace[at].margin
            assert margin < NEAR_TIE, f"{mode} departs from plain decoding at token {at}, margin {margin:.3f}"


def test_lookup_accepts_drafts_on_repetitive_code(engine: Engine) -> None:
    # Code that continues a pattern seen just before: drafts must be accepted, several per pass.
    prefix = "".join(f"    def test_case_{i}(self):\n        self.assertEqual(run({i}), {i})\n\n" for i in range(12))
    request = CompletionRequest("class T:\n" + prefix, "", "t.py")
    result = _run(engine, request, DraftCaches(), "lookup")
    _check_verified(result)
    assert result.stats.accepted_by_source["context"] > 0
    assert result.stats.tokens_per_pass > 1.5
    assert "def test_case_12" in result.text


def test_kv_cache_is_reused_for_the_next_keystroke(engine: Engine) -> None:
    request, caches = _task(engine, *TASKS[0])
    engine.forget_kv()
    cold = _run(engine, request, caches, "none")
    assert cold.stats.prompt_evaluated == cold.stats.prompt_tokens - 1
    # The user types two characters: only the changed end of the prompt is evaluated.
    typed = CompletionRequest(request.prefix + "  ", "", request.path)
    warm = _run(engine, typed, caches, "none")
    assert warm.stats.prompt_evaluated <= 4
    # The same request from an empty cache gives the same completion (up to near-ties).
    engine.forget_kv()
    fresh = _run(engine, typed, caches, "none")
    assert fresh.stats.prompt_evaluated == fresh.stats.prompt_tokens - 1
    at = _first_difference(warm.tokens, fresh.tokens)
    assert at is None or fresh.trace[at].margin < NEAR_TIE


def test_coming_back_to_a_file_puts_its_kv_state_back(engine: Engine) -> None:
    first_file, caches = _task(engine, *TASKS[0])
    other_file, _ = _task(engine, *TASKS[1])
    engine.forget_kv()
    first = _run(engine, first_file, caches, "none")
    _run(engine, other_file, caches, "none")  # the other file's prompt takes the KV cache
    assert len(engine.kv_states) == 1 and engine.kv_states.nbytes > 0
    back = _run(engine, first_file, caches, "none")
    assert back.stats.prompt_evaluated <= 4, "the first file's prompt was evaluated again"
    assert engine.kv_states.stats.restored == 1
    at = _first_difference(first.tokens, back.tokens)
    assert at is None or first.trace[at].margin < NEAR_TIE
    # With no memory for saved states, coming back costs the whole prompt again.
    engine.forget_kv()
    engine.kv_states.budget_bytes = 0
    try:
        _run(engine, first_file, caches, "none")
        _run(engine, other_file, caches, "none")
        again = _run(engine, first_file, caches, "none")
        assert len(engine.kv_states) == 0
        assert again.stats.prompt_evaluated >= again.stats.prompt_tokens - 8  # BOS and the like shared
    finally:
        engine.kv_states.budget_bytes = engine.settings.kv_state_mib * 2**20


def test_coming_back_after_editing_another_file_still_puts_the_state_back(engine: Engine) -> None:
    """The other file's edit joins the prompt's extra context, which comes first: the prompt is
    built with the context the saved state had, or nothing of it could serve."""
    first_file, caches = _task(engine, *TASKS[2])
    other_file, _ = _task(engine, *TASKS[3])
    engine.forget_kv()
    _run(engine, first_file, caches, "none")
    edited_first = ContextChunk(first_file.path, first_file.prefix[-400:])
    _run(engine, dataclasses.replace(other_file, extra_context=(edited_first,)), caches, "none")
    edited_other = ContextChunk(other_file.path, other_file.prefix[-400:])
    back = _run(engine, dataclasses.replace(first_file, extra_context=(edited_other,)), caches, "none")
    assert back.stats.prompt_evaluated <= 4, "the saved state did not serve"


class _CancelAfter(CancelToken):
    """Set once it has been looked at `checks` times (the engine looks before each pass)."""

    def __init__(self, checks: int) -> None:
        super().__init__()
        self._left = checks

    @property
    def cancelled(self) -> bool:
        self._left -= 1
        return self._left < 0


def _cutting(engine: Engine, **kw: object) -> DecodeOptions:
    """Options under which a prompt is cut when what the cache lacks of it would take longer
    than 64 tokens do here: every cold prompt, to the shortest length."""
    engine.complete(CompletionRequest("x = 1\n" * 40, "", "timing.py"), DecodeOptions(draft="none", max_tokens=1))
    token_ms = engine.runtime.prompt_token_ms
    assert token_ms is not None
    return DecodeOptions(draft="none", max_tokens=8, stop_rules=False, trace=True, cold_prompt_ms=64 * token_ms, **kw)  # type: ignore[arg-type]


def test_a_cold_prompt_is_cut_short_until_the_whole_one_is_warm(engine: Engine) -> None:
    request, caches = _task(engine, *TASKS[1])
    typed = CompletionRequest(request.prefix + "  ", "", request.path)
    cut = _cutting(engine)
    engine.forget_kv()
    engine.previous = None
    whole = engine.complete(request, dataclasses.replace(cut, cold_prompt_ms=None), caches)
    assert not whole.stats.short_prompt and whole.stats.prompt_tokens > 1000
    engine.forget_kv()
    cold = engine.complete(request, cut, caches)
    assert cold.stats.short_prompt
    assert cold.stats.prompt_tokens <= MIN_SHORT_TOKENS
    assert cold.stats.prompt_evaluated == cold.stats.prompt_tokens - 1
    # The short prompt's start stays put: typing after it evaluates only the typed end.
    key = engine.complete(typed, cut, caches)
    assert key.stats.short_prompt and key.stats.prompt_evaluated <= 4
    # Warmed while idle, the whole prompt serves the next key, only its end evaluated.
    warmed = engine.warm(typed, dataclasses.replace(cut, prefill_pass_ms=200.0), CancelToken())
    assert warmed >= whole.stats.prompt_tokens - 8
    after = engine.complete(CompletionRequest(typed.prefix + "x", "", request.path), cut, caches)
    assert not after.stats.short_prompt
    assert after.stats.prompt_tokens > 1000 and after.stats.prompt_evaluated <= 4
    # With the whole prompt's state at hand, the completion is the one it gives from scratch.
    engine.forget_kv()
    again = engine.complete(request, cut, caches)
    warm_again = engine.warm(request, cut, CancelToken())
    assert again.stats.short_prompt and warm_again > 1000
    engine.previous = None
    served = engine.complete(request, cut, caches)
    assert not served.stats.short_prompt and served.stats.prompt_evaluated <= 1
    at = _first_difference(whole.tokens, served.tokens)
    assert at is None or whole.trace[at].margin < NEAR_TIE


def test_a_short_prompt_leaves_the_other_files_out(engine: Engine) -> None:
    """Their share would be what the text before the cursor leaves: it would change at every
    key, and every key would evaluate the prompt again from there."""
    request, caches = _task(engine, *TASKS[2])
    other = ContextChunk("other.py", "def helper(value):\n    return value * 2\n" * 20)
    request = dataclasses.replace(request, extra_context=(other,))
    cut = _cutting(engine)
    engine.forget_kv()
    cold = engine.complete(request, cut, caches)
    assert cold.stats.short_prompt
    alone = dataclasses.replace(cut, windows=PromptWindows(extra_tokens=0))
    prompt = engine.build_prompt(request, alone, MIN_SHORT_TOKENS)  # the shortest, as _cutting makes it
    assert cold.stats.prompt_tokens == len(prompt.tokens)
    for typed in ("  ", "  i", "  if"):
        key = engine.complete(dataclasses.replace(request, prefix=request.prefix + typed), cut, caches)
        assert key.stats.short_prompt and key.stats.prompt_evaluated <= 4


def test_a_short_prompt_keeps_its_start_while_the_user_types(engine: Engine) -> None:
    """The file's real next 600 characters typed 20 at a time after a cold short prompt: every
    key evaluates only what was typed since the last (a window sliding with the text moved its
    start every ~130 characters, and that key evaluated the whole short prompt again)."""
    name, marker = TASKS[0]
    request, caches = _task(engine, name, marker)
    text = (STDLIB / name).read_text()
    cursor = text.index(marker)
    cut = _cutting(engine)
    engine.forget_kv()
    cold = engine.complete(request, cut, caches)
    assert cold.stats.short_prompt
    for end in range(20, 620, 20):
        typed = CompletionRequest(text[: cursor + end], "", request.path)
        key = engine.complete(typed, cut, caches)
        assert key.stats.short_prompt, end
        assert key.stats.prompt_evaluated <= 16, (end, key.stats.prompt_evaluated)
    assert key.stats.prompt_tokens > cold.stats.prompt_tokens + 100  # it grew instead of moving


def test_warming_stopped_midway_keeps_both_states(engine: Engine) -> None:
    """A request that interrupts the warming of a whole prompt gets its short prompt back from
    the saved states, and the warming resumes where it stopped."""
    request, caches = _task(engine, *TASKS[3])
    cut = _cutting(engine, prefill_chunk=64)
    engine.forget_kv()
    engine.complete(request, cut, caches)
    first_part = engine.warm(request, cut, _CancelAfter(4))
    assert first_part == 4 * 64
    key = engine.complete(CompletionRequest(request.prefix + " ", "", request.path), cut, caches)
    assert key.stats.short_prompt and key.stats.prompt_evaluated <= 4
    rest = engine.warm(request, cut, CancelToken())
    after = engine.complete(request, cut, caches)
    assert not after.stats.short_prompt and after.stats.prompt_evaluated <= 1
    assert first_part + rest <= after.stats.prompt_tokens, "the warming started over"


def test_cancel_during_generation_leaves_the_next_request_correct(engine: Engine) -> None:
    request, caches = _task(engine, *TASKS[1])
    reference = _run(engine, request, caches, "auto")
    cancel = CancelToken()
    options = DecodeOptions(draft="lookup", max_tokens=400, stop_rules=False)
    timer = threading.Timer(0.3, cancel.cancel)
    timer.start()
    try:
        cancelled = engine.complete(CompletionRequest(request.prefix + "\n", "", "x.py"), options, caches, cancel)
    finally:
        timer.cancel()
    assert cancelled.stop_reason == "cancelled"
    assert 0 < cancelled.stats.tokens < 400
    again = _run(engine, request, caches, "auto")
    at = _first_difference(reference.tokens, again.tokens)
    assert at is None or again.trace[at].margin < NEAR_TIE


def test_an_interrupt_ends_the_pass_under_way_and_the_cache_stays_as_before(engine: Engine) -> None:
    """A request that preempts work does not wait for that work's pass: a raised interrupt ends
    the pass during which llama.cpp reads it (here raised before a pass that the check between
    passes lets start), the cache holds what it held before that pass, and the next request
    continues from there to the text a fresh run gives."""
    request, caches = _task(engine, *TASKS[3])
    reference = _run(engine, request, caches, "none")
    runtime = engine.runtime
    engine.forget_kv()
    tokens = engine.build_prompt(request, DecodeOptions(max_tokens=48)).tokens
    kept = tokens[: len(tokens) // 2]
    runtime.prefill(kept, 512, lambda: False)
    interrupt = PassInterrupt()
    interrupt.raise_()
    with runtime.interrupted_by(interrupt), pytest.raises(Cancelled):
        runtime.prefill(tokens, 512, lambda: False)
    assert runtime.kv_tokens == kept
    # Outside, the interrupt is not read: passes run.
    assert runtime.prefill(tokens[: len(kept) + 8], 512, lambda: False) == 8
    again = _run(engine, request, caches, "none")
    assert again.stats.prompt_evaluated < len(tokens) - len(kept)
    at = _first_difference(reference.tokens, again.tokens)
    assert at is None or again.trace[at].margin < NEAR_TIE


def test_cancelling_raises_the_interrupt_of_the_pass_under_way() -> None:
    cancel = CancelToken()
    assert not cancel.interrupt.raised
    cancel.cancel()
    assert cancel.interrupt.raised and cancel.cancelled


def test_cancel_before_the_prompt_is_evaluated(engine: Engine) -> None:
    engine.forget_kv()
    request, caches = _task(engine, *TASKS[2])
    cancel = CancelToken()
    cancel.cancel()
    result = engine.complete(request, DecodeOptions(draft="none"), caches, cancel)
    assert result.stop_reason == "cancelled" and result.text == "" and result.stats.passes == 0
    # Whatever was evaluated is a prefix of the prompt, so the next request reuses it.
    after = _run(engine, request, caches, "none")
    assert after.stats.tokens == 48


def test_work_done_ahead_sizes_its_prompt_passes_by_time(engine: Engine) -> None:
    """A request arriving during work done ahead waits for the pass under way: with a time
    bound, passes shrink where the machine is slow (here a bound no pass meets: the smallest
    passes, after a small first one) and grow to the chunk where it is fast; the tokens held
    are the prompt's either way."""
    request, _ = _task(engine, *TASKS[0])
    tokens = tokenize_file_text(engine.tokenizer, request.prefix.encode()).tolist()[-600:]
    runtime = engine.runtime

    def passes(pass_ms: float | None) -> int:
        engine.forget_kv()
        checks = 0

        def cancelled() -> bool:
            nonlocal checks
            checks += 1  # once before each pass
            return False

        assert runtime.prefill(tokens, 128, cancelled, pass_ms) == len(tokens)
        assert runtime.kv_tokens == tokens
        return checks

    assert passes(None) == -(-600 // 128)
    assert passes(1e-6) == 1 + -(-(600 - 32) // 16)
    assert passes(1e6) == 1 + -(-(600 - 32) // 128)


@pytest.mark.parametrize("why", ["a request awaits it", "its next place follows"])
def test_work_done_ahead_stops_at_its_answer_when_asked(engine: Engine, why: str) -> None:
    """Work done ahead (no stop rules, up to the token budget) stops once the line a request at
    its cursor shows is known, where a request waits for it (it would wait for the whole
    continuation) or where the next place's work decodes the rest (until_answered); cut by the
    request's rules it shows what the request's own completion would."""
    request = CompletionRequest(STACK + "    def pop(self):\n", "", "stack.py")
    ahead = DecodeOptions(draft="none", max_tokens=48, stop_rules=False, multiline="never")
    engine.forget_kv()
    whole = engine.complete(request, ahead)
    assert whole.stop_reason == "max-tokens" and "\n" in whole.text.strip()
    awaited = threading.Event()
    if why == "a request awaits it":
        awaited.set()
    else:
        ahead = dataclasses.replace(ahead, until_answered=True)
    engine.forget_kv()
    cut_short = engine.complete(request, ahead, awaited=awaited)
    assert cut_short.stop_reason == "answered"
    assert cut_short.stats.tokens < whole.stats.tokens
    engine.forget_kv()
    own = engine.complete(request, DecodeOptions(draft="none", max_tokens=48, multiline="never"))
    stopper = Stopper(request.prefix, request.suffix, True, "never")
    assert shown_from_continuation(stopper, cut_short.text, ended=False, same_budget=False) == own.text != ""


def test_prefix_only_prompt_for_the_default_model(engine: Engine) -> None:
    assert not engine.fill_in_the_middle
    prompt = engine.prompts.build(CompletionRequest("x = 1\n", "y = 2\n", "a.py"), PromptWindows(), 1000)
    bos = engine.prompts.bos
    assert bos is not None
    assert prompt.tokens == [bos, *engine.tokenizer.tokenize("x = 1\n").tolist()]


def test_long_prompt_is_cut_from_the_far_end(engine: Engine) -> None:
    lines = [f"value_{i} = compute({i})\n" for i in range(3000)]
    request = CompletionRequest("".join(lines), "", "big.py")
    result = engine.complete(request, DecodeOptions(draft="none", max_tokens=8, stop_rules=False))
    assert result.stats.prompt_tokens <= 2048
    assert result.stats.tokens == 8
    # The near end survives, the far end is dropped.
    prompt = engine.prompts.build(request, PromptWindows(), 2048 - 8 - 64)
    text = engine.tokenizer.detokenize(prompt.tokens).decode()
    assert text.endswith("value_2999 = compute(2999)\n") and "value_0 " not in text
    assert result.text.startswith("value_")


def test_context_from_other_files_takes_the_far_end_of_a_long_prefix(engine: Engine) -> None:
    """A definition from another file makes the prompt no longer than the prefix's budget: the
    file's farthest lines make room for it, the lines near the cursor stay; a short file keeps
    all of its text."""
    chunk = ContextChunk("lib.py", "def compute(x):\n    return x * 2\n", (0, 2), "definitions")
    windows = PromptWindows(prefix_tokens=400)
    lines = [f"value_{i} = compute({i})\n" for i in range(400)]
    # The longest prefix that fits the budget alone.
    fits = max(n for n in range(1, len(lines)) if len(engine.tokenizer.tokenize("".join(lines[:n]))) <= 400 - 5)
    for prefix, cut in (("".join(lines[:fits]), True), (lines[0], False)):
        alone = engine.prompts.build(CompletionRequest(prefix, "", "big.py"), windows, 4000)
        with_chunk = engine.prompts.build(CompletionRequest(prefix, "", "big.py", (chunk,)), windows, 4000)
        text = engine.tokenizer.detokenize(with_chunk.tokens).decode()
        assert "def compute(x):" in text and text.endswith(prefix[-30:])
        taken = with_chunk.chunks[0][1]
        if cut:
            assert len(with_chunk.tokens) <= 1 + windows.prefix_tokens
            assert "value_0 =" in engine.tokenizer.detokenize(alone.tokens).decode() and "value_0 =" not in text
        else:
            assert len(with_chunk.tokens) == len(alone.tokens) + taken


def test_empty_document(engine: Engine) -> None:
    result = engine.complete(CompletionRequest("", "", "empty.py"), DecodeOptions(max_tokens=8))
    assert result.stats.prompt_tokens == 1  # the BOS token alone
    assert isinstance(result.text, str)


def test_time_budget_counts_generation_and_always_allows_one_pass(engine: Engine) -> None:
    request = CompletionRequest("def add(a, b):\n    return a +", "", "budget.py")
    result = engine.complete(request, DecodeOptions(draft="none", max_tokens=32, time_budget_ms=0.001))
    assert result.stop_reason == "time-budget"
    assert result.stats.passes == 1 and result.stats.tokens == 1 and result.text


STACK = "class Stack:\n    def __init__(self):\n        self.items = []\n\n    def push(self, item):\n        self.items.append(item)\n\n"


@pytest.mark.parametrize(
    ("prefix", "suffix", "start"),
    [
        (STACK + "    de", "", "f "),  # unhealed, the model continued the token "de": "letep = False"
        ("def add(a, b):\n    ret", "", "urn "),  # unhealed: " = a + b"
        ("import os\nprint(os.getc", ")\n", "wd()"),
    ],
)
def test_a_partly_typed_word_is_finished(engine: Engine, prefix: str, suffix: str, start: str) -> None:
    result = engine.complete(CompletionRequest(prefix, suffix, "healing.py"), DecodeOptions(max_tokens=16))
    assert result.text.startswith(start)


def test_token_prefixes_find_every_token_starting_with_a_text(engine: Engine) -> None:
    tokenizer = engine.tokenizer
    pieces = [tokenizer.piece(token) for token in range(tokenizer.n_vocab)]
    # Words, indentation, a character's first byte, and the highest byte values.
    for text in (b"de", b" sel", b"getc", b"_", b"    de", "é".encode()[:1], b"\xfe", b"\xff"):
        expected = sorted(t for t, piece in enumerate(pieces) if piece and piece.startswith(text))
        assert sorted(engine.token_prefixes().starting_with(text).tolist()) == expected
    assert len(engine.token_prefixes().starting_with(b"")) == sum(1 for piece in pieces if piece)
    assert mid_word("x = fo", "") and mid_word("x = fo", ")") and mid_word("a_1", " ")
    assert not mid_word("x = fo", "o") and not mid_word("x = ", "") and not mid_word("", "")


def test_mid_line_completion_stays_on_its_line(engine: Engine) -> None:
    request, caches = _task(engine, *TASKS[0])
    request = CompletionRequest(request.prefix + "        if self.", "", request.path)
    result = engine.complete(request, DecodeOptions(max_tokens=32), caches)
    assert "\n" not in result.text
    assert result.stop_reason in ("stop-rule", "max-tokens", "end-of-generation")


def test_missing_model_is_a_one_line_error(tmp_path: Path) -> None:
    missing = tmp_path / "nope.gguf"
    with pytest.raises(UserError, match="nope.gguf"):
        Engine(EngineSettings(missing))
    garbage = tmp_path / "garbage.gguf"
    garbage.write_bytes(b"not a model at all")
    with pytest.raises(UserError, match="garbage.gguf"):
        Engine(EngineSettings(garbage))


def test_cost_model_is_measured_once_and_cached(engine: Engine) -> None:
    cost = engine.cost_curve()
    assert cost.sizes[0] == 1 and all(b >= a for a, b in zip(cost.ms, cost.ms[1:]))
    assert cost.relative(1) == 1.0 and cost.relative(8) > 1.0
    files = list((engine.settings.cache_dir or Path()).glob("cost-*.json"))
    assert len(files) == 1


# -- fill-in-the-middle, with a tiny model written by the test -------------------------------


@pytest.fixture(scope="module")
def tiny_fim(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Engine]:
    folder = tmp_path_factory.mktemp("tiny")
    info = write_tiny_gguf(folder / "tiny-fim.gguf", fim=True, repo_and_file_tokens=True)
    loaded = engine_on(info.path, folder)
    yield loaded
    loaded.close()


def test_fim_prompt_layout(tiny_fim: Engine) -> None:
    fim = tiny_fim.prompts.fim
    assert fim is not None and fim.file_separator is not None and fim.repository is not None
    tok = tiny_fim.tokenizer
    request = CompletionRequest(
        "def f(x):\n    return ",
        "\n\nprint(f(2))\n",
        "pkg/a.py",
        (ContextChunk("pkg/b.py", "x = 1\n"),),
        repository="demo",
    )
    tokens = tiny_fim.prompts.build(request, PromptWindows(), 400).tokens
    prefix = tok.tokenize(request.prefix).tolist()
    suffix = tok.tokenize(request.suffix).tolist()
    # <repo>demo\n <sep>pkg/b.py\n x = 1\n <sep>pkg/a.py\n <pre>prefix <suf>suffix <mid>
    expected_tail = [fim.prefix, *prefix, fim.suffix, *suffix, fim.middle]
    assert tokens[-len(expected_tail) :] == expected_tail
    head = tokens[: -len(expected_tail)]
    assert head.count(fim.file_separator) == 2 and head.count(fim.repository) == 1
    rendered = tok.detokenize(head, special=True).decode()
    assert rendered.endswith("<|repo_name|>demo\n<|file_sep|>pkg/b.py\nx = 1\n<|file_sep|>pkg/a.py\n")


def test_fim_suffix_window_is_bounded(tiny_fim: Engine) -> None:
    request = CompletionRequest("a = 1\n", "b = 2\n" * 500, "a.py")
    windows = PromptWindows(prefix_tokens=64, suffix_tokens=20, extra_tokens=0)
    tokens = tiny_fim.prompts.build(request, windows, 400).tokens
    fim = tiny_fim.prompts.fim
    assert fim is not None
    suffix_part = tokens[tokens.index(fim.suffix) + 1 : tokens.index(fim.middle)]
    assert 0 < len(suffix_part) <= 20


@pytest.mark.parametrize("mode", ("none", "lookup", "lookahead", "auto"))
def test_every_mode_runs_on_a_fim_model(tiny_fim: Engine, mode: str) -> None:
    request = CompletionRequest("def f(x):\n    return x\n" * 20, "\n", "a.py")
    result = tiny_fim.complete(request, DecodeOptions(draft=mode, max_tokens=24, stop_rules=False, trace=True))
    assert 0 < result.stats.tokens <= 24
    for step in result.trace:
        assert step.token == step.top1
    # The next request starts from a consistent KV cache.
    again = tiny_fim.complete(request, DecodeOptions(draft="none", max_tokens=24, stop_rules=False))
    assert again.stats.prompt_evaluated <= 1
    assert np.all(np.asarray(again.tokens) >= 0)


def test_typing_the_start_of_a_completion_drafts_its_rest(engine: Engine) -> None:
    prefix = "class T:\n" + "".join(
        f"    def test_case_{i}(self):\n        self.assertEqual(run({i}), {i})\n\n" for i in range(6)
    )
    first = engine.complete(CompletionRequest(prefix, "", "t.py"), DecodeOptions(draft="none", max_tokens=24, stop_rules=False))
    # The user types the suggestion's first word (a whole token: a prompt ending inside a token
    # makes the model continue that token instead).
    typed = first.text[: first.text.index("def") + 3]
    # lookup, not auto: whether auto drafts here is the machine's cost curve's call (a busy
    # machine measured one that made it decline), and the policy has tests of its own.
    options = DecodeOptions(draft="lookup", max_tokens=24, stop_rules=False, trace=True)
    second = engine.complete(CompletionRequest(prefix + typed, "", "t.py"), options)
    _check_verified(second)
    assert second.stats.accepted_by_source["previous"] > 0
    assert second.stats.passes < second.stats.tokens
    assert first.text[len(typed) :].startswith(second.text[:10])


def test_auto_widens_where_passes_are_cheap(engine: Engine) -> None:
    """On a machine whose passes cost nearly the same whatever their width (a GPU), auto runs a
    lookahead window and longer drafts; on this CPU's measured curve it runs none."""
    request, caches = _task(engine, *TASKS[3])
    measured = engine.auto_policy().cost
    today = engine.cost_curve()  # the curve the run decides with (it moves during the run)
    cpu = _run(engine, request, caches, "auto")
    # The smallest window (W2 N3 G2) adds 8 positions to the current token's.
    assert cpu.stats.lookahead_window is None or today.relative(9) <= 1.1
    engine.auto_policy().cost = OnlineCost(CostModel((1, 8, 64), (10.0, 10.2, 10.8)))
    try:
        wide = _run(engine, request, caches, "auto", speculation_key="widen")
    finally:
        engine.auto_policy().cost = measured
    _check_verified(wide)
    assert wide.stats.lookahead_window == "W8 N4 G8"
    at = _first_difference(cpu.tokens, wide.tokens)
    assert at is None or cpu.trace[at].margin < NEAR_TIE
