"""The code-aware stopping rules: where a completion ends and what the user is shown."""

from __future__ import annotations

from dataclasses import dataclass

import pytest
from hypothesis import given
from hypothesis import strategies as st

from lookahead_lsp.engine.stopping import Stopper, shown_from_continuation


@dataclass(frozen=True)
class Case:
    """A cursor in a realistic file, what the model generated there, and what must come of it."""

    name: str
    prefix: str
    suffix: str
    generated: str
    cut: int | None
    shown: str


def cut_at(text: str, kept: str) -> int:
    assert text.startswith(kept)
    return len(kept)


PY_TOTAL = "s = 0\n    for x in xs:\n        s += x\n    return s\n\ndef"
C_MAIN = 'printf("hi\\n");\n    return 0;\n}'
GO_MAIN = "fmt.Println(1)\n\tfmt.Println(2)\n}\n"
CRLF_BODY = "a = 1\r\n    return a\r\n\r\nprint"

CASES = [
    # Line mode: code after the cursor on its line.
    Case("call argument", "def show(total):\n    print(", ")\n", "total)\n    return",
         len("total)"), "total"),
    Case("completion starting with a newline inside code", "x = compute(", "a, b)\n",
         "\n    y = 2", 0, ""),
    Case("line mode CRLF", "x = compute(a, b", ")\r\ny = 1\r\n", ", c)\r\ny", len(", c)"),
         ", c"),
    # End of line: code before the cursor, nothing after it.
    Case("end of line, one line", "x = 1", "\ny = 2\n", "  # one\ny = 2", len("  # one"),
         "  # one"),
    Case("end of line opens a block ended by a blank line", "def f():", "\n\nprint(f())\n",
         "\n    return 1\n\nprint", len("\n    return 1"), "\n    return 1"),
    Case("end of line opens a block ended by a dedent", "def show(xs):\n    for x in xs:",
         "\n", "\n        print(x)\n        n += 1\n    print('done')",
         len("\n        print(x)\n        n += 1"), "\n        print(x)\n        n += 1"),
    Case("end of line block, last line unfinished", "if ready:", "", "\n    start(",
         None, "\n    start("),
    # Block mode: only whitespace on the cursor's line.
    Case("python function body", "def total(xs):\n    ", "\n\ndef other():\n    pass\n",
         PY_TOTAL, cut_at(PY_TOTAL, "s = 0\n    for x in xs:\n        s += x\n    return s"),
         "s = 0\n    for x in xs:\n        s += x\n    return s"),
    Case("js closing brace is a dedent", "function add(a, b) {\n  ", "\n\nexport { add };\n",
         "return a + b;\n}\n", len("return a + b;"), "return a + b;"),
    Case("c re-emits the next line", "int main(void) {\n    ", "\n    return 0;\n}\n",
         C_MAIN, len('printf("hi\\n");'), 'printf("hi\\n");'),
    Case("go, tab-indented", "func main() {\n\t", "\n", GO_MAIN,
         len("fmt.Println(1)\n\tfmt.Println(2)"), "fmt.Println(1)\n\tfmt.Println(2)"),
    Case("block CRLF", "def f():\r\n    ", "\r\n", CRLF_BODY, len("a = 1\r\n    return a"),
         "a = 1\r\n    return a"),
    Case("empty document", "", "", "import os\nimport sys\n\n\ndef main():",
         len("import os\nimport sys"), "import os\nimport sys"),
    Case("prefix ending in a newline", "import os\n", "", "import sys\n\nx = 1",
         len("import sys"), "import sys"),
    Case("blank lines before any code do not end a block", "class A:\n    ", "\n",
         "\n\n    x = 1\n", None, "\n\n    x = 1"),
    Case("whitespace-only completion", "def f():\n    ", "\n", "   \n", None, ""),
]


@pytest.mark.parametrize("case", CASES, ids=[case.name for case in CASES])
def test_cut_and_shown_text(case: Case) -> None:
    stopper = Stopper(case.prefix, case.suffix)
    assert stopper.check(case.generated) == case.cut
    assert stopper.finish(case.generated) == case.shown


def feed(stopper: Stopper, text: str, chunk: int) -> int | None:
    """Feed text as a model would, chunk characters per pass, until check() cuts."""
    for end in range(chunk, len(text) + chunk, chunk):
        cut = stopper.check(text[:end])
        if cut is not None:
            return cut
    return None


