"""Token healing: a cursor at the end of a partly typed word leaves the prompt ending in a token
that the model would rarely have seen there ("de" of "def"), and the model continues that token
instead of finishing the word ("de_..."). So the prompt gives up its last token and the first
generated token must start with that token's text: the model picks the word's whole token."""

from __future__ import annotations

import bisect
import ctypes

import numpy as np
import numpy.typing as npt

from lookahead_lsp.base.tokenizer import Tokenizer

# The highest code point: every string starting with `s` sorts between s and s + _LAST.
_LAST = "\U0010ffff"


def mid_word(prefix: str, suffix: str) -> bool:
    """Whether the cursor ends a word being typed: a word character before it, none after."""
    return bool(prefix) and _is_word(prefix[-1]) and not (suffix and _is_word(suffix[0]))


def _is_word(char: str) -> bool:
    return char.isalnum() or char == "_"


class TokenPrefixes:
    """The vocabulary's token texts, sorted, to find every token that starts with a text."""

    def __init__(self, tokenizer: Tokenizer) -> None:
        buffer = ctypes.create_string_buffer(256)
        pairs: list[tuple[str, int]] = []
        for token in range(tokenizer.n_vocab):
            piece = tokenizer.piece(token, buffer)
            if piece:  # control tokens render as nothing and never qualify
                pairs.append((piece.decode("utf-8", "replace"), token))
        pairs.sort()
        self._texts = [text for text, _ in pairs]
        self._ids = np.array([token for _, token in pairs], dtype=np.int32)

    def starting_with(self, text: str) -> npt.NDArray[np.int32]:
        lo = bisect.bisect_left(self._texts, text)
        hi = bisect.bisect_left(self._texts, text + _LAST, lo)
        return self._ids[lo:hi]
