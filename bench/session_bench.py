"""What a user feels: a simulated typing session, lookahead-lsp against llama-server driven the
way llama.vscode drives it, side by side in one run.

The session (the same for both, drawn with --seed): held-out files per language (Python from the
running interpreter, JavaScript from the extension's node_modules, C from linux-source; as
bench/decode_bench.py draws them), visited one after another (each visit a jump to another
file), the first file visited again at the end (a jump back). In each visit the document is the
file cut at a drawn cursor; the user rests there --rest-s seconds (the extension reports the
cursor of a file opened or jumped to at once), asks for a suggestion (time to the first suggestion), then types
the file's real next characters with human timing (a gap of 90-220 ms a key, a pause of
0.6-1.5 s now and then). Each suggestion is read for --read-ms; when the real text continues
with it the user accepts it whole, else with its first word when that matches (the way Tab and
Ctrl+Right accept), else types on; Enter inserts the newline and the editor's auto-indent (the
line's indentation, one step more after a line that opens a block, one less in Python after
`return` and the like; the step detected from the whole file, as VS Code detects it). Where the
real line is indented otherwise, the next key puts the indentation right with the line's first
character (as an editor outdents a closing bracket), and on a blank line Enter again takes the
indentation to the next line. Every key and every accept is a request; its latency is
the time from the edit to the answer, answers from caches and from work done ahead included and
counted apart. Halfway through each visit the user types up to 3 characters of the line in a
burst (60 ms apart, nothing asked: keys faster than an editor's debounce, or a client that asks
only when invoked), rests --rest-s seconds and then asks. The report gives each flow apart: the
first suggestion after a rest in a file (`first`), a key typed (`key`), Tab (`accept`), a word
accepted (`word`), Enter right after Tab (`enter`), the suggestion after the rest that follows
an edit (`rest`); "every request" is keys, accepts and Enters. A request's latency is the
completion request's alone (the status requests the benchmark sends around it are not timed).
Beside them: the suggestions accepted and their characters (`accepts`, `accepted_chars`), and
for lookahead-lsp the prompts of the model's answers (`prompts`: tokens, tokens evaluated, how
many carried chunks of each reason, how many were cold prompts cut short, and on how many
whole prompts the chunks differed from the document's last whole prompt's: `context_changes`).

--editor says which editor's client lookahead-lsp gets: `vscode` (the extension: incremental
changes, `lookahead/cursor` after a rest, inline completion requests), `neovim` (incremental
changes, no cursor reports, `textDocument/completion` requests: the built-in client's menu),
`whole-document` (every change sent as the whole text, no cursor reports, completion requests:
several plugins and simpler clients).

The llama.vscode emulation (read from llama.vscode's and llama.vim's sources): a cache of answers
keyed by the text before the cursor, looked up for the text minus the last few typed
characters when they begin a cached answer; after each shown suggestion, a speculative request
for the text as if it were accepted, not awaited, whose answer goes into the cache (llama-server
with one slot runs it before any later request); requests to /completion with cache_prompt on
(the default model has no FIM tokens, so /infill is not an option) over the 256 lines before the
cursor, n_predict --max-tokens, stopped at the line's end. llama-server runs as the issue's
baseline: `-t 2 -c 4096 --cache-reuse 256 -np 1`, from the llama.cpp that llama-cpp-python
vendors (--llama-server PATH).

Each visited file is edited inside a workspace folder, as in an editor: the files of its
language beside it in the corpus (its folder, not below) are copied into a folder of their own,
the visited file cut at its cursor (what the user saved before typing on), and lookahead-lsp
indexes every such folder before the session starts, so its prompts carry the folder's
definitions and similar code (`contextSources`) as they would for a user. --context-sources
runs lookahead-lsp's session once per value given (a comma list of sources, or `none`), each
with a daemon and cache of its own, in the order given: the price and the use of each source in
one run (the `accepted` counts and characters are what the user took).

lookahead-lsp is started as editors start it (`serve` over stdio, relayed to the user's shared
daemon), with `debounceMs` 0, `multiline` never and `maxTokens` --max-tokens; --idle-windows
other windows connect to the same daemon first, each with a file open, and stay idle (the
figures should not move); --load busy-core keeps one core busy with a spinning process for the
whole run, both systems; --work-ahead off measures what the idle-time work saves;
--cold-prompt-ms off, what cutting cold prompts short saves.

    .venv/bin/python bench/session_bench.py --llama-server PATH [--languages python,javascript]
        [--files 4] [--keys 24] [--editor vscode|neovim|whole-document] [--load none|busy-core]
        [--work-ahead on|off] [--idle-windows N] [--context-sources SOURCES ...]
        [--cold-prompt-ms MS|off] [--json FILE]
"""

