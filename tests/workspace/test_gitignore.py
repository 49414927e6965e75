""".gitignore patterns come from the folder: matching them takes time linear in the path whatever
they are, their number is bounded, and a .gitignore is read only inside the folder."""

from __future__ import annotations

import subprocess
import sys
import textwrap
from pathlib import Path, PurePosixPath

import pytest

from lookahead_lsp.workspace.files import list_source_files
from lookahead_lsp.workspace.gitignore import MAX_PATTERNS_PER_FILE, GitignoreCache, gitignored, spec_reader
from lookahead_lsp.workspace.rules import FolderRules

# `*a*a*...*b` against a name of many a's: a backtracking matcher tries every way to split it.
CATASTROPHIC = "*a" * 14 + "*b"
LONG_NAME = "a" * 60


def _write(root: Path, relative: str, content: str = "x = 1\n") -> Path:
    path = root / relative
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(content)
    return path


def _in_a_child(code: str, timeout_s: float = 60.0) -> subprocess.CompletedProcess[str]:
    """code run by a fresh interpreter, so that a matcher that never ends fails the test on the
    timeout instead of holding pytest's interpreter."""
    return subprocess.run(
        [sys.executable, "-c", textwrap.dedent(code)], capture_output=True, text=True, timeout=timeout_s, check=True
    )


def test_a_catastrophic_gitignore_pattern_is_matched_at_once(tmp_path: Path) -> None:
    root = tmp_path / "plain"
    _write(root, ".gitignore", CATASTROPHIC + "\n")
    _write(root, LONG_NAME)
    _write(root, "a" * 30 + "b")

    listed = _in_a_child(
        f"""
        from pathlib import Path
        from lookahead_lsp.workspace.files import list_source_files
        print(sorted(p.name for p in list_source_files(Path({str(root)!r})).files))
        """
    )

    assert listed.stdout.strip() == str(sorted([".gitignore", LONG_NAME]))


def test_a_catastrophic_ignore_glob_is_matched_at_once(tmp_path: Path) -> None:
    root = tmp_path / "plain"
    _write(root, LONG_NAME)

    matched = _in_a_child(
        f"""
        from pathlib import Path, PurePosixPath
        from lookahead_lsp.workspace.rules import FolderRules
        rules = FolderRules(Path({str(root)!r}), [{CATASTROPHIC!r}], 1 << 20)
        print(rules.user_ignores(PurePosixPath({LONG_NAME!r})), rules.user_ignores(PurePosixPath("a" * 14 + "b")))
        """
    )

    assert matched.stdout.split() == ["False", "True"]


def test_only_the_first_patterns_of_a_long_gitignore_apply(tmp_path: Path) -> None:
    root = tmp_path / "plain"
    patterns = [f"gen_{i}.py" for i in range(MAX_PATTERNS_PER_FILE + 500)]
    _write(root, ".gitignore", "# generated\n\n" + "\n".join(patterns) + "\n")
    spec_of = spec_reader(root)

    assert gitignored(spec_of, PurePosixPath("gen_0.py"))
    assert gitignored(spec_of, PurePosixPath(f"gen_{MAX_PATTERNS_PER_FILE - 1}.py"))
    assert not gitignored(spec_of, PurePosixPath(f"gen_{MAX_PATTERNS_PER_FILE}.py"))


def test_a_gitignore_over_64_kib_is_not_read(tmp_path: Path) -> None:
    root = tmp_path / "plain"
    _write(root, ".gitignore", "*.log\n" + "#" * (64 << 10) + "\n")
    _write(root, "debug.log")

    assert [p.name for p in list_source_files(root).files] == [".gitignore", "debug.log"]


def test_lines_that_are_not_patterns_are_skipped_not_fatal(tmp_path: Path) -> None:
    root = tmp_path / "plain"
    _write(root, ".gitignore", "!\n\\\n*.log\n")
    _write(root, "debug.log")
    _write(root, "main.py")

    assert [p.name for p in list_source_files(root).files] == [".gitignore", "main.py"]


def test_nested_gitignores_of_many_negations_stay_cheap(tmp_path: Path) -> None:
    root = tmp_path / "plain"
    folder = root
    negations = "\n".join(f"!k{i}*" for i in range(4000))  # ~28 KiB, 4,000 patterns
    for depth in range(8):
        _write(folder, ".gitignore", "*.tmp\n" + negations + "\n")
        _write(folder, f"file_{depth}.py")
        _write(folder, f"file_{depth}.tmp")
        folder = folder / f"level_{depth}"

    listed = _in_a_child(
        f"""
        from pathlib import Path
        from lookahead_lsp.workspace.files import list_source_files
        print(len(list_source_files(Path({str(root)!r})).files))
        """
    )

    # The first patterns of each file apply: the .tmp files are left out.
    assert listed.stdout.strip() == str(8 * 2)


def test_a_gitignore_through_a_folder_symlink_out_of_the_folder_is_not_read(tmp_path: Path) -> None:
    root = tmp_path / "plain"
    outside = tmp_path / "outside"
    _write(outside, ".gitignore", "*.py\n")
    _write(root, "main.py")
    (root / "linked").symlink_to(outside, target_is_directory=True)

    assert not gitignored(spec_reader(root), PurePosixPath("linked/x.py"))
    assert GitignoreCache(root).spec(PurePosixPath("linked")) is None
    assert GitignoreCache(root).spec(PurePosixPath()) is None


@pytest.mark.parametrize("globs", [["!"], ["\\"]])
def test_folder_rules_refuse_what_is_not_a_pattern(tmp_path: Path, globs: list[str]) -> None:
    with pytest.raises(ValueError, match="Invalid git pattern"):
        FolderRules(tmp_path, globs, 1 << 20)
