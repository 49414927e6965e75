"""Command line: argument parsing only; each command lives in its own module."""

from __future__ import annotations

import argparse
import sys
from typing import Callable, Sequence

from lookahead_lsp import __version__
from lookahead_lsp.engine.runtime import SAMPLING_MODES

DESCRIPTION = """\
Inline code completions from a GGUF model on your own machine, for any editor that speaks
the Language Server Protocol (VS Code, Neovim, Emacs, Helix, ...). `serve` is what editors
start; `complete` prints one completion at a place in a file; the cache commands prebuild a
repository's n-gram cache, which makes drafting faster; `models` lists, pulls and describes
code models."""


def _build_cache(args: argparse.Namespace) -> int:
    from lookahead_lsp.commands.cache import build_cache

    return build_cache(args)


def _inspect_cache(args: argparse.Namespace) -> int:
    from lookahead_lsp.commands.cache import inspect_cache

    return inspect_cache(args)


def _lookup_stats(args: argparse.Namespace) -> int:
    from lookahead_lsp.commands.lookup_stats import lookup_stats

    return lookup_stats(args)


def _complete(args: argparse.Namespace) -> int:
    from lookahead_lsp.commands.complete import complete

    return complete(args)


def _serve(args: argparse.Namespace) -> int:
    from lookahead_lsp.commands.serve import serve

    return serve(args)


