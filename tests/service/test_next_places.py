"""What is prepared after a suggestion follows what the session's user does next: a kind of place
(the end of the accepted text, the next line after Enter) stays prepared while the user goes
there often enough, and comes back once the user does again."""

from __future__ import annotations

from collections.abc import Hashable

from lookahead_lsp.service.model_work import Work
from lookahead_lsp.service.next_places import Place, after_enter, next_places
from lookahead_lsp.service.work_ahead import WorkAhead

URI = "file:///project/a.py"


class Planner:
    """A session's planner, whose submitted work ahead is kept to be looked at."""

    def __init__(self) -> None:
        self.submitted: list[Work] = []
        self.ahead = WorkAhead("session-1/", lambda: True, lambda: True, lambda uri, prefix, suffix: False, self._submit)

    def _submit(self, work: Work, answer: Hashable, delay_s: float, if_free: bool) -> None:
        self.submitted.append(work)

    def prepared_after(self, prefix: str, shown: str, suffix: str = "\n") -> list[str]:
        """The places prepared, in order, once `shown` was suggested at prefix."""
        self.submitted.clear()
        self.ahead.after_shown(Work(URI, None, prefix, suffix), shown)
        return [self.submitted[0].prefix, *self.submitted[0].then] if self.submitted else []


def test_the_places_after_a_suggestion() -> None:
    assert next_places("x = ", "1", "\nnext") == [Place("accept", "x = 1"), Place("enter", "x = 1\n")]
    assert next_places("x = ", "1", " + y\n") == [Place("accept", "x = 1")]  # Enter would split the line


def test_enter_indents_as_editors_do() -> None:
    assert after_enter("def f(x):\n    y = x") == "\n    "
    assert after_enter("def f(x):\n  if y:") == "\n    "  # the file indents by two
    assert after_enter("class A:\n    def f(self):") == "\n        "
    assert after_enter("int main() {") == "\n    "  # nothing to learn the step from: four
    assert after_enter("f() {\n\tif (x) {") == "\n\t\t"
    assert next_places("x = 1", "", "") == [Place("enter", "x = 1\n")]


def test_enter_finds_the_files_indentation_step_past_comments_and_aligned_lines() -> None:
    # A doc comment's middle lines are one space in: alignment, not a step of one.
    js = "/**\n * Adds.\n */\nclass A {\n    /**\n     * Scope.\n     */\n    removeScope(scope) {"
    assert after_enter(js, "javascript") == "\n        "
    # Arguments aligned under an opening bracket: one odd step among the file's steps of four.
    py = "def f(a,\n      b):\n    if a:\n        return b\n    for x in a:\n        if x:"
    assert after_enter(py, "python") == "\n            "


def test_enter_after_a_python_line_that_ends_its_block_outdents_as_editors_do() -> None:
    assert after_enter("class A:\n    def f(self):\n        return 1", "python") == "\n    "
    assert after_enter("for x in y:\n    if x:\n        break", "python") == "\n    "
    assert after_enter("def f():\n    raise ValueError(x)", "python") == "\n"
    assert after_enter("def f():\n    return (", "python") == "\n        "  # still open
    assert after_enter("def f():\n    returned = 1", "python") == "\n    "  # not the keyword
    assert after_enter("function f() {\n    return x;", "javascript") == "\n    "
    assert next_places("def f():\n    ", "pass", "\n", "python") == [
        Place("accept", "def f():\n    pass"),
        Place("enter", "def f():\n    pass\n"),
    ]


def test_a_user_who_never_presses_enter_after_accepting_gets_that_line_prepared_no_more() -> None:
    planner = Planner()
    for n in range(9):
        prefix = f"x{n} = "
        assert planner.prepared_after(prefix, "1") == [f"{prefix}1", f"{prefix}1\n"]
        planner.ahead.asked(URI, f"{prefix}1")  # Tab, then the user types on the same line
    # After the ninth accept, the line after Enter is not computed; the accepted text's end is.
    assert planner.prepared_after("x9 = ", "1") == ["x9 = 1"]
    counts = planner.ahead.counts
    assert (counts.enter.offered, counts.enter.taken) == (9, 0)
    assert (counts.accept.offered, counts.accept.taken) == (10, 9)
    # The user presses Enter after this one: the next line is prepared again.
    planner.ahead.asked(URI, "x9 = 1")
    planner.ahead.asked(URI, "x9 = 1\n")
    assert planner.prepared_after("x10 = ", "1") == ["x10 = 1", "x10 = 1\n"]


def test_suggestions_not_accepted_say_nothing_of_enter() -> None:
    planner = Planner()
    for n in range(10):  # shown, and typed over
        assert planner.prepared_after(f"y{n} = ", "2") == [f"y{n} = 2", f"y{n} = 2\n"]
    counts = planner.ahead.counts
    assert (counts.accept.offered, counts.accept.taken, counts.enter.offered) == (10, 0, 0)


def test_typing_through_a_suggestion_offers_it_once() -> None:
    planner = Planner()
    for typed in range(5):  # each key answered from the rest of the same suggestion
        planner.prepared_after("value = " + "compute"[:typed], "compute"[typed:] + "()")
        planner.ahead.asked(URI, "value = " + "compute"[: typed + 1])
    planner.ahead.asked(URI, "value = compute()")  # typed to its end: as good as accepted
    counts = planner.ahead.counts
    assert (counts.accept.offered, counts.accept.taken, counts.enter.offered) == (1, 1, 1)
