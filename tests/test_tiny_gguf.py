"""The tiny GGUF model of tiny_gguf.py, as llama.cpp (through llama-cpp-python's low-level API)
loads, tokenizes and decodes it."""

from __future__ import annotations

import ctypes
import math
import os
from pathlib import Path
from typing import Iterator

import llama_cpp
import pytest

from support.tiny_gguf import (
    EOS_TEXT,
    FIM_MID_TEXT,
    FIM_PRE_TEXT,
    FIM_REP_TEXT,
    FIM_SEP_TEXT,
    FIM_SUF_TEXT,
    SPACE,
    TinyModelInfo,
    write_tiny_gguf,
)

Loaded = tuple[TinyModelInfo, llama_cpp.llama_model_p, llama_cpp.llama_vocab_p]


def _load(info: TinyModelInfo) -> tuple[llama_cpp.llama_model_p, llama_cpp.llama_vocab_p]:
    params = llama_cpp.llama_model_default_params()
    params.n_gpu_layers = 0
    model = llama_cpp.llama_model_load_from_file(os.fsencode(info.path), params)
    assert model is not None, f"llama.cpp did not load {info.path}"
    return model, llama_cpp.llama_model_get_vocab(model)


@pytest.fixture(scope="module")
def full(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Loaded]:
    """The default model (FIM with repo and file-separator tokens), loaded once."""
    info = write_tiny_gguf(tmp_path_factory.mktemp("tiny") / "full.gguf")
    model, vocab = _load(info)
    yield info, model, vocab
    llama_cpp.llama_model_free(model)


def _fim_ids(vocab: llama_cpp.llama_vocab_p) -> tuple[int, int, int, int, int]:
    return (
        llama_cpp.llama_vocab_fim_pre(vocab),
        llama_cpp.llama_vocab_fim_suf(vocab),
        llama_cpp.llama_vocab_fim_mid(vocab),
        llama_cpp.llama_vocab_fim_rep(vocab),
        llama_cpp.llama_vocab_fim_sep(vocab),
    )


def _tokenize(vocab: llama_cpp.llama_vocab_p, text: str, *, parse_special: bool) -> list[int]:
    data = text.encode()
    # Byte fallback makes one token per byte the most a text can need, plus the space prefix.
    capacity = len(data) + 2
    tokens = (llama_cpp.llama_token * capacity)()
    count = llama_cpp.llama_tokenize(vocab, data, len(data), tokens, capacity, False, parse_special)
    assert count >= 0
    return list(tokens[:count])


def _text(vocab: llama_cpp.llama_vocab_p, token: int) -> str:
    text: bytes = llama_cpp.llama_vocab_get_text(vocab, token)
    return text.decode()


def test_fim_ids_match_the_info(full: Loaded) -> None:
    info, _model, vocab = full

    assert llama_cpp.llama_vocab_n_tokens(vocab) == info.n_vocab
    assert _fim_ids(vocab) == (info.fim_pre, info.fim_suf, info.fim_mid, info.fim_rep, info.fim_sep)
    assert llama_cpp.llama_vocab_eos(vocab) == info.eos
    assert _text(vocab, info.eos) == EOS_TEXT


@pytest.mark.parametrize(
    ("fim", "repo_and_file_tokens"), [(False, True), (False, False), (True, False)]
)
def test_left_out_tokens_are_null(
    tmp_path: Path, fim: bool, repo_and_file_tokens: bool
) -> None:
    info = write_tiny_gguf(
        tmp_path / "model.gguf", fim=fim, repo_and_file_tokens=repo_and_file_tokens
    )
    model, vocab = _load(info)
    try:
        ids = _fim_ids(vocab)
        n_vocab = llama_cpp.llama_vocab_n_tokens(vocab)
    finally:
        llama_cpp.llama_model_free(model)

    expected = (info.fim_pre, info.fim_suf, info.fim_mid, info.fim_rep, info.fim_sep)
    null = llama_cpp.LLAMA_TOKEN_NULL
    assert ids == tuple(null if token is None else token for token in expected)
    assert (info.fim_pre is not None) == fim
    assert info.fim_rep is None and info.fim_sep is None
    assert n_vocab == info.n_vocab