from __future__ import annotations

import argparse
import asyncio
import dataclasses
import json
import random
import re
import statistics
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request
from dataclasses import dataclass, field
from pathlib import Path
from typing import Protocol

from lsprotocol import types

from tasks import LANGUAGES, Task, corpus_root, pick_tasks
from report import write_report
import support_path  # noqa: F401  (tests/ on sys.path, before support)
from support.daemon import Daemon, end_of, items_of, plain

from lookahead_lsp.models.resolve import resolve_model_path

PORT = 8391
# Files copied into a visited file's workspace folder, at most (a corpus folder may hold
# hundreds).
_FOLDER_FILES = 400
PROMPT_LINES = 256  # llama.vscode's n_prefix


@dataclass
class Latency:
    kind: str  # "first" (after a rest), "key", "accept" (Tab), "word", "enter" (Enter after Tab), "rest"
    ms: float
    source: str  # "model", "cache" (the typed-prefix cache or an answer computed ahead)
    language: str


@dataclass
class Session:
    latencies: list[Latency] = field(default_factory=list)
    accepts: dict[str, int] = field(default_factory=lambda: {"whole": 0, "word": 0})
    accepted_chars: dict[str, int] = field(default_factory=lambda: {"whole": 0, "word": 0})

# The kinds of request, in the report's order.
FLOWS = ("first", "key", "accept", "word", "enter", "rest")
# The rest after an edit: characters typed in a burst with nothing asked, 60 ms apart.
BURST_KEYS = 3
EDITORS = ("vscode", "neovim", "whole-document")


class Editor(Protocol):
    """One completion system as the simulated user sees it."""

    async def visit(self, uri: str, language: str, text: str) -> None: ...
    async def rest(self, uri: str, text: str) -> None: ...
    async def edit(self, uri: str, text: str, inserted: str, removed: int = 0) -> None:
        """`inserted` typed at the end of text, over its last `removed` characters."""
        ...

    async def suggest(self, uri: str, text: str) -> tuple[str, str, float]:
        """The suggestion at the end of text, where it came from, and how long the user waited
        for it (ms)."""
        ...

    async def close(self) -> None: ...


@dataclass(frozen=True)
class AnswerPrompt:
    """The prompt of an answer the model gave: its tokens, those evaluated (not in the KV
    cache), whether it was a cold prompt cut short (no chunks), and its other files' chunks
    (path, lines, why)."""

    uri: str
    tokens: int
    evaluated: int
    short: bool
    chunks: tuple[tuple[str, tuple[int, ...], str], ...]


