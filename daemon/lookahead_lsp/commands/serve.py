"""`lookahead-lsp serve`: the language server on stdio (relayed to the user's shared daemon,
lsp/relay.py, unless --standalone), a Unix socket or TCP, logging to stderr."""

from __future__ import annotations

import argparse
import ipaddress
import logging
import os
import socket
import sys
from pathlib import Path

from lookahead_lsp.base.errors import UserError
from lookahead_lsp.lsp.listeners import Listener, listen_tcp, listen_unix
from lookahead_lsp.models.resolve import MODEL_ENV_VAR


def parse_listen_address(value: str, allow_remote: bool) -> tuple[str, int]:
    """HOST:PORT or :PORT or PORT; the host defaults to 127.0.0.1 and must be a loopback
    address unless allow_remote."""
    host, sep, port_text = value.rpartition(":")
    if not sep:
        host, port_text = "", value
    host = host.strip("[]") or "127.0.0.1"
    try:
        port = int(port_text)
    except ValueError:
        raise UserError(f"--tcp expects HOST:PORT, got {value!r}") from None
    if not 0 <= port <= 65535:
        raise UserError(f"--tcp port out of range: {port}")
    if not allow_remote and not _is_loopback(host):
        raise UserError(f"refusing to listen on {host} (not loopback): add --allow-remote to mean it")
    return host, port


def _is_loopback(host: str) -> bool:
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        pass
    try:
        addresses = {info[4][0] for info in socket.getaddrinfo(host, None)}
    except OSError:
        return False
    return bool(addresses) and all(ipaddress.ip_address(str(a).split("%")[0]).is_loopback for a in addresses)


def serve(args: argparse.Namespace) -> int:
    listener = _listener(args)
    level = args.log_level or ("info" if listener else "warning")
    # stdout carries the protocol in stdio mode: logs go to stderr only.
    logging.basicConfig(
        stream=sys.stderr,
        level=getattr(logging, level.upper()),
        format="%(asctime)s %(levelname)s %(name)s: %(message)s",
    )
    # llama.cpp's own log and pygls's message trace only when asked for.
    quiet = logging.DEBUG if level == "debug" else logging.WARNING
    logging.getLogger("lookahead_lsp.llama").setLevel(quiet)
    logging.getLogger("pygls").setLevel(quiet)
    if listener is not None:
        # Whatever the log level: a client needs the address, and the token's file.
        print(f"lookahead-lsp: {listener.describe()}", file=sys.stderr, flush=True)
    cache_dir = Path(args.cache_dir) if args.cache_dir else None
    code: int | None = None
    if listener is None and not args.standalone:
        from lookahead_lsp.lsp.relay import relay

        default_model = os.environ.get(MODEL_ENV_VAR, "")
        code = relay(sys.stdin.buffer, sys.stdout.buffer, cache_dir, default_model, args.log_level)
    if code is None:
        from lookahead_lsp.lsp.server import serve as run_server

        code = run_server(listener, cache_dir, args.idle_exit)
    # Everything is saved by now. stdin is read on a thread of its own, blocked until the editor
    # closes it, and the interpreter would wait for it at exit: leave without waiting.
    logging.shutdown()
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()
        except (ValueError, OSError):  # closed by the transport already
            pass
    os._exit(code)


def _listener(args: argparse.Namespace) -> Listener | None:
    """The socket to serve on, bound before the server starts; None for stdio."""
    if args.token_file is not None and not args.tcp:
        raise UserError("--token-file goes with --tcp")
    if args.allow_remote and not args.tcp:
        raise UserError("--allow-remote goes with --tcp")
    if args.idle_exit is not None and args.socket is None and not args.tcp:
        raise UserError("--idle-exit goes with --socket or --tcp")
    if args.standalone and (args.socket is not None or args.tcp):
        raise UserError("--standalone goes with stdio")
    if args.socket is not None:
        return listen_unix(Path(args.socket) if args.socket else None)
    if args.tcp:
        host, port = parse_listen_address(args.tcp, args.allow_remote)
        return listen_tcp(host, port, Path(args.token_file) if args.token_file else None)
    return None
