"""Token healing: a cursor at the end of a partly typed word leaves the prompt ending in a token
that the model would rarely have seen there ("de" of "def"), and the model continues that token
instead of finishing the word ("de_..."). So the prompt gives up its last token and the first
generated token must start with that token's text: the model picks the word's whole token."""

from __future__ import annotations

import bisect

import numpy as np
import numpy.typing as npt

from lookahead_lsp._lookup import ids_by_text
from lookahead_lsp.base.tokenizer import Tokenizer

def mid_word(prefix: str, suffix: str) -> bool:
    """Whether the cursor ends a word being typed: a word character before it, none after."""
    return bool(prefix) and _is_word(prefix[-1]) and not (suffix and _is_word(suffix[0]))


def _is_word(char: str) -> bool:
    return char.isalnum() or char == "_"


class TokenPrefixes:
    """The vocabulary's token texts (UTF-8 bytes), sorted, to find every token whose text
    starts with given bytes. Bytes, not strings: they sort in code point order all the same,
    need no decoding, and a token that is part of a character matches as its bytes do."""

    def __init__(self, tokenizer: Tokenizer) -> None:
        data, offsets = tokenizer.pieces()
        # Control tokens render as nothing and never qualify.
        order = ids_by_text(data, offsets)
        bounds = offsets.tolist()
        self._texts = [data[bounds[token] : bounds[token + 1]] for token in order.tolist()]
        self._ids = order

    def starting_with(self, text: bytes) -> npt.NDArray[np.int32]:
        lo = bisect.bisect_left(self._texts, text)
        after = _after_all_starting_with(text)
        hi = len(self._texts) if after is None else bisect.bisect_left(self._texts, after, lo)
        return self._ids[lo:hi]


def _after_all_starting_with(text: bytes) -> bytes | None:
    """The least bytes greater than every bytes that starts with `text` (None: there are
    none, `text` being empty or all 0xff)."""
    stem = text.rstrip(b"\xff")
    return stem[:-1] + bytes([stem[-1] + 1]) if stem else None
