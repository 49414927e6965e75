"""A workspace's dynamic n-gram cache: the n-grams of its source files, each file's own tokens
kept so that an update removes exactly what the file added before."""

from __future__ import annotations

from contextlib import closing
from pathlib import Path

from lookahead_lsp._lookup import NgramCache
from lookahead_lsp.tokenizer import POOL_MIN_BYTES, TokenArray, Tokenizer, tokenize_files
from lookahead_lsp.workspace.files import DEFAULT_MAX_BYTES, list_source_files


class WorkspaceIndex:
    def __init__(self, n_vocab: int) -> None:
        self.cache = NgramCache(n_vocab)
        self._files: dict[Path, TokenArray] = {}

    @property
    def n_files(self) -> int:
        return len(self._files)

    @property
    def n_tokens(self) -> int:
        return sum(len(tokens) for tokens in self._files.values())

    def set_file(self, path: Path, tokens: TokenArray) -> None:
        """The file's n-grams are now those of `tokens` (its old ones removed first)."""
        self.remove_file(path)
        self.cache.add(tokens)
        self._files[path] = tokens

    def remove_file(self, path: Path) -> None:
        old = self._files.pop(path, None)
        if old is not None:
            self.cache.remove(old)

    def add_folder(
        self, root: Path, tokenizer: Tokenizer, jobs: int = 2, max_bytes: int = DEFAULT_MAX_BYTES
    ) -> int:
        """Indexes every source file under root (git-tracked, or not ignored by .gitignore;
        binary, generated and oversized files skipped). Returns the number of files indexed."""
        files = list_source_files(root, max_bytes=max_bytes).files
        total = sum(_size(path) for path in files)
        jobs = jobs if total >= POOL_MIN_BYTES else 1
        indexed = 0
        with closing(tokenize_files(tokenizer.model_path, files, jobs, tokenizer)) as results:
            for path, tokens, _ in results:
                if tokens is not None:  # else vanished since listed
                    self.set_file(path, tokens)
                    indexed += 1
        return indexed


def _size(path: Path) -> int:
    try:
        return path.stat().st_size
    except OSError:
        return 0
