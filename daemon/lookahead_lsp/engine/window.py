"""The lookahead (Jacobi) window and its n-gram pool (Fu et al., "Break the Sequential
Dependency of LLM Inference Using Lookahead Decoding", 2024).

The window holds `levels` = N - 1 rows of W guessed tokens. Column i is one KV sequence: the
current token, level-0 guesses 0..i, then the level-1..N-2 guesses of column i, at consecutive
positions. Each pass turns the model's output at the top of every column into an N-gram for the
pool (keyed by its first token) and shifts the rows up; n-grams from the pool that start with
the current token are verified as candidates in the next passes."""

from __future__ import annotations

import random
from collections.abc import Sequence
from dataclasses import dataclass

from lookahead_lsp.engine.batch import Batch


@dataclass(frozen=True)
class LookaheadShape:
    width: int = 4  # W: columns (parallel guesses) per pass
    ngram: int = 4  # N: n-gram length, so N - 1 levels
    candidates: int = 4  # G: pool n-grams verified per pass

    @property
    def positions(self) -> int:
        return self.width * (self.ngram - 1)


class LookaheadWindow:
    def __init__(self, shape: LookaheadShape, seed_tokens: Sequence[int], seed: int = 0) -> None:
        if shape.width < 1 or shape.ngram < 2 or shape.candidates < 0:
            raise ValueError("lookahead needs width >= 1, ngram >= 2 and candidates >= 0")
        self.shape = shape
        rng = random.Random(seed)
        # Guesses start as tokens of the prompt: plausible in this text, unlike random ids.
        choices = list(seed_tokens) or [0]
        self._levels = [[rng.choice(choices) for _ in range(shape.width)] for _ in range(shape.ngram - 1)]
        self._pool: dict[int, list[tuple[int, ...]]] = {}
        self._rows: list[int] = []

    def candidates(self, token: int) -> list[tuple[int, ...]]:
        """Up to G pooled continuations (N - 1 tokens each) of `token`, newest first."""
        return self._pool.get(token, [])[::-1][: self.shape.candidates]

    def add_to_batch(self, batch: Batch, n_past: int, first_seq: int) -> list[int]:
        """Adds the window after the current token (at n_past); column i uses sequence
        first_seq + i. Returns the sequences used."""
        width, top = self.shape.width, len(self._levels) - 1
        self._rows = []
        for c, token in enumerate(self._levels[0]):
            seqs = [first_seq + i for i in range(c, width)]
            row = batch.add(token, n_past + 1 + c, seqs, top == 0)
            if top == 0:
                self._rows.append(row)
        for level in range(1, top + 1):
            for i, token in enumerate(self._levels[level]):
                row = batch.add(token, n_past + 1 + i + level, (first_seq + i,), level == top)
                if level == top:
                    self._rows.append(row)
        return [first_seq + i for i in range(width)]

    @property
    def output_rows(self) -> list[int]:
        """The logits rows, one per column, of the last add_to_batch."""
        return self._rows

    def update(self, outputs: Sequence[int]) -> None:
        """Takes the model's choice at the top of each column: pools the column's n-gram and
        shifts the levels up."""
        for i, out in enumerate(outputs):
            gram = tuple(level[i] for level in self._levels[1:]) + (int(out),)
            pool = self._pool.setdefault(self._levels[0][i], [])
            if gram not in pool:
                pool.append(gram)
                if len(pool) > max(1, self.shape.candidates):
                    pool.pop(0)
        self._levels = self._levels[1:] + [[int(out) for out in outputs]]