@pytest.mark.parametrize("chunk", [1, 2, 3, 7])
@pytest.mark.parametrize("case", CASES, ids=[case.name for case in CASES])
def test_growing_text_cuts_where_the_whole_text_does(case: Case, chunk: int) -> None:
    cut = feed(Stopper(case.prefix, case.suffix), case.generated, chunk)
    assert cut == case.cut


@pytest.mark.parametrize("case", [case for case in CASES if case.cut is not None],
                         ids=[case.name for case in CASES if case.cut is not None])
def test_showing_the_kept_text_is_showing_the_whole_text(case: Case) -> None:
    assert case.cut is not None
    kept = case.generated[: case.cut]
    assert Stopper(case.prefix, case.suffix).finish(kept) == case.shown


def test_cut_stays_put_as_the_text_grows() -> None:
    stopper = Stopper("def f():\n    ", "\n")
    assert stopper.check("a = 1\nb") == len("a = 1")
    assert stopper.check("a = 1\nb = 2\n") == len("a = 1")


def test_dedent_is_judged_at_the_first_character_of_code() -> None:
    stopper = Stopper("def f():\n    ", "\n")
    assert stopper.check("a = 1\n  ") is None
    assert stopper.check("a = 1\n  e") == len("a = 1")


def test_line_of_spaces_alone_is_undecided() -> None:
    stopper = Stopper("def f():\n    ", "\n")
    assert stopper.check("a = 1\n") is None
    assert stopper.check("a = 1\n    ") is None
    assert stopper.check("a = 1\n        b") is None


@pytest.mark.parametrize(("line", "cut"), [("\tx = 2", None), ("    x = 2", None),
                                           ("  x = 2", len("x = 1"))])
def test_tab_is_one_level_of_four_columns(line: str, cut: int | None) -> None:
    stopper = Stopper("def f():\n\t", "\n")
    assert stopper.check(f"x = 1\n{line}") == cut


def test_first_line_repeating_the_next_line_shows_nothing() -> None:
    stopper = Stopper("def f(x):\n    ", "\n    return x\n")
    assert stopper.check("return x\n") == 0
    assert stopper.finish("return x\n    ") == ""


def test_end_of_line_block_takes_its_indentation_from_its_first_code_line() -> None:
    stopper = Stopper("x = 1", "")
    assert stopper.check("\n\ndef g():\n    return 2\n") is None
    assert stopper.finish("\n\ndef g():\n    return 2\n") == "\n\ndef g():\n    return 2"


def test_completion_ending_the_line_at_end_of_line_ends_at_a_dedent() -> None:
    stopper = Stopper("class A:\n    def f(self):", "\n\nclass B:\n    pass\n")
    text = "\n        return 1\n    def g(self):"
    assert stopper.check(text) == len("\n        return 1")


@pytest.mark.parametrize(("prefix", "suffix", "mid_line"), [
    ("x = foo(", ")\n", True),
    ("def f():", "\n", True),
    ("def f():\n    ", "\n", False),
    ("    ", "return 1\n", True),
    ("", "", False),
    ("import os\r\n", "\r\n", False),
])
def test_mid_line(prefix: str, suffix: str, mid_line: bool) -> None:
    assert Stopper(prefix, suffix).mid_line is mid_line


@pytest.mark.parametrize(("prefix", "suffix", "generated", "shown"), [
    ("print(", ")\n", "total)", "total"),
    ("print(", ")\n", "total) ", "total"),
    ("f(g(x", ")\n", "))", ")"),
    ("f(", ")\n", ")", ""),
    ("if (ready", ") {\n", ") {", ""),
    ("x = [", "]\n", "a[0]", "a[0]"),
    ("f(", ")\n", "g()", "g()"),
    ("int n = ", ";\n", "count + 1;", "count + 1"),
    ("x = ", "  # answer\n", "42  # answer", "42"),
])
def test_repeated_tail_of_the_cursor_line_is_dropped(prefix: str, suffix: str, generated: str,
                                                      shown: str) -> None:
    assert Stopper(prefix, suffix).finish(generated) == shown