class LookaheadEditor:
    """An editor's client of lookahead-lsp (--editor): the VS Code extension's (didOpen,
    incremental didChange, lookahead/cursor after a rest, inline completion), Neovim's (no
    cursor reports, completion requests) or one that sends whole documents."""

    def __init__(self, daemon: Daemon, editor: str) -> None:
        self.daemon = daemon
        self.editor = editor
        self.versions: dict[str, int] = {}
        # Of each answer the model gave, its prompt.
        self.prompts: list[AnswerPrompt] = []

    async def visit(self, uri: str, language: str, text: str) -> None:
        if uri not in self.versions:
            self.daemon.open(uri, language, text)
            self.versions[uri] = 1

    async def rest(self, uri: str, text: str) -> None:
        if self.editor != "vscode":
            return
        position = end_of(text)
        self.daemon.client.protocol.notify(
            "lookahead/cursor",
            {"textDocument": {"uri": uri}, "position": {"line": position.line, "character": position.character}},
        )

    async def edit(self, uri: str, text: str, inserted: str, removed: int = 0) -> None:
        self.versions[uri] += 1
        kept = text[: len(text) - removed]
        document = types.VersionedTextDocumentIdentifier(uri=uri, version=self.versions[uri])
        change: types.TextDocumentContentChangeEvent
        if self.editor == "whole-document":
            change = types.TextDocumentContentChangeWholeDocument(text=kept + inserted)
        else:
            change = types.TextDocumentContentChangePartial(range=types.Range(end_of(kept), end_of(text)), text=inserted)
        self.daemon.client.text_document_did_change(types.DidChangeTextDocumentParams(document, [change]))

    async def suggest(self, uri: str, text: str) -> tuple[str, str, float]:
        cached = plain(await self.daemon.status())["completions"]["from_cache"]
        # The status requests around it are the benchmark's, not the editor's: not timed.
        start = time.perf_counter()
        shown = await (self._inline(uri, text) if self.editor == "vscode" else self._menu(uri, text))
        ms = (time.perf_counter() - start) * 1000
        status = plain(await self.daemon.status())
        source = "cache" if status["completions"]["from_cache"] != cached else "model"
        last = status["last"]
        if source == "model" and last is not None:
            chunks = tuple((c["path"], tuple(c["lines"] or ()), c["why"]) for c in last["context"])
            self.prompts.append(AnswerPrompt(uri, last["prompt_tokens"], last["prompt_evaluated"], bool(last["short_prompt"]), chunks))
        return shown, source, ms

    async def _inline(self, uri: str, text: str) -> str:
        answer, _ = await self.daemon.complete(uri, end_of(text))
        items = items_of(answer)
        if not items:
            return ""
        # The item replaces the line's start up to the cursor: the suggestion is what follows.
        line_start = text[text.rfind("\n") + 1 :]
        shown = str(items[0].insert_text)
        return shown[len(line_start) :] if shown.startswith(line_start) else shown

    async def _menu(self, uri: str, text: str) -> str:
        answer = await self.daemon.client.text_document_completion_async(
            types.CompletionParams(text_document=types.TextDocumentIdentifier(uri=uri), position=end_of(text))
        )
        items = answer.items if isinstance(answer, types.CompletionList) else (answer or [])
        if not items or items[0].text_edit is None:
            return ""
        # The item replaces the word before the cursor: the suggestion is what follows it.
        edit = items[0].text_edit
        word = re.search(r"\w*\Z", text)
        return edit.new_text[len(word.group()) if word else 0 :]

    async def close(self) -> None:
        await self.daemon.stop()


class LlamaVscodeEditor:
    """llama-server, asked as llama.vscode asks it (see the module docstring)."""

    def __init__(self, max_tokens: int) -> None:
        self.max_tokens = max_tokens
        self.cache: dict[str, str] = {}
        self.server = asyncio.Lock()  # one slot: requests run one at a time
        self.pending: set[asyncio.Task[None]] = set()
        self.refused = 0  # requests llama-server answered with an error

    async def visit(self, uri: str, language: str, text: str) -> None:
        pass

    async def rest(self, uri: str, text: str) -> None:
        pass

    async def edit(self, uri: str, text: str, inserted: str, removed: int = 0) -> None:
        pass

    def _cached(self, text: str) -> str | None:
        for back in range(0, min(len(text), 64) + 1):
            hit = self.cache.get(text[: len(text) - back])
            typed = text[len(text) - back :]
            if hit is not None and hit.startswith(typed) and len(hit) > len(typed):
                return hit[len(typed) :]
        return None

    async def _ask(self, text: str) -> str:
        prompt = "".join(text.splitlines(keepends=True)[-PROMPT_LINES:])
        body = {"prompt": prompt, "n_predict": self.max_tokens, "cache_prompt": True, "stop": ["\n"], "top_k": 1, "samplers": ["top_k"]}
        try:
            async with self.server:
                reply = await asyncio.to_thread(_post, "/completion", body)
        except urllib.error.HTTPError as error:
            # llama-server refuses a prompt longer than its context (256 long lines can be): the
            # editor shows nothing, as llama.vscode does for an error.
            self.refused += 1
            print(f"llama-server refused a request: {error}", file=sys.stderr)
            reply = {}
        content = str(reply.get("content", ""))
        self.cache[text] = content
        return content

    async def suggest(self, uri: str, text: str) -> tuple[str, str, float]:
        start = time.perf_counter()
        hit = self._cached(text)
        if hit is not None:
            shown, source = hit, "cache"
        else:
            shown, source = await self._ask(text), "model"
        if shown:
            spec = asyncio.ensure_future(self._speculate(text + shown))
            self.pending.add(spec)
            spec.add_done_callback(self.pending.discard)
        return shown, source, (time.perf_counter() - start) * 1000

    async def _speculate(self, text: str) -> None:
        if self._cached(text) is None:
            await self._ask(text)

    async def close(self) -> None:
        for task in list(self.pending):
            await task


