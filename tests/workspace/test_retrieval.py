"""Context from the folder's own files for a prompt (workspace/retrieval.py), through a real
workspace folder: the definition of a name used above the cursor comes from the file that
defines it, similar code after it; never from another folder, an ignored or oversized file, or
the file itself; similar code from the files beside it too; the same chunks at every keystroke
of a line, and from block to block while they still serve; a definition changed on disk is seen
once the folder has the change."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from lookahead_lsp.base.tokenizer import Tokenizer
from lookahead_lsp.workspace.folder import FolderSettings, WorkspaceFolder
from lookahead_lsp.workspace.retrieval import DEFINITIONS, SIMILAR, FolderRetrieval, RetrievedChunk
from lookahead_lsp.workspace.symbols import definitions
from support.recording_client import RecordingClient
from support.waiting import wait_until

pytestmark = pytest.mark.usefixtures("hermetic_git")

HELPERS = '''"""Helpers."""


def load_settings(path, strict=False):
    """Reads the settings file at path; strict: unknown keys are errors."""
    with open(path) as file:
        return parse_settings(file.read(), strict)


def unrelated():
    return 0
'''
# Six lines: the next is the first of the file's second block of lines, whose query they are.
MAIN = '''from helpers import load_settings


def run(path):
    """Runs with the settings at path."""
    settings = load_settings(path, strict=True)
'''
SECRET_NAME = "load_settings"


def _folder(tokenizer: Tokenizer, root: Path, cache: Path, **settings: object) -> WorkspaceFolder:
    folder = WorkspaceFolder(
        root, tokenizer, threading.Lock(), tokenizer.fingerprint, RecordingClient(),
        FolderSettings(cache_dir=cache, debounce_s=0.05, **settings),  # type: ignore[arg-type]
    )  # fmt: skip
    folder.start()
    wait_until(lambda: folder.status().indexed and folder.retrieval.files > 0, 60.0, 0.02)
    return folder


@pytest.fixture
def project(tmp_path: Path) -> Path:
    root = tmp_path / "project"
    root.mkdir()
    (root / "helpers.py").write_text(HELPERS)
    (root / "main.py").write_text(MAIN)
    return root


@pytest.fixture
def started(tokenizer: Tokenizer, project: Path, tmp_path: Path) -> Iterator[WorkspaceFolder]:
    folder = _folder(tokenizer, project, tmp_path / "cache")
    yield folder
    folder.stop(save=False)


def _typing(prefix: str) -> str:
    """The text before the cursor while a new line is typed under prefix."""
    return prefix + "    value = "


def _texts(chunks: tuple[RetrievedChunk, ...], why: str) -> list[str]:
    return [c.text for c in chunks if c.why == why]


def test_the_definition_comes_from_the_file_that_defines_it(started: WorkspaceFolder, project: Path) -> None:
    chunks = started.retrieval.retrieve(project / "main.py", _typing(MAIN))

    first = chunks[0]
    assert (first.path, first.why) == (project / "helpers.py", DEFINITIONS)
    assert first.text.startswith("def load_settings(path, strict=False):\n")
    assert "Reads the settings file" in first.text and "def unrelated" not in first.text
    assert all(chunk.path != project / "main.py" for chunk in chunks)


def test_similar_code_comes_after_the_definitions(tokenizer: Tokenizer, tmp_path: Path) -> None:
    root = tmp_path / "similar"
    root.mkdir()
    shapes = "".join(f"def area_{i}(width, height):\n    return width * height * {i}\n\n\n" for i in range(8))
    (root / "shapes.py").write_text(shapes)
    prefix = "from shapes import area_1\n\n\ndef volume(width, height, depth):\n    base = width * height\n    return base * depth\n"
    (root / "solids.py").write_text(prefix)
    folder = _folder(tokenizer, root, tmp_path / "cache")
    try:
        chunks = folder.retrieval.retrieve(root / "solids.py", prefix)
    finally:
        folder.stop(save=False)
    whys = [c.why for c in chunks]
    assert DEFINITIONS in whys and SIMILAR in whys
    assert whys.index(SIMILAR) > whys.index(DEFINITIONS)
    assert all("width * height" in text for text in _texts(chunks, SIMILAR))


NEIGHBOUR = "def remap_block(pages, size, order):\n    pages = allocate_pages(order, size)\n    address = map_contiguous(pages, size)\n    return address\n"


def test_similar_code_comes_from_the_files_beside_it_in_its_language(tokenizer: Tokenizer, tmp_path: Path) -> None:
    """The call a line is about to make is often made in the module's other files, which the
    file neither imports nor takes a definition from."""
    root = tmp_path / "module"
    (root / "sub").mkdir(parents=True)
    (root / "alloc.py").write_text("def allocate_pages(order, size):\n    return [order] * size\n")
    (root / "remap.py").write_text(NEIGHBOUR)
    (root / "remap.js").write_text(NEIGHBOUR.replace("map_contiguous", "script_only"))
    (root / "sub" / "remap.py").write_text(NEIGHBOUR.replace("map_contiguous", "far_away"))
    prefix = "def grow(pool, size):\n    pages = allocate_pages(pool.order, size)\n"
    (root / "pool.py").write_text(prefix)
    folder = _folder(tokenizer, root, tmp_path / "cache")
    try:
        chunks = folder.retrieval.retrieve(root / "pool.py", prefix + "    address = ")
    finally:
        folder.stop(save=False)
    similar = [c for c in chunks if c.why == SIMILAR]
    assert [c.path for c in similar] == [root / "remap.py"] and "map_contiguous(pages, size)" in similar[0].text
    assert all(c.path.parent == root and c.path.suffix == ".py" for c in chunks)


def test_reading_ahead_changes_no_chunk(tmp_path: Path) -> None:
    """What the folder's thread reads ahead when a document opens only saves the first
    request the reading."""
    root = tmp_path / "module"
    root.mkdir()
    for i in range(12):
        (root / f"part_{i:02}.py").write_text(NEIGHBOUR.replace("remap_block", f"remap_{i}") * (i + 1))
    prefix = "import part_03\n\n\ndef grow(pool, size):\n    pages = allocate_pages(pool.order, size)\n"
    path = root / "part_05.py"
    found = []
    for ahead in (False, True):
        retrieval = FolderRetrieval(root)
        retrieval.rebuild(sorted(root.iterdir()))
        if ahead:
            retrieval.prepare(path)
        found.append(retrieval.retrieve(path, prefix))
    assert found[0] == found[1] and any(c.why == SIMILAR for c in found[0])


def test_the_chunks_are_the_same_at_every_key_of_a_line(started: WorkspaceFolder, project: Path) -> None:
    line = "    value = load_settings(path).get('name')"
    seen = {started.retrieval.retrieve(project / "main.py", MAIN + line[:n]) for n in range(len(line) + 1)}
    assert len(seen) == 1 and next(iter(seen))


def test_the_chunks_change_once_a_block_of_lines_as_the_user_writes_on(tokenizer: Tokenizer, tmp_path: Path) -> None:
    """Each change of the chunks evaluates the whole prompt again: chosen with the lines above
    the cursor's block of six lines, they are the same on every line of a block."""
    root = tmp_path / "blocks"
    root.mkdir()
    # Two kinds of code, twelve lines each: a window of one is like the lines about it.
    colours = "".join(f"red_{i} = mix(red, hue_{i}, shade)\n" for i in range(12))
    sounds = "".join(f"pitch_{i} = tone(pitch, beat_{i}, tempo)\n" for i in range(12))
    (root / "palette.py").write_text(colours + sounds)
    head = "import palette\n" + "".join(f"red_{i} = mix(red, hue_{i}, shade)\n" for i in range(5))
    lines = [f"pitch_{i} = tone(pitch, beat_{i}, tempo)\n" for i in range(7)]
    (root / "song.py").write_text(head)
    folder = _folder(tokenizer, root, tmp_path / "cache")
    try:
        # The cursor on lines 6 to 12 of song.py, the lines above it typed.
        chosen = [folder.retrieval.retrieve(root / "song.py", head + "".join(lines[:n])) for n in range(7)]
    finally:
        folder.stop(save=False)
    assert chosen[0] and all(found == chosen[0] for found in chosen[:6])
    assert "red_" in _texts(chosen[0], SIMILAR)[0]
    assert chosen[6] != chosen[0] and "pitch_" in _texts(chosen[6], SIMILAR)[0]


