"""Cold prompts, cut to what the machine evaluates in a moment.

A prompt nothing of which is in the KV cache or a saved state (a file just opened, a jump far
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
keeps the length that state was built with: the prompt's start must stay put for its KV state
to be reused while the user types (prompt.py)."""

from __future__ import annotations

from collections import OrderedDict

STEP_TOKENS = 128
# Less context than this and a suggestion is a guess: a machine this slow waits instead.
MIN_SHORT_TOKENS = 256
# The whole prompt serves where it lacks at most this many tokens more than a short one: a
# fraction of a second buys the whole context back.
WHOLE_OVER_SHORT = 64
# Documents whose last short length is remembered (a few bytes each).
_REMEMBERED = 64


class ShortLengths:
    """The lengths in tokens a short prompt may have: the one a cold_prompt_ms budget and the
    cost of a prompt token give now (a multiple of STEP_TOKENS, changed only when the cost moves
    it more than a step), and the one the document's last short prompt had."""

    def __init__(self) -> None:
        self._now: int | None = None
        self._used: OrderedDict[str, int] = OrderedDict()

    def candidates(self, owner: str | None, cold_prompt_ms: float, token_ms: float) -> list[int]:
        fits = max(MIN_SHORT_TOKENS, int(cold_prompt_ms / token_ms) // STEP_TOKENS * STEP_TOKENS)
        if self._now is None or abs(fits - self._now) > STEP_TOKENS:
            self._now = fits
        last = self._used.get(owner) if owner else None
        return [self._now] if last is None or last == self._now else [self._now, last]

    def used(self, owner: str | None, length: int) -> None:
        """The document's short prompt was built with `length`."""
        if not owner:
            return
        self._used[owner] = length
        self._used.move_to_end(owner)
        while len(self._used) > _REMEMBERED:
            self._used.popitem(last=False)
