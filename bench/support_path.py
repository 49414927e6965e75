"""Puts tests/ first on sys.path, so that a benchmark imports what it shares with the tests
(the package tests/support): import it before support."""

import sys
from pathlib import Path

TESTS = str(Path(__file__).resolve().parents[1] / "tests")
if TESTS not in sys.path:
    sys.path.insert(0, TESTS)
