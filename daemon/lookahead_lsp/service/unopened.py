"""Reading a document the editor did not open. A request may name any file:// URI, and its
answer shows the text before the cursor; so the daemon reads such a file only when its real path
(symlinks resolved) lies inside a workspace folder's real root, and then by the indexer's rules
(files.read_source: a regular file, never a FIFO or device, the file actually opened still inside,
not above the size cap). Everything else reads as nothing, the same whether or not the file
exists; a path outside every folder is not even opened. Blocking: run it off the event loop."""

from __future__ import annotations

import os
from collections.abc import Iterable
from pathlib import Path

from lookahead_lsp.base.safe_reads import is_inside
from lookahead_lsp.workspace.files import Unindexable, read_source


def read_unopened(path: Path, real_roots: Iterable[Path], max_bytes: int) -> str | None:
    """The file's text (UTF-8, bad bytes replaced), or None when the daemon must not or cannot
    read it. real_roots: the workspace folders, already resolved."""
    try:
        real = os.path.realpath(path, strict=True)
    except (OSError, ValueError):  # missing, a symlink loop, a NUL in the name
        return None
    root = next((str(r) for r in real_roots if is_inside(real, str(r))), None)
    if root is None:
        return None
    try:
        data, _ = read_source(Path(real), root, max_bytes)
    except (Unindexable, ValueError):
        return None
    return data.decode("utf-8", errors="replace")
