"""`lookahead-lsp complete FILE:LINE:COL`: one completion from the command line."""

from __future__ import annotations

import argparse
import json
import re
import sys
from dataclasses import dataclass
from pathlib import Path

from lookahead_lsp.engine import CompletionRequest, ContextChunk, DecodeOptions, DraftCaches, Engine, EngineSettings
from lookahead_lsp.engine.stages import LOADING
from lookahead_lsp.base.errors import UserError
from lookahead_lsp.models.resolve import resolve_model_path
from lookahead_lsp.base.static_cache import open_static_cache
from lookahead_lsp.workspace.index import WorkspaceIndex
from lookahead_lsp.service.context import context_chunks
from lookahead_lsp.workspace.retrieval import SOURCES as RETRIEVED
from lookahead_lsp.workspace.retrieval import FolderRetrieval

_POSITION = re.compile(r"^(?P<file>.+):(?P<line>\d+):(?P<col>\d+)$")


@dataclass(frozen=True)
class CursorSplit:
    prefix: str
    suffix: str


def parse_position(text: str) -> tuple[Path, int, int]:
    match = _POSITION.match(text)
    if match is None:
        raise UserError(f"expected FILE:LINE:COL (1-based), got {text!r}")
    return Path(match["file"]), int(match["line"]), int(match["col"])


def split_at(document: str, line: int, column: int, name: str) -> CursorSplit:
    """The document's text before and after LINE:COL (1-based, COL in characters). A column
    past the end of its line is clamped to the line's end; a line past the end is an error."""
    if line < 1 or column < 1:
        raise UserError(f"{name}: LINE and COL start at 1, got {line}:{column}")
    lines = document.splitlines(keepends=True) or [""]
    if document.endswith(("\n", "\r")):
        lines.append("")  # the empty line after the last newline is a place to type
    if line > len(lines):
        raise UserError(f"{name}: line {line} is past the end of the file ({len(lines)} lines)")
    start = sum(len(text) for text in lines[: line - 1])
    body = lines[line - 1].rstrip("\r\n")
    offset = start + min(column - 1, len(body))
    return CursorSplit(document[:offset], document[offset:])


def read_document(path: Path) -> str:
    try:
        data = path.read_bytes()
    except OSError as error:
        raise UserError(f"cannot read {path}: {error.strerror or error}") from error
    # Bytes that are not UTF-8 become U+FFFD: the model sees text, the offsets stay characters.
    return data.decode("utf-8", "replace")


def complete(args: argparse.Namespace) -> int:
    path, line, column = parse_position(args.position)
    cursor = split_at(read_document(path), line, column, str(path))
    try:
        options = DecodeOptions(
            draft=args.draft,
            max_tokens=args.max_tokens,
            time_budget_ms=args.time_budget_ms,
            stop_rules=not args.no_stop_rules,
            heal=not args.no_heal,
            multiline=args.multiline,
        )
    except ValueError as error:
        raise UserError(str(error)) from error
    model_path = resolve_model_path(args.model)
    _say(f"{LOADING} {model_path.name}")
    engine = Engine(
        EngineSettings(model_path, n_ctx=args.ctx_size, n_threads=args.threads, n_gpu_layers=args.gpu_layers, sampling=args.sampling)
    )
    try:
        if args.draft == "auto":
            engine.prepare(_say)  # else the completion would measure the machine in silence
        caches, retrieval = _caches(engine, args)
        relative = _relative_name(path, args.workspace)
        context = _retrieved(retrieval, path, cursor.prefix, args.workspace)
        request = CompletionRequest(cursor.prefix, cursor.suffix, relative, context)
        result = engine.complete(request, options, caches)
    finally:
        engine.close()
    if args.json:
        out = {"completion": result.text, "stop_reason": result.stop_reason, "stats": result.stats.as_dict()}
        json.dump(out, sys.stdout, ensure_ascii=False)
        sys.stdout.write("\n")
    else:
        sys.stdout.write(result.text + "\n")
        print(_summary(result.stats.as_dict(), result.stop_reason), file=sys.stderr)
    return 0


def _say(stage: str) -> None:
    """What the command is doing before the completion, on stderr (the completion alone goes
    to stdout): a first run loads and measures for seconds."""
    print(f"lookahead-lsp: {stage}...", file=sys.stderr, flush=True)


def _summary(stats: dict[str, object], stop_reason: str) -> str:
    accepted = stats["accepted_by_source"]
    assert isinstance(accepted, dict)
    drafted = ", ".join(f"{source} {n}" for source, n in accepted.items() if n) or "none"
    return (
        f"{stats['tokens']} tokens in {stats['passes']} passes ({stats['tokens_per_pass']}/pass), "
        f"{stats['tokens_per_s']} tokens/s; accepted from drafts: {drafted}; "
        f"prompt {stats['prompt_evaluated']}/{stats['prompt_tokens']} tokens evaluated in "
        f"{stats['ms_prompt']:.0f} ms; stopped by {stop_reason}"
    )


def _caches(engine: Engine, args: argparse.Namespace) -> tuple[DraftCaches, FolderRetrieval | None]:
    """The draft caches, and with --workspace the folder's retrieval (filled from the files
    its index holds, as the daemon fills a folder's)."""
    tokenizer = engine.tokenizer
    workspace = None
    retrieval = None
    if args.workspace:
        root = Path(args.workspace)
        if not root.is_dir():
            raise UserError(f"workspace is not a folder: {root}")
        index = WorkspaceIndex(tokenizer.n_vocab)
        _say(f"indexing {root}")
        index.index_folder(root, tokenizer)
        workspace = index.cache
        retrieval = FolderRetrieval(root.absolute())
        retrieval.rebuild(index.indexed_paths())
    repository = None
    if args.static_cache:
        repository = open_static_cache(Path(args.static_cache), tokenizer.n_vocab, tokenizer.fingerprint).cache
    return DraftCaches(workspace, repository), retrieval


def _retrieved(retrieval: FolderRetrieval | None, path: Path, prefix: str, workspace: str | None) -> tuple[ContextChunk, ...]:
    """The daemon's definitions and similar code for the document, from the workspace."""
    if retrieval is None or workspace is None:
        return ()
    return context_chunks(RETRIEVED, retrieval, path.absolute(), prefix, [], lambda p, uri: _relative_name(p or path, workspace))


def _relative_name(path: Path, workspace: str | None) -> str:
    if workspace:
        try:
            return path.resolve().relative_to(Path(workspace).resolve()).as_posix()
        except ValueError:
            pass
    return path.name