def _post(path: str, body: dict[str, object]) -> dict[str, object]:
    request = urllib.request.Request(
        f"http://127.0.0.1:{PORT}{path}", json.dumps(body).encode(), {"Content-Type": "application/json"}
    )
    with urllib.request.urlopen(request, timeout=600) as response:
        reply: dict[str, object] = json.loads(response.read())
        return reply


def start_llama_server(binary: Path, model: Path) -> subprocess.Popen[bytes]:
    server = subprocess.Popen(
        [str(binary), "-m", str(model), "-t", "2", "-c", "4096", "--cache-reuse", "256", "-np", "1", "--port", str(PORT)],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline:
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{PORT}/health", timeout=2) as response:
                if response.status == 200:
                    return server
        except OSError:
            time.sleep(0.5)
    server.kill()
    raise SystemExit("llama-server did not come up")


async def type_session(editor: Editor, visits: list[Task], keys: int, rest_s: float, read_ms: float, seed: int) -> Session:
    """The simulated user (module docstring) over the visits, in order."""
    rng = random.Random(seed)
    session = Session()
    texts: dict[str, str] = {}
    for task in visits:
        uri = task.path.as_uri()
        text = texts.get(uri, task.text[: task.cursor])
        done = len(text) - task.cursor  # characters typed in an earlier visit
        await editor.visit(uri, task.language, text)
        await editor.rest(uri, text)
        await asyncio.sleep(rest_s)
        shown, source, ms = await editor.suggest(uri, text)
        session.latencies.append(Latency("first", ms, source, task.language))
        real = task.text[task.cursor + done :]
        step = _indent_step(task.text)
        typed = 0
        after_accept = False
        rested = False
        # After an Enter whose auto-indent is not the real line's: (what the editor inserted,
        # the real indentation). The document then ends with the first, and `real` (what is
        # left to type) starts after the second.
        misindented: tuple[str, str] | None = None
        while (typed < keys or misindented) and real:
            removed = 0
            if misindented is not None:
                await asyncio.sleep(rng.uniform(0.09, 0.22))
                auto, indent = misindented
                misindented = None
                if real.startswith("\n"):
                    # A blank line: Enter again; the editor takes the indentation to the new line.
                    real = real[1:]
                    following = _indentation(real)
                    inserted, removed, kind = indent + "\n" + auto, len(auto), "key"
                    real = real[len(following) :]
                    if following != auto:
                        misindented = (auto, following)
                else:
                    # The user puts the indentation right as they type the line's first
                    # character (as an editor outdents a closing bracket): one key.
                    inserted, removed, kind = indent + real[0], len(auto), "key"
                    real = real[1:]
                typed += 1
            elif not rested and typed >= keys // 2 and (burst := _burst(real)):
                rested = True
                for char in burst:
                    await asyncio.sleep(0.06)
                    await editor.edit(uri, text, char)
                    text += char
                real = real[len(burst) :]
                typed += len(burst)
                await editor.rest(uri, text)
                await asyncio.sleep(rest_s)
                shown, source, ms = await editor.suggest(uri, text)
                session.latencies.append(Latency("rest", ms, source, task.language))
                after_accept = False
                continue
            else:
                rested = rested or typed >= keys // 2
                await asyncio.sleep(read_ms / 1000 if shown else rng.uniform(0.09, 0.22))
                word = _first_word(shown)
                if shown and real.startswith(shown):
                    inserted, kind = shown, "accept"
                elif word and len(word) >= 2 and real.startswith(word):
                    inserted, kind = word, "word"
                elif real.startswith("\n"):
                    inserted, kind = "\n", "enter" if after_accept else "key"
                else:
                    inserted, kind = real[0], "key"
                    if rng.random() < 0.08:
                        await asyncio.sleep(rng.uniform(0.6, 1.5))
                real = real[len(inserted) :]
                typed += len(inserted)
                if inserted == "\n":
                    # Enter, and the editor's auto-indent, which the real line may not have.
                    indent, auto = _indentation(real), _auto_indent(text, task.language, step)
                    inserted += auto
                    real = real[len(indent) :]
                    if auto != indent:
                        misindented = (auto, indent)
                if kind in ("accept", "word"):
                    accepted = "whole" if kind == "accept" else kind
                    session.accepts[accepted] += 1
                    session.accepted_chars[accepted] += len(inserted)
            after_accept = kind == "accept"
            await editor.edit(uri, text, inserted, removed)
            text = text[: len(text) - removed] + inserted
            shown, source, ms = await editor.suggest(uri, text)
            session.latencies.append(Latency(kind, ms, source, task.language))
        texts[uri] = text
    return session


def _indentation(text: str) -> str:
    """The whitespace that starts text's first line."""
    line = text.split("\n", 1)[0]
    return line[: len(line) - len(line.lstrip(" \t"))]


def _indent_step(text: str) -> str:
    """The file's indentation step as an editor detects it when it opens the file (VS Code's
    detectIndentation): tabs where more lines start with a tab, else the most common change of
    indentation between neighbouring code lines (doc comments' ` * ` lines left out)."""
    lines = [line for line in text.split("\n") if line.strip() and not line.lstrip().startswith("*")]
    if sum(line.startswith("\t") for line in lines) > sum(line.startswith(" ") for line in lines):
        return "\t"
    widths = [len(line) - len(line.lstrip(" ")) for line in lines]
    steps = [abs(b - a) for a, b in zip(widths, widths[1:]) if a != b]
    return " " * min(set(steps), key=lambda n: (-steps.count(n), n)) if steps else "    "


def _auto_indent(before: str, language: str, step: str) -> str:
    """What an editor's Enter indents the new line with (VS Code's indentation rules for these
    languages): the line's own indentation, one step more after a line that opens a block, one
    less in Python after a statement that ends one."""
    line = before[before.rfind("\n") + 1 :]
    indent = line[: len(line) - len(line.lstrip(" \t"))]
    code = line.strip()
    if code.endswith(("{", "(", "[") if language != "python" else (":", "(", "[", "{")):
        return indent + step
    if language == "python" and re.match(r"(return|raise|pass|break|continue)\b", code) and indent.endswith(step):
        return indent[: -len(step)]
    return indent


def _burst(real: str) -> str:
    """The characters typed before the rest after an edit: up to BURST_KEYS of the line."""
    return real.split("\n", 1)[0][:BURST_KEYS]


def _first_word(text: str) -> str:
    """What Ctrl+Right accepts: leading whitespace and the word (or run of symbols) after it."""
    i = len(text) - len(text.lstrip())
    j = i
    while j < len(text) and (text[j].isalnum() or text[j] == "_"):
        j += 1
    if j == i:
        while j < len(text) and not text[j].isspace() and not text[j].isalnum():
            j += 1
    return text[:j]


def _stats(values: list[float]) -> dict[str, float | int]:
    if not values:
        return {"n": 0}
    return {"n": len(values), "p50_ms": round(statistics.median(values), 1), "p95_ms": round(_p95(values), 1)}


def _p95(values: list[float] | list[int]) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(0.95 * len(ordered)))]


