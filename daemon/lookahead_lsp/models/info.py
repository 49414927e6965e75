"""What a GGUF model file is: its architecture, context length, vocabulary and fill-in-the-middle
tokens, as `lookahead-lsp models info` prints them.

The metadata comes from gguf_header (pure Python, bounds-checked). The FIM tokens are the ones
llama.cpp finds, since those are the ones completions use (llama.cpp also recognizes FIM tokens
by their text when the file names none); they come from a vocabulary-only load in a child
process, because llama.cpp aborts the whole process on some malformed vocabularies."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from dataclasses import asdict, dataclass
from pathlib import Path

import lookahead_lsp
from lookahead_lsp.base.errors import UserError
from lookahead_lsp.models.gguf_header import GgufError, read_header

# llama_vocab_* getter name -> how `info` calls that token.
_FIM_ROLES = {
    "llama_vocab_fim_pre": "prefix",
    "llama_vocab_fim_suf": "suffix",
    "llama_vocab_fim_mid": "middle",
    "llama_vocab_fim_rep": "repository",
    "llama_vocab_fim_sep": "file separator",
}
_PROBE_TIMEOUT_S = 300


@dataclass(frozen=True)
class FimToken:
    role: str
    id: int
    text: str


@dataclass(frozen=True)
class ModelInfo:
    path: str
    size_bytes: int
    name: str | None
    architecture: str | None
    quantization: str | None
    context_length: int | None  # the context the model was trained with
    vocabulary_size: int
    tokenizer: str | None
    fim_tokens: tuple[FimToken, ...]

    @property
    def fim(self) -> bool:
        """Prefix, suffix and middle tokens: completions can use the code after the cursor."""
        roles = {token.role for token in self.fim_tokens}
        return {"prefix", "suffix", "middle"} <= roles

    def as_json(self) -> str:
        return json.dumps({**asdict(self), "fim": self.fim})


def model_info(path: Path) -> ModelInfo:
    """UserError (one line) when path is no readable, well-formed GGUF model."""
    try:
        header = read_header(path)
        size = path.stat().st_size
    except GgufError as error:
        raise UserError(str(error)) from error
    except OSError as error:
        raise UserError(f"cannot read {path}: {error.strerror or error}") from error
    architecture = header.text("general.architecture")
    n_vocab, fim_tokens = _probe_vocabulary(path)
    return ModelInfo(
        path=str(path),
        size_bytes=size,
        name=header.text("general.name"),
        architecture=architecture,
        quantization=_quantization(header.integer("general.file_type")),
        context_length=header.integer(f"{architecture}.context_length") if architecture else None,
        vocabulary_size=n_vocab,
        tokenizer=header.text("tokenizer.ggml.model"),
        fim_tokens=fim_tokens,
    )


def _quantization(file_type: int | None) -> str | None:
    if file_type is None:
        return None
    import llama_cpp

    names = {
        getattr(llama_cpp, name): name.split("_", 3)[3]
        for name in dir(llama_cpp)
        if name.startswith(("LLAMA_FTYPE_MOSTLY_", "LLAMA_FTYPE_ALL_"))
    }
    return names.get(file_type, f"file type {file_type}")


def _probe_vocabulary(path: Path) -> tuple[int, tuple[FimToken, ...]]:
    try:
        done = subprocess.run(
            [sys.executable, "-m", "lookahead_lsp.models.info", os.fspath(path)],
            # `python -m` puts its working folder first on the import path: the folder that
            # holds this package is one already on it, where a repository the user stands in
            # cannot shadow the package or a dependency (PYTHONSAFEPATH covers 3.11+ as well).
            cwd=Path(lookahead_lsp.__file__).resolve().parents[1],
            env={**os.environ, "PYTHONSAFEPATH": "1"},
            capture_output=True,
            text=True,
            timeout=_PROBE_TIMEOUT_S,
            check=False,
        )
    except subprocess.TimeoutExpired as error:
        raise UserError(f"llama.cpp took over {_PROBE_TIMEOUT_S} s to read {path}'s vocabulary") from error
    if done.returncode != 0:
        raise UserError(f"llama.cpp cannot load {path}'s vocabulary: {_failure(done)}")
    answer = json.loads(done.stdout)
    tokens = tuple(FimToken(role, token, text) for role, token, text in answer["fim"])
    return int(answer["n_vocab"]), tokens


def _failure(done: subprocess.CompletedProcess[str]) -> str:
    lines = [line.strip() for line in done.stderr.splitlines() if line.strip()]
    if done.returncode < 0:
        # Killed by a signal: llama.cpp aborted; its own message says why, before a backtrace.
        why = next((line for line in lines if "error" in line.lower() or "assert" in line.lower()), "")
        return f"it stopped with {signal.Signals(-done.returncode).name}" + (f" ({why})" if why else "")
    return lines[-1] if lines else f"exit status {done.returncode}"


def _vocabulary_in_this_process(path: str) -> dict[str, object]:
    import llama_cpp

    from lookahead_lsp.base.llama_log import route_llama_log

    route_llama_log()  # llama.cpp's own log stays out of the answer
    params = llama_cpp.llama_model_default_params()
    params.vocab_only = True
    model = llama_cpp.llama_model_load_from_file(os.fsencode(path), params)
    if not model:
        raise UserError("not a model llama.cpp can load")
    try:
        vocab = llama_cpp.llama_model_get_vocab(model)
        n_vocab = int(llama_cpp.llama_vocab_n_tokens(vocab))
        fim: list[tuple[str, int, str]] = []
        for getter, role in _FIM_ROLES.items():
            token = int(getattr(llama_cpp, getter)(vocab))
            if 0 <= token < n_vocab:
                text = llama_cpp.llama_vocab_get_text(vocab, token) or b""
                fim.append((role, token, text.decode("utf-8", "replace")))
        return {"n_vocab": n_vocab, "fim": fim}
    finally:
        llama_cpp.llama_model_free(model)


if __name__ == "__main__":
    # The child process of _probe_vocabulary: one JSON object on stdout, or an error on stderr.
    try:
        print(json.dumps(_vocabulary_in_this_process(sys.argv[1])))
    except UserError as error:
        print(error, file=sys.stderr)
        raise SystemExit(2) from None