def _models(args: argparse.Namespace) -> int:
    from lookahead_lsp.commands import models as models_command

    run: Callable[[argparse.Namespace], int] = getattr(models_command, f"models_{args.action}")
    return run(args)


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="lookahead-lsp", description=DESCRIPTION, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--version", action="version", version=f"lookahead-lsp {__version__}")
    commands = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")

    build = commands.add_parser(
        "build-cache", help="prebuild the static n-gram cache of one or more repositories"
    )
    build.add_argument("repos", metavar="REPO", nargs="+", help="repository or folder to index")
    build.add_argument("-o", "--output", required=True, metavar="FILE", help="cache file to write")
    build.add_argument("--model", metavar="GGUF", help="model whose tokenizer to use")
    build.add_argument(
        "--from-upstream",
        metavar="FILE",
        help="also import the 2-grams of a llama.cpp lookup cache (llama-lookup-create)",
    )
    build.add_argument(
        "--max-file-kb", type=int, default=1024, help="skip files larger than this (default 1024)"
    )
    build.add_argument(
        "--jobs",
        type=int,
        default=2,
        metavar="N",
        help="tokenizer processes for inputs over 4 MB (default 2; smaller ones use one)",
    )
    build.add_argument(
        "--dask",
        metavar="ADDRESS",
        help="count on a Dask cluster instead (same file): its scheduler's tcp://HOST:PORT, or"
        " local:N for N local worker processes (needs the dask extra)",
    )
    build.add_argument(
        "--shard-mb",
        type=float,
        default=32,
        metavar="MB",
        help="with --dask: source megabytes per task, which bounds a worker's memory (default 32)",
    )
    build.set_defaults(run=_build_cache)

    inspect = commands.add_parser("inspect-cache", help="print a static cache's header and statistics")
    inspect.add_argument("file", metavar="FILE")
    inspect.add_argument(
        "--verify", action="store_true", help="check the checksum and every structural invariant"
    )
    inspect.add_argument(
        "--export-upstream", metavar="OUT", help="also write it in llama.cpp's lookup cache format"
    )
    inspect.set_defaults(run=_inspect_cache)

    stats = commands.add_parser(
        "lookup-stats", help="replay a text file through the drafter (llama-lookup-stats' method)"
    )
    stats.add_argument("--file", required=True, metavar="TEXT", help="text to replay")
    stats.add_argument("--static-cache", metavar="FILE", help="static cache (ours or llama.cpp's)")
    stats.add_argument(
        "--dynamic-cache", metavar="FILE", help="llama.cpp lookup cache to start the dynamic cache from"
    )
    stats.add_argument("--n-draft", type=int, default=8, metavar="N", help="tokens per draft (8)")
    stats.add_argument("--ctx-size", type=int, default=4096, metavar="N", help="chunk size (4096)")
    stats.add_argument(
        "--branches",
        type=int,
        default=1,
        metavar="K",
        help="draft a token tree of up to K branches per step and keep the best (1: upstream's single draft)",
    )
    stats.add_argument("--model", metavar="GGUF", help="model whose tokenizer to use")
    stats.add_argument("--json", action="store_true", help="print one JSON object")
    stats.set_defaults(run=_lookup_stats)

    comp = commands.add_parser("complete", help="print one completion at FILE:LINE:COL (1-based)")
    comp.add_argument("position", metavar="FILE:LINE:COL")
    comp.add_argument("--workspace", metavar="DIR", help="draft from the n-grams of DIR's source files")
    comp.add_argument("--static-cache", metavar="FILE", help="draft from a prebuilt static cache (build-cache)")
    comp.add_argument(
        "--draft",
        choices=("none", "lookup", "lookahead", "auto"),
        default="auto",
        help="speculation: none (plain greedy), lookup, lookahead, auto (default)",
    )
    comp.add_argument("--max-tokens", type=int, default=64, metavar="N", help="at most N tokens (64)")
    comp.add_argument(
        "--time-budget-ms", type=float, metavar="MS", help="stop generating MS after the prompt is in (one pass always runs)"
    )
    comp.add_argument(
        "--multiline",
        choices=("auto", "always", "never"),
        default="auto",
        help="several lines: auto (from a blank line, default), always, never (the editors' multiline setting)",
    )
    comp.add_argument(
        "--no-stop-rules", action="store_true", help="generate exactly --max-tokens tokens (benchmarks)"
    )
    comp.add_argument(
        "--no-heal", action="store_true", help="no token healing at the end of a partly typed word"
    )
    comp.add_argument("--model", metavar="GGUF", help="model to complete with")
    comp.add_argument("--ctx-size", type=int, default=4096, metavar="N", help="context size (4096)")
    comp.add_argument("--threads", type=int, metavar="N", help="CPU threads (default: the cores other programs leave free)")
    comp.add_argument(
        "--gpu-layers", type=int, default=-1, metavar="N", help="layers on the GPU, GPU builds only (-1: all)"
    )
    comp.add_argument(
        "--sampling", choices=SAMPLING_MODES, default="auto",
        help="where each verified position's argmax is taken (auto: on a GPU, in the backend; on a CPU, on the host)",
    )  # fmt: skip
    comp.add_argument("--json", action="store_true", help="print one JSON object: completion and stats")
    comp.set_defaults(run=_complete)

    srv = commands.add_parser(
        "serve",
        help="run the language server (stdio, relayed to your shared daemon, unless --socket or --tcp)",
    )
    transport = srv.add_mutually_exclusive_group()
    # Some clients (vscode-languageclient among them) add --stdio to the server's command line.
    transport.add_argument("--stdio", action="store_true", help="talk over stdin/stdout (the default)")
    transport.add_argument(
        "--socket",
        nargs="?",
        const="",
        metavar="PATH",
        help="listen on a Unix socket (mode 0600, a session per client) in a folder only you can "
        "write; default lookahead-lsp.sock in $XDG_RUNTIME_DIR/lookahead-lsp (else ~/.cache/lookahead-lsp/run)",
    )
    transport.add_argument(
        "--tcp",
        metavar="HOST:PORT",
        help="listen on TCP (host 127.0.0.1 if omitted, a session per client); a client presents "
        "the token of --token-file as initializationOptions.token",
    )
    srv.add_argument(
        "--token-file",
        metavar="FILE",
        help="with --tcp: the token clients must present, created at random (mode 0600) if the "
        "file does not exist; default tcp-token in the --socket default's folder",
    )
    srv.add_argument(
        "--allow-remote", action="store_true", help="allow --tcp on a host other than the loopback"
    )
    srv.add_argument(
        "--standalone",
        action="store_true",
        help="over stdio: serve in this process, with a model of its own, instead of relaying to "
        "your shared daemon (started when none runs; one model for all your editors)",
    )
    srv.add_argument(
        "--idle-exit",
        type=float,
        metavar="SECONDS",
        help="with --socket or --tcp: leave once no client has been connected for this long",
    )
    srv.add_argument(
        "--log-level",
        choices=("debug", "info", "warning", "error"),
        help="stderr's log level (default: warning over stdio, where the editor gets the log as "
        "window/logMessage and often shows stderr beside it; info over a socket)",
    )
    srv.add_argument(
        "--cache-dir", metavar="DIR", help="where the cost model and the workspace indexes are kept (~/.cache/lookahead-lsp)"
    )
    srv.set_defaults(run=_serve)

    models = commands.add_parser("models", help="known-good GGUF code models: list, pull, info")
    actions = models.add_subparsers(dest="action", required=True, metavar="ACTION")
    listing = actions.add_parser("list", help="the catalogue: size, FIM, licence, CPU speed")
    listing.add_argument("--json", action="store_true", help="print one JSON array")
    pull = actions.add_parser(
        "pull", help="download a model from the Hugging Face Hub into ~/.cache/lookahead-lsp/models"
    )
    pull.add_argument("name", metavar="NAME", help="a name from `models list`, or OWNER/REPO/FILE.gguf")
    pull.add_argument("--sha256", metavar="HEX", help="the file's expected sha256 (overrides the catalogue's)")
    pull.add_argument("--revision", metavar="REV", help="branch, tag or commit on the Hub (default main)")
    info = actions.add_parser(
        "info", help="a GGUF file's architecture, context length, vocabulary and FIM tokens"
    )
    info.add_argument("file", metavar="FILE", help="a .gguf file or a name from `models list`")
    info.add_argument("--json", action="store_true", help="print one JSON object")
    models.set_defaults(run=_models)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    from lookahead_lsp._lookup import CacheError
    from lookahead_lsp.engine.runtime import EngineError
    from lookahead_lsp.base.errors import UserError

    args = _parser().parse_args(argv)
    run: Callable[[argparse.Namespace], int] = args.run
    try:
        return run(args)
    except KeyboardInterrupt:
        print("lookahead-lsp: interrupted", file=sys.stderr)
        return 130
    except (UserError, CacheError, EngineError) as error:
        # Meant for the user as they are: one line, no traceback.
        print(f"lookahead-lsp: {error}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    raise SystemExit(main())
