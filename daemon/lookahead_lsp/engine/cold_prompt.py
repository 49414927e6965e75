"""Cold prompts, cut to what the machine evaluates in a moment.

A prompt nothing of which is in the KV cache or a KV state (a file just opened, a jump far
into one) can take seconds to evaluate on a CPU: ~1.5k tokens at ~4.5 ms a token is 7 s on a
two-core laptop, while the user waits for a first suggestion. Where evaluating what the cache
lacks of a request's prompt would take longer than `cold_prompt_ms`, the request gets a short
prompt instead: the text just before the cursor, as many tokens as this machine evaluates in
that time, without the context of other files. The full prompt is evaluated while the
model is idle (`Engine.warm`), and serves again once the cache lacks at most WHOLE_OVER_SHORT
tokens more of it than of the short one: a key never waits for the rest of a warming.

Which of the two a request gets is decided by the tokens the cache holds, so it never changes
what the model produces for the prompt it is given. The short prompt's length moves in steps,
and only when the cost measured moves a lot; a document whose short prompt has a state at hand
keeps the length that state was built with, and where that prompt started: the prompt's start
must stay put for its KV state to be reused while the user types. A window that slid with the
text (prompt.py's grid) moved its start every ~130 characters typed at 256 tokens, and the next
key evaluated all of it again; kept where it was, the prompt grows up to GROWTH times its
length before it moves (~15 times less often)."""

from __future__ import annotations

from collections import OrderedDict
from dataclasses import dataclass

STEP_TOKENS = 128
# Less context than this and a suggestion is a guess: a machine this slow waits instead.
MIN_SHORT_TOKENS = 256
# The whole prompt serves where it lacks at most this many tokens more than a short one: a
# fraction of a second buys the whole context back.
WHOLE_OVER_SHORT = 64
# A short prompt kept at its start grows up to this many times its length before it moves.
GROWTH = 2
# Documents whose last short prompt is remembered: its length and the start of its text (the
# offset and the characters there, which must still be the document's for the start to hold).
_REMEMBERED = 64
_ANCHOR_CHARS = 64


@dataclass(frozen=True)
class _LastShort:
    length: int
    start: int | None
    text: str


class ShortLengths:
    """The lengths in tokens a short prompt may have: the one a cold_prompt_ms budget and the
    cost of a prompt token give now (a multiple of STEP_TOKENS, changed only when the cost moves
    it more than a step), and the one the document's last short prompt had."""

    def __init__(self) -> None:
        self._now: int | None = None
        self._used: OrderedDict[str, _LastShort] = OrderedDict()

    def candidates(self, owner: str | None, cold_prompt_ms: float, token_ms: float) -> list[int]:
        fits = max(MIN_SHORT_TOKENS, int(cold_prompt_ms / token_ms) // STEP_TOKENS * STEP_TOKENS)
        if self._now is None or abs(fits - self._now) > STEP_TOKENS:
            self._now = fits
        last = self._used.get(owner) if owner else None
        return [self._now] if last is None or last.length == self._now else [self._now, last.length]

    def start(self, owner: str | None, prefix: str) -> int | None:
        """Where the document's last short prompt started in its text, if the text there is
        still what it was (an edit above it moves everything)."""
        last = self._used.get(owner) if owner else None
        if last is None or last.start is None:
            return None
        return last.start if prefix.startswith(last.text, last.start) else None

    def used(self, owner: str | None, length: int, prefix: str, start: int | None) -> None:
        """The document's short prompt was built with `length`, its text from `start` of
        `prefix` (None: not at a known character)."""
        if not owner:
            return
        text = prefix[start : start + _ANCHOR_CHARS] if start is not None else ""
        self._used[owner] = _LastShort(length, start, text)
        self._used.move_to_end(owner)
        while len(self._used) > _REMEMBERED:
            self._used.popitem(last=False)