def test_the_chunks_stay_while_they_still_serve_the_lines_written_since(tmp_path: Path) -> None:
    """A file of code of one shape beside the one being written: every window is about as like
    the lines above the cursor as another, and which one is best moves as the user writes on.
    The chunks chosen first still serve, so they stay (the prompt's KV state with them)."""
    root = tmp_path / "module"
    root.mkdir()
    view = "def view_{0}(request, session):\n    user = session.user_{0}\n    page = load_page(request, user, 'page_{0}')\n    return render(request, page, user)\n\n\n"
    (root / "views.py").write_text("".join(view.format(i) for i in range(8)))
    lines = [line for i in (2, 5) for line in view.replace("view_", "show_").format(i).splitlines(keepends=True)]
    (root / "more.py").write_text("".join(lines))
    retrieval = FolderRetrieval(root)
    retrieval.rebuild(sorted(root.iterdir()))
    chosen = [retrieval.retrieve(root / "more.py", "".join(lines[:n])) for n in range(1, len(lines) + 1)]
    assert _texts(chosen[0], SIMILAR) and all(found == chosen[0] for found in chosen)


def test_another_folder_ignored_and_oversized_files_are_never_read(tokenizer: Tokenizer, tmp_path: Path) -> None:
    root, other = tmp_path / "project", tmp_path / "other"
    root.mkdir()
    other.mkdir()
    (root / "main.py").write_text(MAIN)
    (other / "helpers.py").write_text(HELPERS.replace("Reads", "OTHER FOLDER reads"))
    (root / "ignored.py").write_text(HELPERS.replace("Reads", "IGNORED reads"))
    (root / ".gitignore").write_text("ignored.py\n")
    (root / "globbed.py").write_text(HELPERS.replace("Reads", "GLOBBED reads"))
    big = HELPERS.replace("Reads", "OVERSIZED reads") + "# padding\n" * 200_000
    (root / "big.py").write_text(big)
    folder = _folder(tokenizer, root, tmp_path / "cache", ignore=("globbed.py",))
    other_folder = _folder(tokenizer, other, tmp_path / "cache")
    try:
        chunks = folder.retrieval.retrieve(root / "main.py", _typing(MAIN))
    finally:
        folder.stop(save=False)
        other_folder.stop(save=False)
    assert chunks == ()  # the only definition is in files the folder does not index
    assert folder.retrieval.files == 2  # main.py and .gitignore, as the index holds them