@pytest.mark.parametrize(("prefix", "suffix", "generated"), [
    ("x = ", "compute(a, b)\n", "compute(a"),
    ("x = 1", " + 2\n", " + 2"),
    ("def f(x):\n    ", "\n    if x:\n        return 1\n", "if x:\n        return"),
    ("def f(x):\r\n    ", "\r\n    return x\r\n", "return x\r\n"),
    ("def f():", "\n    return 1\n", "\n    return 1"),
])
def test_completion_repeating_the_suffix_shows_nothing(prefix: str, suffix: str,
                                                       generated: str) -> None:
    assert Stopper(prefix, suffix).finish(generated) == ""


def test_completion_adding_to_the_suffix_is_shown() -> None:
    stopper = Stopper("def f(x):\n    ", "\n    return x\n")
    assert stopper.finish("x += 1\n    return x") == "x += 1"


def test_trailing_whitespace_is_stripped() -> None:
    assert Stopper("def f():\n    ", "\n").finish("return 1   \n  ") == "return 1"


def test_disabled_stopper_never_stops_nor_changes_text() -> None:
    stopper = Stopper("print(", ")\n", enabled=False)
    assert stopper.check(")\n\n\nfoo\n") is None
    assert stopper.finish("x)  \n\n") == "x)  \n\n"


def test_unrelated_text_starts_check_afresh() -> None:
    stopper = Stopper("def f():\n    ", "\n")
    assert stopper.check("a = 1\n\n") == len("a = 1")
    assert stopper.check("\n\n    c = 1") is None


def test_line_is_compared_with_the_suffix_only_once_complete() -> None:
    stopper = Stopper("def f(x):\n    ", "\n    return x\n")
    assert stopper.check("x += 1\n    return x") is None
    assert stopper.check("x += 1\n    return x + 1\n") is None
    assert stopper.finish("x += 1\n    return x + 1\n") == "x += 1\n    return x + 1"


DOC_CHARS = st.sampled_from(list("ab(){}[]:;=\"# \t\n\r"))
documents = st.text(DOC_CHARS, max_size=40)
completions = st.text(DOC_CHARS, max_size=80)


@given(prefix=documents, suffix=documents, text=completions)
def test_cut_and_shown_text_are_prefixes(prefix: str, suffix: str, text: str) -> None:
    stopper = Stopper(prefix, suffix)
    cut = stopper.check(text)
    assert cut is None or 0 <= cut <= len(text)
    shown = stopper.finish(text)
    assert text.startswith(shown)
    if cut is not None:
        assert Stopper(prefix, suffix).finish(text[:cut]) == shown


@given(prefix=documents, suffix=documents, text=completions,
       chunk=st.integers(min_value=1, max_value=8))
def test_cut_is_stable_as_the_text_grows(prefix: str, suffix: str, text: str,
                                         chunk: int) -> None:
    whole = Stopper(prefix, suffix).check(text)
    stopper = Stopper(prefix, suffix)
    first: int | None = None
    for end in range(chunk, len(text) + chunk, chunk):
        cut = stopper.check(text[:end])
        if first is None:
            first = cut
        else:
            assert cut == first
    assert first == whole


def test_a_continuation_decoded_ahead_is_cut_as_the_request_would_be() -> None:
    """What the model decoded past a suggestion, without stop rules, answers a later request
    with what that request's own completion would show, or says it cannot tell."""
    # At the end of a line of code: the completion is that line's rest, never the next line.
    line = Stopper("x = compute(", "", True, "never")
    assert shown_from_continuation(line, "a, b)\ny = 2\n", ended=False, same_budget=False) == "a, b)"
    # The same continuation after the user pressed Enter and the editor indented: the next line.
    after_enter = Stopper("def f():\n    x = 1\n    ", "", True, "never")
    assert shown_from_continuation(after_enter, "return x\n\ndef g", ended=False, same_budget=False) == "return x"
    # A line not finished where the continuation stops: the request would go on, no answer.
    assert shown_from_continuation(line, "a, b", ended=False, same_budget=False) is None
    # Unless the model ended it there, or the request's own token budget would end it there too.
    assert shown_from_continuation(line, "a, b", ended=True, same_budget=False) == "a, b"
    assert shown_from_continuation(line, "a, b", ended=False, same_budget=True) == "a, b"
    # A newline first, in line mode: the request's completion is empty.
    at_end = Stopper("x = compute(a)", "", True, "never")
    assert shown_from_continuation(at_end, "\ny = 2\n", ended=False, same_budget=False) == ""
