"""Flood benchmark: memory stays flat and the daemon keeps answering under a request storm.

A real LSP client starts `lookahead-lsp serve` (default model) on a generated workspace of
--documents Python files (one of them --big-mb large), opens them all, then sends --requests
inline-completion requests round-robin over the documents, each after an edit that types a
character, with about half of them cancelled by `$/cancelRequest` a few milliseconds later, in
bursts of --burst concurrent requests. Then it closes every document and checks that the daemon
still answers a plain request with a suggestion.

Reported: the daemon's resident memory (VmRSS from /proc, Linux) once the model and index are
ready ("before"), at the end of the flood, and after the documents are closed ("after"), its peak
(VmHWM), how many requests were answered, cancelled, failed or never answered, how long answers
took (p50, p95, max), and the final answer.

    .venv/bin/python bench/flood_bench.py [--requests 2000] [--documents 20] [--big-mb 4] [--json FILE]
"""

from __future__ import annotations

import argparse
import asyncio
import random
import statistics
import sys
import tempfile
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from report import write_report
import support_path  # noqa: F401  (tests/ on sys.path, before support)
from support.daemon import Daemon, end_of, items_of, plain
from lsprotocol import types


def python_file(rng: random.Random, target_bytes: int) -> str:
    """Plausible Python source of about target_bytes: functions over a few recurring names."""
    names = ["total", "price", "items", "count", "order", "cart", "line", "value", "result"]
    parts: list[str] = []
    size = 0
    serial = 0
    while size < target_bytes:
        a, b, c = rng.sample(names, 3)
        serial += 1
        block = (
            f"def {a}_{b}_{serial}({c}):\n"
            f"    {a} = 0\n"
            f"    for {b} in {c}:\n"
            f"        {a} += {b}.{rng.choice(names)}\n"
            f"    return {a}\n\n\n"
        )
        parts.append(block)
        size += len(block)
    return "".join(parts)


def _rss_kb(pid: int) -> dict[str, int]:
    values: dict[str, int] = {}
    try:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            key, _, rest = line.partition(":")
            if key in ("VmRSS", "VmHWM"):
                values[key] = int(rest.split()[0])
    except OSError:
        pass
    return values


@dataclass
class Counts:
    sent: int = 0
    with_items: int = 0
    empty: int = 0
    cancelled: int = 0
    errors: int = 0
    unanswered: int = 0  # no answer within --timeout-s
    seconds: list[float] = field(default_factory=list)  # from the request to its answer


