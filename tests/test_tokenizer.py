"""The GGUF tokenizer (real default model), line-aligned splitting and bulk tokenization."""

from __future__ import annotations

import multiprocessing
import os
import signal
import struct
import threading
from pathlib import Path
from typing import BinaryIO, Callable

import hashlib

import llama_cpp
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from lookahead_lsp._lookup import ids_by_text
from lookahead_lsp.base.tokenizer import (
    Tokenizer,
    split_at_lines,
    tokenize_edited_text,
    tokenize_file_text,
    tokenize_files,
)

CODE = "def greet(name):\n    return f'hello {name}!'  # héllo wörld\n"


def test_tokens_are_int32_ids_that_detokenize_to_the_text(tokenizer: Tokenizer) -> None:
    tokens = tokenizer.tokenize(CODE)

    assert tokens.dtype == np.int32
    assert 0 < len(tokens) < len(CODE)
    assert tokens.min() >= 0 and tokens.max() < tokenizer.n_vocab
    assert tokenizer.detokenize(tokens) == CODE.encode()
    np.testing.assert_array_equal(tokenizer.tokenize(CODE.encode()), tokens)


def test_non_utf8_bytes(tokenizer: Tokenizer) -> None:
    data = b"name = 'caf\xe9'\nx\x80 = b'\xff\xfe'\n"  # Latin-1 and stray bytes

    tokens = tokenizer.tokenize(data)

    assert len(tokens) > 0 and tokens.max() < tokenizer.n_vocab
    assert tokenizer.detokenize(tokens) == data


def test_empty_input(tokenizer: Tokenizer) -> None:
    assert tokenizer.tokenize("").shape == (0,)
    assert tokenizer.tokenize(b"").dtype == np.int32
    assert tokenize_file_text(tokenizer, b"").shape == (0,)
    assert tokenizer.detokenize([]) == b""


def test_special_tokens(tokenizer: Tokenizer) -> None:
    control = "<start_of_turn>"

    assert len(tokenizer.tokenize(control, parse_special=True)) == 1
    assert len(tokenizer.tokenize(control)) > 1  # plain text unless asked
    with_bos = tokenizer.tokenize("x", add_special=True)
    assert len(with_bos) == len(tokenizer.tokenize("x")) + 1


def test_detokenize_refuses_ids_outside_the_vocabulary(tokenizer: Tokenizer) -> None:
    with pytest.raises(ValueError, match="token ids"):
        tokenizer.detokenize([1, tokenizer.n_vocab])


def test_fingerprint_is_stable(tokenizer: Tokenizer, model_path: Path) -> None:
    with Tokenizer(model_path) as again:
        assert again.fingerprint == tokenizer.fingerprint
    assert 0 <= tokenizer.fingerprint < 2**64


def test_fingerprint_is_the_documented_digest(tokenizer: Tokenizer) -> None:
    """Caches written before the fingerprint was computed natively keep theirs: it is still the
    SHA-256 its docstring defines, computed here one token at a time through llama-cpp-python."""
    vocab = llama_cpp.llama_model_get_vocab(tokenizer._model)
    digest = hashlib.sha256(struct.pack("<q", tokenizer.n_vocab))
    for token in range(tokenizer.n_vocab):
        text = llama_cpp.llama_vocab_get_text(vocab, token) or b""
        digest.update(struct.pack("<Ii", len(text), llama_cpp.llama_vocab_get_attr(vocab, token)))
        digest.update(text)
    assert tokenizer.fingerprint == int.from_bytes(digest.digest()[:8], "little")


def test_pieces_are_each_tokens_text_and_order_by_bytes(tokenizer: Tokenizer) -> None:
    data, offsets = tokenizer.pieces()
    assert len(offsets) == tokenizer.n_vocab + 1 and offsets[-1] == len(data)
    pieces = [data[offsets[i] : offsets[i + 1]] for i in range(tokenizer.n_vocab)]
    sample = range(0, tokenizer.n_vocab, 97)
    assert [pieces[i] for i in sample] == [tokenizer.piece(i) for i in sample]
    ordered = ids_by_text(data, offsets).tolist()
    assert ordered == sorted((i for i, piece in enumerate(pieces) if piece), key=pieces.__getitem__)


@pytest.mark.parametrize("offsets", [[1, 3], [0, 2, 1, 3], [0, 4], []])
def test_bad_offsets_are_refused(offsets: list[int]) -> None:
    with pytest.raises(ValueError, match="offsets must ascend"):
        ids_by_text(b"abc", np.array(offsets, dtype=np.uint32))


def test_fingerprint_differs_for_another_vocabulary(
    tokenizer: Tokenizer, model_path: Path, tmp_path: Path
) -> None:
    other = tmp_path / "renamed-token.gguf"
    _write_vocab_only_copy(model_path, other, rename_token=1000)

    with Tokenizer(other) as changed:
        assert changed.n_vocab == tokenizer.n_vocab
        assert changed.fingerprint != tokenizer.fingerprint


