"""Cold prompts, cut to what the machine evaluates in a moment.

A prompt nothing of which is in the KV cache or a saved state (a file just opened, a jump far
into one) can take seconds to evaluate on a CPU: ~1.5k tokens at ~4.5 ms a token is 7 s on a
two-core laptop, while the user waits for a first suggestion. Where evaluating what the cache
lacks of a request's prompt would take longer than `cold_prompt_ms`, the request gets a short
prompt instead: the text just before the cursor, as many tokens as this machine evaluates in
that time (the extra context of other files goes first). The full prompt is evaluated while the
model is idle (`Engine.warm`); once its state is at hand, or near enough that the rest fits in
the time, it serves again.

Which of the two a request gets is decided by the tokens the cache holds, so it never changes
what the model produces for the prompt it is given. The short prompt's length moves in steps,
and only when the cost measured moves a lot: its start must stay put for its KV state to be
reused while the user types (prompt.py)."""

from __future__ import annotations

STEP_TOKENS = 128
# Less context than this and a suggestion is a guess: a machine this slow waits instead.
MIN_SHORT_TOKENS = 256


class ShortLength:
    """The short prompt's length in tokens, as a cold_prompt_ms budget and the cost of a
    prompt token give it: a multiple of STEP_TOKENS, changed only when the cost moves it more
    than a step."""

    def __init__(self) -> None:
        self._tokens: int | None = None

    def tokens(self, cold_prompt_ms: float, token_ms: float) -> int:
        fits = max(MIN_SHORT_TOKENS, int(cold_prompt_ms / token_ms) // STEP_TOKENS * STEP_TOKENS)
        if self._tokens is None or abs(fits - self._tokens) > STEP_TOKENS:
            self._tokens = fits
        return self._tokens
