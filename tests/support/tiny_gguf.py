"""Writes a tiny random-weight GGUF model that llama.cpp loads and decodes, for tests that need
a real model but no sensible text: prompt formats (fill-in-the-middle), KV-cache bookkeeping,
cancellation and batch layouts. Writing one takes a few milliseconds.

The model is a one-layer `llama` with 32-dim embeddings and a SentencePiece-style (`llama`)
vocabulary of a few hundred tokens: `<unk>`, `<s>`, `</s>`, the 256 byte tokens, a few dozen
pieces for code and, optionally, FIM tokens.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import gguf
import numpy as np

# Token texts of the special tokens. The FIM, repo and file-separator texts are those of
# Qwen2.5-Coder; note that llama.cpp also recognizes these texts on its own (without the id
# keys), which is why a model without FIM must leave the tokens out, not just the keys.
UNK_TEXT = "<unk>"
BOS_TEXT = "<s>"
EOS_TEXT = "</s>"
FIM_PRE_TEXT = "<|fim_prefix|>"
FIM_SUF_TEXT = "<|fim_suffix|>"
FIM_MID_TEXT = "<|fim_middle|>"
FIM_REP_TEXT = "<|repo_name|>"
FIM_SEP_TEXT = "<|file_sep|>"

# SentencePiece writes a space as this character; llama.cpp does the same before tokenizing.
SPACE = "\u2581"

# Whole-word pieces. llama.cpp's SentencePiece tokenizer only merges two adjacent symbols when
# their concatenation is itself a piece, so every prefix of these is added too (see _pieces);
# without them "def" would stay three letters.
_WORDS = (
    SPACE + "def",
    SPACE + "return",
    SPACE + "if",
    SPACE + "else",
    SPACE + "for",
    SPACE + "in",
    SPACE + "import",
    SPACE + "self",
    SPACE + "print",
    SPACE + "None",
    SPACE + "x",
    SPACE + "y",
    SPACE + "=",
    SPACE + "+",
    SPACE * 4,  # one indentation level
)
_SINGLE_CHARACTERS = SPACE + "():,.=+-*[]_\"'" + "abcdefghijklmnopqrstuvwxyz" + "0123456789"

# Model shape: 4 query heads of 8 dimensions sharing 2 KV heads (grouped-query attention, as in
# the real code models, so KV-cache sizes differ from the embedding size).
N_EMBD = 32
N_HEAD = 4
N_HEAD_KV = 2
HEAD_DIM = N_EMBD // N_HEAD
N_FF = 64
N_LAYER = 1
# Small enough that random activations stay far from overflow through the one layer.
_WEIGHT_STD = 0.02


@dataclass(frozen=True)
class TinyModelInfo:
    """What a test needs to know about a model written by write_tiny_gguf. The FIM ids are None
    where the model has no such token (llama.cpp then reports LLAMA_TOKEN_NULL, -1)."""

    path: Path
    n_vocab: int
    fim_pre: int | None
    fim_suf: int | None
    fim_mid: int | None
    fim_rep: int | None
    fim_sep: int | None
    eos: int


def _pieces() -> list[str]:
    """The normal (type 1) pieces, each once: llama.cpp aborts the process on a duplicate."""
    pieces: list[str] = []
    for word in _WORDS:
        # Longest first: scores descend along the list, so whole words outrank their prefixes.
        pieces.extend(word[:end] for end in range(len(word), 1, -1))
    pieces.extend(_SINGLE_CHARACTERS)
    return list(dict.fromkeys(pieces))


def write_tiny_gguf(
    path: Path,
    *,
    fim: bool = True,
    repo_and_file_tokens: bool = True,
    seed: int = 0,
    n_ctx_train: int = 2048,
) -> TinyModelInfo:
    """Writes the tiny model to path (overwriting it) and returns its token ids.

    fim: add the FIM prefix/suffix/middle tokens (user-defined tokens) and the keys naming them;
    without, the model only supports prefix completion. repo_and_file_tokens: with fim, also add
    the repository-name and file-separator tokens. The weights are random but the same for the
    same seed; n_ctx_train is the training context length written into the metadata.
    """
    if n_ctx_train <= 0:
        raise ValueError(f"n_ctx_train must be positive, got {n_ctx_train}")

    texts = [UNK_TEXT, BOS_TEXT, EOS_TEXT]
    types = [gguf.TokenType.UNKNOWN, gguf.TokenType.CONTROL, gguf.TokenType.CONTROL]
    texts += [f"<0x{byte:02X}>" for byte in range(256)]
    types += [gguf.TokenType.BYTE] * 256
    pieces = _pieces()
    first_piece = len(texts)
    texts += pieces
    types += [gguf.TokenType.NORMAL] * len(pieces)

    specials = [FIM_PRE_TEXT, FIM_SUF_TEXT, FIM_MID_TEXT] if fim else []
    if fim and repo_and_file_tokens:
        specials += [FIM_REP_TEXT, FIM_SEP_TEXT]
    first_special = len(texts)
    texts += specials
    types += [gguf.TokenType.USER_DEFINED] * len(specials)
    special_id = {text: first_special + offset for offset, text in enumerate(specials)}

    # Special and byte tokens score 0. The SentencePiece tokenizer merges the pair whose
    # result scores highest first, so descending scores let whole words outrank their prefixes.
    scores = [0.0] * len(texts)
    for offset in range(len(pieces)):
        scores[first_piece + offset] = -float(offset)

    writer = gguf.GGUFWriter(path, gguf.MODEL_ARCH_NAMES[gguf.MODEL_ARCH.LLAMA])
    writer.add_name("tiny-test-llama")
    writer.add_context_length(n_ctx_train)
    writer.add_embedding_length(N_EMBD)
    writer.add_block_count(N_LAYER)
    writer.add_feed_forward_length(N_FF)
    writer.add_head_count(N_HEAD)
    writer.add_head_count_kv(N_HEAD_KV)
    writer.add_rope_dimension_count(HEAD_DIM)
    writer.add_rope_freq_base(10000.0)
    writer.add_layer_norm_rms_eps(1e-5)
    writer.add_file_type(gguf.LlamaFileType.ALL_F32)

    writer.add_tokenizer_model("llama")
    writer.add_token_list(texts)
    writer.add_token_types(types)
    writer.add_token_scores(scores)
    writer.add_unk_token_id(texts.index(UNK_TEXT))
    writer.add_bos_token_id(texts.index(BOS_TEXT))
    writer.add_eos_token_id(texts.index(EOS_TEXT))
    # Stated explicitly, as Llama's own GGUFs do, rather than left to llama.cpp's defaults.
    writer.add_add_bos_token(True)
    writer.add_add_eos_token(False)
    # Like the BPE tokenizers of FIM code models: a piece tokenized on its own gets no space.
    writer.add_add_space_prefix(False)
    for key, text in (
        (gguf.Keys.Tokenizer.FIM_PRE_ID, FIM_PRE_TEXT),
        (gguf.Keys.Tokenizer.FIM_SUF_ID, FIM_SUF_TEXT),
        (gguf.Keys.Tokenizer.FIM_MID_ID, FIM_MID_TEXT),
        (gguf.Keys.Tokenizer.FIM_REP_ID, FIM_REP_TEXT),
        (gguf.Keys.Tokenizer.FIM_SEP_ID, FIM_SEP_TEXT),
    ):
        if text in special_id:
            writer.add_uint32(key, special_id[text])

    # numpy shapes are GGUF shapes reversed: llama.cpp's {n_embd, n_vocab} for token_embd is
    # (n_vocab, n_embd) here, i.e. rows are what the matrix maps to.
    n_vocab = len(texts)
    rng = np.random.default_rng(seed)

    def weight(*shape: int) -> np.ndarray:
        return (rng.standard_normal(shape) * _WEIGHT_STD).astype(np.float32)

    def norm() -> np.ndarray:
        return np.ones(N_EMBD, dtype=np.float32)

    def name(tensor: gguf.MODEL_TENSOR, block: int = 0) -> str:
        # The name maps give the base names; llama.cpp looks the tensors up with ".weight".
        return gguf.TENSOR_NAMES[tensor].format(bid=block) + ".weight"

    writer.add_tensor(name(gguf.MODEL_TENSOR.TOKEN_EMBD), weight(n_vocab, N_EMBD))
    for block in range(N_LAYER):
        block_tensors = {
            gguf.MODEL_TENSOR.ATTN_NORM: norm(),
            gguf.MODEL_TENSOR.ATTN_Q: weight(N_HEAD * HEAD_DIM, N_EMBD),
            gguf.MODEL_TENSOR.ATTN_K: weight(N_HEAD_KV * HEAD_DIM, N_EMBD),
            gguf.MODEL_TENSOR.ATTN_V: weight(N_HEAD_KV * HEAD_DIM, N_EMBD),
            gguf.MODEL_TENSOR.ATTN_OUT: weight(N_EMBD, N_HEAD * HEAD_DIM),
            gguf.MODEL_TENSOR.FFN_NORM: norm(),
            gguf.MODEL_TENSOR.FFN_GATE: weight(N_FF, N_EMBD),
            gguf.MODEL_TENSOR.FFN_UP: weight(N_FF, N_EMBD),
            gguf.MODEL_TENSOR.FFN_DOWN: weight(N_EMBD, N_FF),
        }
        for tensor, data in block_tensors.items():
            writer.add_tensor(name(tensor, block), data)
    writer.add_tensor(name(gguf.MODEL_TENSOR.OUTPUT_NORM), norm())
    writer.add_tensor(name(gguf.MODEL_TENSOR.OUTPUT), weight(n_vocab, N_EMBD))

    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()

    return TinyModelInfo(
        path=path,
        n_vocab=n_vocab,
        fim_pre=special_id.get(FIM_PRE_TEXT),
        fim_suf=special_id.get(FIM_SUF_TEXT),
        fim_mid=special_id.get(FIM_MID_TEXT),
        fim_rep=special_id.get(FIM_REP_TEXT),
        fim_sep=special_id.get(FIM_SEP_TEXT),
        eos=texts.index(EOS_TEXT),
    )