def test_loading_is_silent_and_bad_files_fail_cleanly(
    model_path: Path, tmp_path: Path, capfd: pytest.CaptureFixture[str]
) -> None:
    Tokenizer(model_path).close()
    not_gguf = tmp_path / "not.gguf"
    not_gguf.write_bytes(b"definitely not a model\n")
    with pytest.raises(Exception, match="cannot load a vocabulary") as raised:
        Tokenizer(not_gguf)

    assert str(not_gguf) in str(raised.value)
    assert capfd.readouterr().err == ""  # llama.cpp's log goes to logging, not stderr


def test_ctrl_c_while_loading_is_not_lost(
    model_path: Path, capfd: pytest.CaptureFixture[str]
) -> None:
    # Loading spends most of its time in llama.cpp, which calls back into Python to log; a
    # KeyboardInterrupt raised in such a callback would be dropped by ctypes.
    timer = threading.Timer(0.2, os.kill, (os.getpid(), signal.SIGINT))
    with pytest.raises(KeyboardInterrupt):
        timer.start()
        for _ in range(20):
            Tokenizer(model_path).close()
    timer.join()
    assert "Exception ignored" not in capfd.readouterr().err


def test_closed_tokenizer_refuses_work(model_path: Path) -> None:
    with Tokenizer(model_path) as closing:
        pass
    with pytest.raises(ValueError, match="closed"):
        closing.tokenize("x")


@given(
    lines=st.lists(st.binary(max_size=40).map(lambda b: b.replace(b"\n", b"")), max_size=30),
    last_newline=st.booleans(),
    piece_bytes=st.integers(min_value=1, max_value=64),
)
def test_split_at_lines(lines: list[bytes], last_newline: bool, piece_bytes: int) -> None:
    data = b"\n".join(lines) + (b"\n" if last_newline and lines else b"")

    pieces = split_at_lines(data, piece_bytes)

    assert b"".join(pieces) == data
    assert all(pieces)
    for piece in pieces[:-1]:
        assert piece.endswith(b"\n")
    for piece in pieces:
        if len(piece) > piece_bytes:  # then it is one line
            assert b"\n" not in piece[:-1]


