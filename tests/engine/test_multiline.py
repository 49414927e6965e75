"""The `multiline` setting's three rules for where a completion ends: auto (several lines from a
blank line or a broken line), always (several lines anywhere), never (one line)."""

from __future__ import annotations

import pytest

from lookahead_lsp.engine import DecodeOptions
from lookahead_lsp.engine.stopping import Stopper

# The cursor at the end of a line of code; the model writes the rest of the statement over
# several lines, then goes on after a blank line.
LIST_PREFIX = "def sizes():\n    items = ["
LIST_GENERATED = "1, 2,\n        3,\n    ]\n\nprint(sizes())\n"
# On a blank line of a function body.
BODY_PREFIX = "def f(x):\n    "
BODY_GENERATED = "y = x + 1\n    return y\n\ndef g():\n"
# Inside code: the text after the cursor on its line is `)`.
CALL_PREFIX = "total = add("
CALL_GENERATED = "first,\n    second,\n\nprint(total)\n"


def _shown(prefix: str, suffix: str, generated: str, multiline: str) -> str:
    """What the editor shows: the generated text cut as check() finds it while it grows."""
    stopper = Stopper(prefix, suffix, multiline=multiline)
    cut = None
    for end in range(1, len(generated) + 1):
        if (cut := stopper.check(generated[:end])) is not None:
            break
    return stopper.finish(generated if cut is None else generated[:cut])


@pytest.mark.parametrize(
    ("prefix", "suffix", "generated", "auto", "always", "never"),
    [
        (LIST_PREFIX, "\n", LIST_GENERATED, "1, 2,", "1, 2,\n        3,\n    ]", "1, 2,"),
        (BODY_PREFIX, "\n", BODY_GENERATED, "y = x + 1\n    return y", "y = x + 1\n    return y", "y = x + 1"),
        (CALL_PREFIX, ")\n", CALL_GENERATED, "first,", "first,\n    second,", "first,"),
        ("def f():", "\n", "\n    return 1\n\nx = f()\n", "\n    return 1", "\n    return 1", ""),
    ],
)
def test_where_a_completion_ends(prefix: str, suffix: str, generated: str, auto: str, always: str, never: str) -> None:
    assert _shown(prefix, suffix, generated, "auto") == auto
    assert _shown(prefix, suffix, generated, "always") == always
    assert _shown(prefix, suffix, generated, "never") == never


def test_an_unknown_mode_is_refused() -> None:
    with pytest.raises(ValueError, match="multiline"):
        Stopper("x = ", "\n", multiline="sometimes")
    with pytest.raises(ValueError, match="multiline"):
        DecodeOptions(multiline="sometimes")
