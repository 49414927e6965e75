"""Two editor windows of one daemon on one repository hold one index: with the real default model
in this process and the daemon's hosts shared as `serve` shares them, a second session on the
same root joins the first one's folder (one folder in the daemon, one index thread, the same
counts), a document open in both windows stays indexed with the text of the window that changed
it last until both closed it, a window that leaves takes only its own texts, and the daemon's
memory budget is shared out among its folders instead of given to each."""

from __future__ import annotations

import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import Any


from lookahead_lsp.service.folder_host import FolderHost
from lookahead_lsp.service.model_host import ModelHost
from lookahead_lsp.service.model_work import Computed
from lookahead_lsp.service.service import LookaheadService
from support.hosts import hosts  # noqa: F401  (the fixture)
from support.recording_client import RecordingClient
from support.waiting import wait_until

CACHE = Path(tempfile.gettempdir()) / "lookahead-lsp-test-cache"
WAIT_S = 300.0
MIB = 1 << 20


def _until(check: Callable[[], bool]) -> None:
    wait_until(check, WAIT_S)


def _window(hosts: tuple[ModelHost[Computed], FolderHost], *roots: Path, settings: dict[str, object] | None = None) -> LookaheadService:
    """A session as `serve` makes one per client: the daemon's hosts, its own editor."""
    service = LookaheadService(RecordingClient(), CACHE, *hosts)
    service.configure(settings or {})
    service.start_model()
    for root in roots:
        service.add_folder(root)
    _until(lambda: service.status()["model_state"] != "loading" and service.status()["index"]["state"] == "ready")
    assert service.status()["model_state"] == "ready"
    return service


def _project(root: Path, lines: int = 40) -> Path:
    (root / "src").mkdir(parents=True)
    for name in ("orders", "billing"):
        (root / "src" / f"{name}.py").write_text(
            "".join(f"def {name}_{i}(value):\n    return value * {i} + len('{name}')\n" for i in range(lines))
        )
    return root


def _tokens(service: LookaheadService) -> int:
    return int(service.status()["index"]["tokens"])


def _settles(service: LookaheadService, tokens: int) -> None:
    _until(lambda: _tokens(service) == tokens)


def test_a_second_window_on_the_same_folder_joins_its_index(tmp_path: Path, hosts: tuple[ModelHost[Computed], FolderHost]) -> None:
    root = _project(tmp_path / "project")
    first = _window(hosts, root)
    try:
        on_disk = _tokens(first)
        second = _window(hosts, root)
        try:
            assert first.workspace.of(root / "src" / "orders.py") is second.workspace.of(root / "src" / "orders.py")
            assert second.status()["shared"]["folders"] == 1, "a second index of the same folder"
            assert _tokens(second) == on_disk
            # The same file open in both windows, with other texts: the latest change is indexed.
            path = root / "src" / "draft.py"
            first.open_document(path.as_uri(), path, "def draft():\n    pass\n" * 50)
            _until(lambda: _tokens(second) > on_disk)
            from_first = _tokens(second)
            second.open_document(path.as_uri(), path, "def other():\n    return 1\n" * 200)
            _until(lambda: _tokens(first) > from_first)
            from_second = _tokens(first)
            # The second window closes it: the first one's text is back, not the disk's (none).
            second.close_document(path.as_uri(), path)
            _settles(first, from_first)
            second.open_document(path.as_uri(), path, "def other():\n    return 1\n" * 200)
            _settles(first, from_second)
        finally:
            second.shutdown()
        # The second window left: its text leaves with it, the first one's stays, and so does
        # the folder, which the first window still uses.
        _settles(first, from_first)
        assert first.status()["shared"]["folders"] == 1
        assert first.status()["index"]["state"] == "ready"
    finally:
        first.shutdown()
    assert hosts[1].folders() == 0, "the last window out must stop the folder"


def _budget(folder: dict[str, Any]) -> int:
    """A folder's budget: its index's part and its symbol table's."""
    return int(folder["index"]["budget_bytes"] + folder["symbols"]["budget_bytes"])


def test_the_daemons_budget_is_shared_out_among_its_folders(tmp_path: Path, hosts: tuple[ModelHost[Computed], FolderHost]) -> None:
    one, two = _project(tmp_path / "one"), _project(tmp_path / "two")
    settings: dict[str, object] = {"indexMemoryMib": 64}
    first = _window(hosts, one, settings=settings)
    try:
        assert [_budget(f) for f in first.status()["folders"]] == [64 * MIB]
        second = _window(hosts, two, settings=settings)
        try:
            budgets = [_budget(f) for w in (first, second) for f in w.status()["folders"]]
            assert budgets == [32 * MIB, 32 * MIB], "each folder took the whole budget"
        finally:
            second.shutdown()
        assert [_budget(f) for f in first.status()["folders"]] == [64 * MIB]
    finally:
        first.shutdown()
