"""The daemon-wide hosts several sessions share in a test (import the fixture into the test file)."""

from __future__ import annotations

import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest

from lookahead_lsp.service.folder_host import FolderHost
from lookahead_lsp.service.model_host import ModelHost
from lookahead_lsp.service.model_work import Computed

CACHE = Path(tempfile.gettempdir()) / "lookahead-lsp-test-cache"


@pytest.fixture(scope="module")
def hosts() -> Iterator[tuple[ModelHost[Computed], FolderHost]]:
    """A daemon's models and folders, shared by the sessions (editor windows) a test opens."""
    models: ModelHost[Computed] = ModelHost(CACHE)
    folders = FolderHost()
    yield models, folders
    folders.close()
    models.close()