def test_code_tokenizes_into_pieces(full: Loaded) -> None:
    _info, _model, vocab = full

    # No space prefix is added: a leading space is the text's own.
    tokens = _tokenize(vocab, " def x", parse_special=False)
    assert [_text(vocab, token) for token in tokens] == [SPACE + "def", SPACE + "x"]

    # A character without a piece falls back to its UTF-8 bytes.
    tokens = _tokenize(vocab, "é", parse_special=False)
    assert [_text(vocab, token) for token in tokens] == ["<0xC3>", "<0xA9>"]


def test_fim_texts_parse_as_fim_tokens(full: Loaded) -> None:
    info, _model, vocab = full
    text = f"{FIM_REP_TEXT}r{FIM_SEP_TEXT}{FIM_PRE_TEXT}def x{FIM_SUF_TEXT}\n{FIM_MID_TEXT}"

    tokens = _tokenize(vocab, text, parse_special=True)
    fim_ids = {info.fim_pre, info.fim_suf, info.fim_mid, info.fim_rep, info.fim_sep}
    in_order = [info.fim_rep, info.fim_sep, info.fim_pre, info.fim_suf, info.fim_mid]
    assert [token for token in tokens if token in fim_ids] == in_order
    # User-defined tokens (unlike control tokens) are matched even without parse_special:
    # text that contains these markers cannot be kept from turning into them.
    assert _tokenize(vocab, text, parse_special=False) == tokens


def test_end_of_generation_tokens(full: Loaded) -> None:
    info, _model, vocab = full

    # llama.cpp itself adds the repo and file-separator tokens to the end-of-generation set.
    end_of_generation = [
        token for token in range(info.n_vocab) if llama_cpp.llama_vocab_is_eog(vocab, token)
    ]
    assert end_of_generation == [info.eos, info.fim_rep, info.fim_sep]


def test_same_seed_same_file(tmp_path: Path) -> None:
    first = write_tiny_gguf(tmp_path / "first.gguf", seed=7).path.read_bytes()
    again = write_tiny_gguf(tmp_path / "again.gguf", seed=7).path.read_bytes()
    other = write_tiny_gguf(tmp_path / "other.gguf", seed=8).path.read_bytes()

    assert first == again
    assert first != other
    assert len(first) == len(other)


def test_decode_two_sequences_sharing_a_token(full: Loaded) -> None:
    info, model, vocab = full
    params = llama_cpp.llama_context_default_params()
    params.n_ctx = 256
    params.n_seq_max = 4
    params.kv_unified = True
    context = llama_cpp.llama_init_from_model(model, params)
    assert context is not None

    shared = llama_cpp.llama_vocab_bos(vocab)
    first = _tokenize(vocab, "def x", parse_special=False)
    second = _tokenize(vocab, "return", parse_special=False)
    # Layout: the shared first token belongs to both sequences, then each sequence's own
    # tokens; logits are requested for the last token of each sequence.
    rows: list[tuple[int, int, tuple[int, ...]]] = [(shared, 0, (0, 1))]
    rows += [(token, 1 + offset, (0,)) for offset, token in enumerate(first)]
    rows += [(token, 1 + offset, (1,)) for offset, token in enumerate(second)]
    wanted = {len(first), len(rows) - 1}
    # llama.cpp aborts the process on a bad batch rather than failing the call: check first.
    assert len(rows) <= llama_cpp.llama_n_batch(context)
    assert all(0 <= token < info.n_vocab for token, _pos, _seqs in rows)

    batch = llama_cpp.llama_batch_init(len(rows), 0, 2)
    try:
        for index, (token, position, seqs) in enumerate(rows):
            batch.token[index] = token
            batch.pos[index] = position
            batch.n_seq_id[index] = len(seqs)
            for slot, seq in enumerate(seqs):
                batch.seq_id[index][slot] = seq
            batch.logits[index] = index in wanted
        batch.n_tokens = len(rows)

        assert llama_cpp.llama_decode(context, batch) == 0
        for index in sorted(wanted):
            logits = llama_cpp.llama_get_logits_ith(context, index)
            values = ctypes.cast(logits, ctypes.POINTER(ctypes.c_float))[: info.n_vocab]
            assert all(math.isfinite(value) for value in values)
            assert len(set(values)) > 1  # random weights, not an all-zero output
    finally:
        llama_cpp.llama_batch_free(batch)
        llama_cpp.llama_free(context)
