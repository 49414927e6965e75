"""The symbol table retrieval resolves names against (workspace/symbol_table.py): it answers
where each name is defined as the files say, whatever the order files come and go in; it stays
within its part of the folder's budget, leaving files out (and saying how many) rather than
growing, and the files beside the open documents are the ones it keeps; a name most files
define costs no more than a few; the daemon's status shows it."""

from __future__ import annotations

import threading
from pathlib import Path

from hypothesis import given, settings
from hypothesis import strategies as st

from lookahead_lsp.base.tokenizer import Tokenizer
from lookahead_lsp.workspace.folder import FolderSettings, WorkspaceFolder
from lookahead_lsp.workspace.retrieval import DEFINITIONS
from lookahead_lsp.workspace.symbol_table import MANY_DEFINERS, SymbolTable, table_budget
from lookahead_lsp.workspace.symbols import Definition, definitions
from support.recording_client import RecordingClient
from support.waiting import wait_until

ROOT = Path("/folder")
NAMES = [f"name_{i}" for i in range(6)]


def _defs(names: list[str]) -> list[Definition]:
    return [Definition(name, line, line + 2, line % 3 != 0) for line, name in enumerate(names)]


# A step: put file k (dropped first, as retrieval does) with these names, or drop it; fewer
# files than make a name too common (the next test's).
_steps = st.lists(
    st.tuples(st.integers(0, MANY_DEFINERS - 1), st.none() | st.lists(st.sampled_from(NAMES), max_size=5)), max_size=60
)


@settings(max_examples=200, deadline=None)
@given(_steps)
def test_the_table_answers_as_the_files_say_whatever_the_order(steps: list[tuple[int, list[str] | None]]) -> None:
    table = SymbolTable(1 << 30)
    files: dict[Path, list[Definition]] = {}
    for k, names in steps:
        path = ROOT / f"f{k}.py"
        table.drop(path)
        files.pop(path, None)
        if names is not None:
            assert table.put(path, _defs(names), ["other"])
            files[path] = _defs(names)
    for name in NAMES:
        expected = {(p, d) for p, found in files.items() for d in found if d.name == name}
        answered = table.definitions_of(name)
        assert set(answered) == expected and len(answered) == len(expected)
    for path in files:
        assert table.defined_in(path) == {d.name for d in files[path]} and table.imports_of(path) == {"other"}
    for path in list(files):
        table.drop(path)
    assert table.status().memory_bytes == 0 and len(table) == 0


def test_a_name_most_files_define_names_none_of_them_and_costs_no_more() -> None:
    table = SymbolTable(1 << 30)
    for k in range(3 * MANY_DEFINERS):
        table.put(ROOT / f"f{k}.h", _defs(["EVERYWHERE", f"only_{k}"]), ())
    assert table.definitions_of("EVERYWHERE") == [] and len(table.definitions_of("only_7")) == 1
    at_many = table.status().memory_bytes
    table.put(ROOT / "one_more.h", _defs(["EVERYWHERE"]), ())
    assert table.status().memory_bytes - at_many < 1000
    for k in range(3 * MANY_DEFINERS):
        table.drop(ROOT / f"f{k}.h")
    table.drop(ROOT / "one_more.h")
    assert table.status().memory_bytes == 0


def test_a_table_at_its_budget_leaves_files_out_and_says_so() -> None:
    text = "".join(f"def function_{i}(value):\n    return value + {i}\n\n" for i in range(200))
    found = definitions(text, "python")
    budget = 100_000
    table = SymbolTable(budget)
    held = [table.put(ROOT / f"module_{k}.py", found, ()) for k in range(40)]
    status = table.status()
    assert held[0] and not all(held), "the budget was never reached"
    assert status.memory_bytes <= budget and status.left_out == held.count(False)
    assert status.files == held.count(True)
    # A file left out gives no definitions; dropping a held one makes room again.
    assert all(p.name != f"module_{held.index(False)}.py" for p, _ in table.definitions_of("function_3"))
    for k in range(held.count(True)):
        table.drop(ROOT / f"module_{k}.py")
    assert table.put(ROOT / "module_39.py", found, ()) and table.status().left_out == held.count(False) - 1


def test_a_folders_symbol_table_takes_its_part_of_the_folders_budget(tokenizer: Tokenizer, tmp_path: Path) -> None:
    root = tmp_path / "project"
    root.mkdir()
    (root / "helpers.py").write_text("def load_settings(path):\n    return path\n")
    budget = 16 << 20
    folder = WorkspaceFolder(
        root, tokenizer, threading.Lock(), tokenizer.fingerprint, RecordingClient(),
        FolderSettings(cache_dir=tmp_path / "cache", debounce_s=0.05, memory_budget=budget),
    )  # fmt: skip
    folder.start()
    try:
        wait_until(lambda: folder.status().indexed and folder.retrieval.files > 0, 60.0, 0.02)
        status = folder.status()
        assert status.symbols.files == 1 and 0 < status.symbols.memory_bytes <= status.symbols.budget_bytes
        assert status.index.budget_bytes + status.symbols.budget_bytes == budget
        assert 0 < status.symbols.budget_bytes < status.index.budget_bytes
    finally:
        folder.stop(save=False)


def test_a_full_table_keeps_the_files_beside_the_open_documents(tokenizer: Tokenizer, tmp_path: Path) -> None:
    root = tmp_path / "project"
    (root / "aaa").mkdir(parents=True)
    (root / "zzz").mkdir()
    for k in range(12):  # first by name, far from the document
        text = "".join(f"def far_{k}_{i}(value):\n    return value\n\n" for i in range(300))
        (root / "aaa" / f"far_{k}.py").write_text(text)
    near = "".join(f"def near_{i}(value):\n    return value\n\n" for i in range(300))
    (root / "zzz" / "near.py").write_text(near + "def load_settings(path):\n    return path\n")
    main = "from near import load_settings\n\n\ndef run(path):\n    settings = load_settings(path)\n"
    (root / "zzz" / "main.py").write_text(main)
    budget = 8 * 150_000  # the table: 150 KB, two files of 300 names and a little
    folder = WorkspaceFolder(
        root, tokenizer, threading.Lock(), tokenizer.fingerprint, RecordingClient(),
        FolderSettings(cache_dir=tmp_path / "cache", debounce_s=0.05, memory_budget=budget),
    )  # fmt: skip
    folder.editor_text(root / "zzz" / "main.py", main)  # open before the folder is indexed
    folder.start()
    try:
        wait_until(lambda: folder.status().indexed and folder.retrieval.files > 0, 60.0, 0.02)
        symbols = folder.status().symbols
        assert symbols.budget_bytes == table_budget(budget) and symbols.left_out > 0
        chunks = folder.retrieval.retrieve(root / "zzz" / "main.py", main + "    value = ")
        assert [(c.path.name, c.why) for c in chunks if c.name == "load_settings"] == [("near.py", DEFINITIONS)]
    finally:
        folder.stop(save=False)