def report(session: Session, languages: list[str]) -> dict[str, object]:
    out: dict[str, object] = {"accepts": session.accepts, "accepted_chars": session.accepted_chars}
    for scope in ["all", *languages]:
        picked = [x for x in session.latencies if scope in ("all", x.language)]
        per_kind: dict[str, object] = {kind: _stats([x.ms for x in picked if x.kind == kind]) for kind in FLOWS}
        per_kind["every_request"] = _stats([x.ms for x in picked if x.kind not in ("first", "rest")])
        per_kind["from_cache"] = sum(x.source == "cache" for x in picked)
        out[scope] = per_kind
    # Every request in order (kind, ms, source, language): where a percentile comes from.
    out["requests"] = [[x.kind, round(x.ms, 1), x.source, x.language] for x in session.latencies]
    return out


def workspace_folders(visits: list[Task], work: Path) -> tuple[list[Task], list[Path]]:
    """The visits moved into workspace folders under work (module docstring): each visited
    file's language neighbours copied beside it, the file itself cut at its cursor. Returns the
    visits with their new paths, and the folders."""
    folders: dict[Path, Path] = {}
    moved: dict[Path, Path] = {}
    for task in visits:
        source = task.path.parent
        if source not in folders:
            folder = work / "folders" / f"{task.language}-{len(folders)}-{source.name}"
            folder.mkdir(parents=True)
            language = LANGUAGES[task.language]
            for path in sorted(p for p in source.iterdir() if p.is_file() and language.matches(p))[:_FOLDER_FILES]:
                (folder / path.name).write_bytes(path.read_bytes())
            folders[source] = folder
        if task.path not in moved:
            moved[task.path] = folders[source] / task.path.name
            moved[task.path].write_text(task.text[: task.cursor])
    return [dataclasses.replace(task, path=moved[task.path]) for task in visits], list(folders.values())