def test_file_text_in_pieces_matches_whole(tokenizer: Tokenizer) -> None:
    data = Path(np.__file__).with_name("__init__.py").read_bytes()
    data = (data * (1 + 100_000 // len(data)))[:100_000]
    data = data[: data.rfind(b"\n") + 1]

    pieces = tokenize_file_text(tokenizer, data)
    whole = tokenizer.tokenize(data)

    assert len(split_at_lines(data)) > 4
    assert tokenizer.detokenize(pieces) == data
    # Cuts fall at line ends, where tokens rarely merge: at most a token or so per cut.
    assert abs(len(pieces) - len(whole)) <= len(split_at_lines(data))


@pytest.mark.parametrize("jobs", [1, 2])
def test_tokenize_files(tokenizer: Tokenizer, model_path: Path, tmp_path: Path, jobs: int) -> None:
    paths = []
    for index in range(12):
        path = tmp_path / f"file{index}.py"
        path.write_text(f"value_{index} = {index} * 2\n" * (index + 1))
        paths.append(path)
    vanished = tmp_path / "vanished.py"

    results = {
        path: (tokens, size)
        for path, tokens, size in tokenize_files(model_path, [*paths, vanished], jobs=jobs)
    }

    assert set(results) == {*paths, vanished}
    assert results[vanished] == (None, 0)
    for path in paths:
        tokens, size = results[path]
        assert tokens is not None
        assert size == path.stat().st_size
        np.testing.assert_array_equal(tokens, tokenizer.tokenize(path.read_bytes()))


def test_a_file_swapped_for_a_fifo_after_listing_is_skipped_not_waited_on(
    tokenizer: Tokenizer, model_path: Path, tmp_path: Path
) -> None:
    # Between the listing and the read, a hostile folder can replace a listed file by a FIFO:
    # opening it plainly would wait forever for a writer.
    fifo = tmp_path / "listed.py"
    os.mkfifo(fifo)
    real = tmp_path / "real.py"
    real.write_text("x = 1\n")
    results = {}

    def run() -> None:
        for path, tokens, size in tokenize_files(model_path, [fifo, real], jobs=1, tokenizer=tokenizer):
            results[path] = (tokens, size)

    worker = threading.Thread(target=run, daemon=True)
    worker.start()
    worker.join(timeout=20)
    if worker.is_alive():  # unblock the reader so the test run can end, then fail
        with open(fifo, "wb"):
            pass
        pytest.fail("tokenize_files waited on a FIFO")
    assert results[fifo] == (None, 0)
    assert results[real][0] is not None


def test_tokenize_files_stops_its_workers_when_closed(model_path: Path, tmp_path: Path) -> None:
    paths = [tmp_path / f"f{index}.py" for index in range(50)]
    for path in paths:
        path.write_text("x = 1\n" * 100)

    results = tokenize_files(model_path, paths, jobs=2)
    next(results)
    results.close()

    assert multiprocessing.active_children() == []


# A vocabulary-only GGUF: the model's metadata with one token renamed and no tensors.

# GGUF value types: struct layouts of the scalars, and the string and array type ids.
_GGUF_SCALARS = {
    0: "B", 1: "b", 2: "H", 3: "h", 4: "I", 5: "i", 6: "f", 7: "?", 10: "Q", 11: "q", 12: "d"
}
_GGUF_STRING, _GGUF_ARRAY = 8, 9


def _write_vocab_only_copy(source: Path, target: Path, rename_token: int) -> None:
    with source.open("rb") as model:
        magic, version, _n_tensors, n_kv = struct.unpack("<4sIQQ", model.read(24))
        assert magic == b"GGUF" and version >= 2
        entries = []
        for _ in range(n_kv):
            key = _read_string(model)
            value_type = _read(model, "<I")
            start = model.tell()
            _skip_value(model, value_type)
            end = model.tell()
            model.seek(start)
            raw = model.read(end - start)
            if key == b"tokenizer.ggml.tokens":
                raw = _renamed(raw, rename_token)
            entries.append(struct.pack("<Q", len(key)) + key + struct.pack("<I", value_type) + raw)
    with target.open("wb") as out:
        out.write(struct.pack("<4sIQQ", b"GGUF", version, 0, n_kv))
        out.writelines(entries)


def _renamed(raw: bytes, token: int) -> bytes:
    element_type, count = struct.unpack_from("<IQ", raw)
    assert element_type == _GGUF_STRING
    offset = 12
    for index in range(count):
        (length,) = struct.unpack_from("<Q", raw, offset)
        if index == token:
            text = raw[offset + 8 : offset + 8 + length] + b"-renamed-for-a-test"
            return (
                raw[:offset] + struct.pack("<Q", len(text)) + text + raw[offset + 8 + length :]
            )
        offset += 8 + length
    raise AssertionError("token not found")


def _read(file: BinaryIO, layout: str) -> int:
    (value,) = struct.unpack(layout, file.read(struct.calcsize(layout)))
    return int(value)


def _read_string(file: BinaryIO) -> bytes:
    return file.read(_read(file, "<Q"))


def _skip_value(file: BinaryIO, value_type: int) -> None:
    if value_type == _GGUF_STRING:
        file.seek(_read(file, "<Q"), 1)
    elif value_type == _GGUF_ARRAY:
        element_type, count = _read(file, "<I"), _read(file, "<Q")
        if element_type in _GGUF_SCALARS:
            file.seek(count * struct.calcsize("<" + _GGUF_SCALARS[element_type]), 1)
        else:
            for _ in range(count):
                _skip_value(file, element_type)
    else:
        file.seek(struct.calcsize("<" + _GGUF_SCALARS[value_type]), 1)


_BIG = "".join(f"    value_{i} = compute(items[{i}], total) + {i}  # line {i}\n" for i in range(1200)).encode()


@settings(max_examples=20, deadline=None)
@given(at=st.integers(0, len(_BIG)), cut=st.integers(0, 300), typed=st.binary(max_size=40))
def test_an_edited_text_is_tokenized_as_the_whole_file(tokenizer: Tokenizer, at: int, cut: int, typed: bytes) -> None:
    _, known = tokenize_edited_text(tokenizer, _BIG, {})
    edited = _BIG[:at] + typed + _BIG[at + cut :]
    tokens, pieces = tokenize_edited_text(tokenizer, edited, known)
    assert tokens.tolist() == tokenize_file_text(tokenizer, edited).tolist()
    assert list(pieces) == list(dict.fromkeys(split_at_lines(edited)))


@pytest.mark.parametrize(
    "edit",
    [
        lambda t: t[:30_000] + b"x" + t[30_000:],  # a key in the middle
        lambda t: t[12:],  # the start of the first line deleted
        lambda t: t[:20_000] + t[20_500:],  # ten lines deleted
        lambda t: t + b"def last():\n    pass\n",  # lines appended
        lambda t: b"import os\n" + t,  # a line inserted at the top
    ],
)
def test_an_edit_tokenizes_only_the_pieces_around_it(tokenizer: Tokenizer, edit: Callable[[bytes], bytes]) -> None:
    _, known = tokenize_edited_text(tokenizer, _BIG, {})
    assert len(known) >= 4
    _, pieces = tokenize_edited_text(tokenizer, edit(_BIG), known)
    reused = [piece for piece in pieces if piece in known]
    assert len(reused) >= len(known) - 2
    assert all(pieces[piece] is known[piece] for piece in reused)  # not tokenized again
