"""`lookahead-lsp serve`: the language server on stdio or TCP, logging to stderr."""

from __future__ import annotations

import argparse
import ipaddress
import logging
import os
import socket
import sys
from pathlib import Path

from lookahead_lsp.errors import UserError


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
    tcp = parse_listen_address(args.tcp, args.allow_remote) if args.tcp else None
    level = args.log_level or ("info" if tcp else "warning")
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
    from lookahead_lsp.server import serve as run_server

    code = run_server(tcp, Path(args.cache_dir) if args.cache_dir else None)
    # Everything is saved by now. pygls reads stdin on a pool thread that a SIGTERM leaves
    # blocked, and the interpreter would wait for it at exit: leave without waiting.
    logging.shutdown()
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()
        except (ValueError, OSError):  # closed by the transport already
            pass
    os._exit(code)