def test_a_changed_definition_is_seen_once_the_folder_has_the_change(started: WorkspaceFolder, project: Path) -> None:
    before = started.retrieval.retrieve(project / "main.py", _typing(MAIN))
    assert "strict=False" in before[0].text
    (project / "helpers.py").write_text(HELPERS.replace("strict=False", "strict=False, encoding='utf-8'"))

    def seen() -> bool:
        chunks = started.retrieval.retrieve(project / "main.py", _typing(MAIN))
        return bool(chunks) and "encoding='utf-8'" in chunks[0].text

    wait_until(seen, 60.0, 0.05)
    (project / "helpers.py").unlink()
    wait_until(lambda: not started.retrieval.retrieve(project / "main.py", _typing(MAIN)), 60.0, 0.05)


@pytest.mark.parametrize(
    ("language", "text", "names"),
    [
        ("python", "CONST = 1\nclass Box:\n    def open(self):\n        pass\nasync def fetch():\n    pass\n", ["CONST", "Box", "open", "fetch"]),
        ("javascript", "export function hello() {\n}\nclass K {\n  method(a) {\n  }\n}\nexports.x = 1;\n", ["hello", "K", "method", "x"]),
        ("c", "#define MAX 3\nstruct point {\n};\ntypedef int count_t;\nint add(int a, int b)\n{\n  return f(a,\n}\n", ["MAX", "point", "count_t", "add"]),
        ("other", "func Serve(w Writer) {\n}\npub fn parse() {}\n", ["Serve", "parse"]),
    ],
)
def test_each_language_names_its_definitions(language: str, text: str, names: list[str]) -> None:
    assert [d.name for d in definitions(text, language)] == names


def test_a_line_made_to_backtrack_costs_no_more_than_its_length() -> None:
    hostile = ("a " * 199 + "\n") * 2000 + ("int" + " *" * 190 + "(\n") * 2000

    elapsed = _timed(lambda: definitions(hostile, "c"))

    assert elapsed < 5.0


def _timed(work: Callable[[], object]) -> float:
    start = time.monotonic()
    work()
    return time.monotonic() - start
