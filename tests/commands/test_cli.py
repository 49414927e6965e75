"""The command line as a new user first meets it: `--help` says what the tool is for."""

from __future__ import annotations

import subprocess
import sys


def test_help_opens_with_what_the_tool_does() -> None:
    shown = subprocess.run(
        [sys.executable, "-m", "lookahead_lsp", "--help"], capture_output=True, text=True, check=True
    ).stdout
    description = shown.split("\n\n")[1]
    assert description.startswith("Inline code completions from a GGUF model")
    assert "argument parsing" not in shown
    for command in ("serve", "complete", "build-cache", "models"):
        assert f"    {command}" in shown
