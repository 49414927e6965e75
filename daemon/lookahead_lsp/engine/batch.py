"""A reusable llama_batch whose arrays are numpy buffers owned here, filled in place: one token
at a time, or by slices where tokens come in runs (a prompt chunk, a token tree)."""

from __future__ import annotations

import ctypes
from collections.abc import Sequence

import llama_cpp
import numpy as np
import numpy.typing as npt


class EngineError(RuntimeError):
    """llama.cpp refused a batch (no room left in the KV cache, or an internal failure)."""



class Batch:
    """A reusable llama_batch of up to `capacity` tokens. Its arrays are numpy buffers owned
    here and filled in place, by slices where tokens come in runs."""

    def __init__(self, capacity: int, n_seq_max: int) -> None:
        self.capacity = capacity
        self.n_seq_max = n_seq_max
        self.token = np.zeros(capacity, dtype=np.int32)
        self.pos = np.zeros(capacity, dtype=np.int32)
        self.n_seq_id = np.zeros(capacity, dtype=np.int32)
        self.seq_id = np.zeros((capacity, n_seq_max), dtype=np.int32)
        self.output = np.zeros(capacity, dtype=np.int8)
        seq_pointer = ctypes.POINTER(llama_cpp.llama_seq_id)
        row_bytes = self.seq_id.strides[0]
        self._seq_rows = (seq_pointer * (capacity + 1))(
            *(ctypes.cast(self.seq_id.ctypes.data + i * row_bytes, seq_pointer) for i in range(capacity))
        )
        self._native = llama_cpp.llama_batch(
            n_tokens=0,
            token=self.token.ctypes.data_as(ctypes.POINTER(llama_cpp.llama_token)),
            embd=None,
            pos=self.pos.ctypes.data_as(ctypes.POINTER(llama_cpp.llama_pos)),
            n_seq_id=self.n_seq_id.ctypes.data_as(ctypes.POINTER(ctypes.c_int32)),
            seq_id=self._seq_rows,
            logits=self.output.ctypes.data_as(ctypes.POINTER(ctypes.c_int8)),
        )
        self.size = 0
        self.n_outputs = 0

    def clear(self) -> None:
        self.size = 0
        self.n_outputs = 0

    def add(self, token: int, pos: int, seqs: Sequence[int], logits: bool) -> int:
        """Appends a token; returns its output row (or -1 without logits)."""
        i = self._reserve(1)
        if not seqs or len(seqs) > self.n_seq_max:
            raise EngineError(f"a token needs 1..{self.n_seq_max} sequences, got {len(seqs)}")
        self.token[i] = token
        self.pos[i] = pos
        self.n_seq_id[i] = len(seqs)
        self.seq_id[i, : len(seqs)] = seqs
        self.output[i] = logits
        self.size += 1
        if not logits:
            return -1
        self.n_outputs += 1
        return self.n_outputs - 1

    def add_run(self, tokens: Sequence[int], first_pos: int, seq: int) -> None:
        """Appends tokens at consecutive positions of one sequence, without outputs."""
        n = len(tokens)
        i = self._reserve(n)
        self.token[i : i + n] = tokens
        self.pos[i : i + n] = np.arange(first_pos, first_pos + n, dtype=np.int32)
        self.n_seq_id[i : i + n] = 1
        self.seq_id[i : i + n, 0] = seq
        self.output[i : i + n] = 0
        self.size += n

    def add_outputs(self, tokens: Sequence[int], positions: npt.NDArray[np.int32], members: npt.NDArray[np.bool_], first_seq: int) -> int:
        """Appends tokens that each ask for an output; token i belongs to the sequences
        first_seq + j for every j where members[i, j]. Returns the first one's output row (the
        others follow in order)."""
        n = len(tokens)
        if members.shape[1] > self.n_seq_max:
            raise EngineError(f"a token needs 1..{self.n_seq_max} sequences, got {members.shape[1]}")
        i = self._reserve(n)
        counts = members.sum(axis=1)
        if n and counts.min() < 1:
            raise EngineError("a token needs at least one sequence")
        self.token[i : i + n] = tokens
        self.pos[i : i + n] = positions
        self.n_seq_id[i : i + n] = counts
        # A stable sort puts each row's member columns first, in order.
        order = np.argsort(~members, axis=1, kind="stable")
        self.seq_id[i : i + n, : members.shape[1]] = order + first_seq
        self.output[i : i + n] = 1
        self.size += n
        first_row = self.n_outputs
        self.n_outputs += n
        return first_row

    def has_seq(self, seq: int | None) -> bool:
        """Whether a token of the batch belongs to sequence `seq`."""
        n = self.size
        filled = np.arange(self.n_seq_max) < self.n_seq_id[:n, None]
        return bool(np.any((self.seq_id[:n] == seq) & filled))

    def output_positions(self) -> npt.NDArray[np.intp]:
        """The batch index of every output, in order."""
        return np.flatnonzero(self.output[: self.size])

    def _reserve(self, n: int) -> int:
        if self.size + n > self.capacity:
            raise EngineError(f"batch full ({self.capacity} tokens)")
        return self.size

    @property
    def native(self) -> llama_cpp.llama_batch:
        self._native.n_tokens = self.size
        return self._native