def _sources_label(sources: tuple[str, ...] | None) -> str:
    if sources is None:
        return "lookahead-lsp"
    return f"lookahead-lsp (contextSources {','.join(sources) or 'none'})"


async def run(args: argparse.Namespace, visits: list[Task], work: Path) -> dict[str, object]:
    model = resolve_model_path(None, str(args.model) if args.model else None, asker="cli")
    busy = subprocess.Popen([sys.executable, "-c", "while True: pass"]) if args.load == "busy-core" else None
    results: dict[str, object] = {}
    visits, folders = workspace_folders(visits, work)
    try:
        settings: dict[str, object] = {"debounceMs": 0, "maxTokens": args.max_tokens, "multiline": "never"}
        settings |= {"modelPath": str(model), "workAhead": args.work_ahead == "on", "coldPromptMs": args.cold_prompt_ms}
        for n, sources in enumerate(args.context_sources or [None]):
            chosen = settings if sources is None else {**settings, "contextSources": list(sources)}
            # A daemon and cache of its own per value: no saved state or index carries over.
            label = _sources_label(sources)
            label += f" run {n + 1}" if label in results else ""
            results[label] = await _lookahead_session(args, visits, folders, work / f"cache-{n}", chosen)
        if args.llama_server:
            server = start_llama_server(args.llama_server, model)
            try:
                upstream = LlamaVscodeEditor(args.max_tokens)
                session = await type_session(upstream, visits, args.keys, args.rest_s, args.read_ms, args.seed)
                await upstream.close()
                results["llama.vscode emulation"] = {**report(session, args.languages), "refused": upstream.refused}
            finally:
                server.terminate()
                server.wait()
    finally:
        if busy is not None:
            busy.kill()
            busy.wait()
    return results


async def _lookahead_session(
    args: argparse.Namespace, visits: list[Task], folders: list[Path], cache: Path, settings: dict[str, object]
) -> dict[str, object]:
    others: list[Daemon] = []
    # Other editor windows of the same user, open on a file of their own and idle.
    for n in range(args.idle_windows):
        other = Daemon(f"session-bench-idle-{n}", shared=True)
        await other.start([], cache, settings)
        task = visits[-1 - n]
        other.open(f"file:///idle/{n}/{task.path.name}", task.language, task.text)
        others.append(other)
    daemon = Daemon("session-bench", shared=True)
    await daemon.start(folders, cache, settings)
    editor = LookaheadEditor(daemon, args.editor)
    session = await type_session(editor, visits, args.keys, args.rest_s, args.read_ms, args.seed)
    status = plain(await daemon.status())
    await editor.close()
    for other in others:
        await other.stop()
    return {**report(session, args.languages), "prompts": _prompts(editor.prompts), "ahead": status["ahead"], "shared": status["shared"]}