async def flood(args: argparse.Namespace) -> dict[str, Any]:
    rng = random.Random(args.seed)
    root = Path(tempfile.mkdtemp(prefix="lookahead-flood-"))
    cache = Path(tempfile.mkdtemp(prefix="lookahead-flood-cache-"))
    documents: list[tuple[str, list[str]]] = []
    for i in range(args.documents):
        size = int(args.big_mb * 1e6) if i == 0 else args.doc_kb * 1000
        text = python_file(rng, size)
        path = root / f"module_{i}.py"
        path.write_text(text)
        documents.append((path.as_uri(), text.splitlines(keepends=True)))

    daemon = Daemon("flood-bench")
    # Short prompts and completions: the flood tests the daemon's bookkeeping, and each
    # completion still runs the real model.
    settings = {"maxTokens": 8, "debounceMs": 0, "prefixTokens": 64, "suffixTokens": 16, "extraContextTokens": 0}
    await daemon.start([root], cache, settings)
    client, pid = daemon.client, daemon.pid

    versions: dict[str, int] = {}
    for uri, lines in documents:
        versions[uri] = 1
        daemon.open(uri, "python", "".join(lines))
    await daemon.status()
    before = _rss_kb(pid)

    counts = Counts()
    next_id = 1_000_000

    async def one(uri: str, line: int, column: int, cancel: bool) -> None:
        nonlocal next_id
        next_id += 1
        msg_id = next_id
        params = types.InlineCompletionParams(
            text_document=types.TextDocumentIdentifier(uri=uri),
            position=types.Position(line=line, character=column),
            context=types.InlineCompletionContext(trigger_kind=types.InlineCompletionTriggerKind.Automatic),
        )
        asked = time.perf_counter()
        future = client.protocol.send_request_async(types.TEXT_DOCUMENT_INLINE_COMPLETION, params, msg_id=msg_id)
        if cancel:
            await asyncio.sleep(rng.uniform(0.0, 0.02))
            client.protocol.notify(types.CANCEL_REQUEST, types.CancelParams(id=msg_id))
        # asyncio.wait, not wait_for: a timeout must not cancel the future the client's reader
        # still resolves when the answer comes late.
        done, _ = await asyncio.wait({future}, timeout=args.timeout_s)
        if not done:
            counts.unanswered += 1
            return
        counts.seconds.append(time.perf_counter() - asked)
        try:
            answer = future.result()
        except Exception as error:  # a cancelled request answers with an error: expected
            if cancel:
                counts.cancelled += 1
            else:
                counts.errors += 1
                print(f"request failed: {type(error).__name__}: {error}", file=sys.stderr)
            return
        if answer is not None and answer.items:
            counts.with_items += 1
        else:
            counts.empty += 1

    started = time.perf_counter()
    sent = 0
    while sent < args.requests:
        burst = []
        for _ in range(min(args.burst, args.requests - sent)):
            uri, lines = documents[sent % len(documents)]
            line = rng.randrange(len(lines))
            column = len(lines[line].rstrip("\n"))
            versions[uri] += 1
            daemon.insert(uri, versions[uri], types.Position(line=line, character=column), " ")
            lines[line] = lines[line].rstrip("\n") + " " + ("\n" if lines[line].endswith("\n") else "")
            burst.append(one(uri, line, column + 1, cancel=rng.random() < 0.5))
            sent += 1
        counts.sent = sent
        await asyncio.gather(*burst)
    flood_s = time.perf_counter() - started
    during = _rss_kb(pid)

    for uri, _ in documents:
        daemon.close(uri)
    await daemon.status()
    await asyncio.sleep(1.0)
    after = _rss_kb(pid)

    # The daemon still answers: a fresh small document, a completion after a function header.
    probe_uri = (root / "probe.py").as_uri()
    probe_text = "def add(a, b):\n    "
    daemon.open(probe_uri, "python", probe_text)
    answer, probe_ms = await daemon.complete(probe_uri, end_of(probe_text), invoked=True)
    final_status = await daemon.status()
    await daemon.stop()
    seconds = sorted(counts.seconds)
    answered = {k: v for k, v in asdict(counts).items() if k != "seconds"}
    return {
        "requests": answered,
        # Requests wait behind at most the worker's queue, so under a flood some answers come
        # late; "unanswered" (none within --timeout-s) is what would be a lost request.
        "answer_s": {
            "p50": round(statistics.median(seconds), 2),
            "p95": round(seconds[int(0.95 * (len(seconds) - 1))], 2),
            "max": round(seconds[-1], 2),
        },
        "flood_s": round(flood_s, 1),
        "rss_mb": {
            "before": round(before.get("VmRSS", 0) / 1024, 1),
            "end_of_flood": round(during.get("VmRSS", 0) / 1024, 1),
            "after_close": round(after.get("VmRSS", 0) / 1024, 1),
            "peak": round(after.get("VmHWM", 0) / 1024, 1),
        },
        "answer_after_flood": next((item.insert_text for item in items_of(answer)), None),
        "answer_after_flood_ms": round(probe_ms, 1),
        "server_completions": plain(final_status.completions),
    }


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--requests", type=int, default=2000)
    parser.add_argument("--documents", type=int, default=20)
    parser.add_argument("--doc-kb", type=int, default=20, help="size of every document but the first")
    parser.add_argument("--big-mb", type=float, default=4.0, help="size of the first document")
    parser.add_argument("--burst", type=int, default=40, help="requests in flight at once")
    parser.add_argument("--timeout-s", type=float, default=600.0, help="a request unanswered this long counts as lost")
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--json", type=Path)
    args = parser.parse_args()
    report = asyncio.run(flood(args))
    write_report(report, args.json)
    lost = report["requests"]["errors"] + report["requests"]["unanswered"]
    return 0 if report["answer_after_flood"] is not None and lost == 0 else 1


if __name__ == "__main__":
    sys.exit(main())
