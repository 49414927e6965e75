"""Which user a TCP peer of this machine is: Linux lists every TCP socket of the network
namespace in /proc/net/tcp and tcp6 with the uid that owns it, so the daemon can refuse another
user's connection before reading a byte of it (transport.py), token or not."""

from __future__ import annotations

import asyncio
import ipaddress
import logging
import os
import socket
import sys
from collections.abc import Iterable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

# Where Linux lists the TCP sockets of this network namespace, each with the uid that owns it.
TCP_TABLES = (Path("/proc/net/tcp"), Path("/proc/net/tcp6"))
_LOG = logging.getLogger(__name__)

Endpoint = tuple[ipaddress.IPv4Address | ipaddress.IPv6Address, int]
# A TCP connection as this daemon sees it: (the peer's end, this daemon's end).
Connection = tuple[Endpoint, Endpoint]


class PeerOwners:
    """The uids that own TCP peers' sockets (tcp_owners), read off the event loop. Connections
    that arrive while the tables are being read are all looked up by the next read, so a flood
    of connections costs a few reads, not one each, and delays a client by two at most."""

    def __init__(self) -> None:
        self._executor = ThreadPoolExecutor(max_workers=1, thread_name_prefix="lookahead-peers")
        self._pending: dict[Connection, list[asyncio.Future[int | None]]] = {}
        self._reader: asyncio.Task[None] | None = None

    @classmethod
    def of(cls, listening: socket.socket) -> PeerOwners | None:
        """Lookups for a TCP listening socket's peers; None where the tables do not list that
        socket itself as this user's (not Linux, or tables that cannot be trusted): the token
        alone decides there."""
        host, port = listening.getsockname()[:2]
        address = ipaddress.ip_address(host.split("%")[0])
        anywhere = ipaddress.ip_address(0) if address.version == 4 else ipaddress.IPv6Address(0)
        itself: Connection = ((address, port), (anywhere, 0))
        if tcp_owners([itself]).get(itself) != os.getuid():
            _LOG.info("the users of TCP peers cannot be told here: the token alone lets them in")
            return None
        return cls()

    async def uid(self, connection: Connection) -> int | None:
        loop = asyncio.get_running_loop()
        answer: asyncio.Future[int | None] = loop.create_future()
        self._pending.setdefault(connection, []).append(answer)
        if self._reader is None:
            self._reader = loop.create_task(self._read())
        return await answer

    async def _read(self) -> None:
        loop = asyncio.get_running_loop()
        try:
            while self._pending:
                batch, self._pending = self._pending, {}
                try:
                    owners = await loop.run_in_executor(self._executor, tcp_owners, list(batch))
                except Exception as error:  # tcp_owners handles what the system raises
                    _LOG.warning("cannot tell which users the peers are: %s", error)
                    owners = {}
                for connection, answers in batch.items():
                    for answer in answers:
                        if not answer.done():  # its connection may have been cancelled
                            answer.set_result(owners.get(connection))
        finally:
            self._reader = None


def tcp_owners(connections: Iterable[Connection], tables: Iterable[Path] = TCP_TABLES) -> dict[Connection, int]:
    """The uid owning the peer's socket, for each of connections whose peer is a socket of
    this machine (Linux): the line of /proc/net/tcp or tcp6 whose local address is the peer's
    end and whose remote address is this daemon's. A connection left out has its peer
    elsewhere, or one already closed (no process holds its socket), or no table to look in."""
    wanted = {(_endpoint(*peer), _endpoint(*local)): (peer, local) for peer, local in connections}
    ports = {b":%04X" % peer[1] for peer, _ in wanted}
    found: dict[Connection, int] = {}
    for table in tables:
        try:
            with open(table, "rb") as file:
                for line in file:
                    fields = line.split()
                    if len(fields) < 10 or fields[1][-5:] not in ports:
                        continue
                    entry = _table_entry(fields)
                    if entry is not None and entry[0] in wanted:
                        found[wanted[entry[0]]] = entry[1]
        except OSError:
            continue
    return found


def _table_entry(fields: list[bytes]) -> tuple[Connection, int] | None:
    """((local end, remote end), uid) of a line of /proc/net/tcp or tcp6, split; None for a
    socket no process holds (inode 0: closed, or in TIME_WAIT) or a line that does not parse."""
    if fields[9] == b"0":
        return None
    try:
        return (_table_endpoint(fields[1]), _table_endpoint(fields[2])), int(fields[7])
    except ValueError:
        return None


def _table_endpoint(text: bytes) -> Endpoint:
    # ADDRESS:PORT in hex, the address as 32-bit words in this machine's byte order.
    address, _, port = text.partition(b":")
    if len(address) not in (8, 32):
        raise ValueError(text)
    packed = b"".join(int(address[i : i + 8], 16).to_bytes(4, sys.byteorder) for i in range(0, len(address), 8))
    return _endpoint(ipaddress.ip_address(packed), int(port, 16))


def _endpoint(address: ipaddress.IPv4Address | ipaddress.IPv6Address, port: int) -> Endpoint:
    # An IPv4 peer of a dual-stack socket shows as ::ffff:a.b.c.d on this side, as a.b.c.d in
    # the table.
    if isinstance(address, ipaddress.IPv6Address) and address.ipv4_mapped is not None:
        return address.ipv4_mapped, port
    return address, port


def tcp_connection(writer: asyncio.StreamWriter) -> Connection | None:
    peer, local = writer.get_extra_info("peername"), writer.get_extra_info("sockname")
    try:
        return (
            (ipaddress.ip_address(peer[0].split("%")[0]), peer[1]),
            (ipaddress.ip_address(local[0].split("%")[0]), local[1]),
        )
    except (TypeError, ValueError, IndexError, AttributeError):  # not an IP socket
        return None