def _prompts(prompts: list[AnswerPrompt]) -> dict[str, object]:
    """The prompts of the model's answers: tokens and tokens evaluated, p50 / p95 / mean, how
    many carried a chunk for each reason, how many were cut short, and the context changes."""

    def summary(values: list[int]) -> dict[str, float]:
        values = values or [0]
        return {"p50": statistics.median(values), "p95": _p95(values), "mean": round(statistics.fmean(values), 1)}

    reasons = sorted({why for p in prompts for _, _, why in p.chunks})
    # A whole prompt whose chunks differ from the document's last whole prompt's: each is
    # evaluated again from its first chunk on.
    last: dict[str, tuple[tuple[str, tuple[int, ...], str], ...]] = {}
    changes = 0
    for p in prompts:
        if not p.short:
            changes += p.uri in last and last[p.uri] != p.chunks
            last[p.uri] = p.chunks
    return {
        "n": len(prompts),
        "tokens": summary([p.tokens for p in prompts]),
        "evaluated": summary([p.evaluated for p in prompts]),
        "with_chunks": {why: sum(any(w == why for _, _, w in p.chunks) for p in prompts) for why in reasons},
        "short": sum(p.short for p in prompts),
        "context_changes": changes,
    }


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--languages", type=lambda s: s.split(","), default=["python", "javascript"])
    parser.add_argument("--files", type=int, default=4, help="files visited per language")
    parser.add_argument("--keys", type=int, default=24, help="characters typed per visit")
    parser.add_argument("--rest-s", type=float, default=3.0, help="the rest before the first request of a visit, and after the edit halfway")
    parser.add_argument("--read-ms", type=float, default=400.0, help="time to read a shown suggestion")
    parser.add_argument("--max-tokens", type=int, default=16)
    parser.add_argument("--editor", choices=EDITORS, default="vscode", help="the client lookahead-lsp gets")
    parser.add_argument("--load", choices=("none", "busy-core"), default="none")
    parser.add_argument("--work-ahead", choices=("on", "off"), default="on", help="lookahead-lsp's workAhead setting")
    parser.add_argument(
        "--cold-prompt-ms", type=lambda s: None if s == "off" else float(s), default=2000.0,
        help="lookahead-lsp's coldPromptMs setting (off: prompts are never cut)",
    )
    parser.add_argument("--idle-windows", type=int, default=0, help="other editor windows on the daemon, idle")
    parser.add_argument(
        "--context-sources", action="append", type=lambda s: () if s == "none" else tuple(s.split(",")),
        help="lookahead-lsp's contextSources (a comma list, or none); repeat to run a session per value",
    )
    parser.add_argument("--seed", type=int, default=5)
    parser.add_argument("--model", type=Path)
    parser.add_argument("--llama-server", type=Path)
    parser.add_argument("--json", type=Path)
    args = parser.parse_args()
    per_language = {name: pick_tasks(LANGUAGES[name], corpus_root(name), args.files, args.seed) for name in args.languages}
    visits = [task for i in range(args.files) for tasks in per_language.values() for task in tasks[i : i + 1]]
    visits.append(visits[0])  # a jump back to the first file
    # The shared daemons stay a while after the session (IDLE_EXIT_S) and may still write there.
    with tempfile.TemporaryDirectory(prefix="session-bench-", ignore_cleanup_errors=True) as work:
        results = asyncio.run(run(args, visits, Path(work)))
    write_report({"arguments": {k: str(v) for k, v in vars(args).items()}, "visits": len(visits), **results}, args.json)
    return 0


if __name__ == "__main__":
    sys.exit(main())
