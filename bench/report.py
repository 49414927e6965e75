"""The report every benchmark writes the same way."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any


def write_report(report: Any, path: Path | None) -> None:
    """Prints the report, and writes it to path when one was given."""
    text = json.dumps(report, indent=1)
    print(text)
    if path is not None:
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
